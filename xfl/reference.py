"""A DLStudio-style decoder that re-runs the whole stack once per target position (chapter 3).

This is a teaching reference, not something to train with. DLStudio's decoder hides the
future by zeroing the input rows after position t and running every layer again for each t,
so a length-L target costs L full passes. One pass with a causal mask computes the same
outputs (``n_pass_decode(..., hide_future_keys=True)`` equals ``stack(x, causal_mask(L))``,
tested in ``tests/test_reference.py``). Zeroing rows alone (``hide_future_keys=False``,
DLStudio's literal scheme) is a different function: zero rows still take part in attention.
"""

from __future__ import annotations

import time
from typing import Callable

import torch
from torch import Tensor, nn

from .attention import causal_mask


def zero_future_rows(x: Tensor, t: int) -> Tensor:
    """A copy of ``x`` ``(B, L, D)`` with rows ``t+1 .. L-1`` set to zero."""
    keep = torch.arange(x.shape[1], device=x.device) <= t  # (L,)
    return x * keep[None, :, None]


def n_pass_decode(stack: nn.Module, x: Tensor, memory: Tensor | None = None,
                  memory_mask: Tensor | None = None, hide_future_keys: bool = True) -> Tensor:
    """Decode ``x`` ``(B, L, D)`` with one full pass of ``stack`` per target position t.

    Pass t zeroes the input rows after t and keeps output row t. With ``hide_future_keys``
    every pass also uses the causal mask (so the result equals one causal pass); without it,
    attention is unmasked, as in DLStudio. ``stack`` is called as
    ``stack(x, mask, memory, memory_mask)`` (an ``xfl.blocks.TransformerStack``).
    Returns ``(B, L, D)``.
    """
    if x.ndim != 3:
        raise ValueError(f"x must be (B, L, D), got shape {tuple(x.shape)}")
    L = x.shape[1]
    mask = causal_mask(L, device=x.device) if hide_future_keys else None
    rows = [stack(zero_future_rows(x, t), mask, memory, memory_mask)[:, t] for t in range(L)]  # L x (B, D)
    return torch.stack(rows, dim=1)  # (B, L, D)


def causal_decode(stack: nn.Module, x: Tensor, memory: Tensor | None = None,
                  memory_mask: Tensor | None = None) -> Tensor:
    """The same outputs in one pass: ``stack(x, causal_mask(L), memory, memory_mask)``."""
    return stack(x, causal_mask(x.shape[1], device=x.device), memory, memory_mask)


# ------------------------------------------------------------------------- timing
def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def median_time(fn: Callable[[], object], repeats: int = 10, warmup: int = 2,
                device: torch.device | str = "cpu") -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` runs, after ``warmup`` runs.

    Waits for the device (CUDA/MPS) before reading the clock, so queued kernels count.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _synchronize(device)
        start = time.perf_counter()
        fn()
        _synchronize(device)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def time_decoders(stack: nn.Module, x: Tensor, memory: Tensor | None = None,
                  repeats: int = 10, warmup: int = 2) -> dict:
    """Forward time (no grad) of the N-pass and the one-pass causal decoder on the same input.

    Returns ``{"n_pass_s", "causal_s", "ratio"}`` with ratio = n_pass_s / causal_s.
    """
    with torch.no_grad():
        n_pass = median_time(lambda: n_pass_decode(stack, x, memory), repeats, warmup, x.device)
        causal = median_time(lambda: causal_decode(stack, x, memory), repeats, warmup, x.device)
    return {"n_pass_s": n_pass, "causal_s": causal, "ratio": n_pass / causal}
