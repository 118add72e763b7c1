"""The key-value cache (xfl.cache: KVCache, decode_step / forward_step, use_cache=True):
every cached step equals the uncached pass, and the decoders give the same tokens and scores.

Models are float64 (as in tests/test_decode.py), so the two paths agree to ~1e-12.
"""

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from test_decode import EOS, PAD, SOS, random_model, sources
from xfl.attention import MultiHeadAttention, causal_mask, causal_padding_mask, newest_queries_mask
from xfl.cache import (KVCache, StackCache, cross_attention_step, memory_cache, new_stack_cache,
                       self_attention_step)
from xfl.decode import beam_search, greedy_decode, sample
from xfl.model import GPT, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer, TokenEmbedding

NORMS = pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])


def stopping_model(norm_first=True, seed=1):
    """A random float64 encoder-decoder whose EOS output row is word 3's embedding: it tends to
    stop after a 3, so rows (and beams) finish at different steps."""
    torch.manual_seed(seed)
    cfg = Seq2SeqConfig(src_vocab=9, tgt_vocab=9, d_model=16, num_heads=2, num_encoder_layers=1,
                        num_decoder_layers=2, dropout=0.0, max_len=16, norm_first=norm_first,
                        tie_output=False)
    model = Seq2SeqTransformer(cfg).double()
    with torch.no_grad():
        model.output.weight.mul_(4)
        model.output.weight[EOS] = 4 * model.tgt_embed.table.weight[3]
    return model.eval()


def gpt_model(positions="sinusoidal", norm_first=True, max_len=8, causal=True, seed=0):
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=2, max_len=max_len, dropout=0.0,
                    positions=positions, norm_first=norm_first, causal=causal)
    return GPT(cfg).double().eval()


def close(a, b):
    torch.testing.assert_close(a, b, rtol=0, atol=1e-9)


# ------------------------------------------------------------------------- pieces
def test_kv_cache_appends_and_reorders_rows():
    cache, k = KVCache(), torch.arange(2 * 3 * 4.0).view(2, 1, 3, 4)  # (B, h, L, d_h)
    keys, values = cache.append(k, -k)
    assert len(cache) == 3 and torch.equal(keys, k)
    keys, values = cache.append(k[:, :, :1], -k[:, :, :1])
    assert keys.shape == (2, 1, 4, 4) and torch.equal(values, -keys)
    cache.reorder(torch.tensor([1, 1]))
    assert torch.equal(cache.keys[0], cache.keys[1]) and torch.equal(cache.keys[0, :, :3], k[1])
    with pytest.raises(ValueError, match=r"cached \(B, heads\) = \(2, 1\)"):
        cache.append(k[:1], k[:1])


def test_kv_cache_grows_past_its_buffer_and_keeps_every_position():
    """The buffer starts at 64 positions and doubles (64 -> 128 -> 256): nothing is lost."""
    cache, k = KVCache(), torch.randn(2, 3, 150, 4)  # (B, h, t, d_h)
    cache.append(k[:, :, :5], -k[:, :, :5])  # a prompt, then one position a step
    for t in range(5, 150):
        keys, values = cache.append(k[:, :, t:t + 1], -k[:, :, t:t + 1])
    assert len(cache) == 150 and torch.equal(keys, k) and torch.equal(values, -k)
    cache.reorder(torch.tensor([1, 0]))
    assert torch.equal(cache.keys, k.flip(0)) and torch.equal(cache.values, -k.flip(0))


class _WrittenElements(TorchDispatchMode):
    """Counts the elements every operation writes (allocations and views left out)."""

    def __init__(self):
        super().__init__()
        self.written = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if "empty" not in func.__name__ and not func.is_view:
            self.written += sum(x.numel() for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor))
        return out


