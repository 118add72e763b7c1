"""Autoregressive decoding (chapter 9 samples with it; chapter 6 explains greedy and beam search
and decodes through ``xfl.translation.translate``): greedy search, beam search, and sampling.

Every decoder feeds its own previous outputs back in: step t runs the causal decoder once
on the tokens chosen so far and reads the logits of the last position. (DLStudio 2.5.8's
"inference" instead runs the decoder once on a fixed SOS, EOS, ... stub and never feeds its
chosen words back: its Transformers.py, lines 1079 and 1096.) The encoder runs once per source
batch.

With ``use_cache=True`` (the default) step t runs the decoder on the newest token only: each
layer keeps the keys and values of the earlier positions (``xfl.attention.KVCache``, appended
one position a step) and the cross-attention keys and values of the memory (projected once per
source batch); beam search moves the cache rows with their parent beams. Same tokens, same
scores (to rounding) as ``use_cache=False``, which re-runs the whole prefix (chapter 6).
Models without the cache methods (``decoder_cache``/``decode_step``, ``new_cache``/
``forward_step``) are decoded without one.

Results are lists of token ids without SOS and without EOS, plus the total log-probability
of each returned sequence (EOS included when it was produced).
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Sequence

import torch
from torch import Tensor, nn

from .model import check_token_ids
from .modes import eval_mode


def _vocab(model: nn.Module, field: str) -> int | None:
    """``model.config.<field>`` (a vocabulary size), or None for a model without one."""
    return getattr(getattr(model, "config", None), field, None)


def _check_ids(vocab: int | None, **ids) -> None:
    """Each named token id (or sequence of ids) must be an int in ``[0, vocab)``."""
    for name, value in ids.items():
        for i in (value if isinstance(value, (list, tuple)) else [value]):
            if not _is_int(i) or i < 0 or (vocab and i >= vocab):
                expected = f"[0, {vocab - 1}] (a vocabulary of {vocab})" if vocab else ">= 0"
                raise ValueError(f"{name} must be an int token id in {expected}, got {i!r}")


def _is_int(x) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool)


def _check(model: nn.Module, src: Tensor, max_len: int, sos: int, eos: int, pad: int,
           banned: Sequence[int]) -> None:
    if not isinstance(src, Tensor) or src.ndim != 2 or src.shape[1] == 0:
        shape = tuple(src.shape) if isinstance(src, Tensor) else type(src).__name__
        raise ValueError(f"src must be (B, S) token ids with S >= 1, got shape {shape}")
    if src.numel() and _vocab(model, "src_vocab"):
        check_token_ids(src, _vocab(model, "src_vocab"), "src token ids", read_back=True)
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    _check_ids(_vocab(model, "tgt_vocab"), sos=sos, eos=eos, pad=pad, banned=tuple(banned))


def _strip(seq: list[int], eos: int, pad: int) -> list[int]:
    """Token ids up to (not including) the first EOS, padding removed."""
    out = []
    for t in seq:
        if t == eos:
            break
        if t != pad:
            out.append(t)
    return out


def _decoder_cache(model: nn.Module, memory: Tensor, src_keep: Tensor, use_cache: bool):
    """The model's key-value cache for this memory, or None (not asked for, or not supported)."""
    if not (use_cache and hasattr(model, "decoder_cache")):
        return None
    return model.decoder_cache(memory, src_keep)


def _next_log_probs(model: nn.Module, tgt: Tensor, memory: Tensor, src_keep: Tensor,
                    never: tuple[int, ...], cache=None) -> Tensor:
    """Log-probabilities of the next token after each row of ``tgt (B, t)``: ``(B, V)``.

    Without a cache the decoder re-runs on all of ``tgt``; with one, only on the tokens not yet
    cached (the newest). Tokens in ``never`` (PAD, SOS) are made impossible.
    """
    if cache is None:
        logits = model.decode(tgt, memory, src_keep)[:, -1]  # (B, V)
    else:
        logits = model.decode_step(tgt[:, len(cache):], cache)[:, -1]  # (B, V)
    log_probs = logits.float().log_softmax(dim=-1)
    log_probs[:, list(never)] = float("-inf")
    return log_probs


def greedy_decode(model: nn.Module, src: Tensor, max_len: int, sos: int, eos: int, pad: int = 0,
                  banned: Sequence[int] = (), use_cache: bool = True):
    """Pick the most likely next token until every row has produced EOS or ``max_len`` tokens.

    src ``(B, S)``. PAD, SOS and the ids in ``banned`` (e.g. ``<unk>``) are never chosen.
    ``use_cache`` decodes with a key-value cache (same output, less work). Returns
    ``(hypotheses, scores)``: B lists of ids, and ``(B,)`` summed log-probabilities of the
    chosen tokens.
    """
    _check(model, src, max_len, sos, eos, pad, banned)
    with eval_mode(model):
        tgt, scores = _greedy(model, src, max_len, sos, eos, pad, (pad, sos, *banned), use_cache)
    return [_strip(row, eos, pad) for row in tgt[:, 1:].tolist()], scores


