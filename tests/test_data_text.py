"""The text pipeline: normalization, tokens, vocabularies, length filter, split, padding."""

import pytest
import torch

from xfl.attention import padding_mask
from xfl.data.text import (EOS, PAD, SOS, UNK, Vocab, detokenize, filter_by_length,
                           group_references, normalize_text, pad_batch, split_by_english, tokenize)

PAIRS = [
    ("Go.", "Ve."), ("Go.", "Vete."), ("Go.", "Vaya."),
    ("Who are you?", "¿Quién eres?"), ("Who are you?", "¿Quiénes sois?"),
    ("I don't know.", "No lo sé."), ("Wow!", "¡Órale!"), ("It's 3 o'clock.", "Son las tres."),
    ("He said, \"Hi.\"", "Dijo: «Hola»."), ("Tom is twenty-one.", "Tom tiene veintiún años."),
] + [(f"Sentence number {i}.", f"Frase número {i}.") for i in range(40)]


def test_normalize_keeps_accents_and_inverted_marks():
    assert normalize_text("  ¿QUIÉN   eres? ") == "¿quién eres?"
    assert normalize_text("¡Órale, NIÑO!") == "¡órale, niño!"
    decomposed = "Que\u0301"  # e + combining acute -> one precomposed é (NFC)
    assert normalize_text(decomposed) == "qué" and len(normalize_text(decomposed)) == 3
    assert normalize_text("a\u200bb\u00a0c\u200dd") == "a b cd"  # zero-width space, nbsp, joiner


def test_tokenize_splits_punctuation_keeps_contractions():
    assert tokenize("¿Qué hora es?") == ["¿", "qué", "hora", "es", "?"]
    assert tokenize("I don't know.") == ["i", "don't", "know", "."]
    assert tokenize("Tom is twenty-one.") == ["tom", "is", "twenty", "-", "one", "."]
    assert tokenize('He said, "Hi."') == ["he", "said", ",", '"', "hi", ".", '"']


@pytest.mark.parametrize("text", ["¿Quién eres?", "I don't know.", 'He said, "Hi."',
                                  "Tom is twenty-one.", "¡Órale!", "Dijo: «Hola»."])
def test_detokenize_round_trips(text):
    tokens = tokenize(text)
    assert detokenize(tokens) == normalize_text(text)
    assert tokenize(detokenize(tokens)) == tokens


@pytest.mark.parametrize("text", ["", "   ", "\t\n", "\u200b"])
def test_empty_and_whitespace_sentences(text):
    assert tokenize(text) == []
    with pytest.raises(ValueError, match="empty"):
        Vocab.build([["a"]], min_freq=1).encode(tokenize(text))
    assert filter_by_length([(text, "hola"), ("hi", text)], max_len=5) == []


def test_vocab_specials_min_freq_and_order_independence():
    sentences = [tokenize(en) for en, _ in PAIRS]
    vocab = Vocab.build(sentences, min_freq=2)
    assert vocab.itos[:4] == ["<pad>", "<unk>", "<sos>", "<eos>"]
    assert (PAD, UNK, SOS, EOS) == (0, 1, 2, 3)
    assert "go" in vocab and "sentence" in vocab and "wow" not in vocab  # wow is seen once
    assert Vocab.build(sentences[::-1], min_freq=2).itos == vocab.itos
    assert len(Vocab.build(sentences, min_freq=1)) > len(vocab)
    with pytest.raises(ValueError, match="min_freq"):
        Vocab.build(sentences, min_freq=0)


def test_encode_decode_round_trip_and_unk():
    vocab = Vocab.build([tokenize(es) for _, es in PAIRS], min_freq=1)
    for _, es in PAIRS:
        ids = vocab.encode_text(es)
        assert ids[0] == SOS and ids[-1] == EOS and UNK not in ids
        assert vocab.decode(ids) == tokenize(es)
        assert vocab.decode_text(ids) == normalize_text(es)
    ids = vocab.encode(["frase", "desconocidísima", "."])
    assert ids == [SOS, vocab.stoi["frase"], UNK, vocab.stoi["."], EOS]
    assert vocab.decode(ids) == ["frase", "<unk>", "."]
    assert vocab.decode(ids + [PAD, PAD]) == vocab.decode(ids)  # stops at EOS
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.decode([len(vocab)])


def test_length_filter_drops_over_long_sentences():
    long_en = " ".join(["word"] * 30) + "."
    pairs = [("Go.", "Ve."), (long_en, "Corta."), ("Short.", long_en)]
    assert filter_by_length(pairs, max_len=10) == [("Go.", "Ve.")]
    assert len(filter_by_length(pairs, max_len=31)) == 3  # 30 words + "."
    with pytest.raises(ValueError, match="max_len"):
        filter_by_length(pairs, max_len=0)


def test_split_is_disjoint_by_english_and_keeps_all_references():
    split = split_by_english(PAIRS, test_fraction=0.2, seed=3)
    parts = {name: {normalize_text(en) for en, _ in getattr(split, name)} for name in ("train", "test")}
    assert not parts["train"] & parts["test"]
    assert sorted(split.train + split.test) == sorted(PAIRS)
    everything = dict((normalize_text(en), sorted(refs)) for en, refs in group_references(PAIRS))
    for en, refs in group_references(split.test):
        assert sorted(refs) == everything[normalize_text(en)]  # every translation kept
    n_english = len(everything)
    assert len(parts["test"]) == round(0.2 * n_english)


def test_split_is_seeded_and_order_independent():
    a = split_by_english(PAIRS, test_fraction=0.3, seed=1)
    b = split_by_english(PAIRS[::-1], test_fraction=0.3, seed=1)
    assert sorted(a.test) == sorted(b.test)
    c = split_by_english(PAIRS, test_fraction=0.3, seed=2)
    assert sorted(a.test) != sorted(c.test)
    with pytest.raises(ValueError, match="test_fraction must be in \\[0, 1\\), got 1.5"):
        split_by_english(PAIRS, test_fraction=1.5)


def test_group_references_collects_every_translation():
    groups = dict(group_references(PAIRS))
    assert groups["Go."] == ["Ve.", "Vete.", "Vaya."]
    assert groups["Who are you?"] == ["¿Quién eres?", "¿Quiénes sois?"]


def test_pad_batch_lengths_and_masks():
    ids, lengths = pad_batch([[2, 5, 3], [2, 3], [2, 7, 8, 9, 3]])
    assert ids.shape == (3, 5) and ids.dtype == torch.long
    assert lengths.tolist() == [3, 2, 5]
    assert ids[1].tolist() == [2, 3, PAD, PAD, PAD]
    mask = padding_mask(lengths, ids.shape[1])
    assert torch.equal(mask, ids != PAD)
    with pytest.raises(ValueError):
        pad_batch([[2, 3], []])
