"""BLEU, the one home: from scratch (chapter 6), as defined by Papineni et al. (2002), and the
sacreBLEU score the book reports (``sacrebleu_score``, multi-reference, case-insensitive).

BLEU = BP · exp(Σ_n w_n log p_n), where p_n is the *modified* (clipped) n-gram precision
summed over the whole corpus and BP the brevity penalty. Inputs are already tokenized:
a hypothesis is a list of tokens; each hypothesis has a list of one or more references.

Corpus statistics follow the paper and sacreBLEU: a hypothesis shorter than n has no
n-grams and adds 0 to the n-gram total. (NLTK's ``corpus_bleu`` adds 1 instead, so it
disagrees with this module and with sacreBLEU exactly when a hypothesis is shorter than
``max_n``; ``tests/test_bleu.py`` shows both cases.)
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

Tokens = Sequence[str]


# ----------------------------------------------------------------- input checks
def _check_tokens(tokens, what: str) -> None:
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise ValueError(f"{what} must be a list of tokens, got {type(tokens).__name__} {tokens!r:.60}")


def _check_max_n(max_n) -> None:
    if not isinstance(max_n, int) or isinstance(max_n, bool) or max_n < 1:
        raise ValueError(f"max_n must be an int >= 1, got {max_n!r}")


def check_weights(weights, max_n: int) -> tuple[float, ...]:
    """Uniform weights 1/max_n when None; else max_n finite weights >= 0 that sum to 1."""
    _check_max_n(max_n)
    if weights is None:
        return (1.0 / max_n,) * max_n
    weights = tuple(float(w) for w in weights)
    if len(weights) != max_n:
        raise ValueError(f"need one weight per n-gram order (max_n={max_n}), got {len(weights)}: {weights}")
    if not all(math.isfinite(w) and w >= 0 for w in weights):
        raise ValueError(f"weights must be finite and >= 0, got {weights}")
    if not math.isclose(sum(weights), 1.0, abs_tol=1e-9):
        raise ValueError(f"weights must sum to 1 (a weighted geometric mean), got sum {sum(weights)}")
    return weights


def _check_corpus(hypotheses, references) -> None:
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise ValueError("hypotheses and references must be lists, not strings")
    if len(hypotheses) != len(references):
        raise ValueError(f"got {len(hypotheses)} hypotheses but {len(references)} reference lists")
    if len(hypotheses) == 0:
        raise ValueError("BLEU of an empty corpus is undefined: got 0 hypotheses")
    for i, (hyp, refs) in enumerate(zip(hypotheses, references)):
        _check_tokens(hyp, f"hypothesis {i}")
        if isinstance(refs, str) or not isinstance(refs, Sequence) or len(refs) == 0:
            raise ValueError(f"hypothesis {i} needs a non-empty list of references, got {refs!r:.60}")
        for j, ref in enumerate(refs):
            _check_tokens(ref, f"reference {j} of hypothesis {i}")


# ------------------------------------------------------------- the small pieces
def ngram_counts(tokens: Tokens, n: int) -> Counter:
    """How often each n-gram (a tuple of n tokens) occurs in ``tokens``."""
    _check_max_n(n)
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def clipped_matches(hypothesis: Tokens, references: Sequence[Tokens], n: int) -> tuple[int, int]:
    """(matched n-grams, hypothesis n-grams): each n-gram's count is clipped to the
    most times it occurs in any single reference."""
    hyp_counts = ngram_counts(hypothesis, n)
    max_ref = Counter()
    for ref in references:
        max_ref |= ngram_counts(ref, n)  # union of Counters keeps the maximum count
    matches = sum(min(count, max_ref[gram]) for gram, count in hyp_counts.items())
    return matches, sum(hyp_counts.values())


def modified_precision(hypothesis: Tokens, references: Sequence[Tokens], n: int) -> float:
    """Clipped n-gram precision p_n of one hypothesis (0.0 when it has no n-grams)."""
    matches, total = clipped_matches(hypothesis, references, n)
    return matches / total if total else 0.0


def closest_ref_length(hyp_len: int, ref_lens: Sequence[int]) -> int:
    """The reference length closest to ``hyp_len``; on a tie, the shorter one."""
    return min(ref_lens, key=lambda r: (abs(r - hyp_len), r))


def brevity_penalty(hyp_len: int, ref_len: int) -> float:
    """BP = 1 if c > r else exp(1 - r/c), with c the hypothesis and r the reference length."""
    if hyp_len < 0 or ref_len < 0:
        raise ValueError(f"lengths must be >= 0, got hyp_len={hyp_len}, ref_len={ref_len}")
    if hyp_len > ref_len:
        return 1.0
    return math.exp(1 - ref_len / hyp_len) if hyp_len > 0 else 0.0


# ------------------------------------------------------------------ the corpus
@dataclass
class BleuStats:
    """BLEU's sufficient statistics: per-order matches and totals, and the two lengths."""

    matches: list[int]
    totals: list[int]
    hyp_len: int = 0
    ref_len: int = 0

    @property
    def precisions(self) -> list[float]:
        return [m / t if t else 0.0 for m, t in zip(self.matches, self.totals)]


