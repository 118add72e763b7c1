"""Word vectors from co-occurrence counts (chapter 1, ``chapters/ch01_qkv/qkv_attention``).

Words that appear in similar contexts get similar vectors: count the word pairs at most
``window`` apart, weight the counts by positive pointwise mutual information (PPMI) and keep
the leading directions of a truncated SVD. Chapter 1 uses them as embeddings with
:math:`W^Q = W^K = I` to show what similarity alone makes attention do.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Iterator, Mapping, Sequence

import torch
from torch import Tensor

WORD = re.compile(r"[a-z']+|[.,!?]")


def words(sentence: str) -> list[str]:
    """Lower-cased words and punctuation marks of ``sentence``."""
    return WORD.findall(sentence.lower())


def top_words(sentences: Iterable[Sequence[str]], size: int) -> dict[str, int]:
    """``{word: index}`` for the ``size`` most frequent words, most frequent first."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    counts = Counter(w for s in sentences for w in s)
    return {w: i for i, (w, _) in enumerate(counts.most_common(size))}


def neighbour_pairs(sentences: Iterable[Sequence[str]], index: Mapping[str, int],
                    window: int = 2) -> Iterator[tuple[int, int]]:
    """(a, b) index pairs of in-vocabulary words at most ``window`` apart, a after b."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    for s in sentences:
        ids = [index[w] for w in s if w in index]
        for i, a in enumerate(ids):
            yield from ((a, b) for b in ids[max(0, i - window): i])


def cooccurrence(sentences: Iterable[Sequence[str]], index: Mapping[str, int],
                 window: int = 2) -> Tensor:
    """Symmetric counts of word pairs at most ``window`` apart: ``(V, V)``."""
    counts = torch.zeros(len(index), len(index))
    pairs = list(neighbour_pairs(sentences, index, window))
    if pairs:
        a, b = torch.tensor(pairs).T
        counts.index_put_((a, b), torch.ones(len(a)), accumulate=True)
    return counts + counts.T


def ppmi_embeddings(counts: Tensor, dim: int = 64) -> Tensor:
    """``(V, V)`` counts -> ``(V, dim)`` unit rows: PPMI reduced by a truncated SVD."""
    if counts.ndim != 2 or counts.shape[0] != counts.shape[1]:
        raise ValueError(f"counts must be square (V, V), got {tuple(counts.shape)}")
    if not 1 <= dim <= counts.shape[0]:
        raise ValueError(f"dim must be in 1..{counts.shape[0]}, got {dim}")
    total = counts.sum()
    expected = counts.sum(1, keepdim=True) * counts.sum(0, keepdim=True) / total
    ppmi = torch.log((counts + 1e-9) / (expected + 1e-9)).clamp_min(0)
    U, S, _ = torch.svd_lowrank(ppmi, q=dim, niter=4)
    return torch.nn.functional.normalize(U * S.sqrt(), dim=-1)
