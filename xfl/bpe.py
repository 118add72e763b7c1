"""Byte-pair encoding (Sennrich, Haddow and Birch, 2016), built in the chapter "Words,
characters, subwords" (chapters/ch04b_subwords/subwords.md).

Public API
----------
``train_bpe(sentences, num_merges, min_frequency=2) -> BPE``   learn merges from raw text.
``BPE.merges``              ``[(left, right), ...]`` in the order they were learned.
``BPE.alphabet``            the initial symbols (characters) seen in training.
``BPE.vocab``               alphabet + every merged symbol: the subword vocabulary.
``BPE.encode(text)``        text -> subword tokens; ``BPE.decode(tokens)`` inverts it exactly.
``BPE.save(path)``, ``BPE.load(path)``   a versioned JSON file, written atomically.
``pretokenize(text)``       text -> the words BPE works inside (lossless, see below).

Conventions (the same as subword-nmt's ``learn_bpe``, so both learn the same merges):

- Words. A text is cut into words with the word pattern of ``xfl.data.text.tokenize``
  (letters and digits, joined by apostrophes; every other non-space character alone), but case
  and spacing are kept: a single space before a word becomes the marker ``▁`` (U+2581) at its
  start; any other whitespace character is a word of its own. ``"¿Qué hora es?"`` ->
  ``['¿', 'Qué', '▁hora', '▁es', '?']``, so decoding gives back the text exactly. A text that
  already holds ``▁`` is refused (it could not be decoded unambiguously).
- End of word. A word's last character carries ``</w>``: ``'▁es'`` starts as
  ``('▁', 'e', 's</w>')``, so ``s</w>`` (a word-final s) and ``s`` are different symbols.
- Counting. Every adjacent pair of symbols in every word, times the word's frequency
  (overlapping pairs count twice: ``a a a`` holds ``(a, a)`` twice).
- Merging. A merge joins the occurrences of the pair left to right without overlap
  (``a a a`` -> ``aa a``).
- Ties. Among equally frequent pairs the largest pair wins, comparing ``(left, right)`` as
  Python tuples of strings (code-point order): subword-nmt's ``max(stats, key=(count, pair))``.
- Stopping. After ``num_merges`` merges, or earlier when no pair occurs ``min_frequency`` times.
- Encoding a word applies the lowest-ranked (earliest learned) pair present, all its
  occurrences left to right, until no learned pair is left (subword-nmt's ``apply_bpe``).
  Characters never seen in training stay single-character tokens: nothing is lost.
"""

from __future__ import annotations

import heapq
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Sequence

from xfl.atomic_files import write_text_atomic

SPACE = "\u2581"  # "▁": a single space came before this word
END = "</w>"  # glued to a word's last symbol
FORMAT, VERSION = "xfl-bpe", 1
SymbolPair = tuple[str, str]  # two adjacent symbols of a word

# With every space already turned into ▁: an optional ▁, then a word (xfl.data.text's pattern)
# or one other character; a ▁ or whitespace character not taken that way is a piece of its own.
_PIECE = re.compile(r"▁?(?:\w+(?:['’]\w+)*|[^\w\s▁])|[\s▁]")


# ------------------------------------------------------------------ words and symbols
def pretokenize(text: str) -> list[str]:
    """Text -> words, ``▁`` marking a space before: ``"Hi, Tom." -> ['Hi', ',', '▁Tom', '.']``."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    if SPACE in text:
        raise ValueError(f"text contains {SPACE!r} (U+2581), which BPE reserves to mark "
                         f"spaces; expected text without it, got {text!r}")
    return _PIECE.findall(text.replace(" ", SPACE))


def word_symbols(word: str) -> tuple[str, ...]:
    """A word -> its characters, the last one marked: ``'▁es' -> ('▁', 'e', 's</w>')``."""
    return (*word[:-1], word[-1] + END)


def merge_symbols(symbols: Sequence[str], pair: SymbolPair) -> list[str]:
    """Join every occurrence of ``pair``, left to right, without overlap:
    ``(a, a, a), (a, a) -> [aa, a]``."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def pairs_of(symbols: Sequence[str]) -> Counter:
    """Adjacent pairs and how often each occurs: ``(a, a, a) -> {(a, a): 2}``."""
    return Counter(zip(symbols, symbols[1:]))


