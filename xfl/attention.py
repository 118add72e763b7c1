"""Scaled dot-product attention, multi-head attention and every mask (chapters 1-5, 8, 10, 11;
built in chapters 1-3).

One implementation serves self-attention, cross-attention, the causal decoder, the
Vision Transformer and the pixel-attention block. Masks follow PyTorch's boolean
convention: ``True`` means "this query may attend to this key".
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .memory import check_fits
from .norms import RMSNorm
from .position import apply_rope


# --------------------------------------------------------------------------- masks
def _check_length(length) -> None:
    """A positive int (a bool is refused: ``True`` is no length)."""
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise ValueError(f"length must be a positive int, got {length!r}")


def causal_mask(length: int, device=None) -> Tensor:
    """``(L, L)`` bool mask, True on and below the diagonal: position i sees 0..i."""
    _check_length(length)
    check_fits(length * length, device, f"causal_mask(length={length}) builds a ({length}, {length}) bool mask",
               f"a length whose square fits in memory (or is_causal=True, which builds no mask)")
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def padding_mask(lengths: Tensor | Sequence[int], length: int) -> Tensor:
    """``(B, L)`` bool mask, True for the first ``lengths[b]`` (real) tokens of row b."""
    lengths = torch.as_tensor(lengths)
    if lengths.ndim != 1 or lengths.is_floating_point():
        raise ValueError(f"lengths must be a 1-D integer sequence, got shape {tuple(lengths.shape)} "
                         f"and dtype {lengths.dtype}")
    _check_length(length)
    if lengths.numel() and (lengths.min() < 0 or lengths.max() > length):
        raise ValueError(f"lengths must lie in [0, {length}], got {lengths.tolist()}")
    positions = torch.arange(length, device=lengths.device)  # (L,)
    return positions[None, :] < lengths[:, None]  # (B, L)


def key_mask(keep: Tensor) -> Tensor:
    """``(B, S)`` True = real token -> ``(B, 1, 1, S)``: a mask over keys for every head and query."""
    return keep[:, None, None, :]


def causal_padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """``(B, L)`` tokens -> ``(B, 1, L, L)``: query i sees keys j <= i that are not padding."""
    causal = causal_mask(tokens.shape[-1], device=tokens.device)  # (L, L)
    return causal & key_mask(tokens != pad_id)  # (B, 1, L, L)


def newest_queries_mask(keep: Tensor, num_queries: int) -> Tensor:
    """The causal padding mask of the last ``num_queries`` of t positions (incremental decoding).

    ``keep (B, t)`` is True for real tokens. Returns ``(B, 1, num_queries, t)``: the query at
    position p sees the real keys j <= p; with ``num_queries == t``, ``causal_padding_mask``.
    """
    t = keep.shape[-1]
    if not 1 <= num_queries <= t:
        raise ValueError(f"num_queries must lie in [1, {t}], got {num_queries}")
    causal = torch.ones(num_queries, t, dtype=torch.bool, device=keep.device).tril(t - num_queries)
    return causal & key_mask(keep)  # (B, 1, num_queries, t)


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The shape ``shapes`` broadcast to, or None when they do not: ``torch.broadcast_shapes`` in
    plain Python (torch's imports sympy on its first call, seconds on a busy CPU)."""
    ndim = max(len(shape) for shape in shapes)
    padded = [(1,) * (ndim - len(shape)) + tuple(shape) for shape in shapes]
    out = []
    for sizes in zip(*padded):
        others = {n for n in sizes if n != 1}
        if len(others) > 1:
            return None
        out.append(others.pop() if others else 1)
    return tuple(out)


def check_mask(mask: Tensor, target_shape: Sequence[int], what: str = "mask") -> None:
    """Raise ValueError unless ``mask`` is bool and broadcasts to ``target_shape``."""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        dtype = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{what} must be a bool tensor (True = may attend), got {dtype}")
    target = tuple(target_shape)
    if broadcast_shape(tuple(mask.shape), target) != target:
        raise ValueError(f"{what} of shape {tuple(mask.shape)} does not broadcast to {target}")


