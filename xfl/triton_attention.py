"""FlashAttention-2 as Triton kernels: the forward, the backward in two kernels, and an autograd
function around them (chapter 11, "The kernel in Triton").

The algorithm is ``xfl.tiled_attention``'s, written the way a GPU runs it: one *program* per
(batch·head, query block) holds its queries, its running maximum ``m``, sum ``l`` and
unnormalised output ``acc`` while it streams the key blocks through, skips the causal blocks
above the diagonal, and writes the output and one log-sum-exp per query. The backward follows
FlashAttention-2 (Dao, 2023): ``D = rowsum(dO ∘ O)`` first (here in PyTorch), then one kernel
with a program per key block that accumulates dK and dV over the query blocks, and one with a
program per query block that accumulates dQ over the key blocks; each recomputes its tiles of
P from the saved log-sum-exp.

On a GPU the kernels are compiled; without one they run under Triton's interpreter
(``TRITON_INTERPRET=1``: each program executed by NumPy, one after another, on CPU tensors), so
they are written, tested and graded on any machine where Triton installs (it comes with
PyTorch's Linux wheels). The mode is fixed for the whole process when Triton is first imported
(its own ``tl.zeros``, ``tl.max``, ... are decorated then): where no CUDA device is visible and
nothing has imported Triton yet, importing this module sets ``TRITON_INTERPRET=1`` first.
CPU tensors in a process whose Triton compiles are refused with a ``RuntimeError`` that says
what to set. Where Triton is missing, importing this module works and every kernel call raises
an ``ImportError`` that says so.

Inputs: q ``(..., Lq, d)``, k ``(..., Lk, d)``, v ``(..., Lk, dv)`` with equal batch dimensions,
float32, float16 or bfloat16 (not under the interpreter, which reads bfloat16 wrongly), on one
device; ``is_causal``: query i sees keys j <= i (top-left aligned, as SDPA). No other mask, no
dropout. Sums are kept in float32; 16-bit inputs feed the
matrix products as they are (float32 accumulation), and float32 ones use full-precision
products (``input_precision="ieee"``, not TF32).
"""

from __future__ import annotations

import functools
import math
import os
import sys
from typing import NamedTuple

import torch
from torch import Tensor

from xfl.attention import _check_qkv

if "triton" not in sys.modules and "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # no GPU: Triton's interpreter, chosen before Triton is imported

try:
    import triton
    import triton.language as tl
except ImportError as error:  # e.g. macOS or Windows wheels of PyTorch, which ship no Triton
    triton = tl = None
    TRITON_IMPORT_ERROR: ImportError | None = error
else:
    TRITON_IMPORT_ERROR = None


