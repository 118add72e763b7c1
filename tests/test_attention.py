"""xfl.attention against PyTorch's own modules, and its invariants."""

import pytest
import torch
from torch import nn

from xfl.attention import (MultiHeadAttention, causal_mask, padding_mask,
                           scaled_dot_product_attention)

B, L, S, D, H = 3, 5, 7, 16, 4
ATOL = 1e-5


def torch_pair(seed=0, bias=True):
    """A torch.nn.MultiheadAttention and an xfl copy with the same weights."""
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(D, H, bias=bias, batch_first=True).double()
    nn.init.normal_(ref.out_proj.bias if bias else ref.out_proj.weight)  # torch zeroes it
    return ref, MultiHeadAttention.from_torch(ref).double()


def inputs(*shapes, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.double, requires_grad=True) for s in shapes]


def torch_forward(ref, q, k, v, allowed=None, key_padding=None):
    """Call torch's module with xfl's convention (True = may attend) translated."""
    attn_mask = None if allowed is None else ~allowed
    kpm = None if key_padding is None else ~key_padding
    return ref(q, k, v, attn_mask=attn_mask, key_padding_mask=kpm, average_attn_weights=False)


def assert_same_grads(a_params, b_params):
    for a, b in zip(a_params, b_params):
        torch.testing.assert_close(a.grad, b.grad, atol=ATOL, rtol=1e-5)


def check_against_torch(cross: bool, allowed=None, key_padding=None, xfl_mask=None, bias=True):
    ref, mine = torch_pair(bias=bias)
    q, kv = inputs((B, L, D), (B, S if cross else L, D))
    q2, kv2 = (t.detach().clone().requires_grad_() for t in (q, kv))
    k_in = kv if cross else q
    want, want_w = torch_forward(ref, q, k_in, k_in, allowed, key_padding)
    got, got_w = (mine(q2, kv2, kv2, mask=xfl_mask, need_weights=True) if cross
                  else mine(q2, mask=xfl_mask, need_weights=True))
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(got_w, want_w, atol=ATOL, rtol=1e-5)
    (want.square().sum() + want_w.sum()).backward()
    (got.square().sum() + got_w.sum()).backward()
    torch.testing.assert_close(q2.grad, q.grad, atol=ATOL, rtol=1e-5)
    if cross:
        torch.testing.assert_close(kv2.grad, kv.grad, atol=ATOL, rtol=1e-5)
    ref_params = [ref.in_proj_weight, ref.out_proj.weight] + ([ref.in_proj_bias] if bias else [])
    mine_params = [mine.in_proj.weight, mine.out_proj.weight] + ([mine.in_proj.bias] if bias else [])
    assert_same_grads(mine_params, ref_params)


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_torch_without_mask(cross, bias):
    check_against_torch(cross, bias=bias)


def test_equals_torch_with_causal_mask():
    allowed = causal_mask(L)
    check_against_torch(False, allowed=allowed, xfl_mask=allowed)


@pytest.mark.parametrize("cross", [False, True])
def test_equals_torch_with_padding_mask(cross):
    lengths = torch.tensor([S, 3, 1]) if cross else torch.tensor([L, 3, 1])
    keys = padding_mask(lengths, S if cross else L)  # (B, Lk)
    check_against_torch(cross, key_padding=keys, xfl_mask=keys[:, None, None, :])


def test_equals_torch_with_causal_and_padding_masks():
    keys = padding_mask([L, 4, 2], L)
    both = causal_mask(L) & keys[:, None, None, :]  # (B, 1, L, L)
    check_against_torch(False, allowed=causal_mask(L), key_padding=keys, xfl_mask=both)


def test_self_attention_is_cross_attention_on_itself():
    _, mine = torch_pair()
    (x,) = inputs((B, L, D))
    torch.testing.assert_close(mine(x), mine(x, x, x))


def test_key_alone_serves_as_value():
    _, mine = torch_pair()
    q, kv = inputs((B, L, D), (B, S, D))
    torch.testing.assert_close(mine(q, kv), mine(q, kv, kv))


@pytest.mark.parametrize("use_mask", [False, True])
def test_explicit_path_equals_fused_path(use_mask):
    q, k, v = inputs((2, H, L, 8), (2, H, S, 8), (2, H, S, 6))
    mask = torch.rand(2, 1, L, S, generator=torch.Generator().manual_seed(3)) > 0.3 if use_mask else None
    fused = scaled_dot_product_attention(q, k, v, mask)
    explicit, weights = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    torch.testing.assert_close(explicit, fused)
    row_sums = weights.sum(-1)  # 1 where the query has a key, else 0
    expected = torch.ones_like(row_sums) if mask is None else mask.any(-1).expand_as(row_sums).double()
    torch.testing.assert_close(row_sums, expected)


def test_scale_is_applied_before_softmax():
    q, k, v = inputs((L, 8), (S, 8), (S, 8))
    manual = torch.softmax(q @ k.T / 8 ** 0.5, dim=-1) @ v
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v), manual)