# ------------------------------------------------------------------------ values
_TRUSTED = ContextVar("xfl_trusted_inputs", default=False)


@contextmanager
def trusted_inputs() -> Iterator[None]:
    """Skip the value checks (:func:`check_finite`, ``xfl.model.check_token_ids``) inside: a
    training step (``xfl.train.train_step``) reads nothing back from the device."""
    token = _TRUSTED.set(True)
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def checks_values() -> bool:
    """False inside :func:`trusted_inputs`."""
    return not _TRUSTED.get()


def check_finite(x: Tensor, name: str, on_accelerators: bool = False) -> None:
    """Raise ValueError when ``x`` holds NaN or inf, naming ``name`` and the first bad entry.

    Checks what a caller passes in, never a training step's activations: tensors autograd tracks
    are skipped, so is everything inside :func:`trusted_inputs`, and so are tensors on an
    accelerator unless ``on_accelerators`` and autograd is off (the check reads a value back)."""
    on_cpu = x.device.type == "cpu"
    if not x.is_floating_point() or x.requires_grad or not (on_cpu or on_accelerators) \
            or not checks_values():
        return
    if (not on_cpu and torch.is_grad_enabled()) or torch.isfinite(x.sum()):  # one cheap pass
        return
    bad = ~torch.isfinite(x)  # the sum is NaN or inf: find the entry (or a finite overflow)
    if bad.any():
        where = tuple(bad.nonzero()[0].tolist())
        raise ValueError(f"{name} holds {int(bad.sum())} NaN or inf value(s), the first "
                         f"{x[where].item()} at index {where}; expected finite numbers")


def check_like_weights(x: Tensor, weight: Tensor, name: str) -> None:
    """Raise ValueError unless ``x`` is floating point, on ``weight``'s device and, outside
    autocast, of ``weight``'s dtype (metadata only)."""
    if not x.is_floating_point():
        raise ValueError(f"{name} must be floating point (the weights are {weight.dtype}), got {x.dtype}")
    if x.device != weight.device:
        raise ValueError(f"{name} is on {x.device}, the weights on {weight.device}; expected one device "
                         f"(move it with {name}.to({str(weight.device)!r}))")
    if x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
        raise ValueError(f"{name} must have the weights' dtype {weight.dtype}, got {x.dtype} "
                         f"(convert with {name}.to({weight.dtype}), or run under torch.autocast)")


