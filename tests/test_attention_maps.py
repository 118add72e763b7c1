"""xfl.attention_maps: recorded maps equal the need_weights path, have the right shapes and
masks, and leave the model's outputs (and hooks) as they were."""

import pytest
import torch
from torch import nn

from xfl.attention_maps import record_attention, seq2seq_attention_maps
from xfl.attention import causal_padding_mask, key_mask
from xfl.model import GPT, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer

PAD = 0



def make_model(norm_first, seed=0):
    torch.manual_seed(seed)
    cfg = Seq2SeqConfig(src_vocab=11, tgt_vocab=13, d_model=16, num_heads=2, num_encoder_layers=2,
                        num_decoder_layers=3, dropout=0.1, norm_first=norm_first, max_len=12)
    return Seq2SeqTransformer(cfg).double()


def batch():
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 11, (3, 6), generator=g)
    tgt = torch.randint(4, 13, (3, 5), generator=g)
    src[1, 4:] = PAD  # a short source sentence
    tgt[2, 3:] = PAD  # a short target prefix
    return src, tgt


@pytest.mark.parametrize("norm_first", [False, True])
def test_shapes_and_masks(norm_first):
    model = make_model(norm_first)
    src, tgt = batch()
    maps = seq2seq_attention_maps(model, src, tgt)
    assert [len(maps[k]) for k in ("encoder", "decoder", "cross")] == [2, 3, 3]
    assert all(w.shape == (3, 2, 6, 6) for w in maps["encoder"])
    assert all(w.shape == (3, 2, 5, 5) for w in maps["decoder"])
    assert all(w.shape == (3, 2, 5, 6) for w in maps["cross"])
    for w in maps["encoder"] + maps["cross"]:
        assert torch.all(w[1, :, :, 4:] == 0)  # nobody attends to source padding
    for w in maps["decoder"]:
        assert torch.all(w.triu(diagonal=1) == 0)  # causal: no look-ahead
        assert torch.all(w[2, :, :, 3:] == 0)  # nor to target padding
    real_rows = [w[0] for w in maps["encoder"] + maps["decoder"] + maps["cross"]]
    for w in real_rows:
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


@pytest.mark.parametrize("norm_first", [False, True])
def test_equal_to_need_weights_by_hand(norm_first):
    """Layer 0 of the encoder and of the decoder, recomputed step by step with need_weights."""
    model = make_model(norm_first).eval()
    src, tgt = batch()
    maps = seq2seq_attention_maps(model, src, tgt)
    with torch.no_grad():
        enc0 = model.encoder.layers[0]
        x = model.src_embed(src)
        h = enc0.residuals[0].norm(x) if norm_first else x
        _, want = enc0.self_attn(h, mask=key_mask(src != PAD), need_weights=True)
        torch.testing.assert_close(maps["encoder"][0], want)

        dec0, memory = model.decoder.layers[0], model.encode(src)
        y = model.tgt_embed(tgt)
        h = dec0.residuals[0].norm(y) if norm_first else y
        out, want = dec0.self_attn(h, mask=causal_padding_mask(tgt, PAD), need_weights=True)
        torch.testing.assert_close(maps["decoder"][0], want)
        y = dec0.residuals[0](y, lambda z: dec0.self_attn(z, mask=causal_padding_mask(tgt, PAD)))
        h = dec0.residuals[1].norm(y) if norm_first else y
        _, want = dec0.cross_attn(h, memory, memory, mask=key_mask(src != PAD), need_weights=True)
        torch.testing.assert_close(maps["cross"][0], want)


def test_outputs_unchanged_hooks_removed_mode_restored():
    model = make_model(True)
    src, tgt = batch()
    model.eval()
    with torch.no_grad():
        before = model(src, tgt)
    model.train()
    seq2seq_attention_maps(model, src, tgt)
    assert model.training
    assert all(not m._forward_hooks for m in model.modules())
    model.eval()
    with torch.no_grad(), record_attention(model) as maps:
        during = model(src, tgt)
    torch.testing.assert_close(during, before, rtol=0, atol=0)
    assert len(maps) == 2 + 3 * 2


def test_record_attention_on_a_gpt_is_causal():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=10, d_model=16, num_heads=4, num_layers=2, max_len=8)).eval()
    tokens = torch.randint(1, 10, (2, 7))
    with torch.no_grad(), record_attention(model) as maps:
        model(tokens)
    assert sorted(maps) == ["blocks.layers.0.self_attn", "blocks.layers.1.self_attn"]
    for w in maps.values():
        assert w.shape == (2, 4, 7, 7) and torch.all(w.triu(diagonal=1) == 0)


def test_a_model_without_attention_is_an_error():
    with pytest.raises(ValueError, match="no xfl MultiHeadAttention"):
        with record_attention(nn.Linear(3, 3)):
            pass