def _imported_interpreted() -> bool:
    """Whether Triton was imported in interpreter mode: its own library functions (``tl.zeros``,
    ``tl.max``, ...) are decorated then, so that import fixes the mode for the whole process."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # another layout of Triton's internals: trust the variable
        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    return isinstance(tl.zeros, InterpretedFunction)


INTERPRETED = TRITON_IMPORT_ERROR is None and _imported_interpreted()

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MIN_BLOCK = 16  # tl.dot needs at least 16 rows and columns on a GPU


def triton_available() -> bool:
    """Whether Triton imports here (the kernels need it, compiled or interpreted)."""
    return TRITON_IMPORT_ERROR is None


def require_triton() -> None:
    """Raise an ``ImportError`` that names what is missing, where Triton does not import."""
    if TRITON_IMPORT_ERROR is not None:
        raise ImportError(
            "xfl.triton_attention needs Triton, which did not import here "
            f"({TRITON_IMPORT_ERROR}). It ships with PyTorch's Linux wheels (pip install torch) "
            "or installs alone (pip install triton); on macOS and Windows use "
            "xfl.tiled_attention, the same algorithm in plain PyTorch.") from TRITON_IMPORT_ERROR


# ------------------------------------------------------------------ the kernels (Triton source)
def _forward_kernel(Q, K, V, O, LSE, stride_qb, stride_qm, stride_kb, stride_kn, stride_vb, stride_vn,
                    stride_ob, stride_om, Lq, Lk, d, dv, scale,
                    IS_CAUSAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
                    D: tl.constexpr, DV: tl.constexpr, PRECISION: tl.constexpr):
    """One program: the query block ``program_id(0)`` of the head ``program_id(1)``.

    Q (BH, Lq, d), K (BH, Lk, d), V (BH, Lk, dv) -> O (BH, Lq, dv), LSE (BH, Lq) float32.
    D, DV: d and dv padded to powers of two (tl.arange needs them); the padding loads as 0."""
    qb, bh = tl.program_id(0), tl.program_id(1)
    rows = qb * BLOCK_Q + tl.arange(0, BLOCK_Q)  # (BQ,) query positions
    cols = tl.arange(0, BLOCK_K)  # (BK,) key positions in the block
    fd, fv = tl.arange(0, D), tl.arange(0, DV)  # feature offsets
    q = tl.load(Q + bh * stride_qb + rows[:, None] * stride_qm + fd[None, :],
                mask=(rows[:, None] < Lq) & (fd[None, :] < d), other=0.0)  # (BQ, D)
    k_ptrs = K + bh * stride_kb + cols[:, None] * stride_kn + fd[None, :]  # (BK, D): the first key block
    v_ptrs = V + bh * stride_vb + cols[:, None] * stride_vn + fv[None, :]  # (BK, DV)
    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)  # running maximum
    l = tl.full([BLOCK_Q], 0.0, tl.float32)  # running sum of exp(s - m)
    acc = tl.full([BLOCK_Q, DV], 0.0, tl.float32)  # running sum of exp(s - m) v
    # causal: key blocks that start after the block's last query are never visited
    end = tl.minimum(Lk, (qb + 1) * BLOCK_Q) if IS_CAUSAL else Lk
    for start in range(0, end, BLOCK_K):
        in_k = start + cols < Lk  # (BK,) the last block may run past Lk
        k = tl.load(k_ptrs, mask=in_k[:, None] & (fd[None, :] < d), other=0.0)  # (BK, D)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # (BQ, BK) scores
        allowed = in_k[None, :]
        if IS_CAUSAL:
            allowed = allowed & (start + cols[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # (BQ,) finite: key 0 is in the first block
        shrink = tl.exp(m - m_new)  # e^{m - m'} of eq. (online softmax)
        p = tl.exp(s - m_new[:, None])  # (BQ, BK)
        l = l * shrink + tl.sum(p, axis=1)
        v = tl.load(v_ptrs, mask=in_k[:, None] & (fv[None, :] < dv), other=0.0)  # (BK, DV)
        acc = acc * shrink[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new
        k_ptrs += BLOCK_K * stride_kn  # the next key block
        v_ptrs += BLOCK_K * stride_vn
    out = acc / l[:, None]  # FlashAttention-2 divides once, at the end
    tl.store(O + bh * stride_ob + rows[:, None] * stride_om + fv[None, :], out.to(O.dtype.element_ty),
             mask=(rows[:, None] < Lq) & (fv[None, :] < dv))
    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)


def _backward_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV_, stride_qb, stride_qm, stride_kb, stride_kn,
                          stride_vb, stride_vn, stride_ob, stride_om, Lq, Lk, d, dv, scale,
                          IS_CAUSAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
                          D: tl.constexpr, DV: tl.constexpr, PRECISION: tl.constexpr):
    """One program: dK and dV of the key block ``program_id(0)`` of head ``program_id(1)``, summed
    over the query blocks that see it (causal: those that end before it are skipped).
    DO has O's strides, DK K's and DV_ V's; LSE and DELTA are (BH, Lq) float32."""
    kb, bh = tl.program_id(0), tl.program_id(1)
    cols = kb * BLOCK_K + tl.arange(0, BLOCK_K)  # (BK,) this block's keys
    rows = tl.arange(0, BLOCK_Q)  # (BQ,) query positions in a block
    fd, fv = tl.arange(0, D), tl.arange(0, DV)
    in_k = cols < Lk
    k = tl.load(K + bh * stride_kb + cols[:, None] * stride_kn + fd[None, :],
                mask=in_k[:, None] & (fd[None, :] < d), other=0.0)  # (BK, D)
    v = tl.load(V + bh * stride_vb + cols[:, None] * stride_vn + fv[None, :],
                mask=in_k[:, None] & (fv[None, :] < dv), other=0.0)  # (BK, DV)
    dk = tl.full([BLOCK_K, D], 0.0, tl.float32)
    dv_acc = tl.full([BLOCK_K, DV], 0.0, tl.float32)
    # causal: query blocks that end before this key block's first key see none of it
    first = (kb * BLOCK_K // BLOCK_Q) * BLOCK_Q if IS_CAUSAL else 0
    q_ptrs = Q + bh * stride_qb + (first + rows[:, None]) * stride_qm + fd[None, :]  # (BQ, D)
    do_ptrs = DO + bh * stride_ob + (first + rows[:, None]) * stride_om + fv[None, :]  # (BQ, DV)
    for start in range(first, Lq, BLOCK_Q):
        in_q = start + rows < Lq  # (BQ,)
        q = tl.load(q_ptrs, mask=in_q[:, None] & (fd[None, :] < d), other=0.0)  # (BQ, D)
        do = tl.load(do_ptrs, mask=in_q[:, None] & (fv[None, :] < dv), other=0.0)  # (BQ, DV)
        lse = tl.load(LSE + bh * Lq + start + rows, mask=in_q, other=0.0)  # (BQ,)
        delta = tl.load(DELTA + bh * Lq + start + rows, mask=in_q, other=0.0)  # (BQ,)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # (BQ, BK)
        allowed = in_q[:, None] & in_k[None, :]
        if IS_CAUSAL:
            allowed = allowed & (cols[None, :] <= start + rows[:, None])
        p = tl.where(allowed, tl.exp(s - lse[:, None]), 0.0)  # P recomputed, (BQ, BK)
        dv_acc += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)  # Pᵀ dO
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # (BQ, BK): dO Vᵀ
        ds = p * (dp - delta[:, None])  # dS = P ∘ (dP - D)
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)  # dSᵀ Q
        q_ptrs += BLOCK_Q * stride_qm
        do_ptrs += BLOCK_Q * stride_om
    tl.store(DK + bh * stride_kb + cols[:, None] * stride_kn + fd[None, :], (dk * scale).to(DK.dtype.element_ty),
             mask=in_k[:, None] & (fd[None, :] < d))
    tl.store(DV_ + bh * stride_vb + cols[:, None] * stride_vn + fv[None, :], dv_acc.to(DV_.dtype.element_ty),
             mask=in_k[:, None] & (fv[None, :] < dv))


