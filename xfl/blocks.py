"""Transformer blocks (chapters 3, 4, 5 and 10; built in chapter 5): one class, post-LN or Pre-LN by a
single flag.

``norm_first=False`` is the post-LN block of Vaswani et al. (2017), Kak's "First
Generation" (FG) transformer: x = LN(x + Sublayer(x)). ``norm_first=True`` is the Pre-LN
block of Xiong et al. (2020): x = x + Sublayer(LN(x)), with one final LayerNorm per stack.

Chapter 10's options make the same block today's decoder block: ``norm="rms"`` (RMSNorm),
``ffn="swiglu"`` (a gated feed-forward), ``num_kv_heads`` (grouped-query attention),
``rope_base`` (rotary positions), ``qk_norm`` and ``bias=False``.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import MultiHeadAttention
from .norms import make_norm


class ReLUSquared(nn.Module):
    """``relu(x)²`` elementwise: nanochat's feed-forward activation (So et al., 2021, Primer)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x).square()


ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "gelu_tanh": partial(nn.GELU, approximate="tanh"),
               "relu2": ReLUSquared}
FFNS = ("mlp", "swiglu", "geglu")
GATES = {"swiglu": F.silu, "geglu": F.gelu}


def _check_activation(activation: str) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")


class FeedForward(nn.Sequential):
    """Position-wise feed-forward net: ``(B, L, D) -> (B, L, D)`` through a hidden width."""

    def __init__(self, d_model: int, d_hidden: int, dropout: float = 0.0, activation: str = "relu",
                 bias: bool = True):
        _check_activation(activation)
        super().__init__(nn.Linear(d_model, d_hidden, bias=bias), ACTIVATIONS[activation](),
                         nn.Dropout(dropout), nn.Linear(d_hidden, d_model, bias=bias))

    @property
    def out_layer(self) -> nn.Linear:
        return self[-1]


class GatedFeedForward(nn.Module):
    """A GLU-family feed-forward (Shazeer, 2020): ``down(gate(x W) ⊙ x V)``, ``(B, L, D) -> (B, L, D)``;
    ``gate="swiglu"`` uses SiLU (Swish), ``"geglu"`` GELU. W and V are one ``(D, 2·hidden)`` matmul."""

    def __init__(self, d_model: int, d_hidden: int, dropout: float = 0.0, gate: str = "swiglu",
                 bias: bool = True):
        super().__init__()
        if gate not in GATES:
            raise ValueError(f"gate must be one of {sorted(GATES)}, got {gate!r}")
        self.gate = GATES[gate]
        self.up = nn.Linear(d_model, 2 * d_hidden, bias=bias)  # [W; V]
        self.drop, self.down = nn.Dropout(dropout), nn.Linear(d_hidden, d_model, bias=bias)

    @classmethod
    def from_weights(cls, w: Tensor, v: Tensor, w2: Tensor, gate: str = "swiglu") -> "GatedFeedForward":
        """A bias-free gated feed-forward with W = ``w (h, d)``, V = ``v (h, d)``, W2 = ``w2 (d, h)``."""
        h, d = w.shape
        if v.shape != w.shape or w2.shape != (d, h):
            raise ValueError(f"need w and v (h, d) and w2 (d, h), got {tuple(w.shape)}, {tuple(v.shape)}, "
                             f"{tuple(w2.shape)}")
        ffn = cls(d, h, gate=gate, bias=False).to(w)
        with torch.no_grad():
            ffn.up.weight.copy_(torch.cat([w, v]))
            ffn.down.weight.copy_(w2)
        return ffn

    def forward(self, x: Tensor) -> Tensor:
        gate, value = self.up(x).chunk(2, dim=-1)  # (B, L, hidden) each
        return self.down(self.drop(self.gate(gate) * value))

    @property
    def out_layer(self) -> nn.Linear:
        return self.down


def gated_hidden(d_model: int, multiple_of: int = 8) -> int:
    """The gated feed-forward's hidden width at the parameters of a 4·d ReLU one: 2/3 · 4d, rounded
    up to a multiple of ``multiple_of`` (as LLaMA does, with 256 there)."""
    return multiple_of * math.ceil(int(2 * 4 * d_model / 3) / multiple_of)


