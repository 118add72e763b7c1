"""The one seeded epoch order: which examples an epoch visits, and in what order (chapter 9; the
other chapters that train get it through ``xfl.translation`` and ``xfl.vit_train``).

The order is a function of ``(seed, epoch)`` alone, never of a global generator, so a resumed
or distributed run sees exactly the batches an uninterrupted single-process run would.
"""

from __future__ import annotations

import random
from typing import Sequence

import torch
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
