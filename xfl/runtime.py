"""Runtime helpers used by every chapter: device choice, seeding, the fast profile.

The fast profile is switched on by the environment variable ``XFL_FAST`` (any of
``1``, ``true``, ``yes``, ``on``). CI sets it so every chapter runs in seconds on a CPU;
a reader on a GPU leaves it unset and gets the full profile.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

FAST_ENV_VAR = "XFL_FAST"
_TRUE_WORDS = {"1", "true", "yes", "on"}
_FALSE_WORDS = {"", "0", "false", "no", "off"}


def fast_profile() -> bool:
    """True when ``XFL_FAST`` asks for the fast (CI) profile."""
    raw = os.environ.get(FAST_ENV_VAR, "").strip().lower()
    if raw in _TRUE_WORDS:
        return True
    if raw in _FALSE_WORDS:
        return False
    raise ValueError(
        f"{FAST_ENV_VAR}={raw!r} is not understood; expected one of "
        f"{sorted(_TRUE_WORDS | _FALSE_WORDS - {''})} or unset"
    )


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
