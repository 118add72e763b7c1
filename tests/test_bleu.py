"""xfl.bleu: the paper's examples, equality with NLTK and sacreBLEU, invariants, errors."""

import math
import random
import warnings

import pytest
from nltk.translate import bleu_score as nltk_bleu
from sacrebleu.metrics import BLEU

from xfl.bleu import (brevity_penalty, closest_ref_length, clipped_matches, corpus_bleu, corpus_statistics,
                      modified_precision, ngram_counts, reference_streams, sacrebleu_score, sentence_bleu)

CAT = "the cat is on the mat".split()
THERE = "there is a cat on the mat".split()


# ------------------------------------------------------------ the seed's examples
def test_the_the_the_unigram_precision_is_2_over_7():
    hyp = "the the the the the the the".split()
    assert clipped_matches(hyp, [CAT, THERE], 1) == (2, 7)
    assert modified_precision(hyp, [CAT, THERE], 1) == pytest.approx(2 / 7)
    assert modified_precision(hyp, [CAT], 1) == pytest.approx(2 / 7)


def test_the_cat_is_is_precise_but_short():
    hyp = "the cat is".split()
    assert modified_precision(hyp, [CAT], 1) == 1.0 and modified_precision(hyp, [CAT], 3) == 1.0
    assert brevity_penalty(3, 6) == pytest.approx(math.exp(1 - 6 / 3))
    assert sentence_bleu(hyp, [CAT], max_n=3) == pytest.approx(math.exp(-1))


def test_small_pieces():
    assert ngram_counts("a b a b".split(), 2) == {("a", "b"): 2, ("b", "a"): 1}
    assert ngram_counts(["a"], 2) == {}
    assert closest_ref_length(5, [3, 7, 9]) == 3  # tie between 3 and 7: the shorter
    assert closest_ref_length(8, [3, 7, 9]) == 7
    assert brevity_penalty(7, 6) == 1.0 and brevity_penalty(6, 6) == 1.0
    assert brevity_penalty(0, 6) == 0.0


# ------------------------------------------------------------------- invariants
def test_identical_is_one_and_disjoint_is_zero():
    assert sentence_bleu(CAT, [CAT]) == 1.0
    assert corpus_bleu([CAT, THERE], [[CAT], [THERE, CAT]]) == 1.0
    assert sentence_bleu("a b c d e".split(), [CAT]) == 0.0


@pytest.mark.parametrize("hyp, refs, max_n", [
    ("the cat sat".split(), [CAT], 4),           # no 4-gram at all
    ("mat the on is cat".split(), [CAT], 2),     # unigrams match, no bigram does
    ([], [CAT], 4),                              # empty hypothesis
])
def test_zero_matches_give_zero(hyp, refs, max_n):
    assert sentence_bleu(hyp, refs, max_n=max_n) == 0.0


def test_zero_weight_order_is_ignored():
    hyp = "mat the on is cat".split()
    assert sentence_bleu(hyp, [CAT], max_n=2, weights=(1.0, 0.0)) == pytest.approx(1.0 * math.exp(1 - 6 / 5))


def test_corpus_bleu_is_not_the_mean_of_sentence_bleu():
    hyps, refs = [CAT, "the cat".split()], [[CAT], [THERE]]
    stats = corpus_statistics(hyps, refs, 2)
    assert stats.hyp_len == 8 and stats.ref_len == 6 + 7
    mean = sum(sentence_bleu(h, r, max_n=2) for h, r in zip(hyps, refs)) / 2
    assert corpus_bleu(hyps, refs, max_n=2) != pytest.approx(mean)


# -------------------------------------------------------- the reference libraries
def random_corpus(rng, n_sentences, max_refs, min_len, vocab="abcdefg"):
    """Random references over a tiny vocabulary; each hypothesis is a noisy copy of one
    of its references (tokens replaced, dropped or repeated), so that n-grams do match."""
    def sentence():
        return [rng.choice(vocab) for _ in range(rng.randint(min_len, 12))]

    def noisy_copy(tokens):
        out = []
        for token in tokens:
            action = rng.random()
            out += [] if action < 0.1 else [rng.choice(vocab)] if action < 0.3 else [token] * (1 + (action > 0.9))
        return out if len(out) >= min_len else tokens

    refs = [[sentence() for _ in range(rng.randint(1, max_refs))] for _ in range(n_sentences)]
    hyps = [noisy_copy(rng.choice(r)) for r in refs]
    return hyps, refs


