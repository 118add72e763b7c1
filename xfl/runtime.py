"""Runtime helpers used by every chapter: device choice and name, seeding, the three profiles.

A chapter sizes its runs by profile:
- ``fast``: seconds per chapter on a CPU (CI and a laptop);
- ``cpu``: the largest run that shows a chapter's lessons within about 10 minutes on a 2-core CPU
  (the book's stored reader runs, where no GPU run is stored);
- ``full``: minutes on a GPU.

``XFL_PROFILE=fast|cpu|full`` chooses one. Without it, ``XFL_FAST=1`` (``true``, ``yes``, ``on``)
forces the fast profile and ``XFL_FAST=0`` (``false``, ``no``, ``off``) the full one; with neither,
a CUDA GPU runs the full profile and anything else (a CPU, Apple's MPS) the fast one, so a laptop
or a CPU-only Colab runtime never starts hours of training.
"""

from __future__ import annotations

import os
import platform
import random

import numpy as np
import torch

PROFILES = ("fast", "cpu", "full")
PROFILE_ENV_VAR = "XFL_PROFILE"
FAST_ENV_VAR = "XFL_FAST"
_TRUE_WORDS = {"1", "true", "yes", "on"}
_FALSE_WORDS = {"0", "false", "no", "off"}


def _fast_request() -> bool | None:
    """True/False when ``XFL_FAST`` forces the fast/full profile, None when it is unset."""
    raw = os.environ.get(FAST_ENV_VAR, "").strip().lower()
    if raw == "":
        return None
    if raw in _TRUE_WORDS:
        return True
    if raw in _FALSE_WORDS:
        return False
    raise ValueError(
        f"{FAST_ENV_VAR}={raw!r} is not understood; expected one of "
        f"{sorted(_TRUE_WORDS | _FALSE_WORDS)} or unset"
    )


def _profile_request() -> tuple[str, str] | None:
    """(profile, the variable that chose it) when the environment chooses, else None."""
    raw = os.environ.get(PROFILE_ENV_VAR, "").strip().lower()
    fast = _fast_request()
    if raw == "":
        if fast is None:
            return None
        return ("fast" if fast else "full"), f"{FAST_ENV_VAR}={os.environ[FAST_ENV_VAR].strip()}"
    if raw not in PROFILES:
        raise ValueError(f"{PROFILE_ENV_VAR}={raw!r} is not understood; expected one of "
                         f"{list(PROFILES)} or unset")
    if fast is not None and fast != (raw == "fast"):
        raise ValueError(f"{PROFILE_ENV_VAR}={raw} and {FAST_ENV_VAR}={os.environ[FAST_ENV_VAR].strip()} "
                         f"contradict each other: set one of them")
    return raw, f"{PROFILE_ENV_VAR}={raw}"


def profile() -> str:
    """``"fast"``, ``"cpu"`` or ``"full"``: as the environment asks, else by the device."""
    requested = _profile_request()
    if requested is not None:
        return requested[0]
    return "full" if default_device().type == "cuda" else "fast"


def fast_profile() -> bool:
    """True for the fast profile only (not for the cpu profile)."""
    return profile() == "fast"


_AS_FAST = object()  # pick's cpu value when none is given


def pick(full, fast, cpu=_AS_FAST):
    """The value for the running profile; in the cpu profile ``cpu``, or ``fast`` when omitted
    (``cpu=None`` is a value: None, e.g. "no limit").

    >>> steps = pick(full=20_000, fast=50, cpu=2_000)
    """
    chosen = profile()
    if chosen == "cpu":
        return fast if cpu is _AS_FAST else cpu
    return fast if chosen == "fast" else full


def default_device() -> torch.device:
    """The best available device: cuda, then mps, then cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def device_name(device: torch.device) -> str:
    """Where a run ran, for its record: ``"NVIDIA H100 80GB HBM3"`` on CUDA, ``"cpu (x86_64, 2 cores)"``
    elsewhere (the benchmarks' results and the stored chapters' metadata)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (all devices) for a repeatable run."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# The pessimistic end of each chapter's T4 range, minutes (rounded up): the rule's FLOP term at
