"""xfl.tiled_attention and xfl.memory against PyTorch, in float64, and their errors."""

import math

import pytest
import torch
import torch.nn.functional as F

from xfl.attention import causal_mask, causal_padding_mask, key_mask, padding_mask, scaled_dot_product_attention
from xfl.memory import cpu_peak_bytes, peak_bytes
from xfl.tiled_attention import (Partial, block_partial, causal_block_counts, explicit_attention_bytes,
                                 merge_partials, online_softmax, sdpa_backend_report, sdpa_kernel_used,
                                 running_max_and_sum, tiled_attention, tiled_attention_backward,
                                 tiled_attention_forward, tiled_attention_recomputing)

TOL = dict(atol=1e-10, rtol=1e-10)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def random_sizes(seed):
    """(B, H, Lq, Lk, d, dv, block_q, block_k) drawn at random: blocks rarely divide the lengths."""
    g = torch.Generator().manual_seed(seed)
    pick = lambda lo, hi: int(torch.randint(lo, hi + 1, (1,), generator=g))  # noqa: E731
    return pick(1, 3), pick(1, 3), pick(1, 70), pick(1, 70), pick(1, 16), pick(1, 9), pick(1, 17), pick(1, 17)


# ------------------------------------------------------------------ online softmax
@pytest.mark.parametrize("block_size", [1, 3, 7, 64, 1000])
def test_online_softmax_equals_torch_on_long_rows(block_size):
    x = 5 * randn(6, 501)
    x[1] *= 1e4  # very large values: exp would overflow without the running maximum
    x[2, ::3] = float("-inf")  # some keys masked
    x[3, :400] = float("-inf")  # the maximum appears only late in the row
    torch.testing.assert_close(online_softmax(x, block_size), torch.softmax(x, dim=-1), atol=1e-12, rtol=1e-12)
    m, l = running_max_and_sum(x, block_size)
    torch.testing.assert_close(m, x.amax(dim=-1), atol=0, rtol=0)
    torch.testing.assert_close(m + l.log(), x.logsumexp(dim=-1), atol=1e-12, rtol=1e-12)


def test_online_softmax_of_a_row_of_minus_infinity_is_zeros():
    x = randn(3, 10)
    x[1] = float("-inf")
    got = online_softmax(x, 4)
    torch.testing.assert_close(got[1], torch.zeros(10, dtype=torch.float64), atol=0, rtol=0)
    torch.testing.assert_close(got[[0, 2]], torch.softmax(x[[0, 2]], -1), atol=1e-12, rtol=1e-12)
    assert torch.isnan(torch.softmax(x, -1)[1]).all()  # what torch returns there instead


def test_merging_partials_in_any_order_gives_the_whole_row():
    scores, v = 3 * randn(4, 30), randn(30, 5, seed=1)
    scores[0, :20] = float("-inf")  # block 0 sees nothing for this query
    scores[1] = float("-inf")  # and this query sees nothing at all
    parts = [block_partial(scores[:, i:i + 10], v[i:i + 10]) for i in (0, 10, 20)]
    whole = block_partial(scores, v)
    for merged in (merge_partials(merge_partials(parts[0], parts[1]), parts[2]),
                   merge_partials(parts[2], merge_partials(parts[1], parts[0]))):
        for got, want in zip(merged, whole):
            torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    assert isinstance(merged, Partial) and merged.l[1] == 0 and merged.m[1] == float("-inf")


# ------------------------------------------------------------------ tiled attention
@pytest.mark.parametrize("seed", range(6))
def test_tiled_attention_equals_xfl_and_sdpa_at_random_sizes(seed):
    B, H, lq, lk, d, dv, bq, bk = random_sizes(seed)
    q, k, v = randn(B, H, lq, d, seed=seed), randn(B, H, lk, d, seed=seed + 100), randn(B, H, lk, dv, seed=seed + 200)
    got = tiled_attention_forward(q, k, v, block_q=bq, block_k=bk)
    torch.testing.assert_close(got.out, scaled_dot_product_attention(q, k, v), **TOL)
    torch.testing.assert_close(got.out, F.scaled_dot_product_attention(q, k, v), **TOL)
    torch.testing.assert_close(got.lse, (q @ k.transpose(-2, -1) / math.sqrt(d)).logsumexp(-1), **TOL)
    assert got.blocks_skipped == 0 and got.blocks_visited == math.ceil(lq / bq) * math.ceil(lk / bk)