def corpus_statistics(hypotheses, references, max_n: int = 4) -> BleuStats:
    """Sum matches, totals and lengths over the corpus (checks its inputs)."""
    _check_max_n(max_n)
    _check_corpus(hypotheses, references)
    stats = BleuStats([0] * max_n, [0] * max_n)
    for hyp, refs in zip(hypotheses, references):
        for n in range(1, max_n + 1):
            matches, total = clipped_matches(hyp, refs, n)
            stats.matches[n - 1] += matches
            stats.totals[n - 1] += total
        stats.hyp_len += len(hyp)
        stats.ref_len += closest_ref_length(len(hyp), [len(r) for r in refs])
    return stats


def bleu_from_statistics(stats: BleuStats, weights=None) -> float:
    """BP · exp(Σ w_n log p_n); 0.0 when some order with weight > 0 has no match."""
    weights = check_weights(weights, len(stats.matches))
    log_sum = 0.0
    for w, p in zip(weights, stats.precisions):
        if w == 0:
            continue
        if p == 0:
            return 0.0
        log_sum += w * math.log(p)
    return brevity_penalty(stats.hyp_len, stats.ref_len) * math.exp(log_sum)


def corpus_bleu(hypotheses, references, max_n: int = 4, weights=None) -> float:
    """Corpus BLEU in [0, 1].

    hypotheses: a list of token lists; references: for each hypothesis, a list of one or
    more token lists. weights: one per order 1..max_n, summing to 1 (default uniform).
    """
    weights = check_weights(weights, max_n)
    return bleu_from_statistics(corpus_statistics(hypotheses, references, max_n), weights)


def sentence_bleu(hypothesis, references, max_n: int = 4, weights=None) -> float:
    """BLEU of one hypothesis (a token list) against its references (a list of token lists)."""
    return corpus_bleu([hypothesis], [references], max_n, weights)


# ------------------------------------------------------------ sacreBLEU, as reported
def reference_streams(references: Sequence[Sequence[str]]) -> list[list[str | None]]:
    """Per-sentence reference lists -> sacreBLEU's streams (None where a sentence has fewer)."""
    most = max(len(r) for r in references)
    return [[r[i] if i < len(r) else None for r in references] for i in range(most)]


def sacrebleu_score(hypotheses: Sequence[str], groups: Sequence[tuple[str, Sequence[str]]],
                    lowercase: bool = True) -> tuple[float, str]:
    """Multi-reference sacreBLEU of detokenized ``hypotheses`` against the raw references of
    ``groups`` (``[(english, [spanish, ...])]``), case-insensitive unless ``lowercase=False``;
    returns (score, signature)."""
    import sacrebleu

    metric = sacrebleu.metrics.BLEU(lowercase=lowercase)
    score = metric.corpus_score(list(hypotheses), reference_streams([refs for _, refs in groups]))
    return score.score, str(metric.get_signature())
