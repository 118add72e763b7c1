"""Attention without the L×L matrix: the online softmax, a tiled forward pass that keeps a
running maximum, sum and log-sum-exp, causal block skipping, and which of PyTorch's fused
kernels runs a call (chapter 11).

Plain PyTorch, written to be read and tested on a CPU: the algorithm of FlashAttention
(Dao et al., 2022), not its speed. Masks follow ``xfl.attention``: bool, True = may attend;
a query with no allowed key gets zeros (and a log-sum-exp of -inf).
"""

from __future__ import annotations

import math
import re
import warnings
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from xfl.attention import _check_qkv, check_mask

NEG_INF = float("-inf")


# ------------------------------------------------------------------ online softmax
class Partial(NamedTuple):
    """Softmax statistics of some keys, per query: the running maximum ``m (..., Lq)``, the sum
    ``l = Σ exp(s - m)`` ``(..., Lq)`` and the unnormalised output ``acc = Σ exp(s - m) v``
    ``(..., Lq, dv)``. The normalised output is ``acc / l``; the log-sum-exp is ``m + log l``."""

    m: Tensor
    l: Tensor
    acc: Tensor


def rescale(old_max: Tensor, new_max: Tensor) -> Tensor:
    """``exp(old_max - new_max)``, and 0 where both are -inf (no key seen yet on either side)."""
    return torch.where(new_max == NEG_INF, 0.0, (old_max - new_max).exp())


def merge_partials(a, b) -> Partial:
    """The statistics of two disjoint sets of keys merged into those of their union.

    ``a`` and ``b`` are ``(m, l, acc)`` triples as in ``Partial``; each is rescaled to the
    common maximum ``max(m_a, m_b)``, then the sums and outputs add."""
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    m = torch.maximum(m_a, m_b)  # (..., Lq)
    s_a, s_b = rescale(m_a, m), rescale(m_b, m)  # (..., Lq)
    return Partial(m, s_a * l_a + s_b * l_b, s_a[..., None] * acc_a + s_b[..., None] * acc_b)


def block_partial(scores: Tensor, v: Tensor) -> Partial:
    """The statistics of one block: ``scores (..., Lq, Lb)`` (-inf where masked), ``v (..., Lb, dv)``."""
    m = scores.amax(dim=-1)  # (..., Lq)
    p = (scores - m[..., None]).exp().nan_to_num(0.0)  # (..., Lq, Lb); rows of -inf give 0
    return Partial(m, p.sum(dim=-1), p @ v)


def _check_block(block_size, name: str = "block_size") -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"{name} must be a positive int, got {block_size!r}")


def running_max_and_sum(x: Tensor, block_size: int) -> tuple[Tensor, Tensor]:
    """One pass over ``x (..., N)`` in blocks of ``block_size``: the maximum ``m`` and
    ``l = Σ exp(x - m)``, both ``(..., )``, kept as running values and rescaled at each block."""
    _check_block(block_size)
    m = torch.full(x.shape[:-1], NEG_INF, dtype=x.dtype, device=x.device)
    l = torch.zeros_like(m)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]  # (..., b)
        new_m = torch.maximum(m, block.amax(dim=-1))
        l = rescale(m, new_m) * l + (block - new_m[..., None]).exp().nan_to_num(0.0).sum(dim=-1)
        m = new_m
    return m, l


def online_softmax(x: Tensor, block_size: int) -> Tensor:
    """softmax over the last axis of ``x (..., N)`` from ``running_max_and_sum`` (one streaming pass
    for the statistics, one to write the weights). A row of only -inf gives zeros."""
    m, l = running_max_and_sum(x, block_size)
    weights = (x - m[..., None]).exp() / l[..., None]  # (..., N)
    return weights.nan_to_num(0.0)


# ------------------------------------------------------------------ tiled attention
class TiledResult(NamedTuple):
    """``out (..., Lq, dv)``, ``lse (..., Lq)`` (the log-sum-exp of each query's scaled
    scores, -inf for a query with no allowed key) and how many (query block, key block) pairs
    were computed and skipped (causal blocks above the diagonal)."""

    out: Tensor
    lse: Tensor
    blocks_visited: int
    blocks_skipped: int


