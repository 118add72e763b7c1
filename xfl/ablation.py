"""Block variants of the decoder-only model trained and measured alike (chapter 10).

One character stream (Tatoeba's Spanish sentences, SOS c1 ... cn EOS, one after another) is cut
into windows of ``length + 1`` tokens, so no batch holds padding. ``train_variant`` trains a
``GPT`` with given ``GPTConfig`` options for a fixed number of steps and measures validation
bits per character (its curve too), parameters, training tokens per second and key-value cache
bytes per token; ``matched_hidden`` picks the feed-forward width that brings a variant to a
target parameter count, so variants are compared at equal parameters.
"""

from __future__ import annotations

import math
import random
import statistics
import unicodedata
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import Tensor, nn

from .attention import causal_mask
from .batches import epoch_rows
from .data.tatoeba import load_pairs
from .data.text import PAD, Vocab
from .model import GPT, MODERN_OPTIONS, GPTConfig, count_parameters
from .norms import RMSNorm
from .runtime import seed_everything
from .seeds import differences, mean_sd
from .timing import Comparison, compare
from .train import TrainConfig, lm_loss, train


@dataclass
class CharStreams:
    """A character vocabulary and the training and validation streams ``(N,)`` of its ids."""

    vocab: Vocab
    train: Tensor
    valid: Tensor


def spanish_characters(max_chars: int = 40, n_valid: int = 500, n_train: int | None = None,
                       seed: int = 0) -> CharStreams:
    """Distinct Spanish sentences of at most ``max_chars`` characters, shuffled with ``seed``:
    the first ``n_valid`` for validation, up to ``n_train`` of the rest for training."""
    spanish = sorted({unicodedata.normalize("NFC", es) for _, es in load_pairs() if len(es) <= max_chars})
    random.Random(seed).shuffle(spanish)
    valid, train_sentences = spanish[:n_valid], spanish[n_valid:][:n_train]
    vocab = Vocab.build((list(s) for s in train_sentences), min_freq=5)
    stream = lambda sentences: torch.tensor([i for s in sentences for i in vocab.encode(list(s))])
    return CharStreams(vocab, stream(train_sentences), stream(valid))


def windows(stream: Tensor, length: int) -> Tensor:
    """``(N,)`` -> ``(W, length + 1)``: consecutive windows, each starting where the last one's
    inputs end (its last token is the next window's first), so every character is a target once."""
    if not isinstance(length, int) or length < 1 or stream.numel() < length + 1:
        raise ValueError(f"length must be an int in [1, {stream.numel() - 1}], got {length!r}")
    return stream.unfold(0, length + 1, length)


def window_batches(all_windows: Tensor, batch_size: int, epoch: int, seed: int = 0) -> list[Tensor]:
    """The batches ``(B, length + 1)`` of one epoch, shuffled by (seed, epoch) only."""
    return [all_windows[rows] for rows in epoch_rows(len(all_windows), batch_size, epoch, seed)]


@torch.no_grad()
def bits_per_char(model: GPT, all_windows: Tensor, batch_size: int = 256) -> float:
    """Mean next-character loss over every target of ``all_windows``, in bits."""
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for k in range(0, len(all_windows), batch_size):
        loss, n = lm_loss(model, all_windows[k:k + batch_size].to(device), pad_id=PAD)
        total, count = total + float(loss) * int(n), count + int(n)
    return total / count / math.log(2)


@dataclass(frozen=True)
class Recipe:
    """Model sizes (``GPTConfig`` fields) and how to train: steps of ``batch`` windows of ``length``."""

    sizes: dict
    length: int
    steps: int
    batch: int
    lr: float
    evals: int = 5  # validation points on each curve
    valid_windows: int | None = None  # None: the whole validation stream
    device: str | None = None


# One recipe per profile, read by chapter 10 (``RECIPES[profile()]``) and bench/modern.py: the
# data (``spanish_characters``'s arguments), the seeds and the ``Recipe``.
RECIPES = {
    "full": dict(data=dict(max_chars=100, n_valid=4000), seeds=(0, 1, 2),
                 recipe=Recipe(sizes=dict(d_model=128, num_heads=8, num_layers=4, dropout=0.0), length=128,
                               steps=1500, batch=64, lr=1e-3, evals=10, valid_windows=1024)),
    "cpu": dict(data=dict(max_chars=40, n_valid=500, n_train=20000), seeds=(0, 1, 2),
                recipe=Recipe(sizes=dict(d_model=48, num_heads=4, num_layers=2, dropout=0.0), length=32,
                              steps=600, batch=32, lr=3e-3, evals=6, valid_windows=256, device="cpu")),
    "fast": dict(data=dict(max_chars=40, n_valid=500, n_train=8000), seeds=(0, 1, 2),
                 recipe=Recipe(sizes=dict(d_model=32, num_heads=4, num_layers=2, dropout=0.0), length=32,
                               steps=120, batch=16, lr=3e-3, evals=4, valid_windows=128, device="cpu")),
    "smoke": dict(data=dict(max_chars=30, n_valid=200, n_train=1000), seeds=(0, 1),
                  recipe=Recipe(sizes=dict(d_model=16, num_heads=4, num_layers=1, dropout=0.0), length=16,
                                steps=4, batch=8, lr=3e-3, evals=2, valid_windows=16, device="cpu")),
}


