"""The lecture's decoding scheme, one full decoder pass per target word (chapters 3 and 5).

Teaching references, not something to train with. The decoder of Kak & Bouman's lecture (its
printed ``MasterDecoderWithMasking``, lines 811-837 of the lecture's text) and of DLStudio 2.5.8
(``Transformers.py``, lines 817-850) hides the future by zeroing target rows and running the
whole stack once per target position t = 1 .. L-1, so a length-L target costs L - 1 passes:

- ``lecture_decode`` reproduces that scheme: for t = 1 .. L-1 it zeroes rows t.. of the input,
  zeroes them again at every block's input (DLStudio 2.5.8's ``BasicDecoderWithMasking``,
  lines 777-780; the lecture's printed block keeps the first t embedding *columns* instead,
  lines 753-755), runs the blocks without an attention mask and reads word t's prediction from
  row t.
- ``n_pass_decode`` keeps the N passes but predicts from row t with rows 0..t visible (the
  shifted-target convention of this book); with ``hide_future_keys`` each pass also uses the
  causal mask, and then it equals one causal pass (tested in ``tests/test_n_pass.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import causal_mask
from .timing import Comparison, compare


def zero_future_rows(x: Tensor, t: int) -> Tensor:
    """A copy of ``x`` ``(B, L, D)`` with rows ``t+1 .. L-1`` set to zero."""
    keep = torch.arange(x.shape[1], device=x.device) <= t  # (L,)
    return x * keep[None, :, None]


def n_pass_decode(stack: nn.Module, x: Tensor, memory: Tensor | None = None,
                  memory_mask: Tensor | None = None, hide_future_keys: bool = True) -> Tensor:
    """Decode ``x`` ``(B, L, D)`` with one full pass of ``stack`` per target position t.

    Pass t zeroes the input rows after t and keeps output row t. With ``hide_future_keys``
    every pass also uses the causal mask (so the result equals one causal pass); without it,
    attention is unmasked, as in the lecture. ``stack`` is called as
    ``stack(x, mask, memory, memory_mask)`` (an ``xfl.blocks.TransformerStack``).
    Returns ``(B, L, D)``.
    """
    if x.ndim != 3:
        raise ValueError(f"x must be (B, L, D), got shape {tuple(x.shape)}")
    L = x.shape[1]
    mask = causal_mask(L, device=x.device) if hide_future_keys else None
    rows = [stack(zero_future_rows(x, t), mask, memory, memory_mask)[:, t] for t in range(L)]  # L x (B, D)
    return torch.stack(rows, dim=1)  # (B, L, D)


def lecture_decode(stack: nn.Module, x: Tensor, memory: Tensor | None = None) -> Tensor:
    """The lecture's scheme on ``x`` ``(B, L, D)``: pass t zeroes rows >= t at every block's input.

    The block-level zeroing of rows is DLStudio 2.5.8's; the lecture's printed block masks
    embedding columns instead (see the module docstring).

    ``stack`` is an ``xfl.blocks.TransformerStack`` (its blocks are run one by one, unmasked).
    Returns ``(B, L - 1, D)``: row t - 1 is pass t's output row t, from which word t is predicted.
    """
    if x.ndim != 3:
        raise ValueError(f"x must be (B, L, D), got shape {tuple(x.shape)}")
    rows = []
    for t in range(1, x.shape[1]):
        h = x
        for layer in stack.layers:
            h = layer(zero_future_rows(h, t - 1), None, memory)  # rows t.. zeroed again
        rows.append(stack.final_norm(h)[:, t])  # (B, D)
    return torch.stack(rows, dim=1)  # (B, L - 1, D)


def causal_decode(stack: nn.Module, x: Tensor, memory: Tensor | None = None,
                  memory_mask: Tensor | None = None) -> Tensor:
    """The same outputs in one pass: ``stack(x, causal_mask(L), memory, memory_mask)``."""
    return stack(x, causal_mask(x.shape[1], device=x.device), memory, memory_mask)


# ------------------------------------------------------------------------- timing
def time_decoders(stack: nn.Module, x: Tensor, memory: Tensor | None = None, pairs: int = 10,
                  warmup: int = 2, threads: int | None = 1) -> Comparison:
    """Forward time (no grad) of the lecture's scheme (``lecture_decode``: L - 1 full passes)
    against one causal pass on the same input, interleaved (``xfl.timing.compare``).

    The candidates are named ``"lecture"`` and ``"causal"``: ``.ratio("lecture", "causal")``.
    """
    with torch.no_grad():
        return compare({"lecture": lambda: lecture_decode(stack, x, memory),
                        "causal": lambda: causal_decode(stack, x, memory)},
                       pairs=pairs, warmup=warmup, threads=threads, device=x.device)
