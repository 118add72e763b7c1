"""The one seeded epoch order: which examples an epoch visits, and in what order (chapter 9; the
other chapters that train get it through ``xfl.translation`` and ``xfl.vit_train``).

The order is a function of ``(seed, epoch)`` alone, never of a global generator, so a resumed
or distributed run sees exactly the batches an uninterrupted single-process run would.
``bucketed`` pads translation batches to a few lengths known in advance (``bench/translate.py``):
a compiled model then compiles every shape before the training clock starts.
"""

from __future__ import annotations

import random
from typing import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


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


def index_batches(n: int, batch_size: int, epoch: int, seed: int = 0) -> list[Tensor]:
    """The shuffled index batches ``(B,)`` of one epoch, on the CPU (the training loop moves each
    to the device without waiting); the last incomplete batch is dropped so every step has the
    same shape (good for ``torch.compile``)."""
    if not isinstance(batch_size, int) or not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be an int in [1, {n}], got {batch_size!r}")
    whole = n // batch_size * batch_size
    return list(torch.tensor(epoch_order(n, epoch, seed)[:whole]).split(batch_size))


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