# ----------------------------------------------------------------------- attention
def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Metadata only (rank, sizes, batch dimensions, dtype kind, device): no value is read."""
    shapes = f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
    if q.ndim < 2 or q.ndim != k.ndim or k.ndim != v.ndim:
        raise ValueError(f"q, k, v need the same rank >= 2, (..., L, d), got shapes {shapes}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same feature size, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v need the same length, got {k.shape[-2]} and {v.shape[-2]}")
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]) and \
            broadcast_shape(q.shape[:-2], k.shape[:-2], v.shape[:-2]) is None:
        raise ValueError(f"q, k, v need batch dimensions (all but the last two) that match or broadcast; "
                         f"shapes {shapes} do not broadcast")
    if not (q.is_floating_point() and k.is_floating_point() and v.is_floating_point()):
        raise ValueError(f"q, k, v must be floating point, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")


def _safe_mask(mask: Tensor) -> tuple[Tensor, Tensor]:
    """Open fully masked rows (so softmax stays finite) and say which rows have a key."""
    has_key = mask.any(dim=-1, keepdim=True)  # (..., Lq, 1)
    return mask | ~has_key, has_key


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
    """softmax(q kᵀ / √d) over the keys: ``(..., Lq, d), (..., Lk, d) -> (..., Lq, Lk)``."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Lq, Lk)
    if mask is None:
        return scores.softmax(dim=-1)
    open_mask, has_key = _safe_mask(mask)
    weights = scores.masked_fill(~open_mask, float("-inf")).softmax(dim=-1)
    return weights * has_key  # rows with no allowed key become zeros


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                                 return_weights: bool = False, dropout_p: float = 0.0,
                                 is_causal: bool = False):
    """Attention(Q, K, V) = softmax(Q Kᵀ / √d) V.

    q ``(..., Lq, d)``, k ``(..., Lk, d)``, v ``(..., Lk, dv)``; ``mask`` is bool and
    broadcasts to ``(..., Lq, Lk)``, True = may attend. Returns ``(..., Lq, dv)``, plus the
    weights ``(..., Lq, Lk)`` when ``return_weights``. A query with no allowed key gets zeros.
    Without weights PyTorch's fused kernel runs; with them, the explicit path (same function).
    ``is_causal=True`` (Lq = Lk, no mask) is the causal mask without materialising it, so the
    fused kernel can skip the masked half (chapter 10).
    Values are not checked here (the inner loop of every model; ``MultiHeadAttention`` checks
    its inputs): a NaN query's output row is what the fused kernel gives (zeros on the CPU) on
    both paths, and its weights row is NaN, so the flag only adds output.
    """
    _check_qkv(q, k, v)
    if is_causal:
        mask = _causal_instead_of(mask, q.shape[-2], k.shape[-2], q.device)
        if not return_weights:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    if mask is not None:
        check_mask(mask, (*broadcast_shape(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2]))
    if return_weights:
        weights = attention_weights(q, k, mask)
        if dropout_p > 0:
            weights = F.dropout(weights, dropout_p)
        out = weights @ v  # (..., Lq, dv)
        if q.isnan().any():  # NaN rows: the fused kernel's output, so the flag only adds output
            out = _fused_attention(q, k, v, mask, dropout_p)
        return out, weights  # (..., Lq, dv), (..., Lq, Lk)
    return _fused_attention(q, k, v, mask, dropout_p)


