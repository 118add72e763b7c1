"""xfl.bpe: conventions, merges worked out by hand, agreement with subword-nmt, exact decoding
on every Tatoeba sentence, files."""

from __future__ import annotations

import io
import json
import unicodedata

import pytest
from subword_nmt.learn_bpe import learn_bpe

from xfl.bpe import (BPE, END, SPACE, merge_symbols, pairs_of, pretokenize, train_bpe,
                     word_symbols)
from xfl.data.tatoeba import load_pairs
from xfl.data.text import normalize_text, tokenize


@pytest.fixture(scope="module")
def tatoeba() -> list[str]:
    """Every sentence of Tatoeba, English and Spanish, as in the file."""
    return [text for pair in load_pairs() for text in pair]


def subword_nmt_merges(sentences, num_merges: int) -> list[tuple[str, str]]:
    """subword-nmt's ``learn_bpe`` on the same words: one line per sentence, words by spaces."""
    text = "".join(" ".join(pretokenize(s)) + "\n" for s in sentences)
    out = io.StringIO()
    learn_bpe(io.StringIO(text), out, num_merges)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("#version"), lines[:1]
    return [tuple(line.split(" ")) for line in lines[1:]]


# ---------------------------------------------------------------- conventions
TEXTS = ["¿Qué hora es?", "I don't know, Tom.", "  two  spaces, a tab\tand\u00a0nbsp ",
         "«Él dijo: \"¡3,5 €!\"»", "", " ", "x"]


@pytest.mark.parametrize("text", TEXTS)
def test_pretokenize_keeps_every_character(text):
    words = pretokenize(text)
    assert "".join(words).replace(SPACE, " ") == text
    assert all(words) and all(" " not in w for w in words)


@pytest.mark.parametrize("text", TEXTS)
def test_pretokenize_splits_like_tokenize_on_normalized_text(text):
    words = pretokenize(normalize_text(text))
    assert [w.removeprefix(SPACE) for w in words if w != SPACE] == tokenize(text)


def test_space_marker_and_end_of_word():
    assert pretokenize("¿Qué hora es?") == ["¿", "Qué", f"{SPACE}hora", f"{SPACE}es", "?"]
    assert word_symbols(f"{SPACE}es") == (SPACE, "e", "s" + END)
    assert word_symbols("a") == ("a" + END,)


def test_pairs_overlap_and_merges_do_not():
    assert pairs_of(("a", "a", "a")) == {("a", "a"): 2}
    assert merge_symbols(["a", "a", "a"], ("a", "a")) == ["aa", "a"]
    assert merge_symbols(["a", "a", "a", "a"], ("a", "a")) == ["aa", "aa"]
    assert merge_symbols(["b", "a", "b"], ("a", "c")) == ["b", "a", "b"]