@pytest.mark.parametrize("seed", range(6))
def test_tiled_causal_equals_sdpa_and_skips_the_blocks_above_the_diagonal(seed):
    B, H, lq, lk, d, dv, bq, bk = random_sizes(seed)
    q, k, v = randn(B, H, lq, d, seed=seed), randn(B, H, lk, d, seed=seed + 1), randn(B, H, lk, dv, seed=seed + 2)
    got = tiled_attention_forward(q, k, v, is_causal=True, block_q=bq, block_k=bk)
    torch.testing.assert_close(got.out, F.scaled_dot_product_attention(q, k, v, is_causal=True), **TOL)
    allowed = torch.ones(lq, lk, dtype=torch.bool).tril()  # SDPA's top-left causal rule
    torch.testing.assert_close(got.out, scaled_dot_product_attention(q, k, v, allowed), **TOL)
    # a tile is skippable when the mask allows nothing in it: count those by brute force
    empty = sum(not allowed[i:i + bq, j:j + bk].any() for i in range(0, lq, bq) for j in range(0, lk, bk))
    assert (got.blocks_visited, got.blocks_skipped) == causal_block_counts(lq, lk, bq, bk)
    assert got.blocks_skipped == empty


def test_causal_block_counts_of_a_square_grid():
    assert causal_block_counts(8, 8, 2, 2) == (10, 6)  # 4 × 4 tiles, 4·5/2 on or below the diagonal
    assert causal_block_counts(1024, 1024, 128, 128) == (36, 28)
    assert causal_block_counts(5, 5, 5, 5) == (1, 0)


def test_tiled_attention_with_padding_and_fully_masked_rows():
    B, L, d = 3, 23, 8
    q, k, v = randn(B, 2, L, d), randn(B, 2, L, d, seed=1), randn(B, 2, L, 4, seed=2)
    keep = padding_mask([23, 9, 0], L)  # the last sentence is all padding: every row fully masked
    for mask in (key_mask(keep), causal_mask(L) & key_mask(keep), causal_padding_mask(torch.where(keep, 1, 0), 0)):
        got = tiled_attention_forward(q, k, v, mask, block_q=5, block_k=4)
        torch.testing.assert_close(got.out, scaled_dot_product_attention(q, k, v, mask), **TOL)
        torch.testing.assert_close(got.out[2], torch.zeros(2, L, 4, dtype=torch.float64), atol=0, rtol=0)
        assert (got.lse[2] == float("-inf")).all() and torch.isfinite(got.lse[0]).all()
    got = tiled_attention(q, k, v, key_mask(keep), is_causal=True, block_q=6, block_k=7)
    torch.testing.assert_close(got, scaled_dot_product_attention(q, k, v, causal_mask(L) & key_mask(keep)), **TOL)


def test_tiled_attention_broadcasts_batch_dimensions_like_xfl():
    q, k, v = randn(2, 3, 11, 4), randn(1, 3, 13, 4, seed=1), randn(2, 1, 13, 5, seed=2)
    torch.testing.assert_close(tiled_attention(q, k, v, block_q=4, block_k=5), scaled_dot_product_attention(q, k, v), **TOL)


@pytest.mark.parametrize("causal", [False, True])
def test_backward_from_lse_equals_autograd(causal):
    q, k, v = (randn(2, 2, 19, 6, seed=s).requires_grad_() for s in range(3))
    keep = key_mask(padding_mask([19, 7], 19))
    res = tiled_attention_forward(q, k, v, keep, is_causal=causal, block_q=5, block_k=6)
    grad_out = randn(2, 2, 19, 6, seed=9)
    want = torch.autograd.grad(res.out, (q, k, v), grad_out)
    got = tiled_attention_backward(q.detach(), k.detach(), v.detach(), res.out.detach(), res.lse.detach(),
                                   grad_out, keep, is_causal=causal, block_k=4)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **TOL)


def test_tiled_attention_passes_gradcheck():
    q, k, v = (randn(1, 5, 3, seed=s).requires_grad_() for s in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v: tiled_attention(q, k, v, is_causal=True, block_q=2, block_k=3),
                                    (q, k, v))


@pytest.mark.parametrize("causal", [False, True])
def test_recomputing_backward_passes_gradcheck_and_saves_no_weights(causal):
    q, k, v = (randn(2, 7, 3, seed=s).requires_grad_() for s in range(3))
    keep = key_mask(padding_mask([7, 4], 7))[:, 0]  # (2, 1, 7): the second row pads its last 3 keys
    fn = lambda q, k, v: tiled_attention_recomputing(q, k, v, keep, is_causal=causal, block_q=3, block_k=2)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))
    out = fn(q, k, v)
    saved = [t.shape for t in out.grad_fn.saved_tensors]
    assert all(s[-2:] != (7, 7) for s in saved), saved  # q, k, v, out and lse: no (L, L) weights
    with pytest.raises(ValueError, match=r"same batch dimensions here, got \(2, 3\), \(1, 3\)"):
        tiled_attention_recomputing(randn(2, 3, 4, 5), randn(1, 3, 4, 5), randn(1, 3, 4, 5))


