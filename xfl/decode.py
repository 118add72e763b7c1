"""Autoregressive decoding (chapter 9 samples with it; chapter 6 explains greedy and beam search
and decodes through ``xfl.translation.translate``): greedy search, beam search, and sampling.

Every decoder feeds its own previous outputs back in: step t runs the causal decoder once
on the tokens chosen so far and reads the logits of the last position. (DLStudio 2.5.8's
"inference" instead runs the decoder once on a fixed SOS, EOS, ... stub and never feeds its
chosen words back: its Transformers.py, lines 1079 and 1096.) The encoder runs once per source
batch.

With ``use_cache=True`` (the default) step t runs the decoder on the newest token only: each
layer keeps the keys and values of the earlier positions (``xfl.cache.KVCache``, appended
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

from .attention import trusted_inputs
from .inference import eval_mode
from .model import check_token_ids


def greedy_decode(model: nn.Module, src: Tensor, max_len: int, *, sos: int, eos: int, pad: int = 0,
                  banned: Sequence[int] = (), use_cache: bool = True):
    """Pick the most likely next token until every row has produced EOS or ``max_len`` tokens.

    src ``(B, S)``. PAD, SOS and the ids in ``banned`` (e.g. ``<unk>``) are never chosen; a
    finished row writes only PAD, at no cost. ``use_cache`` decodes with a key-value cache (same
    output, less work). Returns ``(hypotheses, scores)``: B lists of ids, and ``(B,)`` summed
    log-probabilities of the chosen tokens.
    """
    _check(model, src, max_len, sos, eos, pad, banned)
    B, device, never = src.shape[0], src.device, [pad, sos, *banned]
    with eval_mode(model):
        memory, keep = model.encode(src), model.source_mask(src)  # (B, S, D), (B, S): encoded once
        cache = _decoder_cache(model, memory, keep, use_cache)
        tgt = torch.full((B, 1), sos, dtype=torch.long, device=device)  # (B, 1)
        scores = torch.zeros(B, device=device)
        done = torch.zeros(B, dtype=torch.bool, device=device)
        for _ in range(max_len):
            best, token = _next_log_probs(model, tgt, memory, keep, never, cache).max(dim=-1)  # (B,), (B,)
            scores += best.masked_fill(done, 0.0)
            token = token.masked_fill(done, pad)  # a finished row writes only padding
            tgt = torch.cat([tgt, token[:, None]], dim=1)  # (B, t + 1)
            done |= token == eos
            if done.all():
                break
    return [_strip(row, eos, pad) for row in tgt[:, 1:].tolist()], scores


def beam_search(model: nn.Module, src: Tensor, max_len: int, *, sos: int, eos: int, pad: int = 0,
                beam_size: int = 4, length_penalty: float = 0.0, banned: Sequence[int] = (),
                use_cache: bool = True):
    """Keep the ``beam_size`` = K best prefixes of every source sentence: each step, the K best of
    the K·V candidates (a beam's score plus a next token's log-probability) continue their parent
    beams' prefixes and cache rows; a finished beam only adds PAD, at no cost. The search ranks by
    summed log-probability, the final choice by it over ``length ** length_penalty`` (EOS counted;
    0 = the raw sum). Returns ``(hypotheses, scores)`` like ``greedy_decode`` (unnormalised)."""
    _check(model, src, max_len, sos, eos, pad, banned)
    if not _is_int(beam_size) or beam_size < 1:
        raise ValueError(f"beam_size must be an int >= 1, got {beam_size!r}")
    B, K, device, never = src.shape[0], beam_size, src.device, [pad, sos, *banned]
    with eval_mode(model):
        memory = model.encode(src).repeat_interleave(K, dim=0)  # (B*K, S, D): encoded once
        keep = model.source_mask(src).repeat_interleave(K, dim=0)  # (B*K, S)
        cache = _decoder_cache(model, memory, keep, use_cache)
        tgt = torch.full((B * K, 1), sos, dtype=torch.long, device=device)  # (B*K, 1)
        scores = torch.full((B, K), float("-inf"), device=device)
        scores[:, 0] = 0.0  # the K beams start equal: let only the first one expand
        done = torch.zeros(B * K, dtype=torch.bool, device=device)
        first_row = torch.arange(B, device=device)[:, None] * K  # (B, 1): sentence b's first beam
        for _ in range(max_len):
            log_probs = _next_log_probs(model, tgt, memory, keep, never, cache)  # (B*K, V)
            V = log_probs.shape[-1]
            log_probs = torch.where(done[:, None], _only_pad(log_probs, pad), log_probs)
            candidates = (scores.reshape(-1, 1) + log_probs).view(B, K * V)  # (B, K*V)
            scores, index = candidates.topk(K, dim=-1)  # (B, K)
            rows = (first_row + index // V).flatten()  # (B*K,): each new beam's parent row
            tgt = torch.cat([tgt[rows], (index % V).reshape(-1, 1)], dim=1)  # (B*K, t + 1)
            if cache is not None:
                cache.reorder(rows)  # each beam continues its parent's keys and values
            done = done[rows] | (tgt[:, -1] == eos)
            if done.all():
                break
    hyps = [_strip(row, eos, pad) for row in tgt[:, 1:].tolist()]
    lengths = torch.tensor([len(h) + 1 for h in hyps], dtype=torch.float, device=device).view(B, K)
    best = (scores / lengths ** length_penalty).argmax(dim=-1)  # (B,)
    return [hyps[b * K + k] for b, k in enumerate(best.tolist())], scores.gather(1, best[:, None]).squeeze(1)


def sample(model: nn.Module, prefix: Tensor, max_new: int, temperature: float = 1.0,
           top_k: int | None = None, eos: int | None = None, generator: torch.Generator | None = None,
           use_cache: bool = True) -> Tensor:
    """Continue ``prefix (B, L)`` with a decoder-only model by sampling up to ``max_new`` tokens.

    ``temperature`` divides the logits (-> 0 approaches greedy); ``top_k`` keeps only the k
    most likely tokens, and ``top_k=1`` is greedy decoding: each step takes the argmax (the first
    on a tie) and draws nothing from ``generator``. Rows stop growing after ``eos`` (they are
    padded with it). The model sees the last ``model.config.max_len`` tokens. ``use_cache`` keeps
    a key-value cache (causal models) until the sequence outgrows ``max_len``; from then on every
    step re-runs the window, as without a cache (its positions shift, so cached keys would be
    stale). Same tokens either way for the same ``generator``. Returns ``(B, L + n)`` long, with
    n <= max_new.
    """
    _check_sampling(model, prefix, max_new, temperature, top_k, eos)
    if max_new == 0:
        return prefix
    (B, L) = prefix.shape
    tokens = torch.empty(B, L + max_new, dtype=torch.long, device=prefix.device)  # (B, L + max_new)
    tokens[:, :L] = prefix
    # inference_mode: no autograd bookkeeping per op; the prefix is checked, the rest are the model's ids
    with eval_mode(model), torch.inference_mode(), trusted_inputs():
        end = _fill(model, tokens, L, temperature, top_k, eos, generator, use_cache)
    return tokens if end == tokens.shape[1] else tokens[:, :end].clone()


def _fill(model: nn.Module, tokens: Tensor, start: int, temperature: float, top_k: int | None,
          eos: int | None, generator: torch.Generator | None, use_cache: bool) -> int:
    """``sample``'s loop: write tokens into columns ``start, start + 1, ...`` of ``tokens (B, T)``
    (the first ``start`` hold the prefix); return how many columns are filled (fewer than T when
    every row has produced ``eos``)."""
    window, done = model.config.max_len, torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    cache = model.new_cache() if use_cache and _can_cache(model) else None
    for t in range(start, tokens.shape[1]):
        if cache is not None and t <= window:
            logits = model.forward_step(tokens[:, len(cache):t], cache)[:, -1]  # (B, V): new tokens only
        else:
            logits = model(tokens[:, max(0, t - window):t])[:, -1]  # (B, V): the last max_len tokens again
        nxt = _next_token(logits, temperature, top_k, generator)  # (B,)
        if eos is not None:
            nxt = nxt.masked_fill(done, eos)  # a finished row repeats EOS
            done |= nxt == eos
        tokens[:, t] = nxt
        if eos is not None and done.all():
            return t + 1
    return tokens.shape[1]


def sequence_log_prob(model: nn.Module, src: Tensor, hypothesis: list[int], sos: int,
                      eos: int | None = None) -> float:
    """Teacher-forced log P(hypothesis [+ EOS] | src) for one source ``(1, S)``: one causal pass."""
    target = list(hypothesis) + ([] if eos is None else [eos])
    tgt = torch.tensor([[sos] + target], device=src.device)  # (1, T+1)
    with eval_mode(model):
        log_probs = model(src, tgt[:, :-1]).float().log_softmax(-1)  # (1, T, V)
    return float(log_probs[0].gather(1, tgt[0, 1:, None]).sum())


# ------------------------------------------------------------------ shared steps
def _next_token(logits: Tensor, temperature: float, top_k: int | None,
                generator: torch.Generator | None) -> Tensor:
    """One token per row of ``logits (B, V)``: the argmax for ``top_k=1``, else a draw from the
    softmax of the ``top_k`` best logits over ``temperature``. Returns ``(B,)`` long."""
    if top_k == 1:
        return logits.argmax(dim=-1)  # greedy: dividing by the temperature changes no argmax
    logits = logits.float() / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0]


def _next_log_probs(model: nn.Module, tgt: Tensor, memory: Tensor, src_keep: Tensor,
                    never: list[int], cache=None) -> Tensor:
    """Log-probabilities of the next token after each row of ``tgt (B, t)``: ``(B, V)``.

    Without a cache the decoder re-runs on all of ``tgt``; with one, only on the tokens not yet
    cached (the newest). Tokens in ``never`` (PAD, SOS, banned ones) are made impossible.
    """
    if cache is None:
        logits = model.decode(tgt, memory, src_keep)[:, -1]  # (B, V): the whole prefix again
    else:
        logits = model.decode_step(tgt[:, len(cache):], cache)[:, -1]  # (B, V): the newest token
    log_probs = logits.float().log_softmax(dim=-1)
    log_probs[:, never] = float("-inf")
    return log_probs


def _decoder_cache(model: nn.Module, memory: Tensor, src_keep: Tensor, use_cache: bool):
    """The model's key-value cache for this memory (``xfl.cache``), or None (not asked for, or
    the model has none)."""
    if not (use_cache and hasattr(model, "decoder_cache")):
        return None
    return model.decoder_cache(memory, src_keep)


def _only_pad(log_probs: Tensor, pad: int) -> Tensor:
    """Log-probabilities ``(N, V)`` of a finished beam: PAD costs nothing, anything else is impossible."""
    frozen = torch.full_like(log_probs, float("-inf"))
    frozen[:, pad] = 0.0
    return frozen


def _strip(seq: list[int], eos: int, pad: int) -> list[int]:
    """Token ids up to (not including) the first EOS, padding removed."""
    out = []
    for t in seq:
        if t == eos:
            break
        if t != pad:
            out.append(t)
    return out


def _can_cache(model: nn.Module) -> bool:
    """A causal decoder-only model with ``new_cache`` / ``forward_step``."""
    return hasattr(model, "new_cache") and getattr(model.config, "causal", True)


# ------------------------------------------------------------------ input checks
def _check(model: nn.Module, src: Tensor, max_len: int, sos: int, eos: int, pad: int,
           banned: Sequence[int]) -> None:
    if not isinstance(src, Tensor) or src.ndim != 2 or 0 in src.shape:
        shape = tuple(src.shape) if isinstance(src, Tensor) else type(src).__name__
        raise ValueError(f"src must be (B, S) token ids with B >= 1 and S >= 1, got shape {shape}")
    if src.numel() and _vocab(model, "src_vocab"):
        check_token_ids(src, _vocab(model, "src_vocab"), "src token ids", read_back=True)
    if not _is_int(max_len) or max_len < 1:
        raise ValueError(f"max_len must be an int >= 1, got {max_len!r}")
    positions = getattr(getattr(model, "config", None), "max_len", None)
    if positions and max_len > positions:
        raise ValueError(f"max_len={max_len} tokens to decode exceeds the model's max_len={positions} "
                         f"positions; expected max_len <= {positions}")
    if positions and src.shape[1] > positions:
        raise ValueError(f"src has {src.shape[1]} tokens, more than the model's max_len={positions} positions")
    _check_ids(_vocab(model, "tgt_vocab"), sos=sos, eos=eos, pad=pad, banned=tuple(banned))


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


def _check_ids(vocab: int | None, **ids) -> None:
    """Each named token id (or sequence of ids) must be an int in ``[0, vocab)``."""
    for name, value in ids.items():
        for i in (value if isinstance(value, (list, tuple)) else [value]):
            if not _is_int(i) or i < 0 or (vocab and i >= vocab):
                expected = f"[0, {vocab - 1}] (a vocabulary of {vocab})" if vocab else ">= 0"
                raise ValueError(f"{name} must be an int token id in {expected}, got {i!r}")


def _vocab(model: nn.Module, field: str) -> int | None:
    """``model.config.<field>`` (a vocabulary size), or None for a model without one."""
    return getattr(getattr(model, "config", None), field, None)


def _is_int(x) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool)