def test_earlier_causal_outputs_ignore_later_tokens():
    _, mine = torch_pair()
    (x,) = inputs((B, L, D))
    changed = x.detach().clone()
    changed[:, 3:] = torch.randn_like(changed[:, 3:]) * 10
    before, after = mine(x, mask=causal_mask(L)), mine(changed, mask=causal_mask(L))
    torch.testing.assert_close(after[:, :3], before[:, :3])
    assert not torch.allclose(after[:, 3:], before[:, 3:])


@pytest.mark.parametrize("return_weights", [False, True])
def test_fully_masked_rows_give_zeros_and_finite_grads(return_weights):
    q, k, v = inputs((2, L, 8), (2, S, 8), (2, S, 8))
    mask = torch.ones(2, L, S, dtype=torch.bool)
    mask[0, 1] = False  # query 1 of batch 0 may attend to nothing
    mask[1, :, :] = False  # batch 1 may attend to nothing at all
    result = scaled_dot_product_attention(q, k, v, mask, return_weights=return_weights)
    out = result[0] if return_weights else result
    assert torch.isfinite(out).all()
    assert (out[0, 1] == 0).all() and (out[1] == 0).all()
    assert out[0, 0].abs().sum() > 0
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[1] == 0).all()


def test_fully_masked_rows_in_module():
    _, mine = torch_pair()
    (x,) = inputs((B, L, D))
    no_keys = padding_mask([L, 2, 0], L)[:, None, None, :]
    out = mine(x, mask=no_keys)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    torch.testing.assert_close(out[2], mine.out_proj.bias.expand(L, D))  # zeros then W_O + b


def test_permuting_tokens_permutes_output():
    _, mine = torch_pair()
    (x,) = inputs((B, L, D))
    perm = torch.randperm(L, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(mine(x[:, perm]), mine(x)[:, perm])


def test_cross_attention_permuting_keys_changes_nothing():
    _, mine = torch_pair()
    q, kv = inputs((B, L, D), (B, S, D))
    perm = torch.randperm(S, generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(mine(q, kv[:, perm]), mine(q, kv))


def test_heads_are_batched_not_looped():
    _, mine = torch_pair()
    (x,) = inputs((B, L, D))
    q, k, v = (mine.split_heads(t) for t in mine.project(x, None, None))
    per_head = [scaled_dot_product_attention(q[:, h], k[:, h], v[:, h]) for h in range(H)]
    looped = mine.out_proj(torch.cat(per_head, dim=-1))
    torch.testing.assert_close(mine(x), looped)


def test_masks_have_expected_values():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert padding_mask([2, 0, 3], 3).tolist() == [[True, True, False], [False] * 3, [True] * 3]


def test_dropout_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.5).double()
    (x,) = inputs((B, L, D))
    mha.eval()
    torch.testing.assert_close(mha(x), mha(x))
    mha.train()
    assert not torch.allclose(mha(x), mha(x))


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("d_model, heads", [(10, 3), (16, 0)])
def test_error_d_model_not_divisible(d_model, heads):
    with pytest.raises(ValueError, match=f"d_model={d_model}.*num_heads={heads}"):
        MultiHeadAttention(d_model, heads)


def test_error_mismatched_feature_sizes():
    with pytest.raises(ValueError, match="query must be \\(B, L, 16\\), got \\(2, 5, 12\\)"):
        MultiHeadAttention(D, H)(torch.randn(2, 5, 12))
    with pytest.raises(ValueError, match="feature size, got 8 and 6"):
        scaled_dot_product_attention(torch.randn(5, 8), torch.randn(5, 6), torch.randn(5, 6))
    with pytest.raises(ValueError, match="same length, got 5 and 4"):
        scaled_dot_product_attention(torch.randn(5, 8), torch.randn(5, 8), torch.randn(4, 8))
    with pytest.raises(ValueError, match="batch 2 != key/value batch 3"):
        MultiHeadAttention(D, H)(torch.randn(2, 5, D), torch.randn(3, 5, D))


def test_error_mask_wrong_shape():
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\) does not broadcast to \(2, 4, 5, 5\)"):
        MultiHeadAttention(D, H)(torch.randn(2, 5, D), mask=causal_mask(4))
    with pytest.raises(ValueError, match="does not broadcast"):
        MultiHeadAttention(D, H)(torch.randn(2, 5, D), mask=padding_mask([5, 3], 5))  # (B, L) unsqueezed wrongly


def test_error_mask_wrong_dtype():
    with pytest.raises(ValueError, match="bool tensor.*got torch.float32"):
        MultiHeadAttention(D, H)(torch.randn(2, 5, D), mask=causal_mask(5).float())
    with pytest.raises(ValueError, match="bool tensor.*got torch.int64"):
        scaled_dot_product_attention(torch.randn(5, 8), torch.randn(5, 8), torch.randn(5, 8),
                                     mask=torch.ones(5, 5, dtype=torch.long))


def test_error_mask_helpers():
    with pytest.raises(ValueError, match="positive int, got 0"):
        causal_mask(0)
    with pytest.raises(ValueError, match=r"lie in \[0, 3\], got \[4, 1\]"):
        padding_mask([4, 1], 3)


def test_from_torch_rejects_unsupported_module():
    with pytest.raises(ValueError, match="kdim = vdim = embed_dim"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(D, H, kdim=8, vdim=8))
