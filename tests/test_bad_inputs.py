"""Bad inputs to the public API give a ValueError naming the bad value and what was expected
(issue 39; the table is in DEVELOPERS.md, "Reliability: bad inputs"). Each test is one case."""

import math

import pytest
import torch

from xfl.attention import MultiHeadAttention, scaled_dot_product_attention
from xfl.decode import beam_search, greedy_decode, sample
from xfl.model import GPT, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
from xfl.vit import ViT, ViTConfig

PAD, SOS, EOS, VOCAB = 0, 1, 2, 11


def seq2seq():
    torch.manual_seed(0)
    return Seq2SeqTransformer(Seq2SeqConfig(src_vocab=VOCAB, tgt_vocab=VOCAB, d_model=16, num_heads=2,
                                            num_encoder_layers=1, num_decoder_layers=1, max_len=16))


def gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=VOCAB, d_model=16, num_heads=2, num_layers=1, max_len=16))


def vit():
    torch.manual_seed(0)
    return ViT(ViTConfig(image_size=8, patch_size=4, num_classes=2, d_model=16, num_heads=2,
                         num_layers=1, d_hidden=32))


def tokens(*rows):
    return torch.tensor(rows)


# ------------------------------------------------------------------ token ids
def test_seq2seq_token_beyond_the_vocabulary():
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 10\] \(a vocabulary of 11\), got 11"):
        seq2seq()(tokens([3, 11]), tokens([1, 4]))


def test_seq2seq_negative_token():
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 10\].*got -1"):
        seq2seq()(tokens([3, 4]), tokens([1, -1]))


def test_seq2seq_float_tokens():
    with pytest.raises(ValueError, match="token ids must be an integer tensor, got torch.float32"):
        seq2seq()(torch.tensor([[3.0, 4.0]]), tokens([1, 4]))


def test_gpt_token_beyond_the_vocabulary():
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 10\].*got 50"):
        gpt()(tokens([3, 50]))


def test_greedy_decode_source_token_beyond_the_vocabulary():
    with pytest.raises(ValueError, match=r"src token ids must lie in \[0, 10\].*got 12"):
        greedy_decode(seq2seq(), tokens([3, 12]), max_len=4, sos=SOS, eos=EOS)


def test_greedy_decode_sos_beyond_the_vocabulary():
    with pytest.raises(ValueError, match=r"sos must be an int token id in \[0, 10\].*got 11"):
        greedy_decode(seq2seq(), tokens([3, 4]), max_len=4, sos=VOCAB, eos=EOS)


def test_beam_search_eos_beyond_the_vocabulary():
    with pytest.raises(ValueError, match=r"eos must be an int token id in \[0, 10\].*got 99"):
        beam_search(seq2seq(), tokens([3, 4]), max_len=4, sos=SOS, eos=99)


def test_sample_prefix_token_beyond_the_vocabulary():
    with pytest.raises(ValueError, match=r"prefix token ids must lie in \[0, 10\].*got 11"):
        sample(gpt(), tokens([1, 11]), max_new=3)


def test_sample_empty_prefix():
    with pytest.raises(ValueError, match=r"prefix must be \(B, L\) token ids with L >= 1.*got shape \(2, 0\)"):
        sample(gpt(), torch.zeros(2, 0, dtype=torch.long), max_new=3)


@pytest.mark.parametrize("top_k", [0, -1])
def test_sample_top_k_below_one(top_k):
    with pytest.raises(ValueError, match=rf"top_k must be None or an int >= 1, got {top_k}"):
        sample(gpt(), tokens([1, 4]), max_new=3, top_k=top_k)


@pytest.mark.parametrize("temperature", [math.nan, math.inf, 0.0])
def test_sample_temperature_not_finite_and_positive(temperature):
    with pytest.raises(ValueError, match=rf"temperature must be a finite number > 0, got {temperature}"):
        sample(gpt(), tokens([1, 4]), max_new=3, temperature=temperature)


