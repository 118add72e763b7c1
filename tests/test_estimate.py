"""xfl.estimate: the FLOP and op counts behind the T4 estimate agree with hand counts."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from xfl.attention import MultiHeadAttention
from xfl.estimate import (H100, OPTIMIZER_OPS, T4, Device, Work, attention_flops, count_flops, count_work,
                          training_step)
from xfl.model import GPT, GPTConfig
from xfl.train import lm_loss


def test_linear_forward_and_backward_match_a_hand_count():
    layer, x = nn.Linear(64, 32), torch.randn(8, 64)
    assert count_flops(lambda: layer(x)) == 2 * 8 * 64 * 32
    # backward: the weight's gradient only (x needs none), one more product of the same size
    assert count_flops(lambda: layer(x).sum().backward()) == 2 * (2 * 8 * 64 * 32)


def test_attention_is_counted_forward_and_backward():
    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    assert count_flops(lambda: F.scaled_dot_product_attention(q, q, q)) == attention_flops(2, 4, 16, 16, 8)
    backward = count_flops(lambda: F.scaled_dot_product_attention(q, q, q).sum().backward())
    assert backward == attention_flops(2, 4, 16, 16, 8, backward=True) == 3 * attention_flops(2, 4, 16, 16, 8)


def test_multihead_attention_counts_projections_plus_attention():
    """xfl's attention (the fused path on the CPU) must not lose its T x T products."""
    B, T, D, H = 2, 12, 32, 4
    attn, x = MultiHeadAttention(D, H), torch.randn(B, T, D)
    projections = 2 * B * T * D * (3 * D) + 2 * B * T * D * D  # [W_Q; W_K; W_V] and W_O
    with torch.no_grad():
        counted = count_flops(lambda: attn(x))
    assert counted == projections + attention_flops(B, H, T, T, D // H), (counted, projections)


def tiny_gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=20, d_model=32, num_heads=4, num_layers=2, max_len=40, dropout=0.0))


def test_training_step_flops_scale_with_the_batch_and_ops_do_not():
    model, tokens = tiny_gpt(), torch.randint(1, 20, (8, 17))
    small, large = training_step(model, lm_loss, tokens[:4]), training_step(model, lm_loss, tokens)
    assert large.flops == 2 * small.flops, (small, large)
    assert large.ops == small.ops > OPTIMIZER_OPS
    assert small.scaled(2) == Work(large.flops, large.ops)
    assert all(p.grad is None for p in model.parameters())  # the count leaves no gradients behind


def test_training_step_is_about_three_forwards():
    model, tokens = tiny_gpt(), torch.randint(1, 20, (4, 17))
    forward = count_work(lambda: model(tokens[:, :-1]))
    step = training_step(model, lm_loss, tokens)
    assert 2.5 < step.flops / forward.flops <= 3.0, step.flops / forward.flops  # no input gradient
    assert step.ops > 2 * forward.ops  # the backward dispatches ops of its own


def test_the_rule_adds_compute_and_op_time():
    gpu = Device("toy", peak_flops=1e12, fraction=0.5, op_seconds=1e-5, source="a test")
    assert gpu.seconds(Work(flops=1e12, ops=1000)) == pytest.approx(2.0 + 0.01)
    assert 3 * Work(1, 2) + Work(1, 1) == Work(4, 7)
    assert H100.seconds(Work(1e15, 0)) < T4.seconds(Work(1e15, 0)) / 10  # 989 vs 65 TFLOPS peak


def test_autocast_adds_cast_ops_but_no_flops():
    model, tokens = tiny_gpt(), torch.randint(1, 20, (4, 17))
    mixed, fp32 = training_step(model, lm_loss, tokens), training_step(model, lm_loss, tokens, autocast=False)
    assert mixed.flops == fp32.flops and mixed.ops > fp32.ops, (mixed, fp32)
