"""Normalisation layers, chosen by name: LayerNorm and RMSNorm (chapter 10).

RMSNorm (Zhang & Sennrich, 2019) rescales each feature vector by its root mean square and a
learned gain: y = g ⊙ x / √(mean(x²) + ε). Unlike LayerNorm it neither subtracts the mean nor
adds a bias (chapters/ch10_modern/modern_block.md). ``"rms_plain"`` drops the gain too, as
nanochat does (``F.rms_norm`` without weights).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

NORMS = ("layer", "rms", "rms_plain")


class RMSNorm(nn.Module):
    """``(..., D) -> (..., D)``: x / √(mean(x²) + eps) · weight, as ``torch.nn.RMSNorm``;
    ``gain=False``: no weight (``nn.RMSNorm(elementwise_affine=False)``)."""

    def __init__(self, d_model: int, eps: float = 1e-6, gain: bool = True):
        super().__init__()
        if not isinstance(d_model, int) or d_model < 1:
            raise ValueError(f"d_model must be a positive int, got {d_model!r}")
        self.weight = nn.Parameter(torch.ones(d_model)) if gain else None
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        inverse_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return x * inverse_rms if self.weight is None else x * inverse_rms * self.weight


def make_norm(kind: str, d_model: int, bias: bool = True) -> nn.Module:
    """``"layer"``: ``nn.LayerNorm`` (with a bias unless ``bias=False``); ``"rms"``: ``RMSNorm``;
    ``"rms_plain"``: ``RMSNorm`` without a gain."""
    if kind not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {kind!r}")
    if kind == "layer":
        return nn.LayerNorm(d_model, bias=bias)
    return RMSNorm(d_model, gain=kind == "rms")