def test_sample_negative_max_new():
    with pytest.raises(ValueError, match=r"max_new must be an int >= 0 \(tokens to add\), got -1"):
        sample(gpt(), tokens([1, 4]), max_new=-1)


def test_sample_zero_new_tokens_returns_the_prefix():
    """max_new=0 is a request for nothing more, not an error."""
    prefix = tokens([1, 4])
    assert torch.equal(sample(gpt(), prefix, max_new=0), prefix)


# ------------------------------------------------------------ non-finite values
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_multi_head_attention_non_finite_input(bad):
    x = torch.randn(2, 5, 16)
    x[1, 3, 7] = bad
    with pytest.raises(ValueError, match=rf"query holds 1 NaN or inf value\(s\), the first {bad} at "
                                         r"index \(1, 3, 7\); expected finite numbers"):
        MultiHeadAttention(16, 2)(x)


def test_multi_head_attention_does_not_check_tracked_activations():
    """Inside a training step the inputs are activations autograd tracks: not checked (the check
    would cost every attention call), so NaN propagates to the output as NaN."""
    x = torch.randn(2, 5, 16)
    x[0, 0, 0] = math.nan
    out = MultiHeadAttention(16, 2)(x.requires_grad_())
    assert out[0].isnan().all() and not out[1].isnan().any()


def test_vit_nan_image():
    images = torch.rand(2, 3, 8, 8)
    images[0, 1, 2, 3] = math.nan
    with pytest.raises(ValueError, match=r"images holds 1 NaN or inf value\(s\), the first nan at index \(0, 1, 2, 3\)"):
        vit()(images)


