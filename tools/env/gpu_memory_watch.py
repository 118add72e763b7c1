"""IPython startup file for a notebook's kernel (``tools.env.gpu_chapters`` installs it): samples
the GPU memory the kernel's caching allocator holds and keeps the largest value in the file named
by ``XFL_GPU_MEMORY_FILE``, rewritten whenever it grows (a kernel that is killed still leaves it).

``torch.cuda.memory_reserved`` is sampled rather than read once at the end because a chapter may
call ``torch.cuda.reset_peak_memory_stats`` (chapters 8 and 11 do), which clears the allocator's
own peaks; the reserved memory is freed only by ``torch.cuda.empty_cache``, so a sample every
``PERIOD_S`` misses little. Nothing happens until the notebook itself has imported torch and
initialised CUDA.
"""

import os
import sys
import threading
import time

PERIOD_S = 0.2


def _reserved_bytes() -> int:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return 0
    return max(torch.cuda.memory_reserved(d) for d in range(torch.cuda.device_count()))


def sample(path: str, peak: int) -> int:
    """One sample: the larger of ``peak`` and the memory reserved now, written to ``path`` if larger."""
    reserved = _reserved_bytes()
    if reserved > peak:
        with open(path + ".tmp", "w") as file:
            file.write(str(reserved))
        os.replace(path + ".tmp", path)
    return max(peak, reserved)


def _watch(path: str) -> None:
    peak = 0
    while True:
        peak = sample(path, peak)
        time.sleep(PERIOD_S)


if os.environ.get("XFL_GPU_MEMORY_FILE"):
    threading.Thread(target=_watch, args=(os.environ["XFL_GPU_MEMORY_FILE"],), daemon=True,
                     name="xfl-gpu-memory").start()
