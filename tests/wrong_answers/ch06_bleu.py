"""Chapter 6's (the BLEU page's) plausible wrong answers: each must earn 0 on its question's
hidden tests."""


WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "off by one: range(len - n) drops the last n-gram": '''
def ngram_counts(tokens, n):
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n))
''',
        "a set of n-grams: every count is 1": '''
def ngram_counts(tokens, n):
    return Counter(set(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)))
''',
        "NLTK's ngrams (library BLEU is off limits; blocked)": '''
from nltk.util import ngrams
def ngram_counts(tokens, n):
    return Counter(ngrams(tokens, n))
''',
    },
    "q2": {
        "no clipping: every hypothesis n-gram found in a reference counts": '''
def clipped_precision(hypothesis, references, n):
    hyp = ngram_counts(hypothesis, n)
    total = sum(hyp.values())
    if total == 0:
        return 0.0
    seen = set()
    for ref in references:
        seen |= set(ngram_counts(ref, n))
    return sum(c for g, c in hyp.items() if g in seen) / total
''',
        "clips by the counts summed over all references, not the most in one": '''
def clipped_precision(hypothesis, references, n):
    hyp = ngram_counts(hypothesis, n)
    total = sum(hyp.values())
    if total == 0:
        return 0.0
    pooled = Counter()
    for ref in references:
        pooled += ngram_counts(ref, n)
    return sum(min(c, pooled[g]) for g, c in hyp.items()) / total
''',
        "divides by the hypothesis length, not its number of n-grams": '''
def clipped_precision(hypothesis, references, n):
    hyp = ngram_counts(hypothesis, n)
    if not hyp:
        return 0.0
    best = Counter()
    for ref in references:
        best |= ngram_counts(ref, n)
    return sum(min(c, best[g]) for g, c in hyp.items()) / len(hypothesis)
''',
        "NLTK's modified_precision (library BLEU is off limits; blocked)": '''
from nltk.translate.bleu_score import modified_precision
def clipped_precision(hypothesis, references, n):
    return float(modified_precision(references, hypothesis, n))
''',
        "xfl.bleu.corpus_statistics of a one-sentence corpus (blocked)": '''
import xfl.bleu
def clipped_precision(hypothesis, references, n):
    return xfl.bleu.corpus_statistics([hypothesis], [references], max_n=n).precisions[n - 1]
''',
    },
    "q3": {
        "the ratio upside down: exp(1 - c / r)": '''
def brevity_penalty(hyp_len, ref_len):
    if hyp_len > ref_len:
        return 1.0
    if hyp_len == 0:
        return 0.0
    return math.exp(1 - hyp_len / ref_len)
''',
        "no cap: longer hypotheses get a bonus above 1": '''
def brevity_penalty(hyp_len, ref_len):
    if hyp_len == 0:
        return 0.0
    return math.exp(1 - ref_len / hyp_len)
''',
        "NLTK's brevity_penalty (library BLEU is off limits; blocked)": '''
from nltk.translate.bleu_score import brevity_penalty as nltk_brevity_penalty
def brevity_penalty(hyp_len, ref_len):
    return float(nltk_brevity_penalty(ref_len, hyp_len))
''',
    },
    "q4": {
        "the same sentence twice: pooling changes nothing": '''
def corpus_beats_sentences():
    hyp = "the cat sat on the mat".split()
    ref = ["the cat sat on the red mat today".split()]
    return [hyp, list(hyp)], [ref, list(ref)]
''',
        "two perfect sentences: every score is 1, the corpus is not higher": '''
def corpus_beats_sentences():
    a, b = "the cat sat on the mat".split(), "a dog ran in the big park".split()
    return [a, b], [[list(a)], [list(b)]]
''',
    },
    "q5": {
        "no clipping: p1 = 7/7": '''
def repeated_word_bleu():
    return 1.0, 0.0
''',
        "drops the zero bigram precision from the geometric mean": '''
def repeated_word_bleu():
    p1 = 2 / 7
    return p1, math.sqrt(p1)
''',
        "arithmetic mean of the precisions for N = 2": '''
def repeated_word_bleu():
    p1, p2 = 2 / 7, 0.0
    return p1, (p1 + p2) / 2
''',
        "xfl.bleu.clipped_matches and closest_ref_length (xfl.bleu is off limits; blocked)": '''
import xfl.bleu
def repeated_word_bleu():
    hyp = ["the"] * 7
    refs = ["the cat is on the mat".split(), "there is a cat on the mat".split()]
    (m1, t1), (m2, t2) = (xfl.bleu.clipped_matches(hyp, refs, n) for n in (1, 2))
    r = xfl.bleu.closest_ref_length(len(hyp), [len(ref) for ref in refs])
    bp = 1.0 if len(hyp) > r else math.exp(1 - r / len(hyp))
    p1, p2 = m1 / t1, m2 / t2
    return bp * p1, (bp * math.sqrt(p1 * p2) if p2 else 0.0)
''',
        "xfl.bleu.corpus_statistics with its own mean and penalty (blocked)": '''
import xfl.bleu
def repeated_word_bleu():
    hyp = ["the"] * 7
    refs = ["the cat is on the mat".split(), "there is a cat on the mat".split()]
    out = []
    for big_n in (1, 2):
        stats = xfl.bleu.corpus_statistics([hyp], [refs], max_n=big_n)
        ps = stats.precisions
        mean = 0.0 if min(ps) == 0 else math.exp(sum(math.log(p) for p in ps) / big_n)
        bp = 1.0 if stats.hyp_len > stats.ref_len else math.exp(1 - stats.ref_len / stats.hyp_len)
        out.append(bp * mean)
    return tuple(out)
''',
    },
}
