"""The batches of an epoch, for every model the book trains (chapters 0, 5, 6 and 9; chapter 7
through ``xfl.vit_train``): which examples each batch holds, in what order, padded how.

``epoch_rows`` is the one recipe: a shuffled order, cut into batches (optionally sorted by length
inside pools of batches, for little padding). The others serve it in the form each trainer reads:
``index_batches`` (images on the device, ``xfl.vit_train``), ``padded_batches`` (token sequences,
chapter 9), ``epoch_batches`` (translation pairs, chapters 5-6 and ``bench/translate.py``).

The order is a function of ``(seed, epoch)`` alone, never of a global generator, so a resumed
or distributed run sees exactly the batches an uninterrupted single-process run would.
``bucketed`` pads translation batches to a few lengths known in advance (``bench/translate.py``):
a compiled model then compiles every shape before the training clock starts.
"""

from __future__ import annotations

import random
from typing import Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .data.text import PAD, pad_batch


def epoch_rng(epoch: int, seed: int = 0) -> random.Random:
    """A random generator of its own for one epoch: the same ``(seed, epoch)``, the same draws."""
    return random.Random(seed * 100_003 + epoch)


def shuffled(items: Sequence, rng: random.Random) -> list:
    """A shuffled copy of ``items``, drawn from ``rng``."""
    items = list(items)
    rng.shuffle(items)
    return items


def epoch_order(n: int, epoch: int, seed: int = 0) -> list[int]:
    """A permutation of ``range(n)``, the same for the same ``(seed, epoch)``."""
    return shuffled(range(n), epoch_rng(epoch, seed))


def epoch_rows(n: int, batch_size: int, epoch: int, seed: int = 0, *, drop_last: bool = False,
               length: Callable[[int], int] | None = None, pool: int = 50) -> list[list[int]]:
    """The example indices of each batch of one epoch, the same for the same ``(seed, epoch)``.

    Without ``length``: ``epoch_order`` cut into batches of ``batch_size``. With ``length``
    (index -> tokens): the order is cut into pools of ``pool`` batches, each pool sorted by
    ``length`` before it is cut (a batch then holds examples of similar length: little
    padding), and the batches are shuffled again. ``drop_last`` drops a batch of fewer than
    ``batch_size`` examples, so that every step has the same shape (good for ``torch.compile``)."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    rng = epoch_rng(epoch, seed)
    order = shuffled(range(n), rng)
    step = batch_size * (pool if length is not None else 1)
    rows = []
    for start in range(0, n, step):
        chunk = order[start:start + step]
        if length is not None:
            chunk = sorted(chunk, key=length)
        rows += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    if length is not None:
        rows = shuffled(rows, rng)
    return [r for r in rows if len(r) == batch_size] if drop_last else rows


def index_batches(n: int, batch_size: int, epoch: int, seed: int = 0) -> list[Tensor]:
    """The shuffled index batches ``(B,)`` of one epoch, on the CPU (the training loop moves each
    to the device without waiting); the last incomplete batch is dropped."""
    if not isinstance(batch_size, int) or not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be an int in [1, {n}], got {batch_size!r}")
    return [torch.tensor(rows) for rows in epoch_rows(n, batch_size, epoch, seed, drop_last=True)]


def padded_batches(sequences: Sequence[Sequence[int]], batch_size: int, epoch: int, seed: int = 0,
                   pad_id: int = PAD) -> list[Tensor]:
    """The batches ``(B, L)`` of one epoch of id ``sequences``, each padded with ``pad_id`` to its
    longest sequence (a language model's data for ``xfl.train.train``)."""
    return [pad_batch([sequences[i] for i in rows], pad_id)[0]
            for rows in epoch_rows(len(sequences), batch_size, epoch, seed)]


def epoch_batches(pairs: Sequence, batch_size: int, epoch: int, seed: int = 0, pool: int | None = 50,
                  pad_id: int = PAD, drop_last: bool = False) -> Iterator[tuple[Tensor, Tensor]]:
    """The batches ``(src (B, S), tgt (B, L))`` of one epoch of ``(src ids, tgt ids)`` pairs, the
    same for the same epoch (a translation model's data for ``xfl.train.train``).

    Pairs of similar target length share a batch (``epoch_rows`` with pools of ``pool``
    batches); ``pool=None`` keeps the plain shuffled order."""
    length = (lambda i: len(pairs[i][1])) if pool is not None else None
    for rows in epoch_rows(len(pairs), batch_size, epoch, seed, drop_last=drop_last, length=length,
                           pool=pool or 1):
        yield (pad_batch([pairs[i][0] for i in rows], pad_id)[0],
               pad_batch([pairs[i][1] for i in rows], pad_id)[0])


# ------------------------------------------------------------- fixed shapes for compiling
def bucket(length: int, multiple: int) -> int:
    """``length`` rounded up to a multiple of ``multiple`` (at least one multiple)."""
    if not isinstance(multiple, int) or multiple < 1:
        raise ValueError(f"multiple must be a positive int, got {multiple!r}")
    return max(-(-length // multiple), 1) * multiple


def bucketed(batches: Iterable, batch_size: int, multiple: int = 16, pad_id: int = 0):
    """Translation batches ``(src (B, S), tgt (B, L))`` padded with ``pad_id`` so that the source
    and the decoder's input (``L - 1``) both have the length ``bucket(max(S, L - 1), multiple)``;
    batches of fewer than ``batch_size`` pairs are dropped. Every batch then has one of the
    shapes of ``bucket_batches``, which a compiled model can compile before training starts."""
    for src, tgt in batches:
        if len(src) != batch_size:
            continue
        n = bucket(max(src.shape[1], tgt.shape[1] - 1), multiple)
        yield F.pad(src, (0, n - src.shape[1]), value=pad_id), F.pad(tgt, (0, n + 1 - tgt.shape[1]), value=pad_id)


def bucket_batches(batch_size: int, longest: int, multiple: int = 16, token: int = 3) -> list[tuple]:
    """One batch ``(src (B, n), tgt (B, n + 1))`` filled with ``token`` for every bucket length
    ``n`` up to ``bucket(longest, multiple)``: the shapes ``bucketed`` can give (for
    ``xfl.train.train(..., shapes=...)``)."""
    lengths = range(multiple, bucket(longest, multiple) + 1, multiple)
    return [(torch.full((batch_size, n), token), torch.full((batch_size, n + 1), token)) for n in lengths]
