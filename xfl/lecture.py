"""A DLStudio-style decoder that re-runs the whole stack once per target position (chapter 3).

This is a teaching reference, not something to train with. DLStudio's decoder hides the
future by zeroing the input rows after position t and running every layer again for each t,
so a length-L target costs L full passes. One pass with a causal mask computes the same
outputs (``n_pass_decode(..., hide_future_keys=True)`` equals ``stack(x, causal_mask(L))``,
tested in ``tests/test_reference.py``). Zeroing rows alone (``hide_future_keys=False``,
DLStudio's literal scheme) is a different function: zero rows still take part in attention.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import causal_mask
from .timing import time_call


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
def time_decoders(stack: nn.Module, x: Tensor, memory: Tensor | None = None,
                  repeats: int = 10, warmup: int = 2) -> dict:
    """Forward time (no grad) of the N-pass and the one-pass causal decoder on the same input.

    Returns ``{"n_pass_s", "causal_s", "ratio"}`` with ratio = n_pass_s / causal_s.
    """
    with torch.no_grad():
        n_pass = time_call(lambda: n_pass_decode(stack, x, memory), repeats, warmup, x.device).median_s
        causal = time_call(lambda: causal_decode(stack, x, memory), repeats, warmup, x.device).median_s
    return {"n_pass_s": n_pass, "causal_s": causal, "ratio": n_pass / causal}