# half its rate, 0.125 of the T4's 65 TFLOPS (8 TFLOPS), and 15 us per op instead of 10.
# Basis: a T4 sustains about 24 TFLOPS on large fp16 products (0.37 of peak, held back by its
# 70 W cap) and 12-14 TFLOPS on a fused fp16 encoder of width 768 (NVIDIA DeepLearningExamples
# #115); the book's eager, unfused layers of width 256 do less; 10-15 us per kernel launch on
# Colab's 2.2 GHz host. From bench/results/t4_estimate.json, "slower" (tests/test_runtime.py
# checks them). Chapters not listed finish within their announced minutes either way.
T4_SLOW_MINUTES = {"ch05_encoder_decoder": 24, "ch06_bleu": 7, "ch06_decoding": 8, "ch07_vit": 14,
                   "ch09_gpt": 25, "ch10_modern": 24}
T4_RULE_BASIS = "16 TFLOPS and 10 µs per op"
T4_SLOW_BASIS = "8 TFLOPS and 15 µs per op"
COLAB_LIMIT_MINUTES = 15  # what a chapter's full profile is sized for on Colab's T4
CHAPTER_ENV_VAR = "XFL_CHAPTER"  # set by a published notebook's first cell (tools/book/publish.py)
NO_GPU_HINT = ("no GPU found: on Colab choose Runtime → Change runtime type → T4 GPU and run the "
               "notebook again for the full profile; the fast one trains small models for a few "
               "steps, so its numbers and plots show the code working, not the trained results the "
               "text discusses")


def chapter_name() -> str:
    """The chapter being run: ``XFL_CHAPTER`` (a published notebook sets it), else the working
    folder's name (a notebook runs in its chapter's folder: nbval, the book build, Jupyter)."""
    return os.environ.get(CHAPTER_ENV_VAR, "").strip() or os.path.basename(os.getcwd())


def t4_range(t4_minutes: float, chapter: str | None = None) -> str:
    """The T4 estimate as a range: the rule's minutes, then the pessimistic end where it is longer,
    each with its basis, and by how much it may pass Colab's 15 minutes."""
    slow = T4_SLOW_MINUTES.get(chapter_name() if chapter is None else chapter)
    if slow is None or slow <= t4_minutes:
        return f"about {t4_minutes:g} min on a T4 (an estimate: book/setup.md)"
    over = (f"; on a T4 it may take {slow - COLAB_LIMIT_MINUTES:g} min longer than {COLAB_LIMIT_MINUTES} min"
            if slow > COLAB_LIMIT_MINUTES else "")
    return (f"about {t4_minutes:g}–{slow:g} min on a T4 (estimates: {t4_minutes:g} by the rule, "
            f"{T4_RULE_BASIS}; {slow:g} if slower, {T4_SLOW_BASIS}; book/setup.md){over}")


def run_banner(fast_minutes: float, t4_minutes: float, cpu_minutes: float | None = None) -> str:
    """The line a chapter prints first: its profile (and why), the device, the expected time, and
    which xfl runs it (release and commit, ``xfl.version``).

    ``fast_minutes`` and ``cpu_minutes`` are measured (the fast and cpu profiles on a 2-core
    CPU); ``t4_minutes`` is the full profile on Colab's T4, an estimate until a T4 run measures
    it: from counted FLOPs and operations for the chapters that train (``bench/t4_estimate.py``,
    ``xfl.estimate``), from the full profile's time on a 2-core CPU for the others
    (``book/setup.md``). Where a pessimistic T4 estimate is longer (:data:`T4_SLOW_MINUTES`) the
    banner prints the range. A chapter without a cpu profile runs its fast values there. On a CPU
    chosen by default (no GPU found) the line says how to get Colab's T4 and what the fast profile
    does not show.
    """
    from xfl.version import describe

    device, chosen, requested = default_device(), profile(), _profile_request()
    reason = (requested[1] if requested is not None
              else "CUDA GPU found" if device.type == "cuda" else "no CUDA GPU")
    hint = f" {NO_GPU_HINT};" if requested is None and device.type == "cpu" else ""
    if chosen == "fast" or (chosen == "cpu" and cpu_minutes is None):
        expected = f"about {fast_minutes:g} min on a 2-core CPU"
    elif chosen == "cpu":
        expected = f"about {cpu_minutes:g} min on a 2-core CPU"
    elif device.type == "cuda":
        expected = f"{t4_range(t4_minutes)}, less on newer GPUs"
    else:
        expected = (f"the full profile is meant for a GPU ({t4_range(t4_minutes)}); "
                    f"a CPU may take far longer")
    return f"xfl: {chosen} profile ({reason}) on {device.type};{hint} expected run time {expected}; xfl {describe()}"
