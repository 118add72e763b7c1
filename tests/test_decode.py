"""xfl.decode: greedy == beam(1), beam == exhaustive search, scores == one teacher-forced pass
(with and without the key-value cache; tests/test_kv_cache.py compares the two paths)."""

import itertools

import pytest
import torch

from xfl.decode import beam_search, greedy_decode, sample, sequence_log_prob
from xfl.model import GPT, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer

PAD, SOS, EOS = 0, 1, 2



def random_model(vocab=9, seed=0, norm_first=True):
    torch.manual_seed(seed)
    cfg = Seq2SeqConfig(src_vocab=vocab, tgt_vocab=vocab, d_model=16, num_heads=2,
                        num_encoder_layers=1, num_decoder_layers=2, dropout=0.0, max_len=16,
                        norm_first=norm_first)
    model = Seq2SeqTransformer(cfg).double()
    with torch.no_grad():  # sharpen the output so EOS and repeats both happen
        model.output.weight.mul_(4)
    return model.eval()


def sources(B=4, S=5, vocab=9, seed=1):
    src = torch.randint(3, vocab, (B, S), generator=torch.Generator().manual_seed(seed))
    if B > 1:
        src[1, 3:] = PAD  # one padded sentence
    return src


def test_greedy_equals_beam_of_one():
    model, src = random_model(), sources()
    g_hyp, g_score = greedy_decode(model, src, max_len=8, sos=SOS, eos=EOS)
    b_hyp, b_score = beam_search(model, src, max_len=8, sos=SOS, eos=EOS, beam_size=1)
    assert g_hyp == b_hyp
    torch.testing.assert_close(g_score, b_score)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("decoder", ["greedy", "beam"])
def test_scores_equal_one_teacher_forced_pass(decoder, use_cache):
    """The incremental log-probabilities add up to the causal model's score of the output."""
    model, src = random_model(), sources()
    if decoder == "greedy":
        hyps, scores = greedy_decode(model, src, max_len=8, sos=SOS, eos=EOS, use_cache=use_cache)
    else:
        hyps, scores = beam_search(model, src, max_len=8, sos=SOS, eos=EOS, beam_size=3,
                                   use_cache=use_cache)
    for b, hyp in enumerate(hyps):
        ended = len(hyp) < 8  # stopped by EOS, not by max_len
        one_pass = sequence_log_prob(model, src[b:b + 1, : int((src[b] != PAD).sum())], hyp,
                                     SOS, EOS if ended else None)
        assert one_pass == pytest.approx(float(scores[b]), abs=1e-9)


def exhaustive_best(model, src, max_len, words):
    """Best (score, output) over all outputs: n < max_len words then EOS, or max_len words
    cut off by the length limit (no EOS)."""
    best = (float("-inf"), None)
    for n in range(max_len + 1):
        for seq in itertools.product(words, repeat=n):
            score = sequence_log_prob(model, src, list(seq), SOS, EOS if n < max_len else None)
            best = max(best, (score, list(seq)))
    return best


@pytest.mark.parametrize("use_cache", [True, False])
def test_wide_beam_finds_the_exact_best_sequence(use_cache):
    model, src = random_model(vocab=5, seed=3), sources(B=1, S=4, vocab=5, seed=4)
    max_len, words = 3, [3, 4]
    # 27 beams keep every prefix alive (3 possible tokens per step, 3 steps): exhaustive
    hyps, scores = beam_search(model, src, max_len=max_len, sos=SOS, eos=EOS, beam_size=27,
                               use_cache=use_cache)
    best_score, best_seq = exhaustive_best(model, src, max_len, words)
    assert float(scores[0]) == pytest.approx(best_score, abs=1e-9)
    assert hyps[0] == best_seq


def test_never_emits_pad_or_sos_and_stops_at_max_len():
    model, src = random_model(), sources()
    hyps, _ = beam_search(model, src, max_len=4, sos=SOS, eos=EOS, beam_size=4)
    assert all(len(h) <= 4 and PAD not in h and SOS not in h and EOS not in h for h in hyps)


def test_sample_is_reproducible_and_respects_top_k():
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=1, max_len=8)).eval()
    prefix = torch.tensor([[1, 5], [1, 6]])
    draw = lambda **kw: sample(gpt, prefix, 12, generator=torch.Generator().manual_seed(7), **kw)
    a, b = draw(), draw()
    assert torch.equal(a, b) and a.shape == (2, 14) and torch.equal(a[:, :2], prefix)
    top1 = draw(top_k=1)  # top-1 sampling is greedy
    logits = gpt(top1[:, -8:-1])[:, -1]
    assert torch.equal(top1[:, -1], logits.argmax(-1))


@pytest.mark.parametrize("decoder", ["greedy", "beam"])
def test_banned_tokens_are_never_chosen(decoder):
    model, src = random_model(seed=2), sources()  # this one repeats a word rather than stop
    decode = greedy_decode if decoder == "greedy" else lambda *a, **k: beam_search(*a, **k, beam_size=3)
    free, _ = decode(model, src, max_len=8, sos=SOS, eos=EOS)
    favourite = max(range(3, 9), key=lambda t: sum(h.count(t) for h in free))
    banned, _ = decode(model, src, max_len=8, sos=SOS, eos=EOS, banned=(favourite,))
    assert any(favourite in h for h in free) and not any(favourite in h for h in banned)
