"""The key-value cache: incremental decoding, beside the models it speeds up (no chapter imports it:
chapter 6 builds it from scratch and checks it against ``Seq2SeqTransformer.decoder_cache``).

A decoding step needs, from the earlier positions, only each self-attention layer's keys and
values: ``KVCache`` keeps them and appends the newest position's each step. Cross-attention's
keys and values depend on the source alone, so they are projected once per source batch
(``memory_cache``). ``StackCache`` holds one of each per layer, plus which cached positions are
padding, and moves every row to its parent beam (``reorder``).

The functions run the layers of ``xfl.attention``, ``xfl.blocks`` and ``xfl.model`` on the newest
positions only; the models' ``decoder_cache``/``decode_step`` and ``new_cache``/``forward_step``
call them. Each step equals the uncached pass on the whole prefix (``tests/test_kv_cache.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import key_mask, newest_queries_mask


class KVCache:
    """Keys and values ``(B, heads, t, d_head)`` of the t positions one attention layer has seen.

    They live in buffers ``(B, heads, capacity, d_head)``: a step writes its positions into the
    free columns, and ``keys``/``values`` are views of the first t. A full buffer is replaced by
    one twice as long (at least 64 positions), so a decoding run copies the earlier positions
    O(log t) times instead of once a step (``torch.cat``). ``KVCache(keys, values)`` holds given
    tensors (cross-attention's keys and values of the memory, never appended to).
    """

    def __init__(self, keys: Tensor | None = None, values: Tensor | None = None):
        self._keys, self._values = keys, values  # (B, heads, capacity, d_head) buffers
        self._length = 0 if keys is None else keys.shape[2]

    @property
    def keys(self) -> Tensor | None:
        return None if self._keys is None else self._keys[:, :, :self._length]

    @property
    def values(self) -> Tensor | None:
        return None if self._values is None else self._values[:, :, :self._length]

    def __len__(self) -> int:
        return self._length

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``k, v (B, heads, L, d_head)`` after the cached positions; return all the keys
        and values, ``(B, heads, t + L, d_head)``."""
        if self._keys is not None and k.shape[:2] != self._keys.shape[:2]:
            raise ValueError(f"new keys {tuple(k.shape)} need the cached (B, heads) = "
                             f"{tuple(self._keys.shape[:2])}")
        t, end = self._length, self._length + k.shape[2]
        if self._keys is None or end > self._keys.shape[2]:
            self._keys, self._values = (_longer(old, new, t, end, dim=2)
                                        for old, new in ((self._keys, k), (self._values, v)))
        self._keys[:, :, t:end] = k
        self._values[:, :, t:end] = v
        self._length = end
        return self.keys, self.values

    def reorder(self, rows: Tensor) -> None:
        """Row i becomes the old row ``rows[i]`` (beam search's parent beams): ``rows (B',)`` long.
        Only the t used positions are copied; the buffer keeps its capacity."""
        if self._keys is not None:
            self._keys, self._values = (_select_rows(x, rows, self._length, dim=2)
                                        for x in (self._keys, self._values))


def _select_rows(buffer: Tensor, rows: Tensor, used: int, dim: int) -> Tensor:
    """A buffer of ``buffer``'s capacity whose row i holds the first ``used`` positions (along
    ``dim``) of ``buffer``'s row ``rows[i]``; the free positions are left unwritten."""
    if used == buffer.shape[dim]:  # a full buffer (the memory's keys and values): one copy
        return buffer.index_select(0, rows)
    shape = list(buffer.shape)
    shape[0] = len(rows)
    moved = buffer.new_empty(shape)  # (B', ..., capacity, ...)
    if used:
        moved.narrow(dim, 0, used).copy_(buffer.narrow(dim, 0, used).index_select(0, rows))
    return moved


def _longer(buffer: Tensor | None, new: Tensor, used: int, needed: int, dim: int) -> Tensor:
    """A buffer like ``new`` with at least ``needed`` positions along ``dim`` (twice the old
    length, at least 64), holding ``buffer``'s first ``used`` positions."""
    old = 0 if buffer is None else buffer.shape[dim]
    shape = list(new.shape)
    shape[dim] = max(needed, 2 * old, 64)
    grown = new.new_empty(shape)
    if used:
        grown.narrow(dim, 0, used).copy_(buffer.narrow(dim, 0, used))
    return grown


class StackCache:
    """What incremental decoding keeps for a ``TransformerStack``.

    ``layers``: each block's self-attention ``KVCache``; ``keep (B, t)``: which cached positions
    hold real tokens (no query attends to padding, as in the uncached decoder; a buffer like the
    keys'); for a stack with cross-attention, ``memory``: each block's keys and values of the
    encoder memory, projected once, and ``memory_keep (B, S)``, the memory's keep-mask.
    ``padded``: whether a mask is needed (some cached position is padding, or it is not known).
    """

    def __init__(self, layers: list[KVCache], memory: list[KVCache] | None = None,
                 memory_keep: Tensor | None = None):
        self.layers, self.memory, self.memory_keep = layers, memory, memory_keep  # memory_keep (B, S)
        self._keep, self._length, self.padded = None, 0, False  # (B, capacity) bool buffer

    @property
    def keep(self) -> Tensor | None:
        return None if self._keep is None else self._keep[:, :self._length]

    def __len__(self) -> int:
        return self._length

    def bytes_per_token(self) -> float:
        """Self-attention keys and values held per cached token and sequence, in bytes."""
        if self._keep is None:
            raise ValueError("the cache is empty: run forward_step first")
        total = sum(c.keys.nbytes + c.values.nbytes for c in self.layers)
        return total / self.keep.numel()

    def extend(self, keep_new: Tensor) -> tuple[Tensor | None, bool]:
        """Record the newest positions ``keep_new (B, L)``; return their self-attention mask
        ``(B, 1, L, t + L)`` (causal over the cache, padding masked) and whether ``is_causal``
        stands for it. Without padding no mask is built: one new position sees every cached one
        (None), and the first L positions of an empty cache are causal (None, True). Padding is
        looked for on the CPU only (elsewhere it would read a value back each step): on an
        accelerator the mask is always built."""
        t, end = self._length, self._length + keep_new.shape[1]
        if self._keep is None or end > self._keep.shape[1]:
            self._keep = _longer(self._keep, keep_new, t, end, dim=1)
        self._keep[:, t:end] = keep_new
        self._length = end
        self.padded = self.padded or keep_new.device.type != "cpu" or not bool(keep_new.all())
        if not self.padded and (t == 0 or end == t + 1):
            return None, end > t + 1
        return newest_queries_mask(self.keep, end - t), False

    def reorder(self, rows: Tensor) -> None:
        """Row i continues the old row ``rows[i]`` (beam search's parent beams); ``rows`` long."""
        for cache in self.layers + (self.memory or []):
            cache.reorder(rows)
        if self._keep is not None:
            self._keep = _select_rows(self._keep, rows, self._length, dim=1)
        if self.memory_keep is not None:
            self.memory_keep = self.memory_keep.index_select(0, rows)


# ------------------------------------------------------------------ one attention layer
def self_attention_step(attn: nn.Module, query: Tensor, cache: KVCache, mask: Tensor | None = None,
                        is_causal: bool = False) -> Tensor:
    """Self-attention of the newest positions ``query (B, L, D)`` over the cached ones and
    themselves (``attn`` a ``MultiHeadAttention``); their keys and values are appended to
    ``cache``. ``mask`` broadcasts to ``(B, heads, L, t + L)``; ``is_causal`` (an empty cache, no
    mask) is the causal mask unbuilt. Returns ``(B, L, D)``."""
    attn.check_inputs(query, None, None)
    q, k, v = (attn.split_heads(x) for x in attn.project(query, None, None))  # (B, h|kv, L, d_h)
    q, k = attn.position_heads(q, k, len(cache))
    k, v = cache.append(k, v)  # (B, kv, t + L, d_h): only the kv heads are stored
    return attn.attend(q, k, v, mask, is_causal=is_causal)


def memory_cache(attn: nn.Module, memory: Tensor) -> KVCache:
    """Cross-attention keys and values of ``memory (B, S, D)``, projected once per source batch."""
    attn.check_inputs(memory, None, None)
    k, v = (attn.split_heads(attn.project_one(memory, i)) for i in (1, 2))  # (B, kv, S, d_h)
    return KVCache(k if attn.k_norm is None else attn.k_norm(k), v)


def cross_attention_step(attn: nn.Module, query: Tensor, cache: KVCache, mask: Tensor | None = None) -> Tensor:
    """Cross-attention of ``query (B, L, D)`` over the keys and values of ``memory_cache``: the
    same as ``attn(query, memory, memory, mask)``. Returns ``(B, L, D)``."""
    attn.check_inputs(query, None, None)
    q = attn.split_heads(attn.project_one(query, 0))  # (B, h, L, d_h)
    q = q if attn.q_norm is None else attn.q_norm(q)
    return attn.attend(q, cache.keys, cache.values, mask)


# ------------------------------------------------------------------------ blocks, stacks
def block_step(block: nn.Module, x: Tensor, cache: KVCache, mask: Tensor | None = None,
               memory: KVCache | None = None, memory_mask: Tensor | None = None,
               is_causal: bool = False) -> Tensor:
    """``TransformerBlock.forward`` for the newest positions ``x (B, L, D)`` only: self-attention
    over ``cache`` (``mask`` or ``is_causal``, as in ``self_attention_step``), cross-attention
    over ``memory`` (a ``memory_cache``). Returns ``(B, L, D)``."""
    block.check_memory(memory)
    x = block.residuals[0](x, lambda h: self_attention_step(block.self_attn, h, cache, mask, is_causal))
    if block.cross_attn is not None:
        x = block.residuals[1](x, lambda h: cross_attention_step(block.cross_attn, h, memory, memory_mask))
    return block.residuals[-1](x, block.ffn)


def new_stack_cache(stack: nn.Module, memory: Tensor | None = None,
                    memory_keep: Tensor | None = None) -> StackCache:
    """An empty ``StackCache`` for ``stack_step``; a cross-attention stack needs the memory
    ``(B, S, D)`` and its keep-mask ``(B, S)``, whose keys and values are projected here, once."""
    if (memory is None) != (memory_keep is None):
        raise ValueError("memory and memory_keep must be given together")
    stack.layers[0].check_memory(memory)
    cache = StackCache([KVCache() for _ in stack.layers])
    if memory is not None:
        cache.memory = [memory_cache(layer.cross_attn, memory) for layer in stack.layers]
        cache.memory_keep = memory_keep
    return cache


def stack_step(stack: nn.Module, x: Tensor, keep: Tensor, cache: StackCache) -> Tensor:
    """A ``TransformerStack`` on the newest positions ``x (B, L, D)`` after the t cached ones;
    ``keep (B, L)`` is False where they are padding. Same rows as the stack on all t + L positions
    under a causal padding mask; appends to ``cache``. Returns ``(B, L, D)``."""
    mask, is_causal = cache.extend(keep)  # (B, 1, L, t + L), or None when nothing is masked
    memories = cache.memory or [None] * len(stack.layers)
    memory_mask = None if cache.memory_keep is None else key_mask(cache.memory_keep)  # (B, 1, 1, S)
    for layer, layer_cache, memory in zip(stack.layers, cache.layers, memories):
        x = block_step(layer, x, layer_cache, mask, memory, memory_mask, is_causal)
    return stack.final_norm(x)
