"""One timing discipline for the chapters and the benchmarks.

Used wherever the book compares speeds (chapters 2, 3, 4, 4½, 6, 8, 10, 11 and ``bench/``). Every
timed call waits for the device (CUDA/MPS) before reading the clock, so queued kernels count.

Comparing candidates (the way to say "B is faster than A")::

    from xfl.timing import compare
    cmp = compare({"loop": fn_a, "batched": fn_b}, pairs=20, warmup=2, threads=1, device=device)
    print(cmp.report("loop", "batched"))   # threads, medians, verdict, warning if unclear
    cmp.summary("loop", "batched")          # the same as a dict, for bench/results/*.json
    r = cmp.ratio("loop", "batched")        # Ratio: median, low, high of per-pair time_a / time_b
    assert r.low > 1.5                      # assert only where the margin is far outside the spread

- ``threads``: torch's intra-op thread count is set for the measurement and restored after
  (``pinned_threads``; ``None`` leaves it as it is); the report prints it. One thread makes CPU
  timings agree between ``make test`` (``OMP_NUM_THREADS=1``), ``make book`` and a student's kernel.
- The clock (``clock_for``, printed): on the CPU with ``threads=1``, the calling thread's CPU
  time, so time spent descheduled by other work on a loaded machine does not count (a call
  that sleeps or waits then measures ~0); otherwise (GPU, or more threads) the wall clock.
- ``warmup`` untimed rounds, then ``pairs`` timed rounds. Each round calls every candidate once,
  interleaved (A, B, then B, A: the order rotates every round), so a burst of load falls on both
  sides; ``Comparison.order`` records the order of the timed calls.
- ``ratio(a, b)`` is the median of the per-round ratios time_a / time_b, with their spread: the
  interquartile range (``low`` = 25th, ``high`` = 75th percentile). ``clear`` is False when that
  range includes 1: the spread is larger than the effect. ``verdict(a, b)`` says it in words, from
  the numbers; ``report`` adds a ``WARNING`` line when it is not clear.

A single timing (no comparison): ``time_call(fn, repeats, warmup, device, threads=None)`` returns
a ``Timing`` (median and max - min spread of the repeats).
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

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


@contextmanager
def pinned_threads(threads: int | None) -> Iterator[int]:
    """Set torch's intra-op thread count to ``threads`` inside the block (``None``: unchanged);
    restore the previous count after, also on error. Yields the count in force."""
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def _check_counts(repeats: int, warmup: int, name: str = "repeats", least: int = 1) -> None:
    if not isinstance(repeats, int) or repeats < least:
        raise ValueError(f"{name} must be an int >= {least}, got {repeats!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative int, got {warmup!r}")


def clock_for(device: torch.device | str, threads: int | None) -> Callable[[], float]:
    """The clock a timing reads: on the CPU with one pinned thread, the calling thread's CPU
    time (torch then computes in this thread, and time spent descheduled by other work on the
    machine is not counted); otherwise the wall clock."""
    if torch.device(device).type == "cpu" and threads == 1:
        return time.thread_time
    return time.perf_counter


def _timed(fn: Callable[[], object], device: torch.device | str, clock: Callable[[], float]) -> float:
    """Seconds of one synchronized call of ``fn`` on ``clock``."""
    synchronize(device)
    start = clock()
    fn()
    synchronize(device)
    return clock() - start


def time_call(fn: Callable[[], object], repeats: int = 10, warmup: int = 2,
              device: torch.device | str = "cpu", threads: int | None = None) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones, each synchronized,
    with torch's thread count pinned to ``threads`` (``None``: as it is)."""
    _check_counts(repeats, warmup)
    clock = clock_for(device, threads)
    with pinned_threads(threads):
        for _ in range(warmup):
            fn()
        times = [_timed(fn, device, clock) for _ in range(repeats)]
    return Timing(statistics.median(times), max(times) - min(times), repeats)


