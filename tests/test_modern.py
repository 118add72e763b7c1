"""Chapter 10's options of the one block: RMSNorm, RoPE, SwiGLU, grouped-query attention, QK-norm,
no biases, zero-initialised projections, the fused causal path and GPT-2's exact options.
Models are float64 where two paths must agree (as tests/test_kv_cache.py), to 1e-9."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from xfl.attention import MultiHeadAttention, causal_mask, repeat_kv_heads, scaled_dot_product_attention
from xfl.blocks import FeedForward, GatedFeedForward, TransformerBlock, gated_hidden
from xfl.decode import greedy_decode, sample
from xfl.model import GPT, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer, count_parameters
from xfl.norms import RMSNorm, make_norm
from xfl.position import apply_rope, offset_rotation
from xfl.train import TrainConfig, lm_loss, train


def close(a, b, atol=1e-9):
    torch.testing.assert_close(a, b, rtol=0, atol=atol)


# ------------------------------------------------------------------------ RMSNorm
def test_rmsnorm_equals_torch():
    torch.manual_seed(0)
    mine, theirs = RMSNorm(12, eps=1e-6).double(), nn.RMSNorm(12, eps=1e-6).double()
    with torch.no_grad():
        mine.weight.uniform_(0.5, 1.5)
        theirs.weight.copy_(mine.weight)
    x = torch.randn(3, 5, 12, dtype=torch.float64) * 3 + 1
    close(mine(x), theirs(x))
    close((x / mine(x) * mine.weight).pow(2).mean(-1), x.pow(2).mean(-1) + 1e-6)  # divides by the rms


def test_rmsnorm_is_layernorm_of_zero_mean_rows():
    x = torch.randn(4, 10, dtype=torch.float64)
    x = x - x.mean(-1, keepdim=True)
    close(RMSNorm(10, eps=1e-5).double()(x), nn.LayerNorm(10, eps=1e-5).double()(x))


def test_make_norm_names():
    assert isinstance(make_norm("rms", 8), RMSNorm) and make_norm("layer", 8, bias=False).bias is None
    with pytest.raises(ValueError, match="norm must be one of .* got 'batch'"):
        make_norm("batch", 8)


# --------------------------------------------------------------------------- RoPE
def test_rope_is_chapter_4s_rotation():
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    rotated = apply_rope(x, start=3)  # (1, 5, 8)
    for m in range(5):  # offset_rotation's pair order is (sin, cos): rotation by -angle in (x0, x1)
        close(rotated[0, m], offset_rotation(m + 3, 8).double().T @ x[0, m], atol=1e-6)


def test_rope_scores_depend_only_on_the_offset():
    torch.manual_seed(0)
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    def score(m, n):
        return apply_rope(q.expand(1, 1, 16), start=m)[0, 0] @ apply_rope(k.expand(1, 1, 16), start=n)[0, 0]
    for m, n, shift in [(5, 2, 7), (0, 9, 100), (30, 30, 1234)]:
        close(score(m, n), score(m + shift, n + shift))
    assert abs(score(5, 2) - score(5, 3)) > 1e-3  # but it does depend on the offset


def test_rope_keeps_norms_and_needs_an_even_dimension():
    x = torch.randn(2, 7, 6, dtype=torch.float64)
    close(apply_rope(x, 11).norm(dim=-1), x.norm(dim=-1))
    with pytest.raises(ValueError, match="even head dimension, got 5"):
        apply_rope(torch.randn(3, 5))
    with pytest.raises(ValueError, match="head_dim=3"):
        MultiHeadAttention(12, 4, rope_base=10000.0)


# ------------------------------------------------------------ grouped-query attention
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_gqa_equals_torch_enable_gqa_and_repeated_keys(kv_heads):
    torch.manual_seed(kv_heads)
    mha = MultiHeadAttention(16, 4, num_kv_heads=kv_heads).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    q, k, v = (mha.split_heads(t) for t in mha.project(x, None, None))
    assert q.shape == (2, 4, 6, 4) and k.shape == v.shape == (2, kv_heads, 6, 4)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    repeated = F.scaled_dot_product_attention(q, k.repeat_interleave(4 // kv_heads, 1),
                                              v.repeat_interleave(4 // kv_heads, 1), is_causal=True)
    ours = mha(x, mask=causal_mask(6))
    close(ours, mha.out_proj(mha.merge_heads(theirs)))
    close(ours, mha.out_proj(mha.merge_heads(repeated)))
    close(mha(x, is_causal=True), ours)


def test_one_kv_head_is_multi_query_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=1, bias=False).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    w_q, w_k, w_v = mha.in_proj.weight.split(mha.splits)
    assert w_k.shape == w_v.shape == (4, 16)  # one shared key head, one shared value head
    k, v = x @ w_k.T, x @ w_v.T  # (B, L, d_h), shared by every head
    heads = [scaled_dot_product_attention(x @ w_q[4 * h:4 * h + 4].T, k, v) for h in range(4)]
    close(mha(x), mha.out_proj(torch.cat(heads, -1)))


def test_repeat_kv_heads_groups_and_errors():
    x = torch.arange(3.0).view(1, 3, 1, 1)
    assert repeat_kv_heads(x, 6).flatten().tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="num_heads=4 must be a multiple of the 3 kv heads"):
        repeat_kv_heads(x, 4)
    with pytest.raises(ValueError, match="num_kv_heads=3 must be a positive divisor of num_heads=4"):
        MultiHeadAttention(16, 4, num_kv_heads=3)


def test_the_cache_stores_only_kv_heads():
    sizes = dict(vocab_size=11, d_model=16, num_heads=4, num_layers=2, dropout=0.0)
    per_token = {}
    for kv in (1, 2, 4):
        model = GPT(GPTConfig(**sizes, num_kv_heads=kv)).eval()
        cache = model.new_cache()
        model.forward_step(torch.randint(1, 11, (3, 5)), cache)
        per_token[kv] = cache.bytes_per_token()
    assert per_token == {kv: 2 * 2 * kv * 4 * 4 for kv in (1, 2, 4)}  # K,V x layers x kv x d_h x 4 bytes


# ----------------------------------------------------------- feed-forward, fused path
def test_swiglu_by_definition_and_at_equal_parameters():
    torch.manual_seed(0)
    ffn = GatedFeedForward(16, 40, gate="swiglu").double()
    x = torch.randn(2, 3, 16, dtype=torch.float64)
    w, v = ffn.up.weight.split(40)
    b_w, b_v = ffn.up.bias.split(40)
    close(ffn(x), ffn.down(F.silu(x @ w.T + b_w) * (x @ v.T + b_v)))
    rebuilt = GatedFeedForward.from_weights(w, v, ffn.down.weight)
    close(rebuilt(x), F.silu(x @ w.T) * (x @ v.T) @ ffn.down.weight.T)
    with pytest.raises(ValueError, match=r"w2 \(d, h\), got \(40, 16\), \(40, 16\), \(40, 16\)"):
        GatedFeedForward.from_weights(w, v, w)
    for d in (256, 768):  # at d = 64 rounding 170 up to 176 costs 3%
        gated = count_parameters(GatedFeedForward(d, gated_hidden(d), bias=False))
        assert abs(gated / count_parameters(FeedForward(d, 4 * d, bias=False)) - 1) < 0.02
    assert gated_hidden(4096, 256) == 11008  # LLaMA-7B's width


def test_fused_causal_path_equals_the_mask():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 4, dtype=torch.float64) for _ in range(3))
    close(scaled_dot_product_attention(q, k, v, is_causal=True), scaled_dot_product_attention(q, k, v, causal_mask(7)))
    out, w = scaled_dot_product_attention(q, k, v, is_causal=True, return_weights=True)
    assert torch.equal(w[..., 0, 1:], torch.zeros_like(w[..., 0, 1:]))
    with pytest.raises(ValueError, match="is_causal=True needs mask=None"):
        scaled_dot_product_attention(q, k, v, causal_mask(7), is_causal=True)


def test_gpt_uses_the_fused_path_only_without_padding():
    model = GPT(GPTConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=1, dropout=0.0)).double().eval()
    seen = []
    model.blocks.layers[0].self_attn.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append(kwargs["is_causal"]), with_kwargs=True)
    model(torch.tensor([[3, 4, 5]]))
    model(torch.tensor([[3, 4, 0]]))
    assert seen == [True, False]


# ------------------------------------------------------------- GPT-2 exactness options
def test_gpt2_options_tanh_gelu_and_unscaled_embeddings():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=1, dropout=0.0,
                    activation="gelu_tanh", positions="learned", scale_embedding=False)
    model = GPT(cfg).double()
    layer = nn.TransformerEncoderLayer(16, 2, 64, 0.0, activation=lambda x: F.gelu(x, approximate="tanh"),
                                       batch_first=True, norm_first=True).double()
    block = model.blocks.layers[0]
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    block.self_attn.load_state_dict(MultiHeadAttention.from_torch(layer.self_attn).state_dict())
    block.ffn[0].load_state_dict(layer.linear1.state_dict())
    block.ffn[3].load_state_dict(layer.linear2.state_dict())
    close(block(x), layer(x))
    tokens = torch.tensor([[3, 4]])
    close(model.embed(tokens), model.embed.table(tokens) + model.embed.positions[:2])


# --------------------------------------------------------------- every combination
OPTIONS = dict(norm=["layer", "rms"], positions=["sinusoidal", "learned", "rope", "none"],
               ffn=["mlp", "swiglu", "geglu"], num_kv_heads=[None, 1], qk_norm=[False, True],
               bias=[True, False], zero_init=[False, True])
COMBINATIONS = [dict(zip(OPTIONS, values)) for values in itertools.product(*OPTIONS.values())]


def small_gpt(seed=0, **options):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=13, d_model=16, num_heads=4, num_layers=2, max_len=24, dropout=0.0,
                         **options))


@pytest.mark.parametrize("options", COMBINATIONS[::7] + [COMBINATIONS[-1]], ids=str)
def test_every_option_combination_trains_and_decodes_alike(options):
    model = small_gpt(**options)
    tokens = torch.randint(1, 13, (8, 12))
    with torch.no_grad():
        before = lm_loss(model, tokens)[0].item()
    train(model, lambda epoch: [tokens], lm_loss, TrainConfig(steps=5, lr=3e-3, warmup=0, progress=False,
                                                               amp=False, compile=False, log_every=5))
    with torch.no_grad():
        assert lm_loss(model, tokens)[0].item() < before
    model.eval()
    draw = lambda cache: sample(model, tokens[:2, :3], 8, generator=torch.Generator().manual_seed(1), use_cache=cache)
    assert torch.equal(draw(True), draw(False))


def test_all_combinations_build_with_the_cache_equal_to_the_full_pass():
    tokens = torch.randint(1, 13, (2, 6))
    for options in COMBINATIONS:
        if options["zero_init"]:
            continue  # zero-initialised blocks are the identity: the check below would be empty
        model = small_gpt(**options).double().eval()
        cache, full = model.new_cache(), model(tokens)
        steps = torch.cat([model.forward_step(tokens[:, i:i + 1], cache) for i in range(6)], dim=1)
        close(steps, full)


def test_zero_init_starts_every_block_as_the_identity():
    model = small_gpt(zero_init=True, positions="none").double().eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    for block in model.blocks.layers:
        close(block(x), x)


def test_modern_preset_and_its_overrides():
    c = GPTConfig.modern(vocab_size=11, num_heads=4)
    assert (c.norm, c.positions, c.ffn, c.num_kv_heads, c.bias, c.qk_norm) == ("rms", "rope", "swiglu", 2, False, True)
    assert GPTConfig.modern(vocab_size=11, num_heads=3, d_model=48).num_kv_heads == 3
    assert GPTConfig.modern(vocab_size=11, num_kv_heads=1).num_kv_heads == 1
    model = GPT(GPTConfig.modern(vocab_size=11, d_model=16, num_heads=4, num_layers=1))
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    assert all(m.bias is None for m in model.modules() if isinstance(m, nn.Linear))


@pytest.mark.parametrize("field, value, message", [
    ("norm", "batch", "norm must be one of"), ("positions", "alibi", "positions must be one of"),
    ("ffn", "moe", "ffn must be one of"), ("activation", "swish", "activation must be one of")])
def test_unknown_names_are_refused(field, value, message):
    with pytest.raises(ValueError, match=f"{message}.*got '{value}'"):
        GPTConfig(vocab_size=11, **{field: value})


def test_bad_head_options_are_refused_when_built():
    with pytest.raises(ValueError, match="num_kv_heads=3 must be a positive divisor of num_heads=4"):
        GPT(GPTConfig(vocab_size=11, d_model=16, num_heads=4, num_kv_heads=3))
    with pytest.raises(ValueError, match="even head dimension.*head_dim=3"):
        GPT(GPTConfig(vocab_size=11, d_model=12, num_heads=4, positions="rope"))


# ----------------------------------------------------------------- the encoder-decoder
SEQ2SEQ_OPTIONS = [dict(norm="rms", ffn="swiglu", num_kv_heads=1, qk_norm=True, bias=False),
                   dict(ffn="geglu", num_kv_heads=2, norm_first=False)]


@pytest.mark.parametrize("options", SEQ2SEQ_OPTIONS, ids=str)
def test_seq2seq_takes_the_block_options_and_decodes_alike(options):
    torch.manual_seed(0)
    cfg = Seq2SeqConfig(src_vocab=9, tgt_vocab=9, d_model=16, num_heads=4, num_encoder_layers=1,
                        num_decoder_layers=2, dropout=0.0, max_len=16, **options)
    model = Seq2SeqTransformer(cfg).double().eval()
    block = model.decoder.layers[0]
    assert block.cross_attn.num_kv_heads == options["num_kv_heads"] and isinstance(block.ffn, GatedFeedForward)
    src = torch.randint(3, 9, (3, 5), generator=torch.Generator().manual_seed(1))
    src[1, 3:] = 0
    tgt = torch.randint(3, 9, (3, 6), generator=torch.Generator().manual_seed(2))
    memory, keep = model.encode(src), model.source_mask(src)
    cache = model.decoder_cache(memory, keep)
    steps = torch.cat([model.decode_step(tgt[:, i:i + 1], cache) for i in range(6)], dim=1)
    close(steps, model.decode(tgt, memory, keep))
    with_cache, without = (greedy_decode(model, src, 10, sos=1, eos=2, use_cache=c) for c in (True, False))
    assert with_cache[0] == without[0]


def test_seq2seq_refuses_unknown_block_names():
    with pytest.raises(ValueError, match="ffn must be one of .* got 'moe'"):
        Seq2SeqConfig(src_vocab=9, tgt_vocab=9, ffn="moe")


# ------------------------------------------------- nanochat's options, the ablation's measurements
def test_relu2_and_gainless_rmsnorm():
    x = torch.randn(3, 8, dtype=torch.float64)
    ffn = FeedForward(8, 16, activation="relu2").double()
    close(ffn(x), ffn[3](F.relu(ffn[0](x)) ** 2))
    plain = make_norm("rms_plain", 8).double()
    assert plain.weight is None and not list(plain.parameters())
    close(plain(x), x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt())
    model = small_gpt(norm="rms_plain", activation="relu2")
    assert count_parameters(model) < count_parameters(small_gpt(norm="rms"))


def test_per_position_bits_average_to_bits_per_char():
    from xfl.ablation import bits_per_char, per_position_bits
    model = small_gpt().eval()
    windows = torch.randint(1, 13, (5, 9))  # (W, length + 1): no padding
    per_position = per_position_bits(model, windows, batch_size=2)
    assert per_position.shape == (8,)
    assert abs(float(per_position.mean()) - bits_per_char(model, windows, batch_size=2)) < 1e-6


def test_max_attention_logit_is_capped_by_qk_norm_and_grows_with_w_q():
    from xfl.ablation import max_attention_logit
    tokens = torch.randint(1, 13, (2, 10))
    capped = small_gpt(qk_norm=True, positions="rope")  # gains 1: |q̂·k̂|/√d_h <= √d_h = 2
    with torch.no_grad():
        capped.blocks.layers[0].self_attn.in_proj.weight.mul_(100)
    assert 0 < max_attention_logit(capped, tokens) <= 2 + 1e-5
    free = small_gpt()
    before = max_attention_logit(free, tokens)
    with torch.no_grad():  # only layer 0's W_Q: its logits scale by 10, layer 1's do not change
        free.blocks.layers[0].self_attn.in_proj.weight[:16].mul_(10)
    assert max_attention_logit(free, tokens) >= 5 * before


def test_rope_tables_are_cached_and_equal_the_angles():
    from xfl.position import rope_angles
    x = torch.randn(2, 3, 7, 16, dtype=torch.float64)
    angles = rope_angles(40, 7, 16)  # (7, 8): positions 40..46, computed afresh
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    expected = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
    assert torch.equal(apply_rope(x, start=40), expected)  # the cached table: bit for bit
    with torch.inference_mode():  # a table first built here still serves autograd below
        apply_rope(torch.randn(5, 32), start=3)
    leaf = torch.randn(5, 32, requires_grad=True)
    apply_rope(leaf, start=3).sum().backward()
    assert leaf.grad is not None and leaf.grad.shape == (5, 32)


def test_rope_scale_interpolates_positions():
    """Position m read with scale s gets the angles of m / s: every s-th row of a constant
    vector equals the unscaled rotation one row on; scale 1 is the plain (cached) table."""
    v = torch.randn(16, dtype=torch.float64)
    stretched = apply_rope(v.expand(12, 16), start=0, scale=4.0)  # positions 0, 1/4, 2/4, ...
    torch.testing.assert_close(stretched[::4], apply_rope(v.expand(3, 16), start=0), rtol=0, atol=1e-12)
    assert not torch.allclose(stretched[1], apply_rope(v.expand(2, 16))[1])  # 1/4 is not 1
    x = torch.randn(2, 5, 16)
    assert torch.equal(apply_rope(x, start=3, scale=1.0), apply_rope(x, start=3))
    with pytest.raises(ValueError, match="scale must be > 0"):
        apply_rope(x, scale=0.0)


def test_rope_stretched_reads_longer_windows_then_restores_the_model():
    from xfl.ablation import rope_stretched
    model, tokens = small_gpt(positions="rope").eval(), torch.randint(1, 13, (2, 20))
    before = model(tokens)
    with torch.no_grad(), rope_stretched(model, scale=1.0):
        torch.testing.assert_close(model(tokens), before, rtol=0, atol=0)  # scale 1: nothing moves
    with torch.no_grad(), rope_stretched(model, scale=4.0):
        assert not torch.allclose(model(tokens)[:, 1:], before[:, 1:], atol=1e-4)  # positions moved
    with torch.no_grad(), rope_stretched(model, base=40000.0):
        assert not torch.allclose(model(tokens)[:, 1:], before[:, 1:], atol=1e-4)
    with pytest.raises(RuntimeError), rope_stretched(model, scale=2.0):
        raise RuntimeError("an error inside the block")
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert all(m.rope_scale == 1.0 and m.rope_base == 10000.0 for m in layers)  # restored
    torch.testing.assert_close(model(tokens), before, rtol=0, atol=0)
    with pytest.raises(ValueError, match="no rotary positions"), rope_stretched(small_gpt(), scale=2.0):
        pass


# ------------------------------------------- the extrapolation's windows and the ablation's verdicts
def test_shifted_windows_score_every_character_once_per_half_length_block():
    from xfl.ablation import shifted_windows
    stream = torch.arange(100)
    w = shifted_windows(stream, 8, 3, 4)  # a ring of 24 characters, starts 0 and 4
    assert w.shape == (6, 9) and w[0].tolist() == list(range(9)) and w[2, -1] == 0  # the ring closes
    targets = w[:, 1:]  # (6, 8)
    for lo in (0, 4):  # each block of 4 positions holds each of the 24 characters exactly once
        assert sorted(targets[:, lo:lo + 4].flatten().tolist()) == list(range(24))
    for bad in (dict(step=3), dict(step=0), dict(count=20)):
        with pytest.raises(ValueError, match="need a step dividing length=8"):
            shifted_windows(stream, 8, **{"count": 3, "step": 4, **bad})


class _Unigram(nn.Module):
    """A model blind to position and context: the same logits everywhere."""

    def __init__(self, vocab):
        super().__init__()
        self.logits = nn.Parameter(torch.randn(vocab, dtype=torch.float64))

    def forward(self, tokens):  # (B, L) -> (B, L, V)
        return self.logits.expand(*tokens.shape, -1)


def test_position_profiles_cancel_the_data_across_spans():
    """A position-blind model scores every span alike on shifted windows, not on one start."""
    from xfl.ablation import (CharStreams, Recipe, beyond_training_length, per_position_bits,
                              position_profiles, profile_windows, span_bits)
    torch.manual_seed(0)
    valid = torch.cat([torch.randint(1, 4, (600,)), torch.randint(1, 13, (600,))])  # easy, then hard
    streams = CharStreams(vocab=None, train=valid, valid=valid)
    recipe = Recipe(sizes={}, length=8, steps=1, batch=1, lr=1e-3, valid_windows=None)
    models = [_Unigram(13), _Unigram(13)]
    result = {"per_position": position_profiles(models, streams, recipe)}
    spans = [span_bits(result, lo, hi)["bits"] for lo, hi in ((4, 8), (8, 16), (16, 32))]
    for a, b in zip(spans, spans[1:]):
        assert a == pytest.approx(b, abs=1e-9)
    assert all(p["mean"] == pytest.approx(0, abs=1e-9) for p in beyond_training_length(result, 8).values())
    once = per_position_bits(models[0], profile_windows(streams, recipe, shifted=False))  # (32,)
    assert abs(float(once[4:8].mean() - once[16:32].mean())) > 0.01  # one start: spans differ


def _results(diffs, base=2.0):
    """Fake ablation results: the base, then one variant per list of per-seed differences."""
    out = {"base": {"bits": [base] * 5}}
    out.update({f"v{i}": {"bits": [base + d for d in ds]} for i, ds in enumerate(diffs)})
    return out


def test_holm_verdicts_and_the_table():
    from xfl.ablation import holm_verdicts, table
    clear = [0.11, 0.09, 0.10, 0.12, 0.08]  # t = 14, p ~ 1e-4: worse after Holm
    weak = [0.02, 0.005, 0.012, 0.018, 0.008]  # p ~ 0.012 alone; x11 above 0.05
    results = _results([clear, [-d for d in clear], weak] + [[0.01, -0.01, 0.02, -0.02, 0.0]] * 8)
    v = holm_verdicts(results, "base")
    assert len(v) == 11 and v["v0"]["verdict"] == "worse" and v["v1"]["verdict"] == "better"
    assert v["v2"]["low"] > 0 and v["v2"]["p"] < 0.05 and v["v2"]["verdict"] == "unclear"
    assert all(r["p"] <= r["p_holm"] <= 1 for r in v.values())
    assert holm_verdicts(_results([weak]), "base")["v0"]["verdict"] == "worse"  # one test: no correction
    text = table(results)
    assert max(len(line) for line in text.splitlines()) <= 72, text
    assert "over the 11 comparisons" in text and text.splitlines()[2].endswith("worse")


def test_extrapolation_lines_name_every_code():
    from xfl.ablation import extrapolation_lines
    span = lambda word: {"mean": 0.0, "sd": 0.0, "low": 0.0, "high": 0.0, "verdict": word}  # noqa: E731
    lines = extrapolation_lines({"RoPE": {"L..2L": span("unclear"), "2L..4L": span("worse")},
                                 "none": {"L..2L": span("better"), "2L..4L": span("unclear")}})
    assert lines == ["RoPE: L..2L no clear change; 2L..4L rises",
                     "no-position model: L..2L falls; 2L..4L no clear change"]


def test_rise_against_the_no_position_model_cancels_a_shared_rise():
    from xfl.ablation import beyond_training_length, extrapolation_lines, rise_against
    L = 4
    flat = [1.0] * (2 * L) + [1.5] * (2 * L)  # (4L,): rises by 0.5 from 2L on
    none = {"per_position": [[v + 0.01 * s for v in flat] for s in range(5)]}
    same = {"per_position": [[v + 0.02 * s for v in flat] for s in range(5)]}
    more = {"per_position": [[v + (0.3 + 0.01 * s) * (i >= 2 * L) for i, v in enumerate(flat)] for s in range(5)]}
    assert beyond_training_length(same, L)["2L..4L"]["mean"] == pytest.approx(0.5)  # rises alone
    versus = {"RoPE": rise_against(more, none, L), "learned": rise_against(same, none, L)}
    assert versus["learned"]["2L..4L"]["mean"] == pytest.approx(0, abs=1e-12)
    assert versus["RoPE"]["2L..4L"]["verdict"] == "worse" and versus["RoPE"]["2L..4L"]["mean"] == pytest.approx(0.32)
    assert extrapolation_lines(versus, against="none")[:2] == [
        "each rise against the no-position model's:", "  RoPE: L..2L no clear difference; 2L..4L rises more"]