def model_config(streams: CharStreams, recipe: Recipe, options: dict, d_hidden: int | None = None) -> GPTConfig:
    """A ``GPTConfig`` of ``recipe``'s sizes with ``options``; ``max_len`` 4 · length (extrapolation)."""
    fields = {**recipe.sizes, **options, "d_hidden": d_hidden}
    return GPTConfig(vocab_size=len(streams.vocab), max_len=4 * recipe.length + 1, pad_id=PAD, **fields)


def matched_hidden(streams: CharStreams, recipe: Recipe, options: dict, target: int) -> int:
    """The feed-forward width at which a model with ``options`` has closest to ``target`` parameters
    (the count is linear in the width)."""
    count = lambda h: count_parameters(GPT(model_config(streams, recipe, options, h)))
    per_unit = count(9) - count(8)
    return max(1, round(8 + (target - count(8)) / per_unit))


def cache_bytes_per_token(model: GPT, tokens: int = 4) -> float:
    """Key-value cache bytes per token of ``model`` (one sequence of ``tokens`` ids in float32)."""
    cache = model.new_cache()
    with torch.no_grad():
        model.forward_step(torch.ones(1, tokens, dtype=torch.long, device=next(model.parameters()).device), cache)
    return cache.bytes_per_token()


def train_variant(streams: CharStreams, recipe: Recipe, options: dict, seed: int = 0,
                  d_hidden: int | None = None) -> dict:
    """Train one variant; its validation curve and final bits per character, its sizes and speed."""
    seed_everything(seed)
    model = GPT(model_config(streams, recipe, options, d_hidden))
    valid = windows(streams.valid, recipe.length)[:recipe.valid_windows]
    config = TrainConfig(steps=recipe.steps, lr=recipe.lr, schedule="cosine", warmup_fraction=0.1, seed=seed,
                         eval_every=max(recipe.steps // recipe.evals, 1), log_every=recipe.steps,
                         progress=False, compile=False, device=recipe.device)
    data = partial(window_batches, windows(streams.train, recipe.length), recipe.batch, seed=seed)
    state = train(model, data, lm_loss, config, evaluate=lambda m: {"bits": bits_per_char(m, valid)})
    model.eval()
    return {"model": model, "bits": state.evals[-1]["bits"], "params": count_parameters(model),
            "curve": [(e["step"], e["bits"]) for e in state.evals],
            "tokens_per_s": state.tokens / max(state.seconds, 1e-9),
            "cache_bytes_per_token": cache_bytes_per_token(model)}


def ablation_variants(num_heads: int) -> dict[str, dict]:
    """The book's block, each of chapter 10's changes alone, then all of them (``GPTConfig.modern``)."""
    kv = dict(num_kv_heads=num_heads // 2) if num_heads % 2 == 0 else {}
    return {"2017 block": {}, "RMSNorm": dict(norm="rms"), "RoPE": dict(positions="rope"),
            "SwiGLU": dict(ffn="swiglu"), "GQA (kv = heads/2)": kv, "QK-norm": dict(qk_norm=True),
            "no biases": dict(bias=False), "zero-init proj.": dict(zero_init=True),
            "untied head": dict(tie_output=False), "all together": {**MODERN_OPTIONS, **kv}}


def compare_variants(streams: CharStreams, recipe: Recipe, variants: dict[str, dict],
                     seeds=(0, 1, 2)) -> dict[str, dict]:
    """Each variant trained once per seed at the 2017 block's parameter count (feed-forward width
    matched); per variant: ``summarize`` of its runs."""
    target = count_parameters(GPT(model_config(streams, recipe, {})))
    results = {}
    for name, options in variants.items():
        hidden = matched_hidden(streams, recipe, options, target)
        runs = [train_variant(streams, recipe, options, seed, hidden) for seed in seeds]
        results[name] = summarize(runs, options, hidden)
    return results


def summarize(runs: list[dict], options: dict, d_hidden: int) -> dict:
    """One variant's runs: bits per character (each seed's, mean, spread), mean curve, sizes, speed."""
    bits = [r["bits"] for r in runs]
    curve = [(step, statistics.fmean(c[i][1] for c in (r["curve"] for r in runs)))
             for i, (step, _) in enumerate(runs[0]["curve"])]
    return {"options": options, "d_hidden": d_hidden, "bits": bits, "mean": statistics.fmean(bits),
            "spread": max(bits) - min(bits), "curve": curve, "params": runs[0]["params"],
            "tokens_per_s": statistics.fmean(r["tokens_per_s"] for r in runs),
            "cache_bytes_per_token": runs[0]["cache_bytes_per_token"], "models": [r["model"] for r in runs]}


POSITION_VARIANTS = {"learned": dict(positions="learned"), "sinusoidal": {}, "RoPE": dict(positions="rope"),
                     "none": dict(positions="none")}


def position_study(streams: CharStreams, recipe: Recipe, seeds=(0, 1, 2), ablation: dict | None = None,
                   factors=(1, 2, 4)) -> dict[str, dict]:
    """Length extrapolation: each position code trained at ``recipe.length``, evaluated on
    validation windows of ``factor`` · length; the ablation's sinusoidal and RoPE runs are reused."""
    reused = {"sinusoidal": "2017 block", "RoPE": "RoPE"} if ablation else {}
    todo = {name: opts for name, opts in POSITION_VARIANTS.items() if name not in reused}
    results = {**compare_variants(streams, recipe, todo, seeds), **{n: ablation[a] for n, a in reused.items()}}
    for name in POSITION_VARIANTS:
        results[name]["at_length"] = extrapolation(results[name]["models"], streams, recipe, factors)
    return {name: results[name] for name in POSITION_VARIANTS}


def extrapolation(models: list[GPT], streams: CharStreams, recipe: Recipe, factors=(1, 2, 4)) -> dict:
    """Validation bits per character of each model (one per seed) on windows of factor · length."""
    out = {}
    for factor in factors:
        length = factor * recipe.length
        valid = windows(streams.valid, length)
        valid = valid if recipe.valid_windows is None else valid[:max(recipe.valid_windows // factor, 1)]
        out[length] = [bits_per_char(m, valid) for m in models]
    return out


def kv_head_study(streams: CharStreams, recipe: Recipe, seeds=(0, 1, 2), ablation: dict | None = None) -> dict:
    """Quality and cache size against the number of kv heads (the divisors of num_heads), at equal
    parameters; the ablation's runs with all heads and with half of them are reused."""
    heads = recipe.sizes["num_heads"]
    reused = {heads: "2017 block", heads // 2: "GQA (kv = heads/2)"} if ablation and heads % 2 == 0 else {}
    counts = [kv for kv in range(1, heads + 1) if heads % kv == 0 and kv in (1, 2, 4, heads)]
    todo = {kv: dict(num_kv_heads=kv) for kv in counts if kv not in reused}
    fresh = compare_variants(streams, recipe, todo, seeds)
    return {kv: fresh[kv] if kv in fresh else ablation[reused[kv]] for kv in counts}


def time_fused_path(model: GPT, batch: int, length: int, pairs: int = 20) -> Comparison:
    """Interleaved timing of ``model``'s blocks on ``(batch, length, D)`` inputs under a materialised
    causal mask and under ``is_causal=True`` (the fused path)."""
    x = torch.randn(batch, length, model.config.d_model, device=next(model.parameters()).device)
    mask = causal_mask(length, device=x.device)
    run = lambda **kw: lambda: model.blocks(x, **kw)
    with torch.no_grad():
        return compare({"mask": run(mask=mask), "is_causal": run(is_causal=True)}, pairs, device=x.device)


def time_norms(d_model: int, rows: int, pairs: int = 20) -> Comparison:
    """Interleaved timing of LayerNorm and RMSNorm (xfl's and PyTorch's) on ``(rows, d_model)``."""
    x = torch.randn(rows, d_model)
    norms = {"LayerNorm": nn.LayerNorm(d_model), "RMSNorm (xfl)": RMSNorm(d_model),
             "nn.RMSNorm": nn.RMSNorm(d_model, eps=1e-6)}
    with torch.no_grad():
        return compare({name: partial(norm, x) for name, norm in norms.items()}, pairs)


def difference(result: dict, base: dict) -> str:
    """``result`` vs ``base`` in validation bits, runs paired by seed (``xfl.seeds``): better or
    worse only when every seed agrees, by the mean difference; otherwise no clear difference."""
    diffs = differences(result["bits"], base["bits"])
    if all(d > 0 for d in diffs):
        return f"worse by {statistics.fmean(diffs):.3f} bits"
    if all(d < 0 for d in diffs):
        return f"better by {-statistics.fmean(diffs):.3f} bits"
    return "no clear difference"


def table(results: dict, base: str | None = None) -> str:
    """One line per variant: parameters, bits per character (mean ± standard deviation over seeds),
    the verdict against ``base`` (default: the first), training tokens/s, kv-cache bytes per token."""
    base = base or next(iter(results))
    lines = [f"{'variant':<20}{'params':>8}{'ffn':>5}{'val bits/char':>18}  {'vs ' + base:<28}"
             f"{'tokens/s':>9}{'cache B/tok':>12}"]
    for name, r in results.items():
        verdict = "(baseline)" if name == base else difference(r, results[base])
        lines.append(f"{str(name):<20}{r['params']:>8,}{r['d_hidden']:>5}{mean_sd(r['bits']):>18}"
                     f"  {verdict:<28}{r['tokens_per_s']:>9,.0f}{r['cache_bytes_per_token']:>12,.0f}")
    return "\n".join(lines)
