"""xfl.triton_attention: the FlashAttention-2 kernels in Triton, run under Triton's interpreter on
CPU tensors (``TRITON_INTERPRET=1``, set by ``tests/conftest.py`` where no CUDA device is
visible). Small sizes: the interpreter runs every program in NumPy, one after another."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest
import torch
import torch.nn.functional as F

from xfl import triton_attention as ta

BLOCK = dict(block_q=16, block_k=16)


def qkv(lq, lk, d, dv, batch=(1, 2), seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*batch, lq, d, generator=g).to(dtype), torch.randn(*batch, lk, d, generator=g).to(dtype),
            torch.randn(*batch, lk, dv, generator=g).to(dtype))


def reference_lse(q, k, is_causal):
    """log Σ_j exp(q_i·k_j/√d) over the keys query i may see (top-left causal)."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return s.logsumexp(dim=-1)


def test_triton_imports_in_interpreter_mode_here():
    """The CI machine has no GPU: the kernels must run interpreted, or every other test is void."""
    assert ta.triton_available(), ta.TRITON_IMPORT_ERROR
    assert ta.INTERPRETED or torch.cuda.is_available()


# Lengths that are not multiples of the block (40, 37, 53), Lq != Lk, head sizes that are not
# powers of two (24: padded to 32 inside) and dv != d.
@pytest.mark.parametrize("lq, lk, d, dv, is_causal", [
    (40, 40, 16, 16, False), (40, 40, 16, 16, True), (37, 53, 24, 8, False), (21, 50, 8, 16, True)])
def test_forward_equals_sdpa_and_the_log_sum_exp(lq, lk, d, dv, is_causal):
    q, k, v = qkv(lq, lk, d, dv)
    res = ta.triton_attention_forward(q, k, v, is_causal=is_causal, **BLOCK)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert res.out.shape == want.shape and res.out.dtype == torch.float32 and res.lse.shape == (1, 2, lq)
    torch.testing.assert_close(res.out, want, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(res.lse, reference_lse(q, k, is_causal), atol=2e-6, rtol=2e-6)


def test_float16_under_the_interpreter_and_no_bfloat16():
    """16-bit inputs, float32 sums: float16 within its rounding of SDPA's float32 output; the
    interpreter reads bfloat16 wrongly, so it is refused rather than answered."""
    q, k, v = qkv(40, 40, 16, 16, seed=3)
    out = ta.triton_attention_forward(*(x.half() for x in (q, k, v)), is_causal=True, **BLOCK).out
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               atol=2e-3, rtol=2e-3)
    if ta.INTERPRETED:
        with pytest.raises(ValueError, match="bfloat16.*interpreter"):
            ta.triton_attention_forward(*(x.bfloat16() for x in (q, k, v)), **BLOCK)


def test_causal_blocks_above_the_diagonal_are_never_read():
    """Keys 32..63 come after every query (Lq = 32, blocks of 16): with the causal skip no program
    loads them, so NaN there cannot reach the output or the gradients. A kernel that loaded and
    masked them would multiply 0 by NaN in P V."""
    q, k, v = qkv(32, 64, 16, 16, batch=(2,))
    k[:, 32:], v[:, 32:] = float("nan"), float("nan")
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = ta.triton_attention(q, k, v, is_causal=True, **BLOCK)
    want = F.scaled_dot_product_attention(q.detach(), k.detach()[:, :32], v.detach()[:, :32], is_causal=True)
    torch.testing.assert_close(out.detach(), want, atol=2e-6, rtol=2e-6)
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad[:, :32]).all()


@pytest.mark.parametrize("lq, lk, d, dv, is_causal", [(40, 40, 16, 16, True), (37, 53, 24, 8, False)])
def test_gradients_through_the_backward_kernels_equal_autograds(lq, lk, d, dv, is_causal):
    q, k, v = (x.requires_grad_() for x in qkv(lq, lk, d, dv, seed=1))
    grad_out = torch.randn(1, 2, lq, dv, generator=torch.Generator().manual_seed(2))
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), (q, k, v), grad_out)
    out = ta.triton_attention(q, k, v, is_causal=is_causal, **BLOCK)
    assert [tuple(t.shape) for t in out.grad_fn.saved_tensors] == [
        (1, 2, lq, d), (1, 2, lk, d), (1, 2, lk, dv), (1, 2, lq, dv), (1, 2, lq)]  # no Lq x Lk weights
    out.backward(grad_out)
    for name, got, w in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), want):
        torch.testing.assert_close(got, w, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("kwargs, message", [
    (dict(block_q=24), "block_q must be a power of two >= 16"),
    (dict(block_k=8), "block_k must be a power of two >= 16"),
    (dict(dtype=torch.float64), "one dtype of float32, float16 or bfloat16"),
    (dict(k_batch=(2, 2)), "the same batch dimensions"),
    (dict(lq=0), "must not be empty"),
])
def test_bad_inputs_are_refused_by_name(kwargs, message):
    dtype, lq = kwargs.pop("dtype", torch.float32), kwargs.pop("lq", 8)
    q, k, v = qkv(lq, 8, 16, 16, dtype=dtype)
    if "k_batch" in kwargs:
        k = torch.randn(*kwargs.pop("k_batch"), 8, 16)
    with pytest.raises(ValueError, match=message):
        ta.triton_attention_forward(q, k, v, **{**BLOCK, **kwargs})


def test_cpu_tensors_with_compiled_triton_say_what_to_set(monkeypatch):
    monkeypatch.setattr(ta, "INTERPRETED", False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        ta.triton_attention_forward(*qkv(8, 8, 16, 16), **BLOCK)


def test_without_triton_the_module_imports_and_a_call_says_why(monkeypatch):
    """A copy of the module loaded where ``import triton`` fails (as on macOS wheels)."""
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    spec = importlib.util.spec_from_file_location("triton_attention_without_triton", ta.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert not module.triton_available() and not module.INTERPRETED
    with pytest.raises(ImportError, match="needs Triton.*pip install triton.*xfl.tiled_attention"):
        module.triton_attention(*qkv(8, 8, 16, 16), **BLOCK)


def test_attention_flops_count_the_matmuls():
    """2·m·n·k per (m × k)(k × n) product, per head: the forward's two, the backward's five."""
    bh, lq, lk, d, dv = 2, 32, 48, 16, 8
    forward = [(lq, lk, d), (lq, dv, lk)]  # S = Q Kᵀ, O = P V
    backward = [(lq, lk, d), (lk, dv, lq), (lq, lk, dv), (lq, d, lk), (lk, d, lq)]  # S, dV, dP, dQ, dK
    flops = lambda products: bh * sum(2 * m * n * k for m, n, k in products)  # noqa: E731
    assert ta.attention_flops(bh, lq, lk, d, dv, False) == flops(forward)
    assert ta.attention_flops(bh, lq, lk, d, dv, False, with_backward=True) == flops(forward + backward)
    assert ta.attention_flops(bh, lq, lk, d, dv, True) == flops(forward) / 2