def test_reorder_moves_the_used_positions_as_index_select_on_the_whole_buffer_did():
    cache, k = KVCache(), torch.randn(5, 2, 7, 3)  # (B, h, t, d_h): 7 used of 64 positions
    cache.append(k, -k)
    rows = torch.tensor([4, 0, 0, 2, 1, 3])  # more rows than before, as a beam's first step
    cache.reorder(rows)
    assert torch.equal(cache.keys, k.index_select(0, rows)) and torch.equal(cache.values, -k[rows])
    more = torch.randn(6, 2, 1, 3)
    keys, _ = cache.append(more, more)  # the capacity is kept: appending still works
    assert torch.equal(keys, torch.cat([k[rows], more], dim=2))


def test_reorder_copies_only_the_used_positions_not_the_buffer():
    """7 used positions of a 64-position buffer: a reorder writes keys and values of 7 (twice at
    most: the selection, then its copy into the new buffer), never of 64."""
    cache, k = KVCache(), torch.randn(4, 2, 7, 3)
    cache.append(k, k)
    stack = StackCache([cache])
    stack.extend(torch.ones(4, 7, dtype=torch.bool))  # keep (4, 7) in a 64-position buffer
    counter, rows = _WrittenElements(), torch.tensor([3, 2, 1, 0])
    with counter:
        stack.reorder(rows)
    used = 2 * k.numel() + 4 * 7  # keys, values and keep of the used positions
    assert used < counter.written <= 2 * used, counter.written  # whole buffers: 2*4*2*64*3 + 4*64
    assert torch.equal(stack.keep, torch.ones(4, 7, dtype=torch.bool))


def test_a_stack_cache_builds_a_mask_only_where_a_position_is_padding():
    ones = lambda L: torch.ones(2, L, dtype=torch.bool)  # (B, L) keep-mask of real tokens
    cache = StackCache([])
    assert cache.extend(ones(3)) == (None, True)  # the prompt: causal, unbuilt
    assert cache.extend(ones(1)) == (None, False)  # one new position sees every cached one
    mask, is_causal = cache.extend(ones(2))  # two new positions after cached ones: built
    assert torch.equal(mask, newest_queries_mask(ones(6), 2)) and not is_causal
    mask, _ = cache.extend(torch.tensor([[True], [False]]))  # row 1 writes padding
    assert torch.equal(mask, newest_queries_mask(cache.keep, 1)) and cache.keep.shape == (2, 7)
    mask, _ = cache.extend(ones(1))  # the padding stays cached: still masked
    assert mask.shape == (2, 1, 1, 8) and not mask[1, 0, 0, 6] and mask[1, 0, 0, 7]


def test_newest_queries_mask_is_the_last_rows_of_the_causal_padding_mask():
    tokens = torch.tensor([[3, 4, 5, PAD, 6], [PAD, 3, 4, 5, 6]])
    full = causal_padding_mask(tokens, PAD)  # (B, 1, 5, 5)
    for n in range(1, 6):
        assert torch.equal(newest_queries_mask(tokens != PAD, n), full[:, :, -n:])
    with pytest.raises(ValueError, match="num_queries must lie in"):
        newest_queries_mask(tokens != PAD, 6)


def test_token_embedding_at_a_start_position():
    embed = TokenEmbedding(9, 8, max_len=6, dropout=0.0, pad_id=PAD, positions="learned")
    tokens = torch.tensor([[3, 4, 5, 6]])
    assert torch.equal(embed(tokens[:, 2:], start=2), embed(tokens)[:, 2:])
    with pytest.raises(ValueError, match="sequence length 7 exceeds max_len=6"):
        embed(tokens, start=3)


def test_a_stack_cache_refuses_a_memory_that_does_not_fit():
    model, src = stopping_model(), sources()
    memory, keep = model.encode(src), model.source_mask(src)
    with pytest.raises(ValueError, match="memory and memory_keep must be given together"):
        new_stack_cache(model.decoder, memory)
    with pytest.raises(ValueError, match="memory must be given exactly when the block was built with cross=True"):
        new_stack_cache(model.decoder)
    with pytest.raises(ValueError, match="memory must be given exactly when the block was built with cross=True"):
        new_stack_cache(model.encoder, memory, keep)
    with pytest.raises(ValueError, match="the cache is empty"):
        model.decoder_cache(memory, keep).bytes_per_token()


