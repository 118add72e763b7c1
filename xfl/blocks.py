"""Transformer blocks (chapters 3 and 5; built in chapter 5): one class, post-LN or Pre-LN by a
single flag.

``norm_first=False`` is the post-LN block of Vaswani et al. (2017), Kak's "First
Generation" (FG) transformer: x = LN(x + Sublayer(x)). ``norm_first=True`` is the Pre-LN
block of Xiong et al. (2020): x = x + Sublayer(LN(x)), with one final LayerNorm per stack.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .attention import MultiHeadAttention


ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


class FeedForward(nn.Sequential):
    """Position-wise feed-forward net: ``(B, L, D) -> (B, L, D)`` through a hidden width."""

    def __init__(self, d_model: int, d_hidden: int, dropout: float = 0.0, activation: str = "relu"):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        super().__init__(nn.Linear(d_model, d_hidden), ACTIVATIONS[activation](), nn.Dropout(dropout),
                         nn.Linear(d_hidden, d_model))


class Residual(nn.Module):
    """A sublayer wrapped with dropout, a residual connection and a LayerNorm.

    Post-LN: ``LN(x + drop(f(x)))``. Pre-LN: ``x + drop(f(LN(x)))``.
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool):
        super().__init__()
        self.norm, self.drop, self.norm_first = nn.LayerNorm(d_model), nn.Dropout(dropout), norm_first

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.norm_first:
            return x + self.drop(sublayer(self.norm(x)))
        return self.norm(x + self.drop(sublayer(x)))


class TransformerBlock(nn.Module):
    """Self-attention, optional cross-attention, feed-forward; each in a ``Residual``.

    ``cross=False`` gives an encoder block (or a decoder-only/GPT block with a causal mask);
    ``cross=True`` adds attention over an encoder ``memory`` (an encoder-decoder decoder block).
    """

    def __init__(self, d_model: int, num_heads: int, d_hidden: int | None = None,
                 dropout: float = 0.0, norm_first: bool = True, cross: bool = False,
                 activation: str = "relu"):
        super().__init__()
        d_hidden = 4 * d_model if d_hidden is None else d_hidden
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout) if cross else None
        self.ffn = FeedForward(d_model, d_hidden, dropout, activation)
        n_sublayers = 3 if cross else 2
        self.residuals = nn.ModuleList(Residual(d_model, dropout, norm_first) for _ in range(n_sublayers))
        self.norm_first = norm_first

    def forward(self, x: Tensor, mask: Tensor | None = None, memory: Tensor | None = None,
                memory_mask: Tensor | None = None) -> Tensor:
        """x ``(B, L, D)``; memory ``(B, S, D)`` for cross blocks. Returns ``(B, L, D)``."""
        if (memory is None) != (self.cross_attn is None):
            raise ValueError("memory must be given exactly when the block was built with cross=True")
        first, *rest = self.residuals
        x = first(x, lambda h: self.self_attn(h, mask=mask))
        if self.cross_attn is not None:
            x = rest.pop(0)(x, lambda h: self.cross_attn(h, memory, memory, mask=memory_mask))
        return rest[0](x, self.ffn)

    @classmethod
    def from_torch(cls, layer: nn.Module) -> "TransformerBlock":
        """A block with the weights of a batch-first ``nn.TransformerEncoderLayer`` (an encoder
        block) or ``nn.TransformerDecoderLayer`` (a block with cross-attention); same outputs."""
        if not layer.self_attn.batch_first or layer.norm1.eps != 1e-5:
            raise ValueError("from_torch needs batch_first=True and layer_norm_eps=1e-5, got "
                             f"batch_first={layer.self_attn.batch_first}, eps={layer.norm1.eps}")
        cross = isinstance(layer, nn.TransformerDecoderLayer)
        activation = {F.relu: "relu", F.gelu: "gelu"}.get(layer.activation)
        if activation is None:
            raise ValueError(f"from_torch supports relu and gelu activations, got {layer.activation}")
        block = cls(layer.self_attn.embed_dim, layer.self_attn.num_heads, layer.linear1.out_features,
                    layer.dropout.p, layer.norm_first, cross, activation).to(layer.linear1.weight)
        block.self_attn = MultiHeadAttention.from_torch(layer.self_attn)
        if cross:
            block.cross_attn = MultiHeadAttention.from_torch(layer.multihead_attn)
        block.ffn[0].load_state_dict(layer.linear1.state_dict())
        block.ffn[3].load_state_dict(layer.linear2.state_dict())
        norms = [layer.norm1, layer.norm2] + ([layer.norm3] if cross else [])
        for residual, norm in zip(block.residuals, norms):
            residual.norm.load_state_dict(norm.state_dict())
        return block


class TransformerStack(nn.Module):
    """``num_layers`` blocks; Pre-LN stacks end with a LayerNorm (post-LN ones need none)."""

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_hidden: int | None = None,
                 dropout: float = 0.0, norm_first: bool = True, cross: bool = False,
                 activation: str = "relu"):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_hidden, dropout, norm_first, cross, activation)
            for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x: Tensor, mask: Tensor | None = None, memory: Tensor | None = None,
                memory_mask: Tensor | None = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, mask, memory, memory_mask)
        return self.final_norm(x)
