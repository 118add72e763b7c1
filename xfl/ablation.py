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
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import causal_mask, repeat_kv_heads
from .batches import epoch_rows
from .data.tatoeba import load_pairs
from .data.text import PAD, Vocab
from .model import GPT, MODERN_OPTIONS, GPTConfig, count_parameters
from .norms import RMSNorm
from .runtime import seed_everything
from .seeds import holm, mean_sd, paired_interval, paired_p_value
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
# data (``spanish_characters``'s arguments), the seeds and the ``Recipe``. Five seeds in every
# profile (a paired 95% interval needs them); the cpu and fast runs are short (early training:
# the cpu run's 360 steps are 0.64 of an epoch). ``lr`` is where the learning-rate sweep starts;
# the ablation runs at the rate the sweep finds best for the 2017 block.
FIVE_SEEDS = (0, 1, 2, 3, 4)
RECIPES = {
    "full": dict(data=dict(max_chars=100, n_valid=4000), seeds=FIVE_SEEDS,
                 recipe=Recipe(sizes=dict(d_model=128, num_heads=8, num_layers=4, dropout=0.0),
                               length=128, steps=720, batch=64, lr=1e-3, evals=8,
                               valid_windows=1024)),
    "cpu": dict(data=dict(max_chars=40, n_valid=500, n_train=20000), seeds=FIVE_SEEDS,
                recipe=Recipe(sizes=dict(d_model=48, num_heads=4, num_layers=2, dropout=0.0),
                              length=32, steps=360, batch=32, lr=3e-3, evals=6,
                              valid_windows=256, device="cpu")),
    "fast": dict(data=dict(max_chars=40, n_valid=500, n_train=8000), seeds=FIVE_SEEDS,
                 recipe=Recipe(sizes=dict(d_model=32, num_heads=4, num_layers=2, dropout=0.0),
                               length=32, steps=80, batch=16, lr=3e-3, evals=4,
                               valid_windows=128, device="cpu")),
    "smoke": dict(data=dict(max_chars=30, n_valid=200, n_train=1000), seeds=(0, 1),
                  recipe=Recipe(sizes=dict(d_model=16, num_heads=4, num_layers=1, dropout=0.0),
                                length=16, steps=4, batch=8, lr=3e-3, evals=2,
                                valid_windows=16, device="cpu")),
}
RATE_FACTORS = (1, 3, 6, 10)  # the learning-rate sweep, in multiples of the recipe's rate
HIGH_RATE_FACTOR = 10  # the QK-norm study's rate, in multiples of the recipe's rate (the sweep's top)


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
    """The book's block, each of chapter 10's changes alone (nanochat's ReLU² and gainless RMSNorm
    among them), then all of ``GPTConfig.modern``'s together."""
    kv = dict(num_kv_heads=num_heads // 2) if num_heads % 2 == 0 else {}
    return {"2017 block": {}, "RMSNorm": dict(norm="rms"), "RoPE": dict(positions="rope"),
            "SwiGLU": dict(ffn="swiglu"), "ReLU²": dict(activation="relu2"),
            "RMSNorm no gain": dict(norm="rms_plain"), "GQA kv=heads/2": kv,
            "QK-norm": dict(qk_norm=True), "no biases": dict(bias=False),
            "zero-init proj.": dict(zero_init=True), "untied head": dict(tie_output=False),
            "all together": {**MODERN_OPTIONS, **kv}}


def compare_variants(streams: CharStreams, recipe: Recipe, variants: dict[str, dict],
                     seeds=(0, 1, 2), done: dict | None = None) -> dict[str, dict]:
    """Each variant trained once per seed at the 2017 block's parameter count (feed-forward width
    matched); per variant: ``summarize`` of its runs. Variants named in ``done`` (results of the
    same recipe and seeds) are taken from it, not trained again."""
    target = count_parameters(GPT(model_config(streams, recipe, {})))
    results = {}
    for name, options in variants.items():
        if done and name in done:
            results[name] = done[name]
            continue
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
        results[name]["per_position"] = position_profiles(results[name]["models"], streams, recipe,
                                                          max(factors))
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


@torch.no_grad()
def per_position_bits(model: GPT, all_windows: Tensor, batch_size: int = 256) -> Tensor:
    """``(length,)``: mean next-character loss in bits at each position of ``all_windows``
    ``(W, length + 1)`` (streams hold no padding)."""
    model.eval()
    device = next(model.parameters()).device
    total = torch.zeros(all_windows.shape[1] - 1, dtype=torch.float64)
    for k in range(0, len(all_windows), batch_size):
        batch = all_windows[k:k + batch_size].to(device)  # (B, length + 1)
        logits = model(batch[:, :-1])  # (B, length, V)
        loss = F.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none")  # (B, length)
        total += loss.sum(0).double().cpu()
    return total / len(all_windows) / math.log(2)


def shifted_windows(stream: Tensor, length: int, count: int, step: int) -> Tensor:
    """``(S · count, length + 1)``: ``count`` consecutive windows of a ring (the stream's first
    ``count · length`` characters, the last followed by the first), read from each start
    0, step, 2·step, ... below ``length``. Every character of the ring is a target
    once per start, so with ``step`` dividing ``length`` each position block of ``step`` holds
    every character exactly once: spans made of whole blocks score the same characters."""
    n = count * length
    if step < 1 or length % step or count < 1 or stream.numel() < n:
        raise ValueError(f"need a step dividing length={length} and {n} characters, "
                         f"got step={step!r} and {stream.numel()}")
    ring = stream[:n]  # (n,)
    offsets = torch.arange(0, length, step)[:, None, None] + torch.arange(count)[None, :, None] * length
    index = (offsets + torch.arange(length + 1)) % n  # (S, count, length + 1)
    return ring[index].reshape(-1, length + 1)


def profile_windows(streams: CharStreams, recipe: Recipe, factor: int = 4, shifted: bool = True) -> Tensor:
    """Validation windows ``(W, factor · length + 1)`` for per-position losses: with ``shifted``,
    read from every start that is a multiple of length / 2 (``shifted_windows``), so each span of
    whole half-lengths scores the same characters; else one window per start, as ``windows``."""
    length = factor * recipe.length
    count = (streams.valid.numel() - 1) // length
    count = count if recipe.valid_windows is None else min(count, max(recipe.valid_windows // factor, 1))
    step = max(recipe.length // 2, 1) if shifted else length
    return shifted_windows(streams.valid, length, count, step)


def position_profiles(models: list[GPT], streams: CharStreams, recipe: Recipe, factor: int = 4) -> list[list[float]]:
    """Per seed, ``per_position_bits`` on ``profile_windows`` (shifted starts): spans of whole
    half-lengths score the same characters, so they differ by position (and context) only."""
    valid = profile_windows(streams, recipe, factor)
    return [per_position_bits(m, valid).tolist() for m in models]


def beyond_training_length(result: dict, length: int) -> dict[str, dict]:
    """From ``result["per_position"]`` (``position_profiles``: every span scores the same
    characters): the mean bits at positions L..2L-1 and at 2L..4L-1, each paired by seed
    (``paired``) against positions L/2..L-1 (inside the training length, with long contexts
    already); 'worse' means the loss rises beyond L."""
    inside = span_bits(result, length // 2, length)
    return {"L..2L": paired(span_bits(result, length, 2 * length), inside),
            "2L..4L": paired(span_bits(result, 2 * length, 4 * length), inside)}


def rise_against(result: dict, reference: dict, length: int) -> dict[str, dict]:
    """Per span of ``beyond_training_length``: ``result``'s rise beyond L minus ``reference``'s
    (the same windows, seeds paired), ``paired``; 'worse' means it rises more than the reference."""
    inside = lambda r: span_bits(r, length // 2, length)["bits"]  # noqa: E731
    rise = lambda r, lo, hi: {"bits": [a - b for a, b in zip(span_bits(r, lo, hi)["bits"], inside(r))]}  # noqa: E731
    return {span: paired(rise(result, lo, hi), rise(reference, lo, hi))
            for span, (lo, hi) in {"L..2L": (length, 2 * length), "2L..4L": (2 * length, 4 * length)}.items()}


@contextmanager
def rope_stretched(model: GPT, scale: float = 1.0, base: float | None = None):
    """Inside the block, ``model``'s RoPE layers divide every position by ``scale`` (position
    interpolation, Chen et al., 2023: positions up to scale · L land on the angles training saw)
    and, when ``base`` is given, rotate with that base instead of their own; restored on exit.
    Nothing is retrained."""
    layers = [m for m in model.modules() if getattr(m, "rope_base", None) is not None]
    if not layers:
        raise ValueError("the model has no rotary positions (GPTConfig positions='rope')")
    if not scale > 0 or (base is not None and not base > 1):
        raise ValueError(f"need scale > 0 and base > 1 (or None), got scale={scale!r}, base={base!r}")
    saved = [(m.rope_base, m.rope_scale) for m in layers]
    for m in layers:
        m.rope_scale, m.rope_base = scale, m.rope_base if base is None else base
    try:
        yield model
    finally:
        for m, (old_base, old_scale) in zip(layers, saved):
            m.rope_base, m.rope_scale = old_base, old_scale


def stretched_profiles(models: list[GPT], streams: CharStreams, recipe: Recipe, factor: int = 4,
                       **stretch) -> list[list[float]]:
    """``position_profiles`` on windows of ``factor`` · length, each model read inside
    ``rope_stretched(model, **stretch)``."""
    profiles = []
    for model in models:
        with rope_stretched(model, **stretch):
            profiles += position_profiles([model], streams, recipe, factor)
    return profiles


def span_bits(result: dict, lo: int, hi: int) -> dict:
    """Per seed, the mean of ``result["per_position"]`` over positions lo..hi-1: {"bits": [...]}."""
    return {"bits": [statistics.fmean(p[lo:hi]) for p in result["per_position"]]}


def learned_table_rms(model: GPT, length: int) -> dict[str, float]:
    """RMS of a learned position table's rows below ``length`` (trained), of its rows from
    ``length`` on (never reached in training), and of the √d-scaled token embedding."""
    rows, embed = model.embed.positions, model.embed
    rms = lambda t: float(t.detach().pow(2).mean().sqrt())
    return {"table rows < L": rms(rows[:length]), "table rows >= L": rms(rows[length:]),
            "token embedding x sqrt(d)": rms(embed.table.weight[1:] * embed.scale)}


@torch.no_grad()
def max_attention_logit(model: GPT, tokens: Tensor) -> float:
    """The largest |q·k|/√d_head over every layer, head and causal (query, key) pair of a Pre-LN
    ``model`` on ``tokens (B, L)``: the scores before the softmax."""
    if not model.config.norm_first:
        raise ValueError("max_attention_logit needs a Pre-LN model (norm_first=True), got False")
    model.eval()
    x = model.embed(tokens.to(next(model.parameters()).device))  # (B, L, D)
    keep = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool, device=x.device).tril()
    top = 0.0
    for block in model.blocks.layers:
        attn = block.self_attn
        q, k, _ = (attn.split_heads(t) for t in attn.project(block.residuals[0].norm(x), None, None))
        q, k = attn.position_heads(q, k, 0)  # (B, h, L, d_h), (B, kv, L, d_h)
        logits = q @ repeat_kv_heads(k, attn.num_heads).transpose(-2, -1) / attn.head_dim ** 0.5
        top = max(top, float(logits.abs()[..., keep].max()))  # logits (B, h, L, L)
        x = block(x, is_causal=True)
    return top


def kv_head_study(streams: CharStreams, recipe: Recipe, seeds=(0, 1, 2), ablation: dict | None = None) -> dict:
    """Quality and cache size against the number of kv heads (the divisors of num_heads), at equal
    parameters; the ablation's runs with all heads and with half of them are reused."""
    heads = recipe.sizes["num_heads"]
    reused = {heads: "2017 block", heads // 2: "GQA kv=heads/2"} if ablation and heads % 2 == 0 else {}
    counts = [kv for kv in range(1, heads + 1) if heads % kv == 0 and kv in (1, 2, 4, heads)]
    todo = {kv: dict(num_kv_heads=kv) for kv in counts if kv not in reused}
    fresh = compare_variants(streams, recipe, todo, seeds)
    return {kv: fresh[kv] if kv in fresh else ablation[reused[kv]] for kv in counts}


def lr_sweep(streams: CharStreams, recipe: Recipe, variants: dict[str, dict], seeds=(0, 1, 2),
             factors=RATE_FACTORS) -> dict[float, dict]:
    """``variants`` (name: ``GPTConfig`` options) trained at each rate factor · ``recipe.lr``
    (equal parameters, the same seeds): {rate: {name: ``summarize``}}."""
    sweep = {}
    for factor in factors:
        rate = float(f"{recipe.lr * factor:.3g}")  # 9e-3, not 0.009000000000000001
        sweep[rate] = compare_variants(streams, replace(recipe, lr=rate), variants, seeds)
    return sweep


def best_rate(sweep: dict[float, dict], name: str) -> float:
    """The rate of ``sweep`` at which ``name``'s mean validation bits are lowest."""
    return min(sweep, key=lambda rate: sweep[rate][name]["mean"])


def lr_table(sweep: dict[float, dict], a: str, b: str) -> str:
    """One line per rate: ``a`` and ``b``'s bits (mean ± sd), ``b`` minus ``a`` paired by seed
    (mean, 95% interval, verdict); at most 72 characters wide."""
    lines = [f"{'lr':<8}{a:>14}{b:>14}{'b - a':>8}{'95% interval':>18}  verdict",
             f"{'':<8}{'(a)':>14}{'(b)':>14}"]
    for rate, r in sweep.items():
        p = paired(r[b], r[a])
        interval = f"[{p['low']:+.3f}, {p['high']:+.3f}]"
        lines.append(f"{rate:<8.1e}{mean_sd(r[a]['bits']):>14}{mean_sd(r[b]['bits']):>14}"
                     f"{p['mean']:>+8.3f}{interval:>18}  {p['verdict']}")
    return "\n".join(lines)


def qk_norm_study(streams: CharStreams, recipe: Recipe, seeds=(0, 1, 2),
                  factor: float = HIGH_RATE_FACTOR, done: dict | None = None) -> dict[str, dict]:
    """The 2017 block without and with QK-norm at factor · ``recipe.lr``; each result gains
    ``max_logit``, per seed the largest attention logit on 16 validation windows. ``done``: runs
    at that rate to reuse (``compare_variants``), such as the sweep's 2017 block."""
    high = replace(recipe, lr=float(f"{recipe.lr * factor:.3g}"))
    variants = {"2017 block": {}, "QK-norm": dict(qk_norm=True)}
    results = compare_variants(streams, high, variants, seeds, done)
    tokens = windows(streams.valid, recipe.length)[:16, :-1]  # (16, length)
    return {name: {**r, "max_logit": [max_attention_logit(m, tokens) for m in r["models"]]}
            for name, r in results.items()}


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


def paired(result: dict, base: dict) -> dict:
    """``result`` minus ``base`` in validation bits, runs paired by seed: mean, sd, the 95%
    interval (``xfl.seeds.paired_interval``) and the verdict: better or worse only when the
    interval excludes 0, otherwise unclear (no clear difference)."""
    mean, sd, low, high = paired_interval(result["bits"], base["bits"])
    word = "worse" if low > 0 else "better" if high < 0 else "unclear"
    return dict(mean=mean, sd=sd, low=low, high=high, verdict=word)


def difference(result: dict, base: dict) -> str:
    """``paired`` in words: 'better (-0.182 ± 0.019, 95% CI [-0.21, -0.16])' or
    'no clear difference (...)' when the interval covers 0."""
    p = paired(result, base)
    word = "no clear difference" if p["verdict"] == "unclear" else p["verdict"]
    return f"{word} ({p['mean']:+.3f} ± {p['sd']:.3f}, 95% CI [{p['low']:+.3f}, {p['high']:+.3f}])"


def holm_verdicts(results: dict, base: str | None = None, alpha: float = 0.05) -> dict[str, dict]:
    """Each variant but ``base`` (default: the first) against it, paired by seed: ``paired``'s
    mean, sd and 95% interval, the t-test's p-value, its Holm adjustment over all these
    comparisons (``xfl.seeds.holm``) and the verdict from it: better or worse only when the
    adjusted p is below ``alpha``, otherwise unclear."""
    base = base if base is not None else next(iter(results))
    pairs = {name: paired(r, results[base]) for name, r in results.items() if name != base}
    p = {name: paired_p_value(results[name]["bits"], results[base]["bits"]) for name in pairs}
    adjusted = dict(zip(p, holm(list(p.values()))))
    return {name: {**d, "p": p[name], "p_holm": adjusted[name],
                   "verdict": ("unclear" if adjusted[name] >= alpha else "worse" if d["mean"] > 0 else "better")}
            for name, d in pairs.items()}


def table(results: dict, base: str | None = None) -> str:
    """One line per variant: validation bits per character (mean ± sd over seeds) and the paired
    difference from ``base`` (default: the first): mean, 95% interval, Holm-adjusted p and the
    verdict from it (``holm_verdicts``); at most 72 characters wide."""
    base = base if base is not None else next(iter(results))
    verdicts = holm_verdicts(results, base)
    lines = [f"{'vs ' + str(base):<16}{'bits/char':>14}{'diff.':>8}{'95% interval':>17}{'Holm p':>8}  verdict"]
    for name, r in results.items():
        row = f"{str(name):<16}{mean_sd(r['bits']):>14}"
        if name != base:
            v = verdicts[name]
            row += (f"{v['mean']:>+8.3f}{'[' + format(v['low'], '+.3f') + ', ' + format(v['high'], '+.3f') + ']':>17}"
                    f"{v['p_holm']:>8.3f}  {v['verdict']}")
        lines.append(row)
    return "\n".join(lines + ["interval: 95%, each row alone; verdict: Holm-adjusted p < 0.05",
                              f"over the {len(verdicts)} comparisons, else unclear (no clear difference)"])


def size_table(results: dict, base: str | None = None) -> str:
    """Parameters, feed-forward width, training tokens/s (also as a share of ``base``'s; wall clock
    on this machine, never a verdict) and key-value cache bytes per token, one line per variant."""
    base = base or next(iter(results))
    lines = [f"{'':<16}{'params':>8}{'ffn':>5}{'tokens/s':>10}{'of base':>9}{'cache B/tok':>13}"]
    for name, r in results.items():
        share = r["tokens_per_s"] / results[base]["tokens_per_s"]
        lines.append(f"{str(name):<16}{r['params']:>8,}{r['d_hidden']:>5}{r['tokens_per_s']:>10,.0f}"
                     f"{share:>9.0%}{r['cache_bytes_per_token']:>13,.0f}")
    return "\n".join(lines)


def extrapolation_lines(beyond: dict[str, dict], against: str | None = None) -> list[str]:
    """Per position code, by name (``none`` as 'no-position model'), the verdict of each span of
    ``beyond_training_length`` (rises, falls or no clear change against positions L/2..L-1), or
    with ``against`` (a name) of ``rise_against`` that code (rises more, less, or no clear
    difference)."""
    label = lambda name: "no-position model" if name == "none" else name  # noqa: E731
    words = ({"worse": "rises", "better": "falls", "unclear": "no clear change"} if against is None else
             {"worse": "rises more", "better": "rises less", "unclear": "no clear difference"})
    lines = [f"{label(name)}: " + "; ".join(f"{span} {words[p['verdict']]}" for span, p in spans.items())
             for name, spans in beyond.items()]
    return lines if against is None else [f"each rise against the {label(against)}'s:"] + ["  " + x for x in lines]
