"""Attention without the L×L matrix: the online softmax, a tiled forward pass that keeps a
running maximum, sum and log-sum-exp, causal block skipping, and which of PyTorch's fused
kernels runs a call (chapter 11).

Plain PyTorch, written to be read and tested on a CPU: the algorithm of FlashAttention
(Dao et al., 2022) and the backward of FlashAttention-2 (Dao, 2023), not their speed. Masks
follow ``xfl.attention``: bool, True = may attend; a query with no allowed key gets zeros (and
a log-sum-exp of -inf). 16-bit inputs are accumulated in float32, as the CUDA kernels do.
NaN or inf in q, k or v is refused (``ValueError``) where ``xfl.attention.check_finite`` reads
values (CPU tensors autograd does not track); elsewhere it propagates to the output as NaN.
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

from xfl.attention import _check_qkv, broadcast_shape, check_finite, check_mask

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
    p = exp_below(scores, m[..., None])  # (..., Lq, Lb)
    return Partial(m, p.sum(dim=-1), p @ v)


def exp_below(scores: Tensor, top: Tensor) -> Tensor:
    """``exp(scores - top)``, and 0 where ``top`` is -inf (a row with no allowed key), so
    that a NaN in the scores stays NaN instead of being zeroed with the masked rows."""
    return torch.where(top == NEG_INF, 0.0, (scores - top).exp())


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
        l = rescale(m, new_m) * l + exp_below(block, new_m[..., None]).sum(dim=-1)
        m = new_m
    return m, l


def online_softmax(x: Tensor, block_size: int) -> Tensor:
    """softmax over the last axis of ``x (..., N)`` from ``running_max_and_sum`` (one streaming pass
    for the statistics, one to write the weights). A row of only -inf gives zeros."""
    m, l = running_max_and_sum(x, block_size)
    return exp_below(x, m[..., None]) / l.clamp_min(torch.finfo(x.dtype).tiny)[..., None]


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
    """Validate the inputs (shapes, mask, block sizes, finite values where they are read);
    return the broadcast batch shape."""
    _check_block(block_q, "block_q")
    _check_block(block_k, "block_k")
    _check_qkv(q, k, v)  # the batch dimensions broadcast
    batch = broadcast_shape(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if mask is not None:
        check_mask(mask, (*batch, q.shape[-2], k.shape[-2]))
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_finite(x, name)
    return tuple(batch)


def work_dtype(dtype: torch.dtype, accumulate: torch.dtype | None = None) -> torch.dtype:
    """The dtype the tiles are computed and accumulated in: ``accumulate`` if given, float32
    for 16-bit inputs (as the CUDA kernels accumulate), else ``dtype`` itself."""
    if accumulate is not None:
        return accumulate
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


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
    """Queries ``qs..`` (scaled, ``(..., bq, d)``, in the work dtype) against every key block
    they need, each read once and converted to ``q_blk``'s dtype: with ``is_causal``, key
    blocks that start after the block's last query are not visited."""
    q_last, visited, acc = qs + q_blk.shape[-2] - 1, 0, None
    for ks in range(0, k.shape[-2], block_k):
        if is_causal and ks > q_last:
            break  # every later block lies above the diagonal too
        k_blk, v_blk = (x[..., ks:ks + block_k, :].to(q_blk.dtype) for x in (k, v))  # (..., bk, d)
        scores = _key_block_scores(q_blk, k_blk, qs, ks, mask_rows, is_causal)  # (..., bq, bk)
        part = block_partial(scores, v_blk)
        acc, visited = (part if acc is None else merge_partials(acc, part)), visited + 1
    return acc, visited


