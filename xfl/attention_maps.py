"""Attention maps of a trained model, for heatmaps (chapter 6: BLEU and decoding).

The models call ``MultiHeadAttention`` without ``need_weights`` (so PyTorch's fused kernel
runs). ``record_attention`` hooks every attention module of a model and, whenever one runs,
calls it once more on the same inputs with ``need_weights=True`` and keeps the weights
``(B, heads, Lq, Lk)``. The model's outputs are unchanged. ``seq2seq_attention_maps`` sorts
the maps of a ``Seq2SeqTransformer`` into encoder self-attention, decoder self-attention
and cross-attention, one entry per layer.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention


def _keep_weights(store: dict, name: str):
    """A forward hook that re-runs its attention module with ``need_weights=True``."""
    def hook(module: MultiHeadAttention, args, kwargs, output):
        _, weights = module.forward(*args, **{**kwargs, "need_weights": True})
        store[name] = weights.detach()  # (B, heads, Lq, Lk)
    return hook


@contextmanager
def record_attention(model: nn.Module):
    """``with record_attention(model) as maps: model(...)`` fills ``maps`` with
    ``{module name: weights (B, heads, Lq, Lk)}`` for each ``MultiHeadAttention`` that ran
    (the last call wins). Put the model in eval mode first: with dropout on, the re-run
    draws a different dropout mask than the call it records."""
    maps: dict[str, Tensor] = {}
    handles = [module.register_forward_hook(_keep_weights(maps, name), with_kwargs=True)
               for name, module in model.named_modules() if isinstance(module, MultiHeadAttention)]
    if not handles:
        raise ValueError(f"{type(model).__name__} holds no xfl MultiHeadAttention module to record")
    try:
        yield maps
    finally:
        for handle in handles:
            handle.remove()


def _per_layer(maps: dict, prefix: str, num_layers: int, attribute: str) -> list[Tensor]:
    return [maps[f"{prefix}.layers.{i}.{attribute}"] for i in range(num_layers)]


@torch.no_grad()
def seq2seq_attention_maps(model: nn.Module, src: Tensor, tgt_in: Tensor) -> dict[str, list[Tensor]]:
    """Every attention map of one teacher-forced pass of a ``Seq2SeqTransformer``.

    src ``(B, S)``, tgt_in ``(B, L)`` (SOS + the translation so far). Returns
    ``{"encoder": [(B, h, S, S)] * N_enc, "decoder": [(B, h, L, L)] * N_dec,
    "cross": [(B, h, L, S)] * N_dec}``, layer 0 first. Runs in eval mode (no dropout).
    """
    was_training = model.training
    model.eval()
    try:
        with record_attention(model) as maps:
            model(src, tgt_in)
    finally:
        model.train(was_training)
    c = model.config
    return {"encoder": _per_layer(maps, "encoder", c.num_encoder_layers, "self_attn"),
            "decoder": _per_layer(maps, "decoder", c.num_decoder_layers, "self_attn"),
            "cross": _per_layer(maps, "decoder", c.num_decoder_layers, "cross_attn")}