def make_ffn(kind: str, d_model: int, d_hidden: int | None, dropout: float, activation: str,
             bias: bool = True) -> nn.Module:
    """``"mlp"``: ``FeedForward`` (hidden 4·d by default); ``"swiglu"``/``"geglu"``: ``GatedFeedForward``
    (hidden ``gated_hidden(d)`` by default, the same parameter count)."""
    if kind not in FFNS:
        raise ValueError(f"ffn must be one of {FFNS}, got {kind!r}")
    if kind == "mlp":
        return FeedForward(d_model, 4 * d_model if d_hidden is None else d_hidden, dropout, activation, bias)
    return GatedFeedForward(d_model, gated_hidden(d_model) if d_hidden is None else d_hidden, dropout, kind, bias)


class Residual(nn.Module):
    """A sublayer wrapped with dropout, a residual connection and a norm (LayerNorm or RMSNorm).

    Post-LN: ``LN(x + drop(f(x)))``. Pre-LN: ``x + drop(f(LN(x)))``.
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool, norm: str = "layer",
                 bias: bool = True):
        super().__init__()
        self.norm, self.drop, self.norm_first = make_norm(norm, d_model, bias), nn.Dropout(dropout), norm_first

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.norm_first:
            return x + self.drop(sublayer(self.norm(x)))
        return self.norm(x + self.drop(sublayer(x)))


class TransformerBlock(nn.Module):
    """Self-attention, optional cross-attention, feed-forward; each in a ``Residual``.

    ``cross=False`` gives an encoder block (or a decoder-only/GPT block with a causal mask);
    ``cross=True`` adds attention over an encoder ``memory`` (an encoder-decoder decoder block).
    The keyword options (chapter 10) choose the norm, the feed-forward, kv heads, RoPE, QK-norm
    and biases; their defaults are the 2017 block.
    """

    def __init__(self, d_model: int, num_heads: int, d_hidden: int | None = None,
                 dropout: float = 0.0, norm_first: bool = True, cross: bool = False,
                 activation: str = "relu", *, norm: str = "layer", ffn: str = "mlp",
                 num_kv_heads: int | None = None, rope_base: float | None = None,
                 qk_norm: bool = False, bias: bool = True):
        super().__init__()
        attention = dict(bias=bias, num_kv_heads=num_kv_heads, qk_norm=qk_norm)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout, rope_base=rope_base, **attention)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout, **attention) if cross else None
        self.ffn = make_ffn(ffn, d_model, d_hidden, dropout, activation, bias)
        n_sublayers = 3 if cross else 2
        self.residuals = nn.ModuleList(Residual(d_model, dropout, norm_first, norm, bias)
                                       for _ in range(n_sublayers))
        self.norm_first = norm_first

    def output_layers(self) -> list[nn.Linear]:
        """The layers that write into the residual stream: each attention's W_O, the ffn's last."""
        attentions = [self.self_attn] + ([self.cross_attn] if self.cross_attn is not None else [])
        return [a.out_proj for a in attentions] + [self.ffn.out_layer]

    def forward(self, x: Tensor, mask: Tensor | None = None, memory: Tensor | None = None,
                memory_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """x ``(B, L, D)``; memory ``(B, S, D)`` for cross blocks. Returns ``(B, L, D)``.
        ``is_causal=True`` (with ``mask=None``) is a causal mask the fused kernel never builds.
        (``xfl.cache.block_step`` runs the same sublayers on the newest positions only.)"""
        self.check_memory(memory)
        x = self.residuals[0](x, lambda h: self.self_attn(h, mask=mask, is_causal=is_causal))
        if self.cross_attn is not None:
            x = self.residuals[1](x, lambda h: self.cross_attn(h, memory, memory, mask=memory_mask))
        return self.residuals[-1](x, self.ffn)

    def check_memory(self, memory) -> None:
        if (memory is None) != (self.cross_attn is None):
            raise ValueError("memory must be given exactly when the block was built with cross=True")

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
    """``num_layers`` blocks; Pre-LN stacks end with a norm (post-LN ones need none).
    ``options`` are ``TransformerBlock``'s keyword options (norm, ffn, num_kv_heads, ...)."""

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_hidden: int | None = None,
                 dropout: float = 0.0, norm_first: bool = True, cross: bool = False,
                 activation: str = "relu", **options):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_hidden, dropout, norm_first, cross, activation, **options)
            for _ in range(num_layers))
        final_norm = make_norm(options.get("norm", "layer"), d_model, options.get("bias", True))
        self.final_norm = final_norm if norm_first else nn.Identity()

    def forward(self, x: Tensor, mask: Tensor | None = None, memory: Tensor | None = None,
                memory_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        for layer in self.layers:
            x = layer(x, mask, memory, memory_mask, is_causal)
        return self.final_norm(x)