def tiled_attention_forward(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                            is_causal: bool = False, block_q: int = 64, block_k: int = 64,
                            accumulate: torch.dtype | None = None) -> TiledResult:
    """softmax(q kᵀ / √d) v, one ``block_q × block_k`` tile of scores at a time.

    q ``(..., Lq, d)``, k ``(..., Lk, d)``, v ``(..., Lk, dv)``; ``mask`` bool, broadcastable to
    ``(..., Lq, Lk)``; ``is_causal``: query i sees keys j <= i (top-left aligned, as SDPA).
    Tiles, m, l and the accumulator are in ``work_dtype(q.dtype, accumulate)`` (float32 for
    16-bit inputs); ``out`` is returned in q's dtype, ``lse`` in the work dtype.
    Extra memory: one tile of scores and the running statistics, never the L×L matrix
    (a materialised ``mask`` is L×L bytes of its own)."""
    batch = _check_tiled_inputs(q, k, v, mask, block_q, block_k)
    lq, lk = q.shape[-2], k.shape[-2]
    full_mask = None if mask is None else mask.expand(*batch, lq, lk)  # a view: no copy
    scale, work = 1 / math.sqrt(q.shape[-1]), work_dtype(q.dtype, accumulate)
    outs, lses, visited = [], [], 0
    for qs in range(0, lq, block_q):
        rows = None if full_mask is None else full_mask[..., qs:qs + block_q, :]
        q_blk = q[..., qs:qs + block_q, :].to(work) * scale  # (..., bq, d)
        part, n = _query_block(q_blk, k, v, rows, qs, is_causal, block_k)
        out = torch.where(part.l[..., None] == 0, 0.0, part.acc / part.l[..., None])  # (..., bq, dv)
        outs.append(out.to(q.dtype))
        lses.append(part.m + part.l.log())  # (..., bq); -inf where no key is allowed
        visited += n
    total = math.ceil(lq / block_q) * math.ceil(lk / block_k)
    out = torch.cat([o.expand(*batch, *o.shape[-2:]) for o in outs], dim=-2)  # (..., Lq, dv)
    lse = torch.cat([s.expand(*batch, s.shape[-1]) for s in lses], dim=-1)  # (..., Lq)
    return TiledResult(out, lse, visited, total - visited)


def tiled_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                    is_causal: bool = False, block_q: int = 64, block_k: int = 64,
                    accumulate: torch.dtype | None = None) -> Tensor:
    """The output ``(..., Lq, dv)`` of ``tiled_attention_forward`` (same arguments)."""
    return tiled_attention_forward(q, k, v, mask, is_causal=is_causal, block_q=block_q,
                                   block_k=block_k, accumulate=accumulate).out


# ------------------------------------------------------------------ the backward (FlashAttention-2)
class _KeyBlock(NamedTuple):
    """One key block in the backward: its start, keys, values and the dK, dV it accumulates."""

    ks: int
    k: Tensor
    v: Tensor
    dk: Tensor
    dv: Tensor


def _tile_backward(blk: _KeyBlock, q_blk: Tensor, do_blk: Tensor, lse_blk: Tensor, d_blk: Tensor,
                   qs: int, mask_rows: Tensor | None, is_causal: bool, scale: float) -> Tensor:
    """One (query block, key block) tile of Algorithm 2 of FlashAttention-2: P recomputed from
    the log-sum-exp, dV and dK added into ``blk``, and the tile's share of dQ returned.
    q_blk ``(..., bq, d)`` already scaled, do_blk ``(..., bq, dv)``, lse_blk, d_blk ``(..., bq)``."""
    s = _key_block_scores(q_blk, blk.k, qs, blk.ks, mask_rows, is_causal)  # (..., bq, bk)
    p = exp_below(s, lse_blk[..., None])  # (..., bq, bk): the weights, never stored
    blk.dv.add_(p.transpose(-2, -1) @ do_blk)  # (..., bk, dv)
    ds = p * (do_blk @ blk.v.transpose(-2, -1) - d_blk[..., None])  # (..., bq, bk)
    blk.dk.add_(ds.transpose(-2, -1) @ q_blk)  # (..., bk, d); q_blk carries the 1/√d
    return scale * ds @ blk.k  # (..., bq, d)


