"""Chapter 10's modern block as Hugging Face's Llama and Qwen3: ``to_hugging_face(model)`` copies
a ``GPT`` built with the modern options into a randomly initialised ``LlamaForCausalLM`` (or
``Qwen3ForCausalLM`` when the model has QK-norm) that gives the same logits.

The bridges between the two implementations (chapters/ch10_modern/modern_block.md):

- RoPE: xfl rotates the interleaved pairs (2i, 2i+1) (RoFormer, Meta's reference); Hugging Face
  rotates the halves (i, i + d/2). Permuting each head's query and key features (and QK-norm's
  gains) into the order 0, 2, 4, ..., 1, 3, 5, ... makes one the other; scores are unchanged.
- Embedding scale: xfl multiplies token embeddings by √d (``scale_embedding``); Llama does not,
  so its table is xfl's times √d (the untied head keeps xfl's own weights).
- Norm epsilon: RMSNorm's ε (xfl's 1e-6) is passed as ``rms_norm_eps``.
- Dropout: Llama has attention dropout only; xfl also drops on the residual branches. The two
  agree in eval mode (or with ``dropout=0``).

``to_gpt2(model)`` does the same for a ``GPT`` with GPT-2's block (``GPT2_OPTIONS``: Pre-LN
LayerNorm, learned positions, a GELU feed-forward with biases; chapter 9's model is one) and Hugging
Face's ``GPT2LMHeadModel`` (``bench/generate_hf.py`` times the two generating the same tokens). GPT-2's
``Conv1D`` layers store ``(in, out)`` weights, the transpose of ``nn.Linear``'s; its ``c_attn``
holds W_Q, W_K, W_V side by side, as xfl's ``in_proj`` does (transposed).

Needs ``transformers`` (imported on call).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .model import GPT

# what to_hugging_face needs of a GPTConfig: (field, value)
BRIDGEABLE = (("norm", "rms"), ("positions", "rope"), ("ffn", "swiglu"), ("bias", False),
              ("norm_first", True), ("causal", True), ("tie_output", False))


def check_bridgeable(model: GPT) -> None:
    """Refuse a model whose config has no Llama/Qwen3 counterpart, naming the field."""
    for field, value in BRIDGEABLE:
        if getattr(model.config, field) != value:
            raise ValueError(f"to_hugging_face needs {field}={value!r}, got "
                             f"{field}={getattr(model.config, field)!r}")


def halves_order(head_dim: int) -> Tensor:
    """``(head_dim,)``: feature order 0, 2, ..., d-2, 1, 3, ..., d-1 (pair i -> features i, i + d/2)."""
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def to_halves(weight: Tensor, heads: int, head_dim: int) -> Tensor:
    """A projection ``(heads · d_h, D)`` with each head's output features in ``halves_order``."""
    return weight.view(heads, head_dim, -1)[:, halves_order(head_dim)].reshape(heads * head_dim, -1)


def hf_config(model: GPT, qk_norm: bool):
    """The ``LlamaConfig`` (or ``Qwen3Config``) of ``model``'s sizes, ε, RoPE base; no dropout."""
    from transformers import LlamaConfig, Qwen3Config
    c, block = model.config, model.blocks.layers[0]
    fields = dict(vocab_size=c.vocab_size, hidden_size=c.d_model,
                  intermediate_size=block.ffn.down.in_features, num_hidden_layers=c.num_layers,
                  num_attention_heads=c.num_heads, num_key_value_heads=block.self_attn.num_kv_heads,
                  head_dim=block.self_attn.head_dim, max_position_embeddings=c.max_len,
                  rms_norm_eps=block.residuals[0].norm.eps, attention_bias=False,
                  attention_dropout=0.0, tie_word_embeddings=False,
                  rope_parameters={"rope_type": "default", "rope_theta": c.rope_base})
    return Qwen3Config(**fields) if qk_norm else LlamaConfig(mlp_bias=False, **fields)


@torch.no_grad()
def copy_block(block, layer, rope_halves: bool = True) -> None:
    """xfl ``TransformerBlock`` -> a Llama/Qwen3 decoder layer (weights copied in place)."""
    attn, h, kv, d_h = block.self_attn, block.self_attn.num_heads, block.self_attn.num_kv_heads, \
        block.self_attn.head_dim
    w_q, w_k, w_v = attn.in_proj.weight.split(attn.splits)
    order = halves_order(d_h) if rope_halves else torch.arange(d_h)
    layer.self_attn.q_proj.weight.copy_(to_halves(w_q, h, d_h) if rope_halves else w_q)
    layer.self_attn.k_proj.weight.copy_(to_halves(w_k, kv, d_h) if rope_halves else w_k)
    layer.self_attn.v_proj.weight.copy_(w_v)
    layer.self_attn.o_proj.weight.copy_(attn.out_proj.weight)
    if attn.q_norm is not None:
        layer.self_attn.q_norm.weight.copy_(attn.q_norm.weight[order])
        layer.self_attn.k_norm.weight.copy_(attn.k_norm.weight[order])
    gate, up = block.ffn.up.weight.chunk(2)  # SiLU(x W) gates x V
    layer.mlp.gate_proj.weight.copy_(gate)
    layer.mlp.up_proj.weight.copy_(up)
    layer.mlp.down_proj.weight.copy_(block.ffn.down.weight)
    layer.input_layernorm.weight.copy_(block.residuals[0].norm.weight)
    layer.post_attention_layernorm.weight.copy_(block.residuals[1].norm.weight)


