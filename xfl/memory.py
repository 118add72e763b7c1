"""Peak memory of one call, on the CPU as on a GPU (chapters 8 and 11), and the check that a
requested size fits a device at all (``check_fits``).

On CUDA the caching allocator keeps the statistics (``torch.cuda.max_memory_allocated``). The
CPU has no such counter, so the profiler records every allocation and free
(``profile_memory=True``) and the peak is the largest running total of those events.
"""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile


@contextmanager
def _stderr_silenced():
    """Send file descriptor 2 to /dev/null (the profiler's C++ start/stop lines go there)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextmanager
def quiet_profile(cuda: bool = False, **kwargs):
    """``torch.profiler.profile`` over the CPU (and CUDA kernels with ``cuda``), without its log
    lines on stderr; ``kwargs`` go to ``profile``."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with _stderr_silenced(), profile(activities=activities, **kwargs) as prof:
        yield prof


def cpu_peak_bytes(fn: Callable[[], object]) -> int:
    """The most bytes that ``fn()`` held allocated at once on the CPU, beyond what existed before
    (its result included while it is alive inside the call)."""
    with quiet_profile(profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    total = peak = 0
    for _, nbytes in events:
        total += nbytes
        peak = max(peak, total)
    return peak


def peak_bytes(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak extra memory of ``fn()`` on ``device``: the CUDA allocator's counter or ``cpu_peak_bytes``."""
    device = torch.device(device)
    if device.type == "cpu":
        return cpu_peak_bytes(fn)
    if device.type != "cuda":
        raise ValueError(f"peak_bytes measures cpu and cuda, got {device.type!r}")
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


# ------------------------------------------------------------------- sizes that cannot fit
CHECK_FROM_BYTES = 1 << 28  # requests below 256 MiB are not checked (no device query on the fast path)


@functools.lru_cache(maxsize=None)
def device_memory_bytes(device: torch.device) -> int | None:
    """All the memory ``device`` could ever give: RAM + swap (at most the process's address-space
    limit) on the CPU, the card's total on CUDA; None elsewhere (meta, mps: not checked)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type != "cpu" or not hasattr(os, "sysconf"):
        return None
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") + _swap_bytes()
    try:
        import resource  # POSIX only
    except ImportError:
        return total
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    return total if limit == resource.RLIM_INFINITY else min(total, limit)


def _swap_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            kib = [int(line.split()[1]) for line in f if line.startswith("SwapTotal:")]
        return kib[0] * 1024 if kib else 0
    except OSError:
        return 0


def gib(nbytes: float) -> str:
    """``nbytes`` as GiB, e.g. ``'931.3 GiB'``."""
    return f"{nbytes / 2 ** 30:,.1f} GiB"


def check_fits(nbytes: int, device, request: str, expected: str) -> None:
    """Raise ValueError, before allocating, when ``nbytes`` exceed all the memory of ``device``
    (None: the default device), so the allocation could never succeed: "``request`` of N GiB, more
    than ...; expected ``expected``" (``request`` names the arguments and values, e.g.
    ``"causal_mask(length=1000000) builds a (1000000, 1000000) bool mask"``). Nothing is read back."""
    if nbytes < CHECK_FROM_BYTES:
        return
    device = torch.device(device if device is not None else torch.get_default_device())
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    total = device_memory_bytes(device)
    if total is not None and nbytes > total:
        raise ValueError(f"{request} of {gib(nbytes)} ({nbytes:,} bytes), more than the {gib(total)} "
                         f"of memory on {device}; expected {expected}")