def _greedy(model: nn.Module, src: Tensor, max_len: int, sos: int, eos: int, pad: int,
            never: tuple[int, ...], use_cache: bool):
    """Greedy decoding's tokens ``(B, 1 + t)`` (SOS first) and summed log-probabilities ``(B,)``."""
    memory, keep = model.encode(src), model.source_mask(src)
    cache = _decoder_cache(model, memory, keep, use_cache)
    tgt = torch.full((src.shape[0], 1), sos, dtype=torch.long, device=src.device)  # (B, 1)
    scores = torch.zeros(src.shape[0], device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        log_probs = _next_log_probs(model, tgt, memory, keep, never, cache)  # (B, V)
        best, token = log_probs.max(dim=-1)
        scores += best.masked_fill(done, 0.0)
        token = token.masked_fill(done, pad)  # finished rows only pad
        tgt = torch.cat([tgt, token[:, None]], dim=1)
        done |= token == eos
        if done.all():
            break
    return tgt, scores


def _advance_beams(scores: Tensor, log_probs: Tensor, done: Tensor, pad: int, k: int):
    """One beam step. scores ``(B, K)``, log_probs ``(B*K, V)``, done ``(B*K,)``.

    A finished beam may only extend itself with PAD at no cost, so it keeps its score.
    Returns new scores ``(B, K)``, the parent beam ``(B, K)`` and the new token ``(B, K)``.
    """
    V = log_probs.shape[-1]
    frozen = torch.full_like(log_probs, float("-inf"))
    frozen[:, pad] = 0.0
    log_probs = torch.where(done[:, None], frozen, log_probs)
    candidates = scores.reshape(-1, 1) + log_probs  # (B*K, V)
    top, index = candidates.view(scores.shape[0], k * V).topk(k, dim=-1)  # (B, K)
    return top, index // V, index % V


def beam_search(model: nn.Module, src: Tensor, max_len: int, sos: int, eos: int, pad: int = 0,
                beam_size: int = 4, length_penalty: float = 0.0, banned: Sequence[int] = (),
                use_cache: bool = True):
    """Keep the ``beam_size`` best partial translations of every source sentence (batched).

    Beams are ranked by summed log-probability; the final choice divides by
    ``length ** length_penalty`` (0 = no normalisation). PAD, SOS and ``banned`` are never
    chosen. ``use_cache`` decodes with a key-value cache whose rows follow their parent beams
    (same output, less work). Returns ``(hypotheses, scores)`` like ``greedy_decode`` (scores
    are the unnormalised log-probabilities).
    """
    _check(model, src, max_len, sos, eos, pad, banned)
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    with eval_mode(model):
        tokens, scores = _beams(model, src, max_len, sos, eos, pad, beam_size, (pad, sos, *banned),
                                use_cache)
    return _best_beams(tokens, scores, eos, pad, beam_size, length_penalty)


def _beams(model: nn.Module, src: Tensor, max_len: int, sos: int, eos: int, pad: int, K: int,
           never: tuple[int, ...], use_cache: bool):
    """Every beam's tokens ``(B*K, t)`` (SOS dropped) and summed log-probabilities ``(B, K)``."""
    B = src.shape[0]
    memory = model.encode(src).repeat_interleave(K, dim=0)  # (B*K, S, D): encode once
    keep = model.source_mask(src).repeat_interleave(K, dim=0)  # (B*K, S)
    cache = _decoder_cache(model, memory, keep, use_cache)
    tgt = torch.full((B * K, 1), sos, dtype=torch.long, device=src.device)
    scores = torch.full((B, K), float("-inf"), device=src.device)
    scores[:, 0] = 0.0  # all beams start equal: let only the first one expand
    done = torch.zeros(B * K, dtype=torch.bool, device=src.device)
    offsets = (torch.arange(B, device=src.device) * K)[:, None]  # (B, 1)
    for _ in range(max_len):
        log_probs = _next_log_probs(model, tgt, memory, keep, never, cache)  # (B*K, V)
        scores, parent, token = _advance_beams(scores, log_probs, done, pad, K)
        rows = (parent + offsets).flatten()  # (B*K,)
        tgt = torch.cat([tgt[rows], token.reshape(-1, 1)], dim=1)
        if cache is not None:
            cache.reorder(rows)  # each beam continues its parent's keys and values
        done = done[rows] | (token.flatten() == eos)
        if done.all():
            break
    return tgt[:, 1:], scores


def _best_beams(tokens: Tensor, scores: Tensor, eos: int, pad: int, k: int, length_penalty: float):
    """Choose one beam per sentence; tokens ``(B*K, T)``, scores ``(B, K)``."""
    hypotheses = [_strip(row, eos, pad) for row in tokens.tolist()]
    lengths = torch.tensor([len(h) + 1 for h in hypotheses], dtype=torch.float, device=scores.device)
    ranking = scores / lengths.view_as(scores) ** length_penalty
    best = ranking.argmax(dim=-1)  # (B,)
    chosen = [hypotheses[b * k + int(i)] for b, i in enumerate(best)]
    return chosen, scores.gather(1, best[:, None]).squeeze(1)


def sequence_log_prob(model: nn.Module, src: Tensor, hypothesis: list[int], sos: int,
                      eos: int | None = None) -> float:
    """Teacher-forced log P(hypothesis [+ EOS] | src) for one source ``(1, S)``: one causal pass."""
    target = list(hypothesis) + ([] if eos is None else [eos])
    tgt = torch.tensor([[sos] + target], device=src.device)  # (1, T+1)
    with eval_mode(model):
        log_probs = model(src, tgt[:, :-1]).float().log_softmax(-1)  # (1, T, V)
    return float(log_probs[0].gather(1, tgt[0, 1:, None]).sum())


def sample(model: nn.Module, prefix: Tensor, max_new: int, temperature: float = 1.0,
           top_k: int | None = None, eos: int | None = None, generator: torch.Generator | None = None,
           use_cache: bool = True):
    """Continue ``prefix (B, L)`` with a decoder-only model by sampling ``max_new`` tokens.

    ``temperature`` divides the logits (-> 0 approaches greedy); ``top_k`` keeps only the k
    most likely tokens. Rows stop growing after ``eos`` (they are padded with it). The model
    sees the last ``model.config.max_len`` tokens. ``use_cache`` keeps a key-value cache (causal
    models) until the sequence outgrows ``max_len``; from then on every step re-runs the window,
    as without a cache (its positions shift, so cached keys would be stale). Same tokens either
    way for the same ``generator``. Returns ``(B, L + n)`` with n <= max_new.
    """
    _check_sampling(model, prefix, max_new, temperature, top_k, eos)
    with eval_mode(model):
        cache = model.new_cache() if use_cache and _can_cache(model) else None
        return _sample(model, prefix, max_new, temperature, top_k, eos, generator, cache)


def _check_sampling(model: nn.Module, prefix: Tensor, max_new: int, temperature: float,
                    top_k: int | None, eos: int | None) -> None:
    if not isinstance(prefix, Tensor) or prefix.ndim != 2 or prefix.shape[1] == 0:
        shape = tuple(prefix.shape) if isinstance(prefix, Tensor) else type(prefix).__name__
        raise ValueError(f"prefix must be (B, L) token ids with L >= 1 (at least one token to "
                         f"continue), got shape {shape}")
    vocab = _vocab(model, "vocab_size")
    if vocab:
        check_token_ids(prefix, vocab, "prefix token ids", read_back=True)
    if not _is_int(max_new) or max_new < 0:
        raise ValueError(f"max_new must be an int >= 0 (tokens to add), got {max_new!r}")
    if not (isinstance(temperature, Real) and 0 < temperature < math.inf):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if eos is not None:
        _check_ids(vocab, eos=eos)


def _can_cache(model: nn.Module) -> bool:
    """A causal decoder-only model with ``new_cache`` / ``forward_step``."""
    return hasattr(model, "new_cache") and getattr(model.config, "causal", True)


def _last_logits(model: nn.Module, tokens: Tensor, cache) -> Tensor:
    """``(B, V)`` logits after ``tokens (B, t)``: the uncached tokens through the cache while
    t <= max_len, else one pass over the last max_len tokens."""
    if cache is None or tokens.shape[1] > model.config.max_len:
        return model(tokens[:, -model.config.max_len:])[:, -1]
    return model.forward_step(tokens[:, len(cache):], cache)[:, -1]


def _next_token_logits(model: nn.Module, tokens: Tensor, temperature: float, top_k: int | None,
                       cache=None) -> Tensor:
    """``(B, V)`` logits of the token after ``tokens``, tempered and cut to the ``top_k`` best."""
    logits = _last_logits(model, tokens, cache).float() / temperature  # (B, V)
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits


def _sample(model, tokens: Tensor, max_new: int, temperature: float, top_k, eos, generator,
            cache) -> Tensor:
    done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    for _ in range(max_new):
        logits = _next_token_logits(model, tokens, temperature, top_k, cache)  # (B, V)
        nxt = torch.multinomial(logits.softmax(-1), 1, generator=generator)  # (B, 1)
        if eos is not None:
            nxt = nxt.masked_fill(done[:, None], eos)
            done |= nxt[:, 0] == eos
        tokens = torch.cat([tokens, nxt], dim=1)
        if eos is not None and done.all():
            break
    return tokens