# ------------------------------------------------------------------ bad inputs
@pytest.mark.parametrize("bad", [0, -3, 1.5, True, None])
def test_block_sizes_must_be_positive_ints(bad):
    x = randn(4, 5)
    with pytest.raises(ValueError, match=rf"block_q must be a positive int, got {bad!r}"):
        tiled_attention(x, x, x, block_q=bad)
    with pytest.raises(ValueError, match=rf"block_k must be a positive int, got {bad!r}"):
        tiled_attention(x, x, x, block_k=bad)
    with pytest.raises(ValueError, match=rf"block_size must be a positive int, got {bad!r}"):
        online_softmax(x, bad)
    with pytest.raises(ValueError, match=rf"block_k must be a positive int, got {bad!r}"):
        causal_block_counts(4, 4, 2, bad)


def test_mismatched_shapes_and_masks_are_refused():
    q, k, v = randn(2, 6, 4), randn(2, 7, 4), randn(2, 7, 3)
    with pytest.raises(ValueError, match="same feature size, got 4 and 5"):
        tiled_attention(q, randn(2, 7, 5), v)
    with pytest.raises(ValueError, match="same length, got 7 and 8"):
        tiled_attention(q, k, randn(2, 8, 3))
    with pytest.raises(ValueError, match=r"do not broadcast"):
        tiled_attention(q, randn(3, 7, 4), randn(3, 7, 3))
    with pytest.raises(ValueError, match=r"mask of shape \(6, 6\) does not broadcast to \(2, 6, 7\)"):
        tiled_attention(q, k, v, torch.ones(6, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="must be a bool tensor"):
        tiled_attention(q, k, v, torch.ones(6, 7))


# ------------------------------------------------------------------ memory
def test_cpu_peak_bytes_counts_what_is_alive_at_once():
    n = 250_000  # float32: 1 MB

    def two_at_once():
        a, b = torch.ones(n), torch.ones(n)
        return (a + b).sum()

    def one_after_another():
        for _ in range(3):
            torch.ones(n).sum()

    assert 3 * 4 * n <= cpu_peak_bytes(two_at_once) < 3 * 4 * n + 4096  # a, b and a + b
    assert 4 * n <= cpu_peak_bytes(one_after_another) < 4 * n + 4096  # one at a time
    assert cpu_peak_bytes(two_at_once) == peak_bytes(two_at_once, "cpu")
    with pytest.raises(ValueError, match="measures cpu and cuda, got 'meta'"):
        peak_bytes(two_at_once, "meta")


def test_explicit_path_peak_is_the_formula_and_tiled_peak_grows_linearly():
    d, peaks = 16, {}
    for L in (256, 512):
        q, k, v = (torch.randn(1, 2, L, d) for _ in range(3))
        explicit = cpu_peak_bytes(lambda: torch.softmax(q @ k.transpose(-2, -1) / 4, -1) @ v)
        predicted = explicit_attention_bytes(1, 2, L, L, 4)
        assert predicted <= explicit < predicted + 4 * 2 * L * d + 4096, (L, explicit, predicted)
        peaks[L] = cpu_peak_bytes(lambda: tiled_attention(q, k, v, block_q=64, block_k=64))
    assert peaks[512] < 2.5 * peaks[256], peaks  # doubling L about doubles it (quadratic: 4x)


# ------------------------------------------------------------------ backends
def test_backend_report_names_the_kernel_that_runs_and_refusals():
    q, k, v = torch.randn(1, 2, 32, 16), torch.randn(1, 2, 32, 16), torch.randn(1, 2, 32, 8)
    report = sdpa_backend_report(q, k, v)
    assert set(report) == {"default", "math", "flash", "efficient", "cudnn"}
    assert report["math"] == "runs" and report[report["default"]] == "runs", report
    assert sdpa_kernel_used(q, k, v) == report["default"]
    if q.device.type == "cpu":  # CPU flash wants one head size for q, k and v; no efficient/cuDNN kernel
        assert report["flash"].startswith("refused: Flash attention requires q,k,v to have the same last dimension")
        assert report["efficient"].startswith("refused:") and report["cudnn"].startswith("refused:")
        assert sdpa_backend_report(q, k, k)["flash"] == "runs"


# ------------------------------------------------------------------ FlashAttention-2 backward
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("causal", [False, True])
def test_fa2_backward_equals_autograd_at_random_sizes(seed, causal):
    B, H, Lq, Lk, d, dv, bq, bk = random_sizes(seed)
    Lk = Lk if not causal else max(Lk, Lq)  # causal: every query keeps at least key 0
    q, k, v = randn(B, H, Lq, d, seed=seed), randn(B, H, Lk, d, seed=seed + 1), randn(B, H, Lk, dv, seed=seed + 2)
    for t in (q, k, v):
        t.requires_grad_()
    grad_out = randn(B, H, Lq, dv, seed=seed + 3)
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=causal), (q, k, v), grad_out)
    res = tiled_attention_forward(q.detach(), k.detach(), v.detach(), is_causal=causal, block_q=bq, block_k=bk)
    got = tiled_attention_backward(q.detach(), k.detach(), v.detach(), res.out, res.lse, grad_out,
                                   is_causal=causal, block_q=bk, block_k=bq)  # other tiles than the forward's
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **TOL)