def _fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> Tensor:
    """PyTorch's fused kernel; rows with no allowed key give zeros. ``(..., Lq, dv)``."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    open_mask, has_key = _safe_mask(mask)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=open_mask, dropout_p=dropout_p)
    return out * has_key


def _causal_instead_of(mask: Tensor | None, len_q: int, len_k: int, device) -> Tensor:
    """The causal mask ``(Lq, Lk)`` that ``is_causal=True`` stands for; it excludes ``mask``."""
    if mask is not None or len_q != len_k:
        raise ValueError("is_causal=True needs mask=None and as many queries as keys, got "
                         f"mask={'a tensor' if mask is not None else None}, Lq={len_q}, Lk={len_k}")
    return causal_mask(len_q, device=device)


def repeat_kv_heads(x: Tensor, num_heads: int) -> Tensor:
    """Grouped-query attention's sharing: ``(B, kv_heads, L, d) -> (B, num_heads, L, d)``, each kv
    head repeated for the ``num_heads / kv_heads`` query heads of its group (Ainslie et al., 2023)."""
    kv_heads = x.shape[1]
    if num_heads % kv_heads:
        raise ValueError(f"num_heads={num_heads} must be a multiple of the {kv_heads} kv heads")
    return x if kv_heads == num_heads else x.repeat_interleave(num_heads // kv_heads, dim=1)


# ------------------------------------------------------------- multi-head attention
def _check_sizes(d_model: int, num_heads: int, dropout: float) -> None:
    if num_heads < 1 or d_model % num_heads != 0:
        raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must lie in [0, 1), got {dropout}")


def _check_kv_heads(num_heads: int, num_kv_heads: int | None) -> int:
    """``num_kv_heads`` (None: one per query head), checked to divide ``num_heads``."""
    if num_kv_heads is None:
        return num_heads
    if not isinstance(num_kv_heads, int) or num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads={num_kv_heads!r} must be a positive divisor of num_heads={num_heads}")
    return num_kv_heads


def _check_rope(head_dim: int, rope_base: float | None) -> float | None:
    """``rope_base`` (None: no rotary positions), checked > 1 with an even head dimension."""
    if rope_base is not None and (head_dim % 2 or not rope_base > 1):
        raise ValueError(f"rotary positions need an even head dimension and a base > 1, got "
                         f"head_dim={head_dim}, rope_base={rope_base!r}")
    return rope_base


class MultiHeadAttention(nn.Module):
    """Multi-head attention with batched heads and an output projection (chapter 2).

    query ``(B, Lq, D)``; key/value ``(B, Lk, D)`` for cross-attention, None for self-attention;
    ``mask`` bool, broadcastable to ``(B, heads, Lq, Lk)``. Returns ``(B, Lq, D)``, and the
    weights ``(B, heads, Lq, Lk)`` when ``need_weights``. Chapter 10's options (below the core):
    ``num_kv_heads``, ``rope_base``, ``qk_norm``. Incremental decoding: ``xfl.cache``.
    """

    # what changes the computation without changing a weight's shape (4 heads of 4 or 2 of 8):
    # xfl.checkpoint records and compares these for a model without a config
    settings = ("d_model", "num_heads", "num_kv_heads", "rope_base")

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 num_kv_heads: int | None = None, rope_base: float | None = None, qk_norm: bool = False):
        super().__init__()
        _check_sizes(d_model, num_heads, dropout)
        self.d_model, self.num_heads, self.dropout = d_model, num_heads, dropout
        self.head_dim = d_model // num_heads
        self.num_kv_heads = _check_kv_heads(num_heads, num_kv_heads)
        self.rope_base = _check_rope(self.head_dim, rope_base)
        self.rope_scale = 1.0  # > 1: position interpolation, set to read windows longer than trained
        kv_dim = self.num_kv_heads * self.head_dim
        self.splits = (d_model, kv_dim, kv_dim)
        self.in_proj = nn.Linear(d_model, sum(self.splits), bias=bias)  # [W_Q; W_K; W_V]
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O
        self.q_norm = RMSNorm(self.head_dim) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim) if qk_norm else None

    def forward(self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None,
                mask: Tensor | None = None, need_weights: bool = False, is_causal: bool = False):
        self.check_inputs(query, key, value)
        q, k, v = (self.split_heads(x) for x in self.project(query, key, value))  # (B, h|kv, L, d_h)
        q, k = self.position_heads(q, k, 0 if key is None and value is None else None)
        return self.attend(q, k, v, mask, need_weights, is_causal)

    def project(self, query: Tensor, key: Tensor | None, value: Tensor | None):
        """Q, K, V projections, each ``(B, L, D)``; one matmul for self-attention."""
        if key is None and value is None:
            return self.in_proj(query).split(self.splits, dim=-1)
        key = query if key is None else key
        value = key if value is None else value
        return tuple(self.project_one(x, i) for i, x in enumerate((query, key, value)))

    def split_heads(self, x: Tensor) -> Tensor:
        """``(B, L, heads * d_head) -> (B, heads, L, d_head)`` (query or kv heads)."""
        B, L, _ = x.shape
        return x.view(B, L, -1, self.head_dim).transpose(1, 2)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
               need_weights: bool = False, is_causal: bool = False):
        """Heads ``q (B, h, Lq, d_h)``, ``k, v (B, kv, Lk, d_h)`` -> output ``(B, Lq, D)``
        (and the weights ``(B, h, Lq, Lk)`` when ``need_weights``)."""
        if mask is not None:
            check_mask(mask, (q.shape[0], self.num_heads, q.shape[2], k.shape[2]))
        k, v = repeat_kv_heads(k, self.num_heads), repeat_kv_heads(v, self.num_heads)  # (B, h, Lk, d_h)
        p = self.dropout if self.training else 0.0
        result = scaled_dot_product_attention(q, k, v, mask, return_weights=need_weights, dropout_p=p,
                                              is_causal=is_causal)
        out, weights = result if need_weights else (result, None)
        out = self.out_proj(self.merge_heads(out))  # (B, Lq, D)
        return (out, weights) if need_weights else out

    @staticmethod
    def merge_heads(x: Tensor) -> Tensor:
        """``(B, heads, L, d_head) -> (B, L, heads * d_head)``."""
        B, H, L, d_head = x.shape
        return x.transpose(1, 2).reshape(B, L, H * d_head)

    # ------------------------------------------ beyond the core: chapter 10, xfl.cache, checks
    def position_heads(self, q: Tensor, k: Tensor, start: int | None) -> tuple[Tensor, Tensor]:
        """QK-norm and RoPE (when configured) on heads ``q (B, h, Lq, d_h)``, ``k (B, kv, Lk, d_h)``;
        RoPE only for self-attention, whose newest positions begin at ``start``. Chapter 10:
        ``num_kv_heads`` < ``num_heads`` shares each key/value head among a group of query heads
        (grouped-query attention; 1 = multi-query; a cache keeps only the kv heads);
        ``rope_base`` rotates self-attention's queries and keys by their positions (RoPE);
        ``qk_norm`` RMS-normalises each head's queries and keys before the scores."""
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope_base is not None and start is not None:
            q, k = (apply_rope(x, start, self.rope_base, self.rope_scale) for x in (q, k))
        return q, k

    def project_one(self, x: Tensor, which: int) -> Tensor:
        """``x (B, L, D)`` through W_Q (``which=0``), W_K (1) or W_V (2): ``(B, L, D)``."""
        bias = self.in_proj.bias.split(self.splits)[which] if self.in_proj.bias is not None else None
        return F.linear(x, self.in_proj.weight.split(self.splits, dim=0)[which], bias)

    def check_inputs(self, query: Tensor, key: Tensor | None, value: Tensor | None) -> None:
        """Shapes ``(B, L, D)`` with one batch size, the weights' dtype (any float under autocast)
        and device, finite values (outside a training step)."""
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x is not None and (x.ndim != 3 or x.shape[-1] != self.d_model):
                raise ValueError(f"{name} must be (B, L, {self.d_model}), got {tuple(x.shape)}")
            if x is not None and 0 in x.shape[:2]:
                raise ValueError(f"{name} must be (B, L, {self.d_model}) with B >= 1 and L >= 1, "
                                 f"got {tuple(x.shape)}")
            if x is not None:
                check_like_weights(x, self.in_proj.weight, name)
                check_finite(x, name)
        if key is not None and value is not None and key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} need the same (B, Lk)")
        other = key if key is not None else value
        if other is not None and other.shape[0] != query.shape[0]:
            raise ValueError(f"query batch {query.shape[0]} != key/value batch {other.shape[0]}")

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> "MultiHeadAttention":
        """A MultiHeadAttention with the weights of ``torch.nn.MultiheadAttention`` ``m``."""
        if not m._qkv_same_embed_dim or m.bias_k is not None or m.add_zero_attn:
            raise ValueError("from_torch supports nn.MultiheadAttention with kdim = vdim = embed_dim, "
                             "no bias_k/bias_v and add_zero_attn=False")
        bias = m.in_proj_bias is not None
        mine = cls(m.embed_dim, m.num_heads, dropout=m.dropout, bias=bias).to(m.in_proj_weight)
        with torch.no_grad():
            mine.in_proj.weight.copy_(m.in_proj_weight)
            mine.out_proj.weight.copy_(m.out_proj.weight)
            if bias:
                mine.in_proj.bias.copy_(m.in_proj_bias)
                mine.out_proj.bias.copy_(m.out_proj.bias)
        return mine