# ------------------------------------------------------------------------- training
class _Largest(tuple):
    """A pair that a min-heap pops before smaller pairs: ties go to the largest pair."""

    def __lt__(self, other):
        return tuple.__gt__(self, other)


class _PairStats:
    """Pair counts over a corpus of words, kept exact as merges change the words.

    ``where[pair]`` names the words that held ``pair`` (some may have lost it to an earlier
    merge since), so a merge only revisits those; a heap of
    ``(-count, pair)`` entries (stale ones skipped when popped) finds the most frequent pair."""

    def __init__(self, words: list[list[str]], freqs: list[int]):
        self.words, self.freqs = words, freqs
        self.count: Counter = Counter()
        self.where: defaultdict = defaultdict(set)
        for i in range(len(words)):
            self._tally(i)
        self.heap = [(-n, _Largest(p)) for p, n in self.count.items()]
        heapq.heapify(self.heap)

    def _tally(self, i: int) -> None:
        """Count word ``i``'s pairs into the statistics."""
        for pair, n in pairs_of(self.words[i]).items():
            self.count[pair] += n * self.freqs[i]
            self.where[pair].add(i)

    def best(self) -> tuple[SymbolPair | None, int]:
        """The most frequent pair (largest on ties) and its count; ``(None, 0)`` if none."""
        while self.heap:
            n, pair = -self.heap[0][0], tuple(self.heap[0][1])
            if self.count.get(pair, 0) == n > 0:
                return pair, n
            heapq.heappop(self.heap)  # stale: its count changed since
        return None, 0

    def merge(self, pair: SymbolPair) -> None:
        """Merge ``pair`` in every word that holds it; update only the counts that change."""
        change = defaultdict(int)
        for i in self.where.pop(pair, ()):
            old = self.words[i]
            new = merge_symbols(old, pair)
            if len(new) == len(old):
                continue  # an earlier merge took the pair out of this word
            self.words[i], freq = new, self.freqs[i]
            for p in zip(old, old[1:]):
                change[p] -= freq
            for p in zip(new, new[1:]):
                change[p] += freq
                self.where[p].add(i)
        for p, n in change.items():
            if n:
                self._update(p, n)

    def _update(self, pair: SymbolPair, n: int) -> None:
        """Add ``n`` to ``pair``'s count; push the new count, or forget the pair at zero."""
        self.count[pair] += n
        if self.count[pair] > 0:
            heapq.heappush(self.heap, (-self.count[pair], _Largest(pair)))
        else:
            del self.count[pair]


def train_bpe(sentences: Iterable[str], num_merges: int, min_frequency: int = 2,
              alphabet: Iterable[str] = ()) -> "BPE":
    """Learn up to ``num_merges`` merges from raw sentences (see the module's conventions).
    ``alphabet``: characters that join the initial symbols even if training never shows them
    (each also as a word's last symbol, ``c + END``), e.g. all 256 byte symbols."""
    if not isinstance(num_merges, int) or num_merges < 0:
        raise ValueError(f"num_merges must be an int >= 0, got {num_merges!r}")
    if not isinstance(min_frequency, int) or min_frequency < 1:
        raise ValueError(f"min_frequency must be an int >= 1, got {min_frequency!r}")
    if isinstance(sentences, str):
        raise ValueError(f"sentences must be an iterable of str, got one str: {sentences[:40]!r}")
    extra = list(alphabet)  # a str is its characters
    bad = [c for c in extra if not isinstance(c, str) or len(c) != 1]
    if bad:
        raise ValueError(f"alphabet must hold single characters, got {bad[:3]!r}")
    counts = Counter()
    for text, n in Counter(sentences).items():  # each distinct sentence once
        for word in pretokenize(text):
            counts[word] += n
    words = [list(word_symbols(w)) for w in counts]
    seen = {s for symbols in words for s in symbols}
    alphabet = sorted(seen | {c for c in extra} | {c + END for c in extra})
    stats, merges = _PairStats(words, list(counts.values())), []
    while len(merges) < num_merges:
        pair, n = stats.best()
        if pair is None or n < min_frequency:
            break
        merges.append(pair)
        stats.merge(pair)
    return BPE(merges, alphabet)