def causal_block_counts(lq: int, lk: int, block_q: int, block_k: int) -> tuple[int, int]:
    """(visited, skipped) block pairs of a causal ``lq × lk`` attention in tiles of
    ``block_q × block_k``: a pair is skipped when its first key comes after its last query."""
    for name, n in (("lq", lq), ("lk", lk), ("block_q", block_q), ("block_k", block_k)):
        _check_block(n, name)
    n_k = math.ceil(lk / block_k)
    visited = sum(min(n_k, (min(qs + block_q, lq) - 1) // block_k + 1) for qs in range(0, lq, block_q))
    return visited, math.ceil(lq / block_q) * n_k - visited


def _check_tiled_inputs(q, k, v, mask, block_q, block_k) -> tuple[int, ...]:
    """Validate the inputs; return the broadcast batch shape."""
    _check_block(block_q, "block_q")
    _check_block(block_k, "block_k")
    _check_qkv(q, k, v)
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the batch dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and "
                         f"v {tuple(v.shape)} do not broadcast") from None
    if mask is not None:
        check_mask(mask, (*batch, q.shape[-2], k.shape[-2]))
    return tuple(batch)


def _key_block_scores(q_blk: Tensor, k_blk: Tensor, qs: int, ks: int, mask_rows: Tensor | None,
                      is_causal: bool) -> Tensor:
    """Scores of (scaled) queries ``qs..`` against keys ``ks..``: ``(..., bq, bk)``, -inf where
    ``mask_rows`` (the mask's rows of these queries, every key) or the causal rule forbids."""
    scores = q_blk @ k_blk.transpose(-2, -1)  # (..., bq, bk)
    if mask_rows is not None:
        scores = scores.masked_fill(~mask_rows[..., ks:ks + k_blk.shape[-2]], NEG_INF)
    if is_causal:
        rows = torch.arange(qs, qs + q_blk.shape[-2], device=q_blk.device)
        cols = torch.arange(ks, ks + k_blk.shape[-2], device=q_blk.device)
        scores = scores.masked_fill(cols[None, :] > rows[:, None], NEG_INF)
    return scores


def _query_block(q_blk: Tensor, k: Tensor, v: Tensor, mask_rows: Tensor | None, qs: int,
                 is_causal: bool, block_k: int) -> tuple[Partial, int]:
    """Queries ``qs..`` (scaled, ``(..., bq, d)``) against every key block they need: with
    ``is_causal``, key blocks that start after the block's last query are not visited."""
    q_last, visited, acc = qs + q_blk.shape[-2] - 1, 0, None
    for ks in range(0, k.shape[-2], block_k):
        if is_causal and ks > q_last:
            break  # every later block lies above the diagonal too
        scores = _key_block_scores(q_blk, k[..., ks:ks + block_k, :], qs, ks, mask_rows, is_causal)
        part = block_partial(scores, v[..., ks:ks + block_k, :])  # scores: (..., bq, bk)
        acc, visited = (part if acc is None else merge_partials(acc, part)), visited + 1
    return acc, visited


def tiled_attention_forward(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                            is_causal: bool = False, block_q: int = 64, block_k: int = 64) -> TiledResult:
    """softmax(q kᵀ / √d) v, one ``block_q × block_k`` tile of scores at a time.

    q ``(..., Lq, d)``, k ``(..., Lk, d)``, v ``(..., Lk, dv)``; ``mask`` bool, broadcastable to
    ``(..., Lq, Lk)``; ``is_causal``: query i sees keys j <= i (top-left aligned, as SDPA).
    Extra memory: one tile of scores and the running statistics, never the L×L matrix
    (a materialised ``mask`` is L×L bytes of its own)."""
    batch = _check_tiled_inputs(q, k, v, mask, block_q, block_k)
    lq, lk = q.shape[-2], k.shape[-2]
    full_mask = None if mask is None else mask.expand(*batch, lq, lk)  # a view: no copy
    q = q / math.sqrt(q.shape[-1])
    outs, lses, visited = [], [], 0
    for qs in range(0, lq, block_q):
        rows = None if full_mask is None else full_mask[..., qs:qs + block_q, :]
        part, n = _query_block(q[..., qs:qs + block_q, :], k, v, rows, qs, is_causal, block_k)
        outs.append((part.acc / part.l[..., None]).nan_to_num(0.0))  # (..., bq, dv); l = 0 -> 0
        lses.append(part.m + part.l.log())  # (..., bq)
        visited += n
    total = math.ceil(lq / block_q) * math.ceil(lk / block_k)
    out = torch.cat([o.expand(*batch, *o.shape[-2:]) for o in outs], dim=-2)  # (..., Lq, dv)
    lse = torch.cat([s.expand(*batch, s.shape[-1]) for s in lses], dim=-1)  # (..., Lq)
    return TiledResult(out, lse, visited, total - visited)


def tiled_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                    is_causal: bool = False, block_q: int = 64, block_k: int = 64) -> Tensor:
    """The output ``(..., Lq, dv)`` of ``tiled_attention_forward`` (same arguments)."""
    return tiled_attention_forward(q, k, v, mask, is_causal=is_causal, block_q=block_q, block_k=block_k).out


