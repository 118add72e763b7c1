"""One timer for the chapters and the benchmarks: warm-up, then the median and spread of repeats.

Used wherever the book compares speeds (chapters 2, 3, 4, 8 and ``bench/``). It waits for the
device (CUDA/MPS) before reading the clock, so queued kernels are counted.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median over ``repeats`` runs and their spread (max - min)."""

    median_s: float
    spread_s: float
    repeats: int

    @property
    def median_ms(self) -> float:
        return 1e3 * self.median_s

    def __str__(self) -> str:
        return f"{self.median_ms:.3f} ms (spread {1e3 * self.spread_s:.3f} ms over {self.repeats} runs)"


def synchronize(device: torch.device | str) -> None:
    """Wait until every queued kernel on ``device`` has finished (no-op on the CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def time_call(fn: Callable[[], object], repeats: int = 10, warmup: int = 2,
              device: torch.device | str = "cpu") -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones, each synchronized."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative int, got {warmup!r}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return Timing(statistics.median(times), max(times) - min(times), repeats)