def _backward_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, stride_qb, stride_qm, stride_kb, stride_kn,
                        stride_vb, stride_vn, stride_ob, stride_om, Lq, Lk, d, dv, scale,
                        IS_CAUSAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
                        D: tl.constexpr, DV: tl.constexpr, PRECISION: tl.constexpr):
    """One program: dQ of the query block ``program_id(0)`` of head ``program_id(1)``, summed over
    the key blocks it sees (the forward's loop). DQ has Q's strides."""
    qb, bh = tl.program_id(0), tl.program_id(1)
    rows = qb * BLOCK_Q + tl.arange(0, BLOCK_Q)  # (BQ,)
    cols = tl.arange(0, BLOCK_K)  # (BK,)
    fd, fv = tl.arange(0, D), tl.arange(0, DV)
    in_q = rows < Lq
    q = tl.load(Q + bh * stride_qb + rows[:, None] * stride_qm + fd[None, :],
                mask=in_q[:, None] & (fd[None, :] < d), other=0.0)  # (BQ, D)
    do = tl.load(DO + bh * stride_ob + rows[:, None] * stride_om + fv[None, :],
                 mask=in_q[:, None] & (fv[None, :] < dv), other=0.0)  # (BQ, DV)
    lse = tl.load(LSE + bh * Lq + rows, mask=in_q, other=0.0)  # (BQ,)
    delta = tl.load(DELTA + bh * Lq + rows, mask=in_q, other=0.0)  # (BQ,)
    k_ptrs = K + bh * stride_kb + cols[:, None] * stride_kn + fd[None, :]  # (BK, D)
    v_ptrs = V + bh * stride_vb + cols[:, None] * stride_vn + fv[None, :]  # (BK, DV)
    dq = tl.full([BLOCK_Q, D], 0.0, tl.float32)
    end = tl.minimum(Lk, (qb + 1) * BLOCK_Q) if IS_CAUSAL else Lk
    for start in range(0, end, BLOCK_K):
        in_k = start + cols < Lk
        k = tl.load(k_ptrs, mask=in_k[:, None] & (fd[None, :] < d), other=0.0)  # (BK, D)
        v = tl.load(v_ptrs, mask=in_k[:, None] & (fv[None, :] < dv), other=0.0)  # (BK, DV)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # (BQ, BK)
        allowed = in_q[:, None] & in_k[None, :]
        if IS_CAUSAL:
            allowed = allowed & (start + cols[None, :] <= rows[:, None])
        p = tl.where(allowed, tl.exp(s - lse[:, None]), 0.0)  # (BQ, BK)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # (BQ, BK)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)  # dS K
        k_ptrs += BLOCK_K * stride_kn
        v_ptrs += BLOCK_K * stride_vn
    tl.store(DQ + bh * stride_qb + rows[:, None] * stride_qm + fd[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=in_q[:, None] & (fd[None, :] < d))


class Kernels(NamedTuple):
    """The three kernels, decorated for one mode (compiled or interpreted)."""

    forward: object
    backward_dkdv: object
    backward_dq: object


@functools.cache
def kernels() -> Kernels:
    """The three kernels, decorated once, in the mode Triton was imported in (``INTERPRETED``):
    ``triton.jit`` reads ``TRITON_INTERPRET`` when it decorates, so it is set to match."""
    require_triton()
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if INTERPRETED else "0"
    try:
        return Kernels(*(triton.jit(fn) for fn in (_forward_kernel, _backward_dkdv_kernel, _backward_dq_kernel)))
    finally:
        os.environ.pop("TRITON_INTERPRET") if old is None else os.environ.__setitem__("TRITON_INTERPRET", old)


# ------------------------------------------------------------------ launching them
def _check_inputs(q: Tensor, k: Tensor, v: Tensor, block_q, block_k) -> None:
    for name, block in (("block_q", block_q), ("block_k", block_k)):
        if isinstance(block, bool) or not isinstance(block, int) or block < MIN_BLOCK or block & (block - 1):
            raise ValueError(f"{name} must be a power of two >= {MIN_BLOCK} (tl.arange and tl.dot need it), "
                             f"got {block!r}")
    _check_qkv(q, k, v)
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(f"q, k, v need the same batch dimensions, got {tuple(q.shape[:-2])}, "
                         f"{tuple(k.shape[:-2])} and {tuple(v.shape[:-2])}")
    if 0 in q.shape or 0 in k.shape or 0 in v.shape:
        raise ValueError(f"q, k, v must not be empty, got shapes {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if q.dtype not in DTYPES or not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k, v must share one dtype of float32, float16 or bfloat16, got "
                         f"{q.dtype}, {k.dtype} and {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device} and {v.device}")


def _heads(x: Tensor) -> Tensor:
    """``(..., L, f)`` -> ``(BH, L, f)`` contiguous (a view when x already is)."""
    return x.reshape(-1, *x.shape[-2:]).contiguous()


def _check_mode(x: Tensor) -> None:
    """CPU tensors need the interpreter; compiled kernels need CUDA tensors; the interpreter
    reads bfloat16 wrongly (Triton 3.8.0 returned outputs of order 1e9), so it gets none."""
    if INTERPRETED and x.dtype == torch.bfloat16:
        raise ValueError("q, k, v are bfloat16, which Triton's interpreter does not read correctly; "
                         "expected float32 or float16 under the interpreter (bfloat16 runs compiled, on a GPU)")
    if x.device.type != "cuda" and not INTERPRETED:
        raise RuntimeError(
            f"q is on {x.device}, which Triton's compiled kernels cannot read, and Triton was imported "
            "without its interpreter. Set TRITON_INTERPRET=1 before anything imports Triton (torch.compile "
            "does), e.g. at the top of the notebook, or pass CUDA tensors.")


def _launch_args(q: Tensor, k: Tensor, v: Tensor, o: Tensor, is_causal: bool, block_q: int, block_k: int) -> tuple:
    """The strides, sizes and constants every kernel takes after its tensors, and its keywords."""
    d, dv = q.shape[-1], v.shape[-1]
    strides = (q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), o.stride(0), o.stride(1))
    constants = dict(IS_CAUSAL=bool(is_causal), BLOCK_Q=block_q, BLOCK_K=block_k,
                     D=max(MIN_BLOCK, triton.next_power_of_2(d)), DV=max(MIN_BLOCK, triton.next_power_of_2(dv)),
                     PRECISION="ieee" if q.dtype == torch.float32 else None)  # None: Triton's default
    return (*strides, q.shape[1], k.shape[1], d, dv, 1 / math.sqrt(d)), constants