def test_scaled_dot_product_attention_nan_query_same_output_with_weights():
    """The flag only adds output: a NaN query row gets the fused kernel's output on both paths
    (the function is every model's inner loop and checks no values), and its weights are NaN."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, generator=g) for _ in range(3))
    q[1, 2, 5] = math.nan
    plain = scaled_dot_product_attention(q, k, v)
    out, weights = scaled_dot_product_attention(q, k, v, return_weights=True)
    torch.testing.assert_close(out, plain, equal_nan=True)
    assert weights[1, 2].isnan().all() and not weights[0].isnan().any()
    torch.testing.assert_close(out[0], (weights @ v)[0])


# --------------------------------------------------------------------- images
def test_vit_one_channel_images():
    with pytest.raises(ValueError, match=r"images must have 3 channels \(in_channels\), got 1 in shape \(2, 1, 8, 8\)"):
        vit()(torch.rand(2, 1, 8, 8))


def test_vit_uint8_images():
    with pytest.raises(ValueError, match="images must be floating point, got torch.uint8; convert uint8"):
        vit()(torch.zeros(2, 3, 8, 8, dtype=torch.uint8))


# ------------------------------------------------------------------- data files
def cifar_batch(data=None, labels=None, n=4) -> bytes:
    import pickle

    import numpy as np

    data = np.zeros((n, 3072), np.uint8) if data is None else data
    return pickle.dumps({b"data": data, b"labels": list(range(n)) if labels is None else labels}, protocol=2)


def test_cifar_labels_outside_0_to_9(tmp_path):
    from xfl.data.cifar import read_batch

    (tmp_path / "b").write_bytes(cifar_batch(labels=[3, 255, -7, 1]))
    with pytest.raises(ValueError, match=r"b: labels must lie in 0..9, got \[255, -7\] \(2 out of range\)"):
        read_batch(tmp_path / "b")


def test_cifar_float_pixels_are_not_wrapped(tmp_path):
    import numpy as np

    from xfl.data.cifar import read_batch

    (tmp_path / "b").write_bytes(cifar_batch(data=np.full((4, 3072), 300.7)))
    with pytest.raises(ValueError, match=r"b: pixels must be uint8 \(0..255\), got float64"):
        read_batch(tmp_path / "b")


def test_damaged_cached_cifar_batch_is_deleted_and_fetched_again(tmp_path, monkeypatch):
    """Like the zip (xfl.data.download.fetch): a truncated cached batch is removed and the
    mirror's verified copy is used (a mirror made here, with its own sha256)."""
    import hashlib

    from xfl.data import cifar

    good = cifar_batch()
    mirror, cache = tmp_path / "mirror", tmp_path / "cache"
    for folder, content in ((mirror, good), (cache, good[: len(good) // 2])):
        (folder / cifar.FOLDER).mkdir(parents=True)
        (folder / cifar.FOLDER / "test_batch").write_bytes(content)
    monkeypatch.setenv("XFL_DATA_DIR", str(cache))
    monkeypatch.setenv("XFL_DATA_MIRROR", str(mirror))
    monkeypatch.setitem(cifar.MIRROR_SHA256, "test_batch", hashlib.sha256(good).hexdigest())
    assert cifar.batch_path("test_batch") == mirror / cifar.FOLDER / "test_batch"
    assert not (cache / cifar.FOLDER / "test_batch").exists()
    assert cifar.read_batch(cifar.batch_path("test_batch"))[1].tolist() == [0, 1, 2, 3]


def test_a_bad_token_inside_a_training_step_is_named_too():
    """xfl.train's step skips the checks (they would read back); the embedding's own IndexError
    is turned into the same message, at no cost to steps without one."""
    from xfl.attention import trusted_inputs

    with trusted_inputs(), pytest.raises(ValueError, match=r"token ids must lie in \[0, 10\].*got 12"):
        gpt()(tokens([3, 12]))


# ------------------------------------------------------- empty inputs, sizes, paths (issue 52)
@pytest.mark.parametrize("src, tgt, name, shape", [
    (torch.zeros(2, 0, dtype=torch.long), tokens([1], [1]), "src", r"\(2, 0\)"),
    (torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, 1, dtype=torch.long), "src", r"\(0, 3\)"),
    (tokens([3, 4]), torch.zeros(1, 0, dtype=torch.long), "tgt_in", r"\(1, 0\)")],
    ids=["length-0 source", "batch of 0 rows", "length-0 target"])
def test_seq2seq_empty_input(src, tgt, name, shape):
    with pytest.raises(ValueError, match=rf"{name} must be \(B, L\) token ids with B >= 1 and L >= 1, "
                                         rf"got shape {shape}"):
        seq2seq()(src, tgt)


def test_gpt_empty_input():
    with pytest.raises(ValueError, match=r"tokens must be \(B, L\) .* got shape \(0, 4\)"):
        gpt()(torch.zeros(0, 4, dtype=torch.long))


@pytest.mark.parametrize("x, shape", [(torch.zeros(1, 0, 8), r"\(1, 0, 8\)"), (torch.zeros(0, 3, 8), r"\(0, 3, 8\)")],
                         ids=["length 0", "batch of 0"])
def test_multi_head_attention_empty_input(x, shape):
    with pytest.raises(ValueError, match=rf"query must be \(B, L, 8\) with B >= 1 and L >= 1, got {shape}"):
        MultiHeadAttention(8, 2)(x)


@pytest.mark.parametrize("field, config", [
    ("src_vocab", lambda: Seq2SeqConfig(src_vocab=0, tgt_vocab=10, d_model=16, num_heads=2)),
    ("tgt_vocab", lambda: Seq2SeqConfig(src_vocab=10, tgt_vocab=-3, d_model=16, num_heads=2)),
    ("max_len", lambda: GPTConfig(vocab_size=10, d_model=16, num_heads=2, num_layers=1, max_len=0)),
    ("vocab_size", lambda: GPTConfig(vocab_size=0, d_model=16, num_heads=2)),
    ("d_model", lambda: GPTConfig(vocab_size=10, d_model=0, num_heads=2))])
def test_config_sizes_below_one(field, config):
    """Refused when the config is made, before any model is built; the message names the field."""
    with pytest.raises(ValueError, match=rf"Config\.{field} must be an int >= 1, got -?\d"):
        config()


def test_greedy_decode_longer_than_the_model_positions():
    """Checked before decoding (it used to fail at step 17 with the embedding's message)."""
    with pytest.raises(ValueError, match=r"max_len=20 tokens to decode exceeds the model's max_len=16 positions; "
                                         r"expected max_len <= 16"):
        greedy_decode(seq2seq(), tokens([3, 4]), max_len=20, sos=SOS, eos=EOS)


def test_beam_search_empty_batch():
    with pytest.raises(ValueError, match=r"src must be \(B, S\) token ids with B >= 1 and S >= 1, got shape \(0, 2\)"):
        beam_search(seq2seq(), torch.zeros(0, 2, dtype=torch.long), max_len=4, sos=SOS, eos=EOS)


def test_a_folder_is_not_a_checkpoint(tmp_path):
    from xfl.checkpoint import read_checkpoint
    with pytest.raises(ValueError, match=rf"{tmp_path} is a folder; expected a checkpoint file"):
        read_checkpoint(tmp_path)


@pytest.mark.parametrize("text, expected", [("İstanbul", ["istanbul"]), ("a\x00b\x07c", ["abc"]),
                                            ("a\ud800b", ["ab"]), ("x\ty\nz", ["x", "y", "z"])],
                         ids=["dotted capital I", "NUL and BEL", "lone surrogate", "whitespace controls"])
def test_tokenize_normalises_before_lowering_and_drops_controls(text, expected):
    from xfl.data.text import tokenize
    assert tokenize(text) == expected
    assert all("\u0307" not in t and t.encode("utf-8") for t in tokenize(text))


# ------------------------------------- issue 63: the report's 20 unclear cases (attacks.md, 4b)
# Metadata checks only (dtype, device, rank, shape, a size before allocating): free in a training
# step. The inputs on another device are made with torch.empty on "meta" (randn there takes 18 s).
def test_multi_head_attention_float64_input():
    with pytest.raises(ValueError, match=r"query must have the weights' dtype torch.float32, got torch.float64 "
                                         r"\(convert with query.to\(torch.float32\)"):
        MultiHeadAttention(16, 2)(torch.randn(2, 5, 16).double())


def test_multi_head_attention_integer_input():
    with pytest.raises(ValueError, match=r"query must be floating point \(the weights are torch.float32\), "
                                         r"got torch.int64"):
        MultiHeadAttention(16, 2)(torch.ones(2, 5, 16, dtype=torch.long))


def test_multi_head_attention_takes_any_float_under_autocast():
    """Under autocast a block hands bf16 activations to fp32 weights: not refused."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = MultiHeadAttention(16, 2)(torch.randn(2, 5, 16).bfloat16())
    assert out.shape == (2, 5, 16) and out.dtype == torch.bfloat16


def test_multi_head_attention_input_on_another_device():
    with pytest.raises(ValueError, match=r"key is on meta, the weights on cpu; expected one device "
                                         r"\(move it with key.to\('cpu'\)\)"):
        MultiHeadAttention(16, 2)(torch.randn(2, 5, 16), torch.empty(2, 5, 16, device="meta"))


def test_gpt_tokens_on_another_device():
    with pytest.raises(ValueError, match=r"tokens are on meta, the model on cpu; expected one device"):
        gpt()(torch.empty(2, 3, dtype=torch.long, device="meta"))


def test_vit_images_on_another_device():
    with pytest.raises(ValueError, match=r"images are on meta, the model on cpu; expected one device"):
        vit()(torch.empty(2, 3, 8, 8, device="meta"))


def test_scaled_dot_product_attention_batches_that_do_not_broadcast():
    with pytest.raises(ValueError, match=r"q, k, v need batch dimensions .* that match or broadcast; shapes "
                                         r"\(2, 4, 8\), \(3, 4, 8\), \(3, 4, 8\) do not broadcast"):
        scaled_dot_product_attention(torch.randn(2, 4, 8), torch.randn(3, 4, 8), torch.randn(3, 4, 8))


def test_scaled_dot_product_attention_broadcast_batches_still_work():
    q, k, v = torch.randn(2, 4, 8), torch.randn(1, 4, 8), torch.randn(1, 4, 8)
    out = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k.expand(2, 4, 8), v.expand(2, 4, 8)))


def test_scaled_dot_product_attention_one_dimensional_inputs():
    with pytest.raises(ValueError, match=r"q, k, v need the same rank >= 2, \(\.\.\., L, d\), got shapes "
                                         r"\(8,\), \(8,\), \(8,\)"):
        scaled_dot_product_attention(torch.randn(8), torch.randn(8), torch.randn(8))


def test_scaled_dot_product_attention_integer_inputs():
    q = torch.ones(2, 4, 8, dtype=torch.long)
    with pytest.raises(ValueError, match=r"q, k, v must be floating point, got torch.int64, torch.int64, torch.int64"):
        scaled_dot_product_attention(q, q, q)


def test_causal_mask_too_large_names_the_length():
    """10**7 positions: a 100 TB mask, refused before torch.ones is asked for it."""
    from xfl.attention import causal_mask

    with pytest.raises(ValueError, match=r"causal_mask\(length=10000000\) builds a \(10000000, 10000000\) bool "
                                         r"mask of [\d,.]+ GiB .* more than the [\d,.]+ GiB of memory on cpu; "
                                         r"expected a length whose square fits"):
        causal_mask(10 ** 7)


def test_sinusoidal_encoding_too_large_names_the_arguments():
    from xfl.position import sinusoidal_encoding

    with pytest.raises(ValueError, match=r"sinusoidal_encoding\(length=1000000000000, d_model=512\) builds "
                                         r"float32 tables of [\d,.]+ GiB .* memory on cpu; expected a length"):
        sinusoidal_encoding(10 ** 12, 512)


def test_gpt_too_large_names_the_config():
    with pytest.raises(ValueError, match=r"GPTConfig\(d_model=1048576, d_hidden=None, max_len=128, num_layers=4, "
                                         r"vocab_size=11\) gives at least [\d,]+ float32 weights of [\d,.]+ GiB"
                                         r".*; expected a smaller d_model"):
        GPT(GPTConfig(vocab_size=VOCAB, d_model=2 ** 20, num_heads=8))


def test_causal_mask_of_a_bool_length():
    from xfl.attention import causal_mask

    with pytest.raises(ValueError, match="length must be a positive int, got True"):
        causal_mask(True)


def test_vit_channels_last_images():
    with pytest.raises(ValueError, match=r"images must have 3 channels \(in_channels\), got 8 in shape "
                                         r"\(2, 8, 8, 3\); its last dimension holds the channels, \(B, H, W, C\): "
                                         r"expected \(B, C, H, W\), use images.permute\(0, 3, 1, 2\)"):
        vit()(torch.rand(2, 8, 8, 3))


@pytest.mark.parametrize("field", ["num_classes", "num_layers", "d_model", "in_channels", "d_hidden"])
def test_vit_config_sizes_below_one(field):
    """num_classes=0 used to build a model of (B, 0) logits, silently."""
    with pytest.raises(ValueError, match=rf"ViTConfig\.{field} must be an int >= 1, got 0"):
        ViTConfig(**{field: 0})


@pytest.mark.parametrize("rows, shown", [([["a", "b"]], r"'a' \(str\)"), ([[3], [2 ** 70]], r"1180591620717411303424 \(int\)"),
                                         ([[1.5, 2.0]], r"1.5 \(float\)")],
                         ids=["str", "beyond int64", "float"])
def test_pad_batch_ids_that_are_not_int64(rows, shown):
    from xfl.data.text import pad_batch

    with pytest.raises(ValueError, match=rf"pad_batch: sequence {len(rows) - 1} holds {shown}; expected int token ids"):
        pad_batch(rows)


def test_checkpoint_of_a_config_less_attention_into_other_heads(tmp_path):
    """A bare MultiHeadAttention has no config; 2 heads of 8 and 4 of 4 have the same weight shapes.
    Its `settings` (heads, width, kv heads, RoPE base) are recorded and compared instead."""
    from types import SimpleNamespace

    from xfl.checkpoint import load_checkpoint, save_checkpoint

    def save(m, path):  # no optimizer: building the first one imports torch._dynamo (16 s here)
        save_checkpoint(path, m, SimpleNamespace(state_dict=dict),
                        torch.amp.GradScaler("cpu", enabled=False), {"step": 3}, {})

    save(MultiHeadAttention(16, 2), tmp_path / "mha.pt")
    with pytest.raises(ValueError, match=r"mha.pt holds a model with another configuration \(num_heads: "
                                         r"checkpoint 2, model 4, num_kv_heads: checkpoint 2, model 4\)"):
        load_checkpoint(tmp_path / "mha.pt", MultiHeadAttention(16, 4))
    assert load_checkpoint(tmp_path / "mha.pt", MultiHeadAttention(16, 2, dropout=0.1)) == {"step": 3}
    save(torch.nn.Sequential(torch.nn.Linear(16, 16), MultiHeadAttention(16, 2)), tmp_path / "seq.pt")
    with pytest.raises(ValueError, match=r"\(1\.num_heads: checkpoint 2, model 8"):
        load_checkpoint(tmp_path / "seq.pt", torch.nn.Sequential(torch.nn.Linear(16, 16), MultiHeadAttention(16, 8)))


def test_channel_stats_of_an_empty_batch():
    from xfl.data.cifar import channel_stats

    with pytest.raises(ValueError, match=r"images must hold at least one pixel per channel, got an empty batch "
                                         r"\(0, 3, 32, 32\)"):
        channel_stats(torch.zeros(0, 3, 32, 32, dtype=torch.uint8))


def test_normalize_float_pixels_in_0_to_255():
    from xfl.data.cifar import normalize

    images = torch.full((2, 3, 4, 4), 17.0)
    images[1, 2, 3, 0] = 254.0
    with pytest.raises(ValueError, match=r"float images must hold pixels in \[0, 1\], got a maximum of 254 "
                                         r"\(pixels in 0..255\?\); expected floats in \[0, 1\]"):
        normalize(images)


def test_normalize_takes_unit_floats_with_a_resampling_overshoot():
    """The rule cannot refuse real [0, 1] images: up to 1 + FLOAT_SLACK passes (bicubic overshoot)."""
    from xfl.data.cifar import FLOAT_SLACK, normalize

    uint8 = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    torch.testing.assert_close(normalize(uint8.float() / 255), normalize(uint8))
    assert normalize(torch.full((1, 3, 2, 2), 1 + FLOAT_SLACK)).isfinite().all()


def test_count_parameters_of_a_tensor():
    from xfl.model import count_parameters

    with pytest.raises(ValueError, match="count_parameters needs a torch.nn.Module .*, got Tensor"):
        count_parameters(torch.zeros(3))


def test_broadcast_shape_agrees_with_torch():
    """The mask and batch checks use xfl's plain-Python broadcast (torch's imports sympy on its first
    call: 17 s on a busy 2-core machine, in the first masked attention of a process)."""
    import itertools

    from xfl.attention import broadcast_shape

    sizes = [(), (0,), (1,), (3,), (1, 3), (2, 1), (2, 3), (0, 1), (4, 1, 3)]
    for shapes in itertools.chain(itertools.product(sizes, repeat=2), itertools.product(sizes[:5], repeat=3)):
        try:
            expected = tuple(torch.broadcast_shapes(*shapes))
        except RuntimeError:
            expected = None
        assert broadcast_shape(*shapes) == expected, shapes