@torch.no_grad()
def to_hugging_face(model: GPT, rope_halves: bool = True, scale_embedding: bool = True):
    """A randomly initialised ``LlamaForCausalLM`` (``Qwen3ForCausalLM`` with QK-norm) holding
    ``model``'s weights, in eval mode and ``model``'s dtype. ``rope_halves=False`` or
    ``scale_embedding=False`` leave out that bridge (to show what it is for)."""
    from transformers import LlamaForCausalLM, Qwen3ForCausalLM
    check_bridgeable(model)
    qk_norm = model.config.qk_norm
    hf = (Qwen3ForCausalLM if qk_norm else LlamaForCausalLM)(hf_config(model, qk_norm))
    hf = hf.to(model.output.weight)
    scale = model.embed.scale if scale_embedding else 1.0
    hf.model.embed_tokens.weight.copy_(model.embed.table.weight * scale)
    for block, layer in zip(model.blocks.layers, hf.model.layers):
        copy_block(block, layer, rope_halves)
    hf.model.norm.weight.copy_(model.blocks.final_norm.weight)
    hf.lm_head.weight.copy_(model.output.weight)
    return hf.eval()


# ------------------------------------------------------------------------------ GPT-2
# what to_gpt2 needs of a GPTConfig: (field, allowed values)
GPT2_OPTIONS = (("norm", ("layer",)), ("positions", ("learned",)), ("ffn", ("mlp",)),
                ("activation", ("gelu_tanh", "gelu")), ("bias", (True,)), ("norm_first", (True,)),
                ("causal", (True,)), ("qk_norm", (False,)))
HF_ACTIVATIONS = {"gelu_tanh": "gelu_new", "gelu": "gelu"}  # GPT-2's own is the tanh one


def check_gpt2(model: GPT) -> None:
    """Refuse a model whose config has no GPT-2 counterpart, naming the field."""
    for field, allowed in GPT2_OPTIONS:
        got = getattr(model.config, field)
        if got not in allowed:
            expected = repr(allowed[0]) if len(allowed) == 1 else f"one of {allowed}"
            raise ValueError(f"to_gpt2 needs {field}={expected}, got {field}={got!r}")
    if model.blocks.layers[0].self_attn.num_kv_heads != model.config.num_heads:
        raise ValueError(f"to_gpt2 needs one kv head per head, got num_kv_heads={model.config.num_kv_heads}")


def gpt2_config(model: GPT):
    """The ``GPT2Config`` of ``model``'s sizes and activation: no dropout, no BOS/EOS (generation
    runs its length); the head is untied unless xfl's is tied to an unscaled embedding."""
    from transformers import GPT2Config
    c, block = model.config, model.blocks.layers[0]
    return GPT2Config(vocab_size=c.vocab_size, n_positions=c.max_len, n_embd=c.d_model,
                      n_layer=c.num_layers, n_head=c.num_heads, n_inner=block.ffn[0].out_features,
                      activation_function=HF_ACTIVATIONS[c.activation], resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0, layer_norm_epsilon=block.residuals[0].norm.eps, bos_token_id=None,
                      eos_token_id=None, pad_token_id=c.pad_id,
                      tie_word_embeddings=c.tie_output and model.embed.scale == 1.0)


@torch.no_grad()
def to_gpt2(model: GPT):
    """A randomly initialised ``GPT2LMHeadModel`` holding ``model``'s weights, in eval mode and
    ``model``'s dtype: the same logits (``tests/test_generate_hf.py``). xfl's √d embedding scale
    (``scale_embedding``) is folded into GPT-2's table, whose head then keeps xfl's own weights."""
    from transformers import GPT2LMHeadModel
    check_gpt2(model)
    hf = GPT2LMHeadModel(gpt2_config(model)).to(model.output.weight)
    hf.transformer.wte.weight.copy_(model.embed.table.weight * model.embed.scale)
    if not hf.config.tie_word_embeddings:
        hf.lm_head.weight.copy_(model.output.weight)
    hf.transformer.wpe.weight.copy_(model.embed.positions)
    for block, layer in zip(model.blocks.layers, hf.transformer.h):
        linears = ((layer.attn.c_attn, block.self_attn.in_proj), (layer.attn.c_proj, block.self_attn.out_proj),
                   (layer.mlp.c_fc, block.ffn[0]), (layer.mlp.c_proj, block.ffn[3]))
        for conv, linear in linears:  # Conv1D: x @ W + b with W (in, out)
            conv.weight.copy_(linear.weight.T)
            conv.bias.copy_(linear.bias)
        for norm, mine in ((layer.ln_1, block.residuals[0].norm), (layer.ln_2, block.residuals[1].norm)):
            norm.load_state_dict(mine.state_dict())
    hf.transformer.ln_f.load_state_dict(model.blocks.final_norm.state_dict())
    return hf.eval()
