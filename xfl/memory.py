"""Peak memory of one call, on the CPU as on a GPU (chapters 8 and 11).

On CUDA the caching allocator keeps the statistics (``torch.cuda.max_memory_allocated``). The
CPU has no such counter, so the profiler records every allocation and free
(``profile_memory=True``) and the peak is the largest running total of those events.
"""

from __future__ import annotations

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
