"""xfl.hf_bridge: chapter 10's modern block copied into Hugging Face's LlamaForCausalLM (and
Qwen3ForCausalLM with QK-norm) gives the same logits; each bridge is needed. Skipped only where
transformers cannot be imported."""

import pytest
import torch

from xfl.hf_bridge import halves_order, to_hugging_face
from xfl.model import GPT, GPTConfig

transformers = pytest.importorskip("transformers")


def modern_gpt(seed=0, **fields):
    """A modern GPT with random weights everywhere (gains too), so every copy is checked."""
    torch.manual_seed(seed)
    config = dict(vocab_size=37, d_model=32, num_heads=4, num_layers=2, max_len=40, zero_init=False)
    model = GPT(GPTConfig.modern(**{**config, **fields}))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def logits_gap(model, hf, seed=1):
    tokens = torch.randint(1, model.config.vocab_size, (3, 24), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return float((model(tokens) - hf(tokens).logits).abs().max())


@pytest.mark.parametrize("qk_norm, name", [(False, "LlamaForCausalLM"), (True, "Qwen3ForCausalLM")])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_modern_block_equals_hugging_face(qk_norm, name, kv_heads):
    model = modern_gpt(qk_norm=qk_norm, num_kv_heads=kv_heads, dropout=0.1)
    hf = to_hugging_face(model)
    assert type(hf).__name__ == name and hf.config.num_key_value_heads == kv_heads
    assert logits_gap(model, hf) < 1e-4


def test_each_bridge_is_needed():
    model = modern_gpt(qk_norm=True, rope_base=500.0)
    assert logits_gap(model, to_hugging_face(model)) < 1e-4
    assert logits_gap(model, to_hugging_face(model, rope_halves=False)) > 1e-2  # pairs vs halves
    assert logits_gap(model, to_hugging_face(model, scale_embedding=False)) > 1e-2  # √d
    model.train()  # xfl's residual dropout: logits differ from Llama's until eval mode
    assert logits_gap(model, to_hugging_face(model)) > 1e-2


def test_halves_order_and_refusals():
    assert halves_order(6).tolist() == [0, 2, 4, 1, 3, 5]
    for field, value in (("norm", "layer"), ("positions", "sinusoidal"), ("ffn", "mlp"),
                         ("tie_output", True)):
        with pytest.raises(ValueError, match=f"needs {field}=.*got {field}={value!r}"):
            to_hugging_face(modern_gpt(**{field: value}))