def tiled_attention_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, grad_out: Tensor,
                             mask: Tensor | None = None, *, is_causal: bool = False,
                             block_q: int = 64, block_k: int = 64,
                             accumulate: torch.dtype | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv) of attention from the forward's ``out`` and ``lse`` alone, as
    FlashAttention-2's Algorithm 2: an outer loop over key blocks, an inner one over query
    blocks, each tile of weights recomputed as ``exp(s - lse)``; with ``is_causal`` a key block
    skips the query blocks that end before it. ``D = rowsum(dO ∘ O)``; per tile
    ``dV += Pᵀ dO``, ``dS = P ∘ (dO Vᵀ - D)``, ``dQ += dS K / √d``, ``dK += dSᵀ Q / √d``.
    Shapes as in ``tiled_attention_forward``; q, k, v need equal batch dimensions."""
    _check_tiled_inputs(q, k, v, mask, block_q, block_k)
    _check_same_batch(q, k, v)
    lq, lk, work = q.shape[-2], k.shape[-2], work_dtype(q.dtype, accumulate)
    full_mask = None if mask is None else mask.expand(*q.shape[:-2], lq, lk)
    scale = 1 / math.sqrt(q.shape[-1])
    qw, do, lse = (q.to(work) * scale), grad_out.to(work), lse.to(work)  # (..., Lq, d / dv / -)
    D = (do * out.to(work)).sum(dim=-1)  # (..., Lq)
    dq, dks, dvs = torch.zeros_like(qw), [], []
    for ks in range(0, lk, block_k):
        kv = [x[..., ks:ks + block_k, :].to(work) for x in (k, v)]  # (..., bk, d), (..., bk, dv)
        blk = _KeyBlock(ks, *kv, *(torch.zeros(x.shape, dtype=work, device=x.device) for x in kv))
        first = ks // block_q * block_q if is_causal else 0  # earlier query blocks end before ks
        for qs in range(first, lq, block_q):
            rows = slice(qs, qs + block_q)
            mask_rows = None if full_mask is None else full_mask[..., rows, :]
            dq[..., rows, :] += _tile_backward(blk, qw[..., rows, :], do[..., rows, :], lse[..., rows],
                                               D[..., rows], qs, mask_rows, is_causal, scale)
        dks.append(blk.dk)
        dvs.append(blk.dv)
    return dq.to(q.dtype), torch.cat(dks, dim=-2).to(k.dtype), torch.cat(dvs, dim=-2).to(v.dtype)


def _check_same_batch(q: Tensor, k: Tensor, v: Tensor) -> None:
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(f"q, k, v need the same batch dimensions here, got {tuple(q.shape[:-2])}, "
                         f"{tuple(k.shape[:-2])} and {tuple(v.shape[:-2])}")


class _RecomputingAttention(torch.autograd.Function):
    """Forward by tiles; saves q, k, v, out and lse (no weights); backward by recomputation."""

    @staticmethod
    def forward(ctx, q, k, v, mask, is_causal, block_q, block_k):
        res = tiled_attention_forward(q, k, v, mask, is_causal=is_causal, block_q=block_q, block_k=block_k)
        ctx.save_for_backward(q, k, v, res.out, res.lse)
        ctx.mask, ctx.is_causal, ctx.blocks = mask, is_causal, (block_q, block_k)
        return res.out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        grads = tiled_attention_backward(q, k, v, out, lse, grad_out, ctx.mask, is_causal=ctx.is_causal,
                                         block_q=ctx.blocks[0], block_k=ctx.blocks[1])
        return (*grads, None, None, None, None)


def tiled_attention_recomputing(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                                is_causal: bool = False, block_q: int = 64, block_k: int = 64) -> Tensor:
    """``tiled_attention`` whose backward is ``tiled_attention_backward``: autograd keeps q, k, v,
    the output and one log-sum-exp per query, never the weights. q, k, v need equal batch shapes."""
    _check_same_batch(q, k, v)
    return _RecomputingAttention.apply(q, k, v, mask, is_causal, block_q, block_k)


# ------------------------------------------------------------------ memory and traffic
def explicit_attention_bytes(batch: int, heads: int, lq: int, lk: int, element_size: int) -> int:
    """Bytes of the two ``(B, H, Lq, Lk)`` matrices that the explicit path ``softmax(q kᵀ/√d) v``
    holds at once (the scores and the scaled scores, then the scaled scores and the weights):
    its peak extra memory, up to the output and a few bytes."""
    return 2 * element_size * batch * heads * lq * lk


def tiled_bytes_moved(lq: int, lk: int, d: int, dv: int, block_q: int, element_size: int = 4) -> int:
    """Bytes the tiled forward reads from and writes to slow memory per head, without a mask:
    q once, every K and V block once per query block (``ceil(lq / block_q)`` passes over K and
    V), the output and the log-sum-exp written once. The K, V term, ``2 lq lk d / block_q``
    for dv = d, is what makes it Θ(N² d² / M) for tiles sized to an on-chip memory of M."""
    passes = math.ceil(lq / block_q)
    return element_size * (lq * d + passes * lk * (d + dv) + lq * dv + lq)


def elements_read(fn, *tensors: Tensor) -> int:
    """How many elements of ``tensors`` the operations of ``fn()`` read: every non-view
    operator whose argument shares one of their storages adds that argument's size."""
    from torch.utils._python_dispatch import TorchDispatchMode

    storages = {t.untyped_storage().data_ptr() for t in tensors}

    class _Reads(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view:
                flat = torch.utils._pytree.tree_leaves((args, kwargs or {}))
                _Reads.count += sum(a.numel() for a in flat if isinstance(a, Tensor)
                                    and a.untyped_storage().data_ptr() in storages)
            return func(*args, **(kwargs or {}))

    with _Reads():
        fn()
    return _Reads.count


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
