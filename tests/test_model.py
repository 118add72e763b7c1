"""xfl.model: masks, causality, padding invariance, tying; the decoder-only GPT."""

import pytest
import torch

from xfl.model import GPT, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer, count_parameters

PAD = 0



def tiny(norm_first=True, tie=True, seed=0):
    torch.manual_seed(seed)
    cfg = Seq2SeqConfig(src_vocab=13, tgt_vocab=11, d_model=16, num_heads=2, num_encoder_layers=2,
                        num_decoder_layers=2, d_hidden=32, dropout=0.0, norm_first=norm_first,
                        max_len=20, tie_output=tie)
    return Seq2SeqTransformer(cfg).double().eval()


def tokens(B, L, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (B, L), generator=g)


@pytest.mark.parametrize("norm_first", [False, True])
def test_shapes_and_every_parameter_learns(norm_first):
    model = tiny(norm_first).train()
    src, tgt = tokens(3, 7, 13, 1), tokens(3, 5, 11, 2)
    logits = model(src, tgt)
    assert logits.shape == (3, 5, 11)
    logits.sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []  # embeddings included (DLStudio's never reach the optimizer)


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_changes_nothing(norm_first):
    model = tiny(norm_first)
    src, tgt = tokens(2, 6, 13, 3), tokens(2, 4, 11, 4)
    ref = model(src, tgt)
    src_padded = torch.cat([src, torch.full((2, 3), PAD)], dim=1)
    tgt_padded = torch.cat([tgt, torch.full((2, 2), PAD)], dim=1)
    out = model(src_padded, tgt_padded)[:, :4]
    torch.testing.assert_close(out, ref)


def test_padding_mask_is_per_row():
    """A short sentence padded inside a batch gives the logits it gives alone."""
    model = tiny()
    long_src, short_src = tokens(1, 8, 13, 5), tokens(1, 5, 13, 6)
    tgt = tokens(2, 4, 11, 7)
    batch = torch.cat([long_src, torch.cat([short_src, torch.zeros(1, 3, dtype=torch.long)], 1)])
    out = model(batch, tgt)
    torch.testing.assert_close(out[1:], model(short_src, tgt[1:]))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_is_causal(norm_first):
    model = tiny(norm_first)
    src, tgt = tokens(2, 6, 13, 8), tokens(2, 6, 11, 9)
    changed = tgt.clone()
    changed[:, 3] = (changed[:, 3] % 10) + 1
    a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_encode_decode_equals_forward():
    model = tiny()
    src, tgt = tokens(2, 6, 13, 10), tokens(2, 5, 11, 11)
    split = model.decode(tgt, model.encode(src), model.source_mask(src))
    torch.testing.assert_close(split, model(src, tgt))


def test_tied_output_shares_the_embedding():
    tied, untied = tiny(tie=True), tiny(tie=False)
    assert tied.output.weight is tied.tgt_embed.table.weight
    assert count_parameters(untied) - count_parameters(tied) == 11 * 16


def test_too_long_input_is_refused():
    with pytest.raises(ValueError, match="max_len"):
        tiny()(tokens(1, 21, 13, 0), tokens(1, 3, 11, 0))


def test_gpt_is_causal_and_ignores_trailing_padding():
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=17, d_model=16, num_heads=2, num_layers=2, dropout=0.0,
                        max_len=12)).double().eval()
    x = tokens(2, 8, 17, 12)
    out = gpt(x)
    assert out.shape == (2, 8, 17)
    changed = x.clone()
    changed[:, 5] = (changed[:, 5] % 16) + 1
    torch.testing.assert_close(gpt(changed)[:, :5], out[:, :5])
    padded = torch.cat([x, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(gpt(padded)[:, :8], out)


def gpt_like(**kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=17, d_model=16, num_heads=2, num_layers=2, d_hidden=32, dropout=0.0, max_len=12)
    return GPT(GPTConfig(**{**cfg, **kw})).eval()


def test_gpt_gelu_block_equals_torch_encoder_layer_under_a_causal_mask():
    model = gpt_like(activation="gelu")
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu", batch_first=True,
                                             norm_first=True).eval()
    block = model.blocks.layers[0]
    assert isinstance(block.ffn[1], torch.nn.GELU)
    block.load_state_dict(type(block).from_torch(layer).state_dict())
    x = torch.randn(3, 7, 16)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(7)
    torch.testing.assert_close(block(x, mask=~torch.ones(7, 7, dtype=torch.bool).triu(1)),
                               layer(x, src_mask=causal, is_causal=True))


def test_learned_positions_are_a_trained_table_added_to_the_scaled_tokens():
    model = gpt_like(positions="learned")
    table = model.embed.positions
    assert isinstance(table, torch.nn.Parameter) and table.shape == (12, 16)
    assert any(p is table for p in model.parameters())
    t = tokens(2, 9, 17, 3)
    expected = model.embed.table(t) * 16 ** 0.5 + table[:9]
    torch.testing.assert_close(model.embed(t), expected)
    lm = model.train()(t)
    lm.logsumexp(-1).sum().backward()
    assert table.grad[:9].abs().sum() > 0 and table.grad[9:].abs().sum() == 0


def test_sinusoidal_positions_stay_a_buffer():
    model = gpt_like()
    assert "embed.positions" not in dict(model.named_parameters())


def test_learned_positions_get_no_weight_decay():
    from xfl.train import parameter_groups

    model = gpt_like(positions="learned")
    no_decay = parameter_groups(model, 0.1)[1]["params"]
    assert any(p is model.embed.positions for p in no_decay)


def test_non_causal_gpt_lets_early_positions_see_later_tokens():
    causal, bidirectional = gpt_like(), gpt_like(causal=False)
    t = tokens(2, 8, 17, 4)
    changed = t.clone()
    changed[:, 6] = t[:, 6] % 16 + 1
    with torch.no_grad():
        torch.testing.assert_close(causal(t)[:, :6], causal(changed)[:, :6])
        assert not torch.allclose(bidirectional(t)[:, :6], bidirectional(changed)[:, :6])


def test_non_causal_gpt_ignores_padding_keys():
    model = gpt_like(causal=False)
    t = tokens(1, 6, 17, 5)
    padded = torch.cat([t, torch.full((1, 3), PAD)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(padded)[:, :6], model(t))


@pytest.mark.parametrize("field, bad", [("activation", "swish"), ("positions", "rotary")])
def test_gpt_config_names_a_bad_choice(field, bad):
    with pytest.raises(ValueError, match=bad):
        GPTConfig(vocab_size=5, **{field: bad})


def test_shared_embeddings_are_one_table_for_source_target_and_output():
    cfg = Seq2SeqConfig(src_vocab=20, tgt_vocab=20, d_model=16, num_heads=2, num_encoder_layers=1,
                        num_decoder_layers=1, share_embeddings=True)
    model = Seq2SeqTransformer(cfg)
    separate = Seq2SeqTransformer(Seq2SeqConfig(**{**vars(cfg), "share_embeddings": False}))
    assert model.src_embed.table.weight is model.tgt_embed.table.weight is model.output.weight
    assert count_parameters(separate) - count_parameters(model) == 20 * 16
    src = torch.randint(3, 10, (2, 5))
    model.encode(src).sum().backward()  # a source-only loss trains the target's embedding rows too
    assert model.tgt_embed.table.weight.grad[3:10].abs().sum() > 0


def test_shared_embeddings_need_one_vocabulary():
    with pytest.raises(ValueError, match="src_vocab=20 and tgt_vocab=30"):
        Seq2SeqConfig(src_vocab=20, tgt_vocab=30, share_embeddings=True)