def test_fa2_backward_skips_the_causal_tiles_above_the_diagonal():
    from xfl.attention import trusted_inputs
    from xfl.tiled_attention import elements_read

    L, d, bq, bk = 96, 8, 16, 32
    q, k, v, grad_out = (randn(1, 2, L, d, seed=s) for s in range(4))
    res = tiled_attention_forward(q, k, v, is_causal=True, block_q=bq, block_k=bk)
    reads = {}
    for causal in (False, True):
        with trusted_inputs():  # without the input check's own pass over k
            reads[causal] = elements_read(lambda: tiled_attention_backward(
                q, k, v, res.out, res.lse, grad_out, is_causal=causal, block_q=bq, block_k=bk), k)
    per_tile = 2 * 2 * bk * d  # each tile reads its key block twice (S = QKᵀ, dQ = dS K), 2 heads
    visited, skipped = causal_block_counts(L, L, bq, bk)
    assert reads[True] == visited * per_tile and reads[False] == (visited + skipped) * per_tile, reads


def test_forward_reads_k_and_v_once_per_query_block():
    from xfl.attention import trusted_inputs
    from xfl.tiled_attention import elements_read, tiled_bytes_moved

    L, d = 100, 8
    q, k, v = (randn(1, L, d, seed=s) for s in range(3))
    for bq in (7, 25, 100):
        with trusted_inputs():
            got = elements_read(lambda: tiled_attention(q, k, v, block_q=bq, block_k=16), k, v)
        assert got == math.ceil(L / bq) * 2 * L * d, (bq, got)
        assert tiled_bytes_moved(L, L, d, d, bq, 4) == 4 * (2 * L * d + L + got)  # + q, out, lse


def test_16_bit_inputs_accumulate_in_float32():
    qf, kf, vf = (randn(2, 2, 200, 32, seed=s) for s in range(3))
    want = F.scaled_dot_product_attention(qf, kf, vf)
    qb, kb, vb = (x.bfloat16() for x in (qf, kf, vf))
    res = tiled_attention_forward(qb, kb, vb)
    assert res.out.dtype == torch.bfloat16 and res.lse.dtype == torch.float32
    err = lambda o: (o.double() - want).abs().mean().item()  # noqa: E731
    in_bf16 = tiled_attention(qb, kb, vb, accumulate=torch.bfloat16)
    assert err(res.out) < 0.8 * err(in_bf16), (err(res.out), err(in_bf16))
    assert err(res.out) < 1.5 * err(F.scaled_dot_product_attention(qb, kb, vb))


def test_nan_inputs_are_refused_or_propagate_never_become_zeros():
    q, k, v = randn(1, 6, 4), randn(1, 6, 4, seed=1), randn(1, 6, 4, seed=2)
    q[0, 2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"q holds 1 NaN or inf value\(s\), the first nan at index \(0, 2, 1\)"):
        tiled_attention(q, k, v, block_q=4, block_k=4)
    k[0, 3, 0] = float("inf")
    with pytest.raises(ValueError, match=r"k holds 1 NaN or inf"):
        tiled_attention(q.nan_to_num(), k, v)
    out = tiled_attention(q.requires_grad_(), k.nan_to_num(posinf=0.0), v, block_q=4, block_k=4)
    assert out[0, 2].isnan().all() and not out[0, [0, 1, 3, 4, 5]].isnan().any()  # autograd-tracked: not read
    row = torch.tensor([[1.0, float("nan"), 2.0], [float("-inf")] * 3], dtype=torch.float64)
    got = online_softmax(row, 2)
    assert got[0].isnan().all() and (got[1] == 0).all()  # NaN stays NaN; a masked row is zeros
