"""Chapter 10's measurements (xfl.ablation): from the 2017 block to today's decoder block.

    python -m bench.modern              # the CPU recipe (5 seeds; about 12 min on a quiet 2-core CPU)
    python -m bench.modern --full       # the GPU recipe (chapter 10's full profile)
    python -m bench.modern --smoke      # tiny and short (a few seconds; for the tests)

On Tatoeba's Spanish sentences as one character stream (chapter 9's task, cut into windows
without padding), writes to ``bench/results/modern.json`` (or ``--out``): the ablation (the
book's block, each change alone, all together; equal parameters within 2% by the feed-forward
width; validation bits per character per seed, mean and spread, the paired difference from the
2017 block with its 95% interval and verdict; training tokens per second; key-value cache bytes
per token; Holm-adjusted p-values and verdicts), run at the 2017 block's best rate of a
learning-rate sweep of the 2017 and modern blocks (four rates, 1 to 10 times the recipe's), the
2017 block with and without QK-norm at the sweep's top rate (bits and largest attention logit
per seed), length extrapolation (trained at L, evaluated at L, 2L, 4L, and per position on 4L
windows read from shifted starts, so that every span scores the same characters: learned,
sinusoidal, RoPE, no positions; the learned table's RMS) and quality against the number of kv heads; plus
interleaved timings of the fused causal path against a mask and of RMSNorm against LayerNorm.
Wall-clock figures depend on the machine and its load: they are recorded, never a verdict.
Sentences from tatoeba.org (CC-BY 2.0 FR). Data: XFL_DATA_MIRROR or a verified download.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import torch

from bench.report import write_results
from xfl.ablation import (HIGH_RATE_FACTOR, RECIPES, Recipe, ablation_variants, best_rate,
                          beyond_training_length, compare_variants, difference, holm_verdicts,
                          kv_head_study, learned_table_rms, lr_sweep, position_study, qk_norm_study, rise_against,
                          spanish_characters, time_fused_path, time_norms)
from xfl.runtime import default_device, device_name

RESULTS = Path(__file__).resolve().parent / "results" / "modern.json"


def plain(results: dict, base) -> dict:
    """A study's results without the trained models, keys as strings (for JSON), each with its
    verdict against ``results[base]`` (paired by seed, ``xfl.ablation.difference``)."""
    return {str(name): {**{k: v for k, v in r.items() if k != "models"},
                        "vs_" + str(base): difference(r, results[base])} for name, r in results.items()}


def timings(ablation: dict, recipe: Recipe, pairs: int) -> dict:
    """Fused causal path vs a mask on the trained 2017 block; RMSNorm vs LayerNorm."""
    fused = time_fused_path(ablation["2017 block"]["models"][0], recipe.batch, recipe.length, pairs)
    norms = time_norms(recipe.sizes["d_model"], recipe.batch * recipe.length, pairs)
    return {"fused": {"median_s": {n: fused.median_s(n) for n in fused.times},
                      "verdict": fused.verdict("mask", "is_causal")},
            "norms": {"median_s": {n: norms.median_s(n) for n in norms.times},
                      "verdict": norms.verdict("LayerNorm", "RMSNorm (xfl)")}}


def positions_report(positions: dict, length: int) -> dict:
    """Bits at L, 2L, 4L and per position of 4L windows per code and seed; rises beyond L, alone
    and against the no-position model's."""
    report = {n: {"at_length": {str(k): v for k, v in r["at_length"].items()},
                  "per_position": r["per_position"],
                  "beyond_L": beyond_training_length(r, length),
                  **({} if n == "none" else {"beyond_L_vs_none": rise_against(r, positions["none"], length)})}
              for n, r in positions.items()}
    report["learned"]["table_rms"] = [learned_table_rms(m, length) for m in positions["learned"]["models"]]
    return report


def run(profile: str) -> dict:
    """Every study of ``profile``'s recipe, as chapter 10 runs them: the learning-rate sweep of the
    2017 and modern blocks, the ablation at the 2017 block's best rate (the sweep's runs at that
    rate reused), QK-norm at the sweep's top rate, extrapolation and kv heads; without models."""
    spec = RECIPES[profile]
    recipe, seeds = spec["recipe"], spec["seeds"]
    streams = spanish_characters(**spec["data"])
    variants = ablation_variants(recipe.sizes["num_heads"])
    sweep = lr_sweep(streams, recipe, {n: variants[n] for n in ("2017 block", "all together")}, seeds)
    tuned = replace(recipe, lr=best_rate(sweep, "2017 block"))
    ablation = compare_variants(streams, tuned, variants, seeds, done=sweep[tuned.lr])
    top = {"2017 block": sweep[float(f"{recipe.lr * HIGH_RATE_FACTOR:.3g}")]["2017 block"]}
    qk = qk_norm_study(streams, recipe, seeds, done=top)
    positions = position_study(streams, tuned, seeds, ablation)
    kv_heads = kv_head_study(streams, tuned, seeds, ablation)
    holm = {name: {k: v[k] for k in ("p", "p_holm", "verdict")}
            for name, v in holm_verdicts(ablation, "2017 block").items()}
    return {"profile": profile, "seeds": list(seeds), "recipe": {**recipe.__dict__, "data": spec["data"]},
            "ablation_lr": tuned.lr, "vocab": len(streams.vocab), "train_chars": streams.train.numel(),
            "valid_chars": streams.valid.numel(), "ablation": plain(ablation, "2017 block"),
            "ablation_holm": holm, "extrapolation": positions_report(positions, recipe.length),
            "lr_sweep": {str(rate): plain(r, "2017 block") for rate, r in sweep.items()},
            "qk_norm_high_lr": plain(qk, "2017 block"),
            "kv_heads": plain(kv_heads, recipe.sizes["num_heads"]),
            "timings": timings(ablation, recipe, 5 if profile == "smoke" else 30)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--smoke", action="store_true", help="tiny and short (for the tests)")
    which.add_argument("--full", action="store_true", help="the GPU recipe (chapter 10's full profile)")
    parser.add_argument("--out", type=Path, default=None, help=f"JSON file (default {RESULTS})")
    args = parser.parse_args(argv)
    profile = "smoke" if args.smoke else "full" if args.full else "cpu"
    wall, load = time.perf_counter(), os.getloadavg()[0]
    result = run(profile)
    device = torch.device(RECIPES[profile]["recipe"].device or default_device())
    result.update(device=device_name(device), torch=torch.__version__, cpu_threads=torch.get_num_threads(),
                  load_average_at_start=load, wall_seconds=time.perf_counter() - wall)
    write_results(args.out or RESULTS, result)
    print(json.dumps({n: [round(r["mean"], 3), round(r["spread"], 3)] for n, r in result["ablation"].items()},
                     indent=1))
    return result


if __name__ == "__main__":
    main()