def test_merges_worked_out_by_hand():
    """Sennrich et al.'s toy corpus. Pair counts at the start: (s, t</w>) 9 and (e, s) 9 tie,
    and the larger pair wins; then (e, st</w>) 9, (l, o) 7; then (n, e), (e, w) and
    (w, est</w>) tie at 6: (w, est</w>) is the largest; it removes (e, w), leaving (n, e) and
    (e, west</w>) tied at 6: n > e; then (ne, west</w>) 6 and (lo, w</w>) 5."""
    corpus = ["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3
    expected = [("s", "t</w>"), ("e", "st</w>"), ("l", "o"), ("w", "est</w>"), ("n", "e"),
                ("ne", "west</w>"), ("lo", "w</w>")]
    bpe = train_bpe(corpus, num_merges=len(expected))
    assert bpe.merges == expected
    assert bpe.encode("newest") == ["newest</w>"]
    assert bpe.encode("lowest") == ["lo", "west</w>"]  # a word never seen in training
    assert bpe.encode("lows") == ["lo", "w", "s</w>"]


def test_training_stops_when_no_pair_repeats():
    assert train_bpe(["ab cd"], num_merges=10).merges == []
    assert train_bpe(["ab ab"], num_merges=10).merges == [("a", "b</w>")]  # 'ab' and '▁ab'
    assert train_bpe(["ab ab"], num_merges=10, min_frequency=1).merges == [
        ("a", "b</w>"), (SPACE, "ab</w>")]


# ---------------------------------------------------------- against subword-nmt
SMALL_CORPORA = {
    "repeated letters": ["aaaa aaa aa a", "aaaaaa baaa", "aa aa aab"] * 3,
    "ties everywhere": ["ab ba cd dc", "ba ab dc cd", "abcd dcba"],
    "sennrich toy": ["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3,
}


@pytest.mark.parametrize("name", SMALL_CORPORA)
def test_small_corpora_match_subword_nmt(name):
    corpus = SMALL_CORPORA[name]
    assert train_bpe(corpus, 50).merges == subword_nmt_merges(corpus, 50)


def test_tatoeba_merges_match_subword_nmt(tatoeba):
    """All of Tatoeba (both languages, case kept): the first 1,500 merges agree."""
    ours = train_bpe(tatoeba, 1500).merges
    assert len(ours) == 1500
    assert ours == subword_nmt_merges(tatoeba, 1500)


# ------------------------------------------------------------ encode, decode
@pytest.fixture(scope="module")
def small_bpe(tatoeba) -> BPE:
    """Trained on 2,000 sentences only, so most Tatoeba words (and some characters) are new."""
    return train_bpe(tatoeba[:2000], 500)


def test_decode_inverts_encode_on_every_tatoeba_sentence(small_bpe, tatoeba):
    """Raw and normalized (as the translation chapters use them); decomposed accents too."""
    for text in ("¿Qué tal?", unicodedata.normalize("NFD", "¿Qué tal, Zoë?")):
        assert small_bpe.decode(small_bpe.encode(text)) == text
    for text in tatoeba:
        for variant in (text, normalize_text(text)):
            assert small_bpe.decode(small_bpe.encode(variant)) == variant, variant


def test_tokens_are_vocabulary_or_unseen_characters(small_bpe, tatoeba):
    vocab = set(small_bpe.vocab)
    for text in tatoeba[:2000]:
        assert set(small_bpe.encode(text)) <= vocab, text
    unseen = next(t for t in tatoeba if not set(small_bpe.encode(t)) <= vocab)
    for token in set(small_bpe.encode(unseen)) - vocab:
        assert len(token.removesuffix(END)) == 1, token  # only unseen characters fall outside


def test_given_alphabet_covers_unseen_characters():
    """``alphabet=``: unseen characters join the initial symbols (also as a word's end), the
    merges stay those learned without it, and bad entries raise ValueError."""
    text = ["low lower lowest"] * 2
    plain, wide = train_bpe(text, 3), train_bpe(text, 3, alphabet="xyzl")
    assert wide.merges == plain.merges
    assert set(wide.alphabet) == set(plain.alphabet) | {c + e for c in "xyzl" for e in ("", END)}
    assert set(wide.encode("zyx")) <= set(wide.vocab)
    assert not set(plain.encode("zyx")) <= set(plain.vocab)
    with pytest.raises(ValueError, match="single characters"):
        train_bpe(text, 3, alphabet=["ab"])


def test_vocab_is_alphabet_plus_merges(small_bpe):
    vocab = small_bpe.vocab
    assert vocab[: len(small_bpe.alphabet)] == small_bpe.alphabet
    assert set(vocab) == set(small_bpe.alphabet) | {a + b for a, b in small_bpe.merges}
    assert len(vocab) == len(set(vocab)) == len(small_bpe)


def test_more_merges_give_fewer_tokens(tatoeba):
    sample = tatoeba[:3000]
    lengths = [sum(len(bpe.encode(t)) for t in sample)
               for bpe in (train_bpe(sample, n) for n in (0, 200, 1000))]
    assert lengths[0] == sum(len(t) for t in sample)  # one token per character (a space: ▁)
    assert lengths[0] > lengths[1] > lengths[2]


def test_bad_inputs_name_the_value():
    with pytest.raises(ValueError, match="num_merges must be an int >= 0, got -1"):
        train_bpe(["a"], -1)
    with pytest.raises(ValueError, match="iterable of str, got one str: 'low lower'"):
        train_bpe("low lower", 5)
    with pytest.raises(ValueError, match="U\\+2581"):
        train_bpe([f"a{SPACE}b"], 1)
    with pytest.raises(ValueError, match="got the str 'ab'"):
        BPE([]).decode("ab")
    with pytest.raises(ValueError, match="merge 1 must be two non-empty strings, got \\('a', 'b', 'c'\\)"):
        BPE([("a", "b"), ("a", "b", "c")])


# ---------------------------------------------------------------------- files
def test_save_load_round_trip(small_bpe, tmp_path):
    path = tmp_path / "bpe.json"
    small_bpe.save(path)
    loaded = BPE.load(path)
    assert loaded.merges == small_bpe.merges and loaded.alphabet == small_bpe.alphabet
    assert loaded.encode("¿Dónde está Zeke?") == small_bpe.encode("¿Dónde está Zeke?")
    assert [p.name for p in tmp_path.iterdir()] == ["bpe.json"]  # no temporary file left
    small_bpe.save(path)  # overwrites
    assert json.loads(path.read_text(encoding="utf-8"))["version"] == 1


@pytest.mark.parametrize("content, message", [
    (b"\x89PNG\r\n", "expected UTF-8 JSON with format 'xfl-bpe'"),
    (b'{"format": "xfl-bpe", "version": 1', "expected UTF-8 JSON with format 'xfl-bpe'"),
    (b"[1, 2]", "expected a JSON object with format 'xfl-bpe', got a list"),
    (b'{"format": "sentencepiece"}', "expected format='xfl-bpe', got 'sentencepiece'"),
    (b'{"format": "xfl-bpe", "version": 2}', "expected version=1, got 2"),
])
def test_foreign_or_corrupt_files_are_refused(tmp_path, content, message):
    path = tmp_path / "codes.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as err:
        BPE.load(path)
    assert str(path) in str(err.value)


def test_bad_merges_in_a_file_are_refused(small_bpe, tmp_path):
    path = tmp_path / "bpe.json"
    small_bpe.save(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["merges"][3] = ["a", "b", "c"]
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match="list of \\[left, right\\] string pairs"):
        BPE.load(path)


# ------------------------------------------------------------------ benchmark
def test_benchmark_writes_its_results(tmp_path):
    """``python -m bench.bpe`` on a few merges: the JSON it writes is the report it returns."""
    from helpers import import_bench

    out = tmp_path / "bpe.json"
    report = import_bench("bpe").main(["--merges", "20", "--repeats", "3", "--subword-nmt",
                                       "--out", str(out)])
    assert json.loads(out.read_text(encoding="utf-8")) == report
    assert report["merges"] == 20 and report["sentences"] == 2 * len(load_pairs())
    assert report["same_merges_as_subword_nmt"] is True and report["train_seconds_median"] > 0
    low, high = report["subword_nmt_over_xfl_interquartile"]
    assert low <= report["subword_nmt_over_xfl"] <= high and "xfl.bpe" in report["verdict"]