def test_attention_step_by_step_equals_one_causal_pass():
    torch.manual_seed(0)
    mha, x = MultiHeadAttention(16, 4).double().eval(), torch.randn(3, 6, 16, dtype=torch.double)
    full = mha(x, mask=causal_mask(6))
    cache = KVCache()
    steps = [self_attention_step(mha, x[:, :2], cache, causal_mask(2))]  # a two-token prefix, then one by one
    steps += [self_attention_step(mha, x[:, t:t + 1], cache) for t in range(2, 6)]
    close(torch.cat(steps, dim=1), full)
    memory = torch.randn(3, 4, 16, dtype=torch.double)
    close(cross_attention_step(mha, x, memory_cache(mha, memory)), mha(x, memory, memory))


# ------------------------------------------------------------------- model steps
@NORMS
def test_decode_step_equals_decode_at_every_position_padding_included(norm_first):
    """Rows that finished (EOS, then PAD) and a padded source: every position's logits agree."""
    model, src = random_model(norm_first=norm_first), sources()
    tgt = torch.tensor([[SOS, 3, 4, 5, 6], [SOS, 4, EOS, PAD, PAD], [SOS, EOS, PAD, PAD, PAD],
                        [SOS, 6, 6, 6, 6]])
    memory, keep = model.encode(src), model.source_mask(src)
    full = model.decode(tgt, memory, keep)  # (B, 5, V)
    cache = model.decoder_cache(memory, keep)
    steps = torch.cat([model.decode_step(tgt[:, t:t + 1], cache) for t in range(5)], dim=1)
    assert len(cache) == 5 and cache.layers[0].keys.shape == (4, 2, 5, 8)
    close(steps, full)


@NORMS
@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_gpt_forward_step_equals_forward(positions, norm_first):
    model = gpt_model(positions, norm_first)
    tokens = torch.tensor([[PAD, 3, 4, 5, 6, 7, 8, 9], [3, 4, 5, 6, 7, 8, 9, 10]])  # one left-padded
    cache = model.new_cache()
    steps = [model.forward_step(tokens[:, :3], cache)]  # the prompt in one pass, then token by token
    steps += [model.forward_step(tokens[:, t:t + 1], cache) for t in range(3, 8)]
    close(torch.cat(steps, dim=1), model(tokens))


def test_a_non_causal_gpt_has_no_cache():
    with pytest.raises(ValueError, match="causal=True, got causal=False"):
        gpt_model(causal=False).new_cache()


# -------------------------------------------------------------------- decoders
def never_decode(*args):
    raise AssertionError("the cached path re-ran the decoder over the whole prefix")


def assert_same_decoding(decode, model, src, **kw):
    """Cached and uncached decoding give the same hypotheses and scores; returns them."""
    hyps, scores = decode(model, src, sos=SOS, eos=EOS, use_cache=False, **kw)
    model.decode = never_decode  # the cached path must not use it
    cached_hyps, cached_scores = decode(model, src, sos=SOS, eos=EOS, **kw)  # use_cache=True by default
    del model.decode
    assert cached_hyps == hyps
    close(cached_scores, scores)
    return hyps


@NORMS
def test_greedy_with_and_without_cache(norm_first):
    model, src = stopping_model(norm_first), sources(B=6, S=5)  # row 1 is padded
    hyps = assert_same_decoding(greedy_decode, model, src, max_len=10)
    assert len({len(h) for h in hyps}) > 2 and max(map(len, hyps)) == 10  # finished and live rows
    assert_same_decoding(greedy_decode, random_model(seed=2, norm_first=norm_first), src, max_len=10,
                         banned=(3,))


