"""Transformer blocks (chapters 3 and 5; built in chapter 5): one class, post-LN or Pre-LN by a
single flag.

``norm_first=False`` is the post-LN block of Vaswani et al. (2017), Kak's "First
Generation" (FG) transformer: x = LN(x + Sublayer(x)). ``norm_first=True`` is the Pre-LN
block of Xiong et al. (2020): x = x + Sublayer(LN(x)), with one final LayerNorm per stack.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import KVCache, MultiHeadAttention, key_mask, newest_queries_mask


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
        self._check_memory(memory)
        return self._sublayers(x, lambda h: self.self_attn(h, mask=mask),
                               lambda h: self.cross_attn(h, memory, memory, mask=memory_mask))

    def forward_step(self, x: Tensor, cache: KVCache, mask: Tensor | None = None,
                     memory: KVCache | None = None, memory_mask: Tensor | None = None) -> Tensor:
        """``forward`` for the newest positions ``x (B, L, D)`` only: self-attention over ``cache``
        (the earlier positions' keys and values; the new ones are appended), cross-attention over
        ``memory``, the memory's keys and values (``memory_cache``). Returns ``(B, L, D)``."""
        self._check_memory(memory)
        return self._sublayers(x, lambda h: self.self_attn.forward_step(h, cache, mask),
                               lambda h: self.cross_attn.forward_memory(h, memory, memory_mask))

    def _check_memory(self, memory) -> None:
        if (memory is None) != (self.cross_attn is None):
            raise ValueError("memory must be given exactly when the block was built with cross=True")

    def _sublayers(self, x: Tensor, self_attention, cross_attention) -> Tensor:
        """Self-attention, cross-attention (cross blocks only) and feed-forward, each residual."""
        first, *rest = self.residuals
        x = first(x, self_attention)
        if self.cross_attn is not None:
            x = rest.pop(0)(x, cross_attention)
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


@dataclass
class StackCache:
    """What incremental decoding keeps for a ``TransformerStack`` (chapter 6).

    ``layers``: each block's self-attention ``KVCache``; ``keep (B, t)``: which cached positions
    hold real tokens (no query attends to padding, as in the uncached decoder); for a stack with
    cross-attention, ``memory``: each block's keys and values of the encoder memory, projected
    once, and ``memory_keep (B, S)``, the memory's keep-mask.
    """

    layers: list[KVCache]
    keep: Tensor | None = None  # (B, t) bool
    memory: list[KVCache] | None = None
    memory_keep: Tensor | None = None  # (B, S) bool

    def __len__(self) -> int:
        return 0 if self.keep is None else self.keep.shape[1]

    def extend(self, keep_new: Tensor) -> Tensor:
        """Record the newest positions ``keep_new (B, L)``; return their self-attention mask
        ``(B, 1, L, t + L)``: causal over the cache, padding masked."""
        self.keep = keep_new if self.keep is None else torch.cat([self.keep, keep_new], dim=1)
        return newest_queries_mask(self.keep, keep_new.shape[1])

    def reorder(self, rows: Tensor) -> None:
        """Row i continues the old row ``rows[i]`` (beam search's parent beams); ``rows`` long."""
        for cache in self.layers + (self.memory or []):
            cache.reorder(rows)
        self.keep = None if self.keep is None else self.keep.index_select(0, rows)
        if self.memory_keep is not None:
            self.memory_keep = self.memory_keep.index_select(0, rows)


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

    def new_cache(self, memory: Tensor | None = None, memory_keep: Tensor | None = None) -> StackCache:
        """An empty ``StackCache`` for ``forward_step``; a cross-attention stack needs the memory
        ``(B, S, D)`` and its keep-mask ``(B, S)``, whose keys and values are projected here, once."""
        if (memory is None) != (memory_keep is None):
            raise ValueError("memory and memory_keep must be given together")
        self.layers[0]._check_memory(memory)
        cache = StackCache([KVCache() for _ in self.layers])
        if memory is not None:
            cache.memory = [layer.cross_attn.memory_cache(memory) for layer in self.layers]
            cache.memory_keep = memory_keep
        return cache

    def forward_step(self, x: Tensor, keep: Tensor, cache: StackCache) -> Tensor:
        """The stack on the newest positions ``x (B, L, D)`` after the t cached ones; ``keep (B, L)``
        is False where they are padding. Same rows as ``forward`` on all t + L positions under a
        causal padding mask; appends to ``cache``. Returns ``(B, L, D)``."""
        mask = cache.extend(keep)  # (B, 1, L, t + L)
        memories = cache.memory or [None] * len(self.layers)
        memory_mask = None if cache.memory_keep is None else key_mask(cache.memory_keep)  # (B, 1, 1, S)
        for layer, layer_cache, memory in zip(self.layers, cache.layers, memories):
            x = layer.forward_step(x, layer_cache, mask, memory, memory_mask)
        return self.final_norm(x)