@dataclass(frozen=True)
class Ratio:
    """Per-round ratios time_a / time_b: their median and interquartile range [low, high]."""

    a: str
    b: str
    median: float
    low: float
    high: float
    pairs: int

    @property
    def clear(self) -> bool:
        """True when the interquartile range lies on one side of 1 (spread smaller than effect)."""
        return self.low > 1 or self.high < 1

    def verdict(self) -> str:
        """Which candidate is faster, and by how much, or that the spread hides the difference."""
        spread = f"per-pair ratios {self.a}/{self.b}: median {self.median:.2f}, " \
                 f"interquartile {self.low:.2f}-{self.high:.2f} over {self.pairs} pairs"
        if not self.clear:
            return f"no clear difference between {self.a} and {self.b}: spread larger than the effect ({spread})"
        if self.median > 1:
            return f"{self.b} is {self.median:.2f}x faster than {self.a} ({spread})"
        return f"{self.a} is {1 / self.median:.2f}x faster than {self.b} ({spread})"

    def __str__(self) -> str:
        return f"{self.median:.2f}x (interquartile {self.low:.2f}-{self.high:.2f})"


@dataclass(frozen=True)
class Comparison:
    """Seconds of interleaved calls: ``times[name][i]`` is candidate ``name`` in round ``i``."""

    times: Mapping[str, tuple[float, ...]]
    order: tuple[str, ...]
    threads: int
    warmup: int
    clock: str = "wall"

    @property
    def pairs(self) -> int:
        return len(next(iter(self.times.values())))

    def timing(self, name: str) -> Timing:
        """Median and spread (max - min) of candidate ``name``'s timed calls."""
        times = self._times(name)
        return Timing(statistics.median(times), max(times) - min(times), len(times))

    def median_s(self, name: str) -> float:
        return self.timing(name).median_s

    def ratio(self, a: str, b: str) -> Ratio:
        """time_a / time_b per round: median and interquartile range."""
        ratios = [ta / tb for ta, tb in zip(self._times(a), self._times(b))]
        low, _, high = statistics.quantiles(ratios, n=4, method="inclusive")
        return Ratio(a, b, statistics.median(ratios), low, high, len(ratios))

    def verdict(self, a: str, b: str) -> str:
        return self.ratio(a, b).verdict()

    def summary(self, a: str, b: str) -> dict:
        """For a results file: the two medians (``<name>_s``), the ratio a/b and its
        interquartile range, pairs, threads, clock and the verdict."""
        ratio = self.ratio(a, b)
        return {f"{a}_s": self.median_s(a), f"{b}_s": self.median_s(b), "ratio": ratio.median,
                "ratio_interquartile": [ratio.low, ratio.high], "pairs": ratio.pairs,
                "threads": self.threads, "clock": self.clock, "verdict": ratio.verdict()}

    def report(self, a: str, b: str) -> str:
        """Threads, each candidate's median, the verdict, and a warning when it is not clear."""
        ratio = self.ratio(a, b)
        lines = [str(self), ratio.verdict()]
        if not ratio.clear:
            lines.append(f"WARNING: the spread of the per-pair ratios is larger than the effect; "
                         f"do not read {a} vs {b} from this run")
        return "\n".join(lines)

    def __str__(self) -> str:
        head = (f"{self.pairs} interleaved rounds after {self.warmup} warm-up, {self.threads} thread(s), "
                f"{self.clock} clock:")
        rows = [f"  {name}: {self.timing(name)}" for name in self.times]
        return "\n".join([head, *rows])

    def _times(self, name: str) -> tuple[float, ...]:
        if name not in self.times:
            raise KeyError(f"no candidate {name!r}; the candidates are {list(self.times)}")
        return self.times[name]


def compare(candidates: Mapping[str, Callable[[], object]], pairs: int = 20, warmup: int = 2,
            threads: int | None = 1, device: torch.device | str = "cpu") -> Comparison:
    """Time the ``candidates`` (name -> no-argument function) against each other: ``warmup``
    untimed rounds, then ``pairs`` timed rounds in which every candidate runs once, the order
    rotating each round, on ``threads`` torch threads (restored after)."""
    _check_counts(pairs, warmup, name="pairs", least=3)
    if len(candidates) < 2:
        raise ValueError(f"compare needs at least 2 candidates, got {list(candidates)}")
    names, clock = list(candidates), clock_for(device, threads)
    times: dict[str, list[float]] = {name: [] for name in names}
    order: list[str] = []
    with pinned_threads(threads) as in_force:
        for round_ in range(-warmup, pairs):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                if round_ < 0:
                    candidates[name]()
                    continue
                times[name].append(_timed(candidates[name], device, clock))
                order.append(name)
    clock_name = "thread CPU" if clock is time.thread_time else "wall"
    return Comparison({n: tuple(t) for n, t in times.items()}, tuple(order), in_force, warmup, clock_name)
