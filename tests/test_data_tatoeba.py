"""Tatoeba English–Spanish: reading the zip, broken zips, and the real counts on the mirror.

The real-data tests need the offline mirror: CI sets XFL_DATA_MIRROR=../shared/data; locally run
``XFL_DATA_MIRROR=/path/to/shared/data pytest tests/test_data_tatoeba.py``.
"""

import os
import zipfile

import pytest

from xfl.data.tatoeba import load_pairs, read_pairs_from_zip
from xfl.data.text import (Vocab, filter_by_length, group_references, normalize_text,
                           split_by_english, tokenize)

LINES = "Go.\tVe.\tCC-BY 2.0 (France) Attribution: tatoeba.org\nGo.\tVete.\n\tvacío\nsolo\n¿Qué?\t\n"


def make_zip(path, text=LINES, member="spa-eng/spa.txt"):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(member, text.encode("utf-8") * 50)
    return path


def test_reads_pairs_and_skips_broken_lines(tmp_path):
    pairs = read_pairs_from_zip(make_zip(tmp_path / "spa-eng.zip"))
    assert pairs[:2] == [("Go.", "Ve."), ("Go.", "Vete.")]  # third column ignored
    assert len(pairs) == 100  # lines with an empty side or no tab are skipped


def test_truncated_zip_is_a_clear_error(tmp_path):
    path = make_zip(tmp_path / "spa-eng.zip")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="not a readable spa-eng.zip"):
        read_pairs_from_zip(path)


def test_corrupt_member_is_a_clear_error(tmp_path):
    path = make_zip(tmp_path / "spa-eng.zip", text="word\tpalabra\n" * 400)
    data = bytearray(path.read_bytes())
    data[60] ^= 0xFF  # inside the compressed member: bad CRC or bad deflate stream
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="spa-eng.zip"):
        read_pairs_from_zip(path)


def test_zip_without_the_member_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="spa-eng/spa.txt"):
        read_pairs_from_zip(make_zip(tmp_path / "other.zip", member="other.txt"))


# ------------------------------------------------------------- the real data
@pytest.fixture(scope="module")
def pairs():
    if not os.environ.get("XFL_DATA_MIRROR"):
        pytest.skip("XFL_DATA_MIRROR is not set (CI points it at ../shared/data)")
    return load_pairs()


def test_real_counts(pairs):
    assert len(pairs) == 118_964
    assert len({normalize_text(en) for en, _ in pairs}) == 102_902
    assert pairs[0] == ("Go.", "Ve.")
    assert all(en and es for en, es in pairs)
    assert any("¿" in es for _, es in pairs) and any("ñ" in es for _, es in pairs)


def test_real_split_vocab_and_length_counts(pairs):
    """The numbers data/README.md quotes (default split: 10 % test, seed 0, min_freq 2)."""
    split = split_by_english(pairs)
    assert (len(split.train), len(split.test)) == (107_105, 11_859)
    test_groups = group_references(split.test)
    assert len(test_groups) == 10_290
    train_english = {normalize_text(en) for en, _ in split.train}
    assert not train_english & {normalize_text(en) for en, _ in split.test}
    all_refs = {normalize_text(en): len(refs) for en, refs in group_references(pairs)}
    assert all(len(refs) == all_refs[normalize_text(en)] for en, refs in test_groups)
    assert max(len(refs) for _, refs in test_groups) > 5  # some sentences have many references
    tokens = [(tokenize(en), tokenize(es)) for en, es in split.train]  # tokenize once
    en_vocab = Vocab.build((en for en, _ in tokens), min_freq=2)
    es_vocab = Vocab.build((es for _, es in tokens), min_freq=2)
    assert (len(en_vocab), len(es_vocab)) == (8_679, 14_449)
    assert sum(max(len(en), len(es)) <= 20 for en, es in tokens) == 106_794
    head = split.train[:5_000]  # filter_by_length agrees with the token counts
    expected = sum(max(len(a), len(b)) <= 20 for a, b in tokens[:5_000])
    assert len(filter_by_length(head, 20)) == expected