class FlashResult(NamedTuple):
    """``out (..., Lq, dv)`` in q's dtype and ``lse (..., Lq)`` float32, the log-sum-exp of each
    query's scaled scores (what the backward needs, with the output)."""

    out: Tensor
    lse: Tensor


def triton_attention_forward(q: Tensor, k: Tensor, v: Tensor, *, is_causal: bool = False,
                             block_q: int = 64, block_k: int = 64) -> FlashResult:
    """softmax(q kᵀ / √d) v by the forward kernel: a grid of (query blocks, batch·heads) programs.

    q ``(..., Lq, d)``, k ``(..., Lk, d)``, v ``(..., Lk, dv)`` (equal batch dimensions); blocks
    are powers of two >= 16. Returns ``FlashResult(out, lse)``."""
    _check_inputs(q, k, v, block_q, block_k)
    require_triton()
    _check_mode(q)
    qh, kh, vh = _heads(q), _heads(k), _heads(v)  # (BH, L, f)
    out = torch.empty(*qh.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)  # (BH, Lq, dv)
    lse = torch.empty(qh.shape[:-1], dtype=torch.float32, device=q.device)  # (BH, Lq)
    args, constants = _launch_args(qh, kh, vh, out, is_causal, block_q, block_k)
    grid = (triton.cdiv(qh.shape[1], block_q), qh.shape[0])
    kernels().forward[grid](qh, kh, vh, out, lse, *args, **constants)
    return FlashResult(out.reshape(*q.shape[:-1], v.shape[-1]), lse.reshape(q.shape[:-1]))


