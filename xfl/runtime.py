"""Runtime helpers used by every chapter: device choice, seeding, the fast profile.

The profile follows the device: with ``XFL_FAST`` unset, a CUDA GPU runs the full profile and
anything else (a CPU, Apple's MPS) the fast one, so a laptop or a CPU-only Colab runtime never
starts hours of training. ``XFL_FAST=1`` (``true``, ``yes``, ``on``) forces the fast profile
(CI sets it), ``XFL_FAST=0`` (``false``, ``no``, ``off``) the full one.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

FAST_ENV_VAR = "XFL_FAST"
_TRUE_WORDS = {"1", "true", "yes", "on"}
_FALSE_WORDS = {"0", "false", "no", "off"}


def _profile_request() -> bool | None:
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


def fast_profile() -> bool:
    """True for the fast profile: forced by ``XFL_FAST``, else wherever there is no CUDA GPU."""
    requested = _profile_request()
    return default_device().type != "cuda" if requested is None else requested


def pick(full, fast):
    """Return ``fast`` in the fast profile and ``full`` otherwise.

    >>> steps = pick(full=20_000, fast=50)
    """
    return fast if fast_profile() else full


def default_device() -> torch.device:
    """The best available device: cuda, then mps, then cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (all devices) for a repeatable run."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def run_banner(fast_minutes: float, t4_minutes: float) -> str:
    """The line a chapter prints first: its profile (and why), the device, the expected time.

    ``fast_minutes`` is measured (the fast profile on a 2-core CPU); ``t4_minutes`` is the full
    profile on Colab's T4, an estimate until a T4 run measures it (``book/setup.md``).
    """
    device, fast, requested = default_device(), fast_profile(), _profile_request()
    reason = (f"{FAST_ENV_VAR}={os.environ[FAST_ENV_VAR].strip()}" if requested is not None
              else "CUDA GPU found" if device.type == "cuda" else "no CUDA GPU")
    if fast:
        expected = f"about {fast_minutes:g} min on a 2-core CPU"
    elif device.type == "cuda":
        expected = f"about {t4_minutes:g} min on a T4 (estimate), less on newer GPUs"
    else:
        expected = f"the full profile is meant for a GPU (about {t4_minutes:g} min on a T4): far longer here"
    name = "fast" if fast else "full"
    return f"xfl: {name} profile ({reason}) on {device.type}; expected run time {expected}"
