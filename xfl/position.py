"""Sinusoidal positional encoding (chapters 3, 4 and 10), as in Vaswani et al. (2017), section 3.5,
and rotary position embedding (RoPE; Su et al., 2021).

PE[pos, 2i] = sin(pos / base^(2i/d)),  PE[pos, 2i+1] = cos(pos / base^(2i/d)).
RoPE rotates each feature pair (2i, 2i+1) of a query or key at position m by the angle m·ω_i,
with the same frequencies ω_i = base^(-2i/d), so q_m · k_n depends on m - n only.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from .memory import check_fits


def _check_positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def frequencies(d_model: int, base: float = 10000.0, dtype: torch.dtype = torch.float32) -> Tensor:
    """The angular frequencies 1 / base^(2i/d), one per sin/cos pair: ``(ceil(d/2),)``."""
    _check_positive_int("d_model", d_model)
    if not base > 1:
        raise ValueError(f"base must be > 1, got {base!r}")
    even_dims = torch.arange(0, d_model, 2, dtype=dtype)  # 2i
    return base ** (-even_dims / d_model)


def sinusoidal_encoding(length: int, d_model: int, base: float = 10000.0) -> Tensor:
    """``(length, d_model)`` float32 table: sin in even columns, cos in odd columns."""
    _check_positive_int("length", length)
    _check_positive_int("d_model", d_model)
    check_fits(4 * length * (d_model + (d_model + 1) // 2), None,  # the table and its angles, float32
               f"sinusoidal_encoding(length={length}, d_model={d_model}) builds float32 tables",
               "a length (or max_len) and d_model whose product fits in memory")
    omega = frequencies(d_model, base)  # (ceil(d/2),)
    angles = torch.arange(length, dtype=torch.float32)[:, None] * omega  # (length, ceil(d/2))
    pe = torch.empty(length, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe


def offset_rotation(k: int, d_model: int, base: float = 10000.0) -> Tensor:
    """The ``(d_model, d_model)`` matrix M_k with PE(pos + k) = M_k @ PE(pos) for every pos.

    It is block-diagonal: one 2x2 rotation by angle k·ω_i per (sin, cos) pair. Needs even d.
    """
    if d_model % 2:
        raise ValueError(f"offset_rotation needs an even d_model, got {d_model}")
    theta = k * frequencies(d_model, base).double()  # (d/2,)
    c, s = torch.cos(theta), torch.sin(theta)
    blocks = torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)  # (d/2, 2, 2)
    return torch.block_diag(*blocks).float()


def rope_angles(start: int, length: int, head_dim: int, base: float = 10000.0,
                device=None, scale: float = 1.0) -> Tensor:
    """``(length, head_dim/2)`` float64 angles (m / scale)·ω_i for positions m = start .. start+length-1.
    ``scale`` > 1 is position interpolation (Chen et al., 2023): positions up to scale·L land
    on the angles of positions up to L."""
    if head_dim % 2:
        raise ValueError(f"rotary positions need an even head dimension, got {head_dim}")
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    omega = frequencies(head_dim, base, torch.float64).to(device)  # (d/2,)
    positions = torch.arange(start, start + length, dtype=torch.float64, device=device) / scale  # (L,)
    return positions[:, None] * omega


@functools.lru_cache(maxsize=32)
def _rope_table(positions: int, head_dim: int, base: float, scale: float, device: torch.device,
                dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin ``(positions, head_dim/2)`` of the angles of positions 0.. (computed once)."""
    with torch.inference_mode(False), torch.no_grad():  # plain tensors, usable under autograd
        angles = rope_angles(0, positions, head_dim, base, device, scale)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def rope_cos_sin(start: int, length: int, head_dim: int, base: float, device: torch.device,
                 dtype: torch.dtype, scale: float = 1.0) -> tuple[Tensor, Tensor]:
    """cos and sin ``(length, head_dim/2)`` of ``rope_angles``, sliced from a table cached per
    (size, base, scale, device, dtype), as nanochat and Llama precompute them; computed afresh
    under ``torch.compile`` (which folds them into the graph)."""
    if torch.compiler.is_compiling():
        angles = rope_angles(start, length, head_dim, base, device, scale)
        return angles.cos().to(dtype), angles.sin().to(dtype)
    size = 1 << max(start + length - 1, 1).bit_length()  # a power of two >= start + length
    cos, sin = _rope_table(size, head_dim, float(base), float(scale), torch.device(device), dtype)
    return cos[start:start + length], sin[start:start + length]


def apply_rope(x: Tensor, start: int = 0, base: float = 10000.0, scale: float = 1.0) -> Tensor:
    """Rotate the pairs (2i, 2i+1) of ``x (..., L, d)`` at positions start.. by (m / scale)·ω_i:
    ``(..., L, d)``."""
    if x.shape[-1] % 2:
        raise ValueError(f"rotary positions need an even head dimension, got {x.shape[-1]}")
    cos, sin = rope_cos_sin(start, x.shape[-2], x.shape[-1], base, x.device, x.dtype, scale)  # (L, d/2)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., L, d/2) each
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