def triton_attention_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, grad_out: Tensor, *,
                              is_causal: bool = False, block_q: int = 64,
                              block_k: int = 64) -> tuple[Tensor, Tensor, Tensor]:
    """``(dq, dk, dv)`` from the forward's ``out`` and ``lse`` alone, FlashAttention-2's way:
    ``D = rowsum(dO ∘ O)`` (PyTorch), then the dK/dV kernel (a program per key block) and the dQ
    kernel (a program per query block), each recomputing its tiles of P as ``exp(s - lse)``.
    Shapes as in ``triton_attention_forward``; ``grad_out`` like ``out``."""
    _check_inputs(q, k, v, block_q, block_k)
    if grad_out.shape != out.shape or lse.shape != q.shape[:-1]:
        raise ValueError(f"grad_out must have out's shape {tuple(out.shape)} and lse the shape "
                         f"{tuple(q.shape[:-1])}, got {tuple(grad_out.shape)} and {tuple(lse.shape)}")
    require_triton()
    _check_mode(q)
    qh, kh, vh = _heads(q), _heads(k), _heads(v)
    oh, doh = _heads(out), _heads(grad_out.to(q.dtype))  # (BH, Lq, dv)
    lse_h = lse.reshape(-1, lse.shape[-1]).float().contiguous()  # (BH, Lq)
    delta = (doh.float() * oh.float()).sum(dim=-1).contiguous()  # (BH, Lq): D = rowsum(dO ∘ O)
    dq, dk, dv = torch.empty_like(qh), torch.empty_like(kh), torch.empty_like(vh)
    args, constants = _launch_args(qh, kh, vh, oh, is_causal, block_q, block_k)
    run = kernels()
    run.backward_dkdv[(triton.cdiv(kh.shape[1], block_k), kh.shape[0])](
        qh, kh, vh, doh, lse_h, delta, dk, dv, *args, **constants)
    run.backward_dq[(triton.cdiv(qh.shape[1], block_q), qh.shape[0])](
        qh, kh, vh, doh, lse_h, delta, dq, *args, **constants)
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


class _FlashAttention(torch.autograd.Function):
    """The forward kernel; saves q, k, v, out and lse (no weights); the backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, block_q, block_k):
        res = triton_attention_forward(q, k, v, is_causal=is_causal, block_q=block_q, block_k=block_k)
        ctx.save_for_backward(q, k, v, res.out, res.lse)
        ctx.options = dict(is_causal=is_causal, block_q=block_q, block_k=block_k)
        return res.out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        return (*triton_attention_backward(q, k, v, out, lse, grad_out, **ctx.options), None, None, None)


def triton_attention(q: Tensor, k: Tensor, v: Tensor, *, is_causal: bool = False,
                     block_q: int = 64, block_k: int = 64) -> Tensor:
    """FlashAttention-2 in Triton: ``softmax(q kᵀ/√d) v`` ``(..., Lq, dv)``, differentiable
    (``loss.backward()`` runs the backward kernels). Arguments as ``triton_attention_forward``."""
    return _FlashAttention.apply(q, k, v, is_causal, block_q, block_k)


def attention_flops(batch_heads: int, lq: int, lk: int, d: int, dv: int, is_causal: bool,
                    with_backward: bool = False) -> float:
    """Matmul FLOPs of attention per call: forward ``2 Lq Lk (d + dv)`` per head (QKᵀ and PV);
    with the backward, FlashAttention-2's five more products (QKᵀ again, Pᵀ dO, dO Vᵀ, dS K,
    dSᵀ Q) add ``2 Lq Lk (3d + 2dv)``, 2.5x the forward where d = dv. Halved when causal."""
    per_head = 2.0 * lq * lk * ((d + dv) + ((3 * d + 2 * dv) if with_backward else 0))
    return batch_heads * per_head * (0.5 if is_causal else 1.0)