def tiled_attention_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, grad_out: Tensor,
                             mask: Tensor | None = None, *, is_causal: bool = False,
                             block_k: int = 64) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv) of attention from the forward's ``out`` and ``lse`` alone: the
    weights of each key block are recomputed as ``exp(s - lse)``, never stored.

    With ``D = rowsum(dO ∘ O)``: ``dV = Pᵀ dO``, ``dP = dO Vᵀ``, ``dS = P ∘ (dP - D)``,
    ``dQ = dS K / √d``, ``dK = dSᵀ Q / √d``. Shapes as in ``tiled_attention_forward``; the
    batch dimensions of q, k, v must be equal here."""
    batch = _check_tiled_inputs(q, k, v, mask, 1, block_k)
    full_mask = None if mask is None else mask.expand(*batch, q.shape[-2], k.shape[-2])
    scale = 1 / math.sqrt(q.shape[-1])
    D = (grad_out * out).sum(dim=-1, keepdim=True)  # (..., Lq, 1)
    dq, dks, dvs = torch.zeros_like(q), [], []
    for ks in range(0, k.shape[-2], block_k):
        k_blk, v_blk = k[..., ks:ks + block_k, :], v[..., ks:ks + block_k, :]
        p = (_key_block_scores(q * scale, k_blk, 0, ks, full_mask, is_causal) - lse[..., None]).exp()
        p = p.nan_to_num(0.0)  # (..., Lq, bk); queries with no key: lse = -inf
        ds = p * (grad_out @ v_blk.transpose(-2, -1) - D)  # (..., Lq, bk)
        dq = dq + scale * ds @ k_blk
        dks.append(scale * ds.transpose(-2, -1) @ q)  # (..., bk, d)
        dvs.append(p.transpose(-2, -1) @ grad_out)  # (..., bk, dv)
    return dq, torch.cat(dks, dim=-2), torch.cat(dvs, dim=-2)


class _RecomputingAttention(torch.autograd.Function):
    """Forward by tiles; saves q, k, v, out and lse (no weights); backward by recomputation."""

    @staticmethod
    def forward(ctx, q, k, v, mask, is_causal, block_q, block_k):
        res = tiled_attention_forward(q, k, v, mask, is_causal=is_causal, block_q=block_q, block_k=block_k)
        ctx.save_for_backward(q, k, v, res.out, res.lse)
        ctx.mask, ctx.is_causal, ctx.block_k = mask, is_causal, block_k
        return res.out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        grads = tiled_attention_backward(q, k, v, out, lse, grad_out, ctx.mask,
                                         is_causal=ctx.is_causal, block_k=ctx.block_k)
        return (*grads, None, None, None, None)


def tiled_attention_recomputing(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                                is_causal: bool = False, block_q: int = 64, block_k: int = 64) -> Tensor:
    """``tiled_attention`` whose backward is ``tiled_attention_backward``: autograd keeps q, k, v,
    the output and one log-sum-exp per query, never the weights. q, k, v need equal batch shapes."""
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(f"q, k, v need the same batch dimensions here, got {tuple(q.shape[:-2])}, "
                         f"{tuple(k.shape[:-2])} and {tuple(v.shape[:-2])}")
    return _RecomputingAttention.apply(q, k, v, mask, is_causal, block_q, block_k)


def explicit_attention_bytes(batch: int, heads: int, lq: int, lk: int, element_size: int) -> int:
    """Bytes of the two ``(B, H, Lq, Lk)`` matrices that the explicit path ``softmax(q kᵀ/√d) v``
    holds at once (the scores and the scaled scores, then the scaled scores and the weights):
    its peak extra memory, up to the output and a few bytes."""
    return 2 * element_size * batch * heads * lq * lk


# ------------------------------------------------------------------ PyTorch's backends
KERNEL_NAMES = {  # the aten operator each SDPA backend runs -> the backend's name
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
}
BACKENDS = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def sdpa_kernel_used(q: Tensor, k: Tensor, v: Tensor, **kwargs) -> str:
    """The backend (``math``, ``flash``, ...) that ``F.scaled_dot_product_attention(q, k, v,
    **kwargs)`` runs, read from the operators the profiler records."""
    from xfl.memory import quiet_profile
    with quiet_profile() as prof:
        F.scaled_dot_product_attention(q, k, v, **kwargs)
    used = {KERNEL_NAMES[e.name] for e in prof.events() if e.name in KERNEL_NAMES}
    if len(used) != 1:
        raise RuntimeError(f"expected one SDPA kernel in the profile, found {sorted(used)}")
    return used.pop()


def sdpa_backend_report(q: Tensor, k: Tensor, v: Tensor, **kwargs) -> dict[str, str]:
    """Which backend runs the call by default, and for each backend forced alone with
    ``sdpa_kernel``: ``"runs"`` or ``"refused: <PyTorch's first reason>"``."""
    report = {"default": sdpa_kernel_used(q, k, v, **kwargs)}
    for name, backend in BACKENDS.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel(backend):
                    report[name] = "runs" if sdpa_kernel_used(q, k, v, **kwargs) == name else "ran another"
            except RuntimeError as error:
                report[name] = f"refused: {_refusal_reason(caught, error)}"
    return report


def _refusal_reason(caught: list, error: RuntimeError) -> str:
    """PyTorch's warnings about why a kernel was not used, without their source locations;
    the error itself when there are none (a backend this build or device does not have)."""
    lines = [re.sub(r"\s*\(Triggered internally at .*\)\s*$", "", str(w.message)).strip() for w in caught]
    lines = [line for line in lines if line and not line.endswith("because:")]
    return " ".join(lines) or str(error).splitlines()[0]
