"""Text pipeline for the translation chapters: normalize, tokenize, vocabularies, splits, padding.

Public API
----------
``normalize_text(text)``       NFC, lower case, one space between words; keeps accents, ¿ and ¡;
                               drops control characters and lone surrogates.
``tokenize(text)``             normalized word and punctuation tokens (``[]`` for an empty text).
``detokenize(tokens)``         tokens -> readable text; ``tokenize(detokenize(t)) == t``.
``Vocab``                      token <-> id with ``PAD=0, UNK=1, SOS=2, EOS=3``; ``Vocab.build``
                               applies a minimum-frequency cut; ``encode``/``decode`` round-trip.
``filter_by_length(pairs, max_len)``   keep pairs with 1..max_len tokens on both sides.
``split_by_english(pairs, ...)``       seeded train/valid/test split by English sentence.
``group_references(pairs)``    ``[(english, [all its Spanish translations]), ...]`` for BLEU.
``encode_pairs``, ``pad_batch``   ids, padding and lengths (the batches of an epoch: ``xfl.batches``).

Empty text: ``tokenize`` returns ``[]``, ``filter_by_length`` drops such pairs (they have fewer
than one token), ``load_pairs`` never returns them, and ``Vocab.encode`` refuses an empty
token list with a ValueError. Explained in the book's page "The datasets"
(chapters/ch00_data/datasets.md).
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections import Counter
from numbers import Integral
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch
from torch import Tensor

PAD, UNK, SOS, EOS = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "<sos>", "<eos>")

# A word is letters/digits, possibly joined by apostrophes (don't, l'homme); every other
# non-space character is a token of its own (¿ ¡ . , ! ? " - ...).
_TOKEN = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")
# Invisible format characters (soft hyphen, zero-width joiners, direction marks, BOM);
# a zero-width space (U+200B) becomes a space instead.
_INVISIBLE = re.compile("[\u00ad\u200c-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")
# Control characters that are not whitespace (NUL, BEL, ESC, C1 controls) and lone surrogates
# (a str can hold them, no UTF-8 file can): dropped.
_CONTROL = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\ud800-\udfff]")
_NO_SPACE_BEFORE = {".", ",", "!", "?", ";", ":", ")", "»", "%", "…"}
_NO_SPACE_AFTER = {"¿", "¡", "(", "«", "$"}


# ------------------------------------------------------------------ normalize
def clean(text: str) -> str:
    """NFC, control characters, lone surrogates and invisible format characters removed,
    whitespace collapsed; case kept."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    text = unicodedata.normalize("NFC", _CONTROL.sub("", text))
    text = _INVISIBLE.sub("", text.replace("\u200b", " "))
    return " ".join(text.split())