# ------------------------------------------------------------------------ the model
class BPE:
    """Learned merges and the alphabet they start from; encodes and decodes text.

    >>> bpe = train_bpe(["low lower lowest"] * 2, num_merges=3)
    >>> bpe.merges  # (l, o) is seen 6 times; then three pairs 4 times each, the largest wins
    [('l', 'o'), ('▁', 'lo'), ('▁lo', 'w')]
    >>> bpe.encode("a lowest")
    ['a</w>', '▁low', 'e', 's', 't</w>']
    >>> bpe.decode(bpe.encode("lower lowest"))
    'lower lowest'
    """

    def __init__(self, merges: Iterable[Sequence[str]], alphabet: Iterable[str] = ()):
        self.merges: list[SymbolPair] = [tuple(p) for p in merges]
        self.alphabet: list[str] = list(alphabet)
        for i, pair in enumerate(self.merges):
            if len(pair) != 2 or not _strings(pair):
                raise ValueError(f"merge {i} must be two non-empty strings, got {pair!r}")
        self.ranks = {p: r for r, p in reversed(list(enumerate(self.merges)))}  # first wins
        self._cache: dict[str, list[str]] = {}

    @property
    def vocab(self) -> list[str]:
        """The alphabet, then each merged symbol once, in the order it was learned."""
        return list(dict.fromkeys(self.alphabet + [a + b for a, b in self.merges]))

    def encode_word(self, word: str) -> list[str]:
        """One word -> subwords: apply the earliest learned pair present until none is."""
        if word not in self._cache:
            symbols = list(word_symbols(word))
            while len(symbols) > 1:
                ranked = [(self.ranks[p], p) for p in zip(symbols, symbols[1:]) if p in self.ranks]
                if not ranked:
                    break
                symbols = merge_symbols(symbols, min(ranked)[1])
            self._cache[word] = symbols
        return list(self._cache[word])

    def encode(self, text: str) -> list[str]:
        """Text -> subword tokens, a word's last one ending in ``</w>`` (see the class example)."""
        return [token for word in pretokenize(text) for token in self.encode_word(word)]

    def decode(self, tokens: Sequence[str]) -> str:
        """Tokens -> text: drop each ``</w>``, turn ``▁`` back into a space."""
        if isinstance(tokens, str):
            raise ValueError(f"decode takes a list of tokens, got the str {tokens!r}")
        return "".join(t.removesuffix(END) for t in tokens).replace(SPACE, " ")

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        return f"BPE({len(self.merges)} merges, {len(self.alphabet)} initial symbols)"

    # ------------------------------------------------------------------ files
    def save(self, path: str | Path) -> None:
        """Write a versioned JSON file, atomically (a failed write keeps the old file)."""
        header = {"format": FORMAT, "version": VERSION, "end_of_word": END, "space": SPACE,
                  "alphabet": self.alphabet}
        merges = ",\n".join(json.dumps(list(p), ensure_ascii=False) for p in self.merges)
        text = json.dumps(header, ensure_ascii=False)[:-1] + f', "merges": [\n{merges}\n]}}\n'
        write_text_atomic(path, text)

    @classmethod
    def load(cls, path: str | Path) -> "BPE":
        """Read a file written by ``save``; a corrupt or foreign file raises ValueError."""
        try:
            data = json.loads(Path(path).read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path} is not an xfl BPE file: expected UTF-8 JSON with "
                             f"format {FORMAT!r} ({type(err).__name__}: {err})") from err
        _check_file(data, path)
        return cls(data["merges"], data["alphabet"])


def _check_file(data, path) -> None:
    """Raise ValueError naming ``path`` unless ``data`` is a version-``VERSION`` BPE file."""
    expected = {"format": FORMAT, "version": VERSION, "end_of_word": END, "space": SPACE}
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not an xfl BPE file: expected a JSON object with format "
                         f"{FORMAT!r}, got a {type(data).__name__}")
    for key, value in expected.items():
        if data.get(key) != value:
            raise ValueError(f"{path} is not an xfl BPE file of version {VERSION}: expected "
                             f"{key}={value!r}, got {data.get(key)!r}")
    merges, alphabet = data.get("merges"), data.get("alphabet")
    if not (isinstance(merges, list) and all(isinstance(p, list) and _strings(p) and len(p) == 2
                                             for p in merges)):
        raise ValueError(f"{path}: expected 'merges' to be a list of [left, right] string pairs")
    if not (isinstance(alphabet, list) and _strings(alphabet)):
        raise ValueError(f"{path}: expected 'alphabet' to be a list of non-empty strings")


def _strings(values) -> bool:
    """True when every value is a non-empty str."""
    return all(isinstance(v, str) and v for v in values)
