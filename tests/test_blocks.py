"""xfl.blocks equals PyTorch's TransformerEncoderLayer / DecoderLayer with the same weights."""

import pytest
import torch
from torch import nn

from xfl.attention import causal_mask, padding_mask
from xfl.blocks import TransformerBlock, TransformerStack

D, H, F = 32, 4, 64


def randomize(module: nn.Module) -> None:
    """Non-trivial LayerNorm and bias values, so a wrong wiring shows."""
    torch.manual_seed(3)
    with torch.no_grad():
        for p in module.parameters():
            if p.ndim == 1:
                p.copy_(torch.randn_like(p) * 0.5 + (1.0 if p.abs().sum() > 0 else 0.0))


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_equals_torch(norm_first):
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, batch_first=True, norm_first=norm_first).double()
    randomize(ref)
    mine = TransformerBlock.from_torch(ref)
    assert mine.cross_attn is None and next(mine.parameters()).dtype == torch.double
    x = torch.randn(3, 6, D, dtype=torch.double)
    keys = padding_mask([6, 4, 2], 6)
    want = ref(x, src_key_padding_mask=~keys)
    got = mine(x, mask=keys[:, None, None, :])
    real = keys[..., None]  # torch's fast path may leave padded positions arbitrary; compare real ones
    torch.testing.assert_close(got * real, want * real)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_equals_torch(norm_first):
    torch.manual_seed(1)
    ref = nn.TransformerDecoderLayer(D, H, F, dropout=0.0, batch_first=True, norm_first=norm_first).double()
    randomize(ref)
    mine = TransformerBlock.from_torch(ref)
    assert mine.cross_attn is not None
    x, memory = torch.randn(2, 5, D, dtype=torch.double), torch.randn(2, 7, D, dtype=torch.double)
    memory_keys = padding_mask([7, 3], 7)
    want = ref(x, memory, tgt_mask=~causal_mask(5), memory_key_padding_mask=~memory_keys)
    got = mine(x, mask=causal_mask(5), memory=memory, memory_mask=memory_keys[:, None, None, :])
    torch.testing.assert_close(got, want)


def test_post_ln_and_pre_ln_differ_only_by_the_flag():
    torch.manual_seed(0)
    post, pre = TransformerBlock(D, H, norm_first=False), TransformerBlock(D, H, norm_first=True)
    pre.load_state_dict(post.state_dict())
    x = torch.randn(2, 5, D)
    assert not torch.allclose(post(x), pre(x))
    # post-LN output rows are normalized; pre-LN ones are not
    torch.testing.assert_close(post(x).mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)


def test_pre_ln_stack_ends_with_norm_post_ln_does_not():
    assert isinstance(TransformerStack(2, D, H, norm_first=True).final_norm, nn.LayerNorm)
    assert isinstance(TransformerStack(2, D, H, norm_first=False).final_norm, nn.Identity)


def test_from_torch_refuses_what_it_cannot_copy():
    with pytest.raises(ValueError, match="batch_first=False"):
        TransformerBlock.from_torch(nn.TransformerEncoderLayer(D, H, F))
    with pytest.raises(ValueError, match="relu and gelu"):
        TransformerBlock.from_torch(nn.TransformerEncoderLayer(D, H, F, batch_first=True, activation=torch.tanh))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_from_torch_keeps_the_activation(activation):
    torch.manual_seed(2)
    ref = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, batch_first=True, activation=activation).eval()
    x = torch.randn(2, 4, D)
    torch.testing.assert_close(TransformerBlock.from_torch(ref).eval()(x), ref(x), atol=1e-5, rtol=1e-5)


def test_errors():
    with pytest.raises(ValueError, match="memory must be given exactly"):
        TransformerBlock(D, H, cross=True)(torch.randn(1, 3, D))
    with pytest.raises(ValueError, match="num_layers must be >= 1, got 0"):
        TransformerStack(0, D, H)
    with pytest.raises(ValueError, match="activation must be one of .* got 'tanh'"):
        TransformerBlock(D, H, activation="tanh")