@NORMS
@pytest.mark.parametrize("beam_size", [1, 2, 3, 5])
def test_beam_search_with_and_without_cache(norm_first, beam_size):
    model, src = stopping_model(norm_first), sources(B=6, S=5)
    hyps = assert_same_decoding(beam_search, model, src, max_len=10, beam_size=beam_size,
                                length_penalty=0.6)
    assert len({len(h) for h in hyps}) > 1  # finished beams (EOS) carried along with live ones


def test_beam_cache_rows_follow_their_parents():
    """A wide beam on a padded batch: the beams reorder at every step (parents change)."""
    model, src = stopping_model(seed=3), sources(B=3, S=6)
    src[2, 2:] = PAD
    assert_same_decoding(beam_search, model, src, max_len=12, beam_size=8, banned=(4,))


@NORMS
@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
@pytest.mark.parametrize("max_new", [4, 15])  # within max_len = 8, and far beyond it
def test_sample_with_and_without_cache(positions, norm_first, max_new):
    model, prefix = gpt_model(positions, norm_first), torch.tensor([[1, 5], [1, 6], [PAD, 7]])
    draw = lambda **kw: sample(model, prefix, max_new, generator=torch.Generator().manual_seed(3), **kw)
    uncached = draw(use_cache=False)
    assert torch.equal(draw(), uncached) and uncached.shape == (3, 2 + max_new)
    stopped = draw(temperature=0.5, top_k=3, eos=4)
    assert torch.equal(stopped, draw(temperature=0.5, top_k=3, eos=4, use_cache=False))
    assert not stopped.is_inference()


@NORMS
def test_greedy_sampling_is_the_argmax_of_the_full_model_and_draws_nothing(norm_first):
    """top_k=1: at every step (cached, then past max_len = 8; a left-padded row) the token is the
    argmax of the uncached model's logits on the last 8 tokens; the generator is left untouched."""
    model, prefix = gpt_model("learned", norm_first), torch.tensor([[1, 5, 6], [PAD, 7, 3], [4, 4, 4]])
    generator = torch.Generator().manual_seed(3)
    state = generator.get_state()
    tokens = sample(model, prefix, 12, temperature=0.3, top_k=1, generator=generator)
    assert torch.equal(generator.get_state(), state) and tokens.shape == (3, 15) and tokens.dtype == torch.long
    assert not tokens.is_inference()  # made under torch.inference_mode, returned as an ordinary tensor
    for t in range(3, 15):
        assert torch.equal(tokens[:, t], model(tokens[:, max(0, t - 8):t])[:, -1].argmax(-1)), t
    assert torch.equal(sample(model, prefix, 12, top_k=1, use_cache=False), tokens)
    eos = int(tokens[0, 5])  # row 0 alone, stopping at its first eos: the tokens up to it, then none
    end = 3 + int((tokens[0, 3:] == eos).nonzero()[0, 0]) + 1
    stopped = sample(model, prefix[:1], 12, top_k=1, eos=eos)
    assert torch.equal(stopped, tokens[:1, :end]) and end < 15 and not stopped.is_inference()


def test_sample_from_a_prefix_longer_than_max_len():
    model = gpt_model(max_len=4)
    prefix = torch.randint(3, 11, (2, 6), generator=torch.Generator().manual_seed(0))
    draw = lambda cache: sample(model, prefix, 5, generator=torch.Generator().manual_seed(1), use_cache=cache)
    assert torch.equal(draw(True), draw(False))


def test_models_without_a_cache_decode_as_before():
    """A non-causal GPT and a model with only ``forward`` are sampled without a cache."""
    model, prefix = gpt_model(causal=False), torch.tensor([[1, 5]])
    draw = lambda m, cache: sample(m, prefix, 5, generator=torch.Generator().manual_seed(1), use_cache=cache)
    assert torch.equal(draw(model, True), draw(model, False))

    class ForwardOnly(nn.Module):
        config = model.config

        def forward(self, tokens):
            return model(tokens)

    assert torch.equal(draw(ForwardOnly(), True), draw(model, False))
