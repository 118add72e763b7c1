"""xfl.pixel.PixelAttention: identity at init, equal to MultiHeadAttention over pixels,
equivariant to pixel permutations, and the d^(-1/4) scaling trick."""

import math

import pytest
import torch
from torch import nn

from xfl.attention import scaled_dot_product_attention
from xfl.pixel import PixelAttention

B, C, H, W, HEADS = 2, 16, 5, 6, 4


def feature_map(seed=0):
    return torch.randn(B, C, H, W, generator=torch.Generator().manual_seed(seed), dtype=torch.double)


def perturbed_block(seed=0, heads=HEADS):
    """A block whose zero-initialized output projection has been given random weights."""
    torch.manual_seed(seed)
    block = PixelAttention(C, heads).double()
    nn.init.normal_(block.proj.weight, std=0.3)
    nn.init.normal_(block.proj.bias, std=0.3)
    nn.init.normal_(block.norm.weight)
    nn.init.normal_(block.norm.bias)
    return block


def test_identity_at_init():
    torch.manual_seed(0)
    block = PixelAttention(C, HEADS).double()
    x = feature_map()
    torch.testing.assert_close(block(x), x)


def test_shape_preserved():
    assert perturbed_block()(feature_map()).shape == (B, C, H, W)


@pytest.mark.parametrize("heads", [1, 4])
def test_equals_multihead_attention_over_flattened_pixels(heads):
    block, x = perturbed_block(heads=heads), feature_map()
    mha = block.as_multihead()
    tokens = block.norm(x).flatten(2).transpose(1, 2)  # (B, HW, C)
    expected = x + mha(tokens).transpose(1, 2).reshape(B, C, H, W)
    out = block(x)
    assert not torch.allclose(out, x)  # the perturbed block is not the identity
    torch.testing.assert_close(out, expected)


def test_equivariant_to_pixel_permutation():
    block, x = perturbed_block(), feature_map()
    perm = torch.randperm(H * W, generator=torch.Generator().manual_seed(3))

    def shuffle(t):  # permute pixels, keep the (B, C, H, W) shape
        return t.flatten(2)[:, :, perm].reshape(B, C, H, W)

    torch.testing.assert_close(block(shuffle(x)), shuffle(block(x)))


def test_quarter_power_scaling_equals_one_sqrt_scale():
    q, k, v = (torch.randn(B, HEADS, H * W, 8, dtype=torch.double) for _ in range(3))
    d = q.shape[-1]
    scale = d ** -0.25  # DLStudio and improved-diffusion scale q and k each by this
    split = ((q * scale) @ (k * scale).transpose(-1, -2)).softmax(-1) @ v
    torch.testing.assert_close(split, scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(split, ((q @ k.transpose(-1, -2)) / math.sqrt(d)).softmax(-1) @ v)


def test_attention_map_rows_are_distributions():
    weights = perturbed_block().attention_map(feature_map())
    assert weights.shape == (B, HEADS, H * W, H * W)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, HEADS, H * W, dtype=torch.double))


def test_gradients_reach_every_parameter():
    block = perturbed_block()
    block(feature_map()).square().sum().backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_errors():
    with pytest.raises(ValueError, match="num_heads"):
        PixelAttention(10, 3)
    with pytest.raises(ValueError, match="num_groups"):
        PixelAttention(16, 1, num_groups=5)
    with pytest.raises(ValueError, match=r"\(B, 16, H, W\)"):
        PixelAttention(16, 2)(torch.zeros(1, 8, 4, 4))