def normalize_text(text: str) -> str:
    """``clean``, then lower case: ``str.lower`` (not ``casefold``) keeps ß and every accent,
    ``"¿ÉL?" -> "¿él?"``; a dotted capital I lowers to a plain i (``"İstanbul" -> "istanbul"``,
    not i + a combining dot), and the result is NFC again."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return unicodedata.normalize("NFC", clean(text).lower().replace("i\u0307", "i"))


def tokenize(text: str) -> list[str]:
    """Normalized tokens: ``"¿Qué hora es?" -> ['¿', 'qué', 'hora', 'es', '?']``."""
    return _TOKEN.findall(normalize_text(text))


def detokenize(tokens: Sequence[str]) -> str:
    """Join tokens into text: no space before ``. , ? !``, none after ``¿ ¡``, hyphens
    joined, straight double quotes alternately opening and closing."""
    out, glue_next, open_quote = "", True, False
    for token in tokens:
        glue = glue_next or token in _NO_SPACE_BEFORE or token == "-"
        if token == '"':
            glue, open_quote = glue or open_quote, not open_quote
            glue_next = open_quote
        else:
            glue_next = token in _NO_SPACE_AFTER or token == "-"
        out += token if glue else " " + token
    return out


# ---------------------------------------------------------------------- vocab
class Vocab:
    """Token <-> id map; ids 0..3 are ``<pad> <unk> <sos> <eos>``.

    >>> v = Vocab.build([["hola", "."], ["hola"]], min_freq=2)
    >>> v.encode(["hola", "mundo"])   # [SOS, hola, UNK, EOS]
    [2, 4, 1, 3]
    """

    def __init__(self, itos: Sequence[str]):
        if tuple(itos[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}, got {tuple(itos[:4])}")
        if len(set(itos)) != len(itos):
            raise ValueError("vocabulary tokens must be unique")
        self.itos = list(itos)
        self.stoi = {token: i for i, token in enumerate(self.itos)}

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], min_freq: int = 2) -> "Vocab":
        """Vocabulary of tokens seen at least ``min_freq`` times, most frequent first
        (ties alphabetical, so the result does not depend on input order)."""
        if not isinstance(min_freq, int) or min_freq < 1:
            raise ValueError(f"min_freq must be an int >= 1, got {min_freq!r}")
        counts = Counter(token for sentence in sentences for token in sentence)
        kept = sorted((t for t, n in counts.items() if n >= min_freq and t not in SPECIALS),
                      key=lambda t: (-counts[t], t))
        return cls(list(SPECIALS) + kept)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Token ids, unknown tokens -> UNK, wrapped in SOS ... EOS."""
        if len(tokens) == 0:
            raise ValueError("cannot encode an empty sentence (no tokens); filter it out first "
                             "with filter_by_length")
        return [SOS, *(self.stoi.get(token, UNK) for token in tokens), EOS]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens up to the first EOS, with PAD and SOS dropped."""
        tokens = []
        for i in (int(i) for i in ids):
            if i == EOS:
                break
            if not 0 <= i < len(self.itos):
                raise ValueError(f"id {i} is outside the vocabulary [0, {len(self.itos)})")
            if i not in (PAD, SOS):
                tokens.append(self.itos[i])
        return tokens

    def encode_text(self, text: str) -> list[int]:
        """``encode(tokenize(text))``."""
        return self.encode(tokenize(text))

    def decode_text(self, ids: Iterable[int]) -> str:
        """``detokenize(decode(ids))``."""
        return detokenize(self.decode(ids))


# -------------------------------------------------------------- filter, split
SentencePair = tuple[str, str]  # (english, spanish)


def filter_by_length(pairs: Iterable[SentencePair], max_len: int) -> list[SentencePair]:
    """Pairs whose English and Spanish both have 1..max_len tokens (empty ones dropped)."""
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be a positive int, got {max_len!r}")
    return [(en, es) for en, es in pairs
            if 1 <= len(tokenize(en)) <= max_len and 1 <= len(tokenize(es)) <= max_len]


@dataclass
class Split:
    """Pairs of each part; an English sentence (after ``normalize_text``) lies in one part only."""

    train: list[SentencePair]
    test: list[SentencePair]


def split_by_english(pairs: Sequence[SentencePair], test_fraction: float = 0.1, seed: int = 0) -> Split:
    """Seeded split of the distinct English sentences; every pair follows its English
    sentence, so a test sentence keeps all of its Spanish translations. The result
    depends on the seed and the set of pairs, not on their order."""
    if not 0 <= test_fraction < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    keys = [normalize_text(en) for en, _ in pairs]
    english = sorted(set(keys))
    random.Random(seed).shuffle(english)
    test = set(english[:round(test_fraction * len(english))])
    split = Split(train=[], test=[])
    for key, pair in zip(keys, pairs):
        (split.test if key in test else split.train).append(tuple(pair))
    return split


def group_references(pairs: Iterable[SentencePair]) -> list[tuple[str, list[str]]]:
    """``[(english, [spanish, ...]), ...]``: every translation of each English sentence
    (grouped after ``normalize_text``), in first-seen order, for multi-reference BLEU."""
    groups: dict[str, tuple[str, list[str]]] = {}
    for en, es in pairs:
        groups.setdefault(normalize_text(en), (en, []))[1].append(es)
    return list(groups.values())


# -------------------------------------------------------------------- batches
def encode_pairs(pairs: Iterable[SentencePair], src_vocab: Vocab, tgt_vocab: Vocab
                 ) -> list[tuple[list[int], list[int]]]:
    """Each ``(english, spanish)`` -> ``(src ids, tgt ids)``, both wrapped in SOS ... EOS."""
    return [(src_vocab.encode_text(en), tgt_vocab.encode_text(es)) for en, es in pairs]


def _id_row(seq: Sequence[int], row: int) -> Tensor:
    """``seq`` as int64 ids ``(L,)``; a str, float, bool or an int beyond int64 is named."""
    try:
        ids = torch.as_tensor(seq)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        ids = None
    if ids is not None and not (ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool):
        return ids.to(torch.long)
    bad = next((x for x in seq if isinstance(x, bool) or not isinstance(x, Integral)
                or not -2 ** 63 <= x < 2 ** 63), seq)
    raise ValueError(f"pad_batch: sequence {row} holds {bad!r} ({type(bad).__name__}); expected int "
                     f"token ids (each in the int64 range)")


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int = PAD,
              device=None) -> tuple[Tensor, Tensor]:
    """``B`` id lists -> ids ``(B, L)`` (padded with ``pad_id``, L = longest) and lengths ``(B,)``."""
    if len(sequences) == 0 or any(len(s) == 0 for s in sequences):
        raise ValueError("pad_batch needs at least one sequence and no empty sequences")
    lengths = [len(s) for s in sequences]  # Python ints: no tensor is read back
    ids = torch.full((len(sequences), max(lengths)), pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = _id_row(seq, row)
    return ids.to(device), torch.tensor(lengths, dtype=torch.long, device=device)