def nltk_corpus_bleu(hyps, refs, max_n=4):
    with warnings.catch_warnings():  # NLTK warns when some order has no match
        warnings.simplefilter("ignore")
        return nltk_bleu.corpus_bleu(refs, hyps, weights=(1 / max_n,) * max_n)


def sacre_corpus_bleu(hyps, refs, max_n=4):
    """sacreBLEU (0-100) on space-joined tokens; missing references are None."""
    width = max(len(r) for r in refs)
    streams = [[" ".join(r[k]) if k < len(r) else None for r in refs] for k in range(width)]
    bleu = BLEU(tokenize="none", smooth_method="none", max_ngram_order=max_n)
    return bleu.corpus_score([" ".join(h) for h in hyps], streams).score / 100


@pytest.mark.parametrize("seed", range(40))
def test_equals_nltk_and_sacrebleu(seed):
    rng = random.Random(seed)
    max_n = rng.choice([1, 2, 3, 4])
    hyps, refs = random_corpus(rng, rng.randint(1, 20), max_refs=4, min_len=max_n)
    ours = corpus_bleu(hyps, refs, max_n=max_n)
    assert ours == pytest.approx(nltk_corpus_bleu(hyps, refs, max_n), rel=1e-9, abs=1e-12)
    assert ours == pytest.approx(sacre_corpus_bleu(hyps, refs, max_n), rel=1e-9, abs=1e-12)
    assert 0.0 <= ours <= 1.0


def test_nontrivial_scores_were_compared():
    rng = random.Random(0)
    scores = [corpus_bleu(*random_corpus(rng, 10, 3, 4)) for _ in range(20)]
    assert sum(0.05 < s < 0.95 for s in scores) >= 15


def test_short_hypotheses_follow_sacrebleu_not_nltk():
    """NLTK counts 1 (not 0) n-grams for a hypothesis shorter than n."""
    hyps, refs = [CAT, ["the"]], [[CAT], [THERE]]
    ours = corpus_bleu(hyps, refs)
    assert ours == pytest.approx(sacre_corpus_bleu(hyps, refs), rel=1e-12)
    assert ours != pytest.approx(nltk_corpus_bleu(hyps, refs), rel=1e-3)


def test_sentence_bleu_equals_nltk_sentence_bleu():
    rng = random.Random(1)
    for hyp, refs in zip(*random_corpus(rng, 30, 3, 4, vocab="abc")):
        want = nltk_bleu.sentence_bleu(refs, hyp) if sentence_bleu(hyp, refs) > 0 else 0.0
        assert sentence_bleu(hyp, refs) == pytest.approx(want, rel=1e-9)


# ------------------------------------------------------------------------ errors
@pytest.mark.parametrize("call, message", [
    (lambda: corpus_bleu([CAT], [[CAT], [CAT]]), "1 hypotheses but 2"),
    (lambda: corpus_bleu([], []), "empty corpus"),
    (lambda: corpus_bleu([CAT], [[]]), "non-empty list of references"),
    (lambda: corpus_bleu(["the cat"], [[CAT]]), "hypothesis 0 must be a list of tokens"),
    (lambda: sentence_bleu(CAT, [CAT, "the cat"]), "reference 1 of hypothesis 0"),
    (lambda: sentence_bleu(CAT, CAT), "reference 0 of hypothesis 0"),
    (lambda: sentence_bleu(CAT, [CAT], max_n=0), "max_n must be an int >= 1"),
    (lambda: sentence_bleu(CAT, [CAT], weights=(0.5, 0.5)), "one weight per n-gram order"),
    (lambda: sentence_bleu(CAT, [CAT], max_n=2, weights=(0.7, 0.7)), "sum to 1"),
    (lambda: sentence_bleu(CAT, [CAT], max_n=2, weights=(1.5, -0.5)), ">= 0"),
])
def test_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_reference_streams_pad_with_none():
    assert reference_streams([["a"], ["b", "c"]]) == [["a", "b"], [None, "c"]]


def test_sacrebleu_score_uses_every_reference_and_ignores_case():
    groups = [("Go now.", ["Ve ahora mismo a casa.", "Vete ahora mismo a casa."]),
              ("Run!", ["¡Corre tan rápido como puedas!"])]
    hypotheses = ["VETE AHORA MISMO A CASA.", "¡corre tan rápido como puedas!"]
    score, signature = sacrebleu_score(hypotheses, groups)
    assert score == pytest.approx(100.0) and "case:lc" in signature
    first_only, _ = sacrebleu_score(hypotheses, [(en, refs[:1]) for en, refs in groups])
    assert first_only < 100.0
