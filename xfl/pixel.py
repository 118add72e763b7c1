"""Inter-pixel attention, the attention block of diffusion UNets (chapter 8,
``chapters/ch08_pixel/pixel_attention``).

Every pixel of a feature map is a token: GroupNorm, a 1x1 convolution to q, k, v,
attention over the H*W pixels, a zero-initialized 1x1 output projection and a residual
connection (Ho et al., 2020; Nichol & Dhariwal, 2021). At initialization it is the identity.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention, scaled_dot_product_attention


class PixelAttention(nn.Module):
    """``(B, C, H, W) -> (B, C, H, W)``: x + proj(attention over pixels of GroupNorm(x)).

    The 1x1 ``qkv`` convolution writes 3C channels laid out per head as
    ``(heads, [q, k, v], C/heads)``. ``num_groups`` defaults to gcd(C, 32).
    """

    def __init__(self, channels: int, num_heads: int = 1, num_groups: int | None = None):
        super().__init__()
        if num_heads < 1 or channels % num_heads:
            raise ValueError(f"channels={channels} must be divisible by num_heads={num_heads}")
        num_groups = math.gcd(channels, 32) if num_groups is None else num_groups
        if channels % num_groups:
            raise ValueError(f"channels={channels} must be divisible by num_groups={num_groups}")
        self.channels, self.num_heads = channels, num_heads
        self.norm = nn.GroupNorm(num_groups, channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, kernel_size=1)
        self.proj = nn.Conv2d(channels, channels, kernel_size=1)
        nn.init.zeros_(self.proj.weight)  # the block starts as the identity
        nn.init.zeros_(self.proj.bias)

    def heads_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v, each ``(B, heads, H*W, C/heads)``, from ``(B, C, H, W)``."""
        if x.ndim != 4 or x.shape[1] != self.channels:
            raise ValueError(f"expected (B, {self.channels}, H, W), got {tuple(x.shape)}")
        B, C, H, W = x.shape
        qkv = self.qkv(self.norm(x)).reshape(B, self.num_heads, 3, C // self.num_heads, H * W)
        q, k, v = qkv.transpose(-1, -2).contiguous().unbind(dim=2)  # each (B, heads, HW, d)
        return q, k, v

    def forward(self, x: Tensor) -> Tensor:
        B, C, H, W = x.shape
        out = scaled_dot_product_attention(*self.heads_qkv(x))  # (B, heads, HW, d)
        out = out.transpose(-1, -2).reshape(B, C, H, W)  # heads back into channels
        return x + self.proj(out)

    @torch.no_grad()
    def attention_map(self, x: Tensor) -> Tensor:
        """Weights ``(B, heads, H*W, H*W)``: row i is where pixel i (row-major) looks."""
        q, k, v = self.heads_qkv(x)
        return scaled_dot_product_attention(q, k, v, return_weights=True)[1]

    def as_multihead(self) -> MultiHeadAttention:
        """An ``xfl`` MultiHeadAttention with this block's weights: on the normalized
        pixels as tokens ``(B, H*W, C)`` it computes exactly ``proj(attention)``."""
        C, h = self.channels, self.num_heads
        mha = MultiHeadAttention(C, h).to(self.qkv.weight)
        w = self.qkv.weight.reshape(h, 3, C // h, C).transpose(0, 1).reshape(3 * C, C)
        b = self.qkv.bias.reshape(h, 3, C // h).transpose(0, 1).reshape(3 * C)
        with torch.no_grad():  # (heads, [q,k,v], d) -> ([q,k,v], heads, d): MHA's layout
            mha.in_proj.weight.copy_(w)
            mha.in_proj.bias.copy_(b)
            mha.out_proj.weight.copy_(self.proj.weight.reshape(C, C))
            mha.out_proj.bias.copy_(self.proj.bias)
        return mha
