"""Train an English -> Spanish transformer on Tatoeba within a fixed time budget, score it.

    python -m bench.translate                 # the GPU run: 420 s of training, then BLEU
    python -m bench.translate --budget 300    # another training budget (seconds)
    python -m bench.translate --smoke         # CPU smoke run on a small subset (about 30 s)
    python -m bench.translate --timings-only  # only the two CPU timings below (no training)
    python -m bench.translate --no-timings    # training and BLEU only (the GPU plan's step)

Writes JSON to ``bench/results/translate.json`` (or ``--out``): held-out multi-reference
sacreBLEU on the test split, scored once (detokenized hypotheses, raw references,
case-insensitive); the validation curve (greedy BLEU on a few hundred validation sentences every
``eval_every`` steps, timed apart from training) whose best weights are kept; the beam size and
length penalty chosen on the validation split and the scores that chose them; the model (its
description and parameter count, printed from it), training tokens per second, compilation
seconds, wall time, device and the configuration; plus two CPU timings:

- xfl's one-pass causal decoder vs the lecture's decoder, which re-runs the stack once per
  target position (``xfl.n_pass.lecture_decode``), at B=50, L=10, d=256 (goal: >= 4.5x faster);
- ``xfl.attention.MultiHeadAttention`` vs ``torch.nn.MultiheadAttention`` forward time
  (goal: <= 1.1x torch's time).

Both on one CPU thread, the two candidates interleaved (``xfl.timing.compare``): each records
the medians, the ratio as the median of per-pair ratios with its interquartile range, and the
verdict.

Target of the GPU run: BLEU >= 45 within 7 minutes of training on one H100 (issue 49).
Sentence pairs from www.manythings.org/anki and tatoeba.org (CC-BY 2.0 FR).
Data: XFL_DATA_MIRROR (offline mirror) or a verified download.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch
from torch import nn

from bench.report import BestWeights, resume_path, write_results
from xfl.attention import MultiHeadAttention
from xfl.blocks import TransformerStack
from xfl.batches import bucket, bucket_batches, bucketed, epoch_batches
from xfl.data.tatoeba import load_pairs
from xfl.model import Seq2SeqTransformer, count_parameters
from xfl.n_pass import time_decoders
from xfl.timing import compare
from xfl.runtime import default_device, device_name, seed_everything
from xfl.train import TrainConfig, seq2seq_loss, train
from xfl.translation import choose_decoding, heldout_bleu, prepare_task

RESULTS = Path(__file__).resolve().parent / "results" / "translate.json"
TIMINGS = RESULTS.with_name("translate_timings.json")  # --timings-only: the CPU goals alone

# A Pre-LN encoder-decoder on joint byte-pair subwords, one embedding table shared by both
# languages and the output (``describe`` prints its sizes and parameter count from the model),
# regularised by dropout and label smoothing. The learning rate warms up over a number of steps
# (not seconds: a GPU compiling would eat a warm-up on the clock), then decays to zero on the
# clock (cosine over the time budget). Batches are padded to lengths in multiples of ``bucket``
# and every such shape is compiled before the clock starts. Every ``eval_every`` steps, greedy
# BLEU on ``track_sentences`` validation sentences (outside the clock); the best weights are kept.
# Then the beam size and length penalty are chosen on the validation split; the test split is
# scored once, with those choices. Not yet run on a GPU: the numbers in results/ say what was measured.
GPU = dict(model=dict(d_model=512, num_heads=8, num_encoder_layers=4, num_decoder_layers=4,
                      d_hidden=2048, dropout=0.2, norm_first=True, tie_output=True),
           train=dict(lr=7e-4, schedule="cosine", warmup_steps=2000, weight_decay=0.01,
                      clip_norm=1.0, log_every=100, eval_every=2500),
           subwords=8000, batch_size=256, label_smoothing=0.1, bucket=16, track_sentences=300,
           beam_sizes=(1, 4, 8), length_penalties=(0.0, 0.6, 1.0),
           train_limit=None, valid_limit=None, test_limit=None)
SMOKE = dict(model=dict(d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                        d_hidden=64, dropout=0.1, norm_first=True, tie_output=True),
             train=dict(lr=3e-3, schedule="cosine", warmup_steps=10, weight_decay=0.01,
                        clip_norm=1.0, log_every=10, eval_every=20),
             subwords=500, batch_size=32, label_smoothing=0.1, bucket=8, track_sentences=20,
             beam_sizes=(1, 2), length_penalties=(0.0, 1.0),
             train_limit=3000, valid_limit=30, test_limit=40)


def describe(model: Seq2SeqTransformer) -> str:
    """The recipe's model in words, read from the model itself."""
    c = model.config
    norm = "Pre-LN" if c.norm_first else "post-LN"
    shared = ", one embedding table for both languages" if c.share_embeddings else ""
    tied = " and the output" if c.tie_output else ""
    return (f"{norm} encoder-decoder, {c.num_encoder_layers}+{c.num_decoder_layers} layers of width "
            f"{c.d_model}, {c.num_heads} heads, feed-forward {c.d_hidden}, dropout {c.dropout}, "
            f"{c.src_vocab:,} subwords{shared}{tied}: {count_parameters(model):,} parameters")


def bucketed_epochs(task, batch_size: int, multiple: int):
    """``data(epoch)`` for ``train``: the epoch's batches, padded to bucket lengths."""
    return lambda epoch: bucketed(epoch_batches(task.train, batch_size, epoch), batch_size, multiple)


def greedy_valid_bleu(task, limit: int):
    """``score(model)``: greedy BLEU on the first ``limit`` validation sentences."""
    return lambda model: heldout_bleu(model, task, beam_size=1, limit=limit, split="valid")["bleu"]


def train_and_score(recipe: dict, budget: float, device: torch.device, progress: bool) -> dict:
    """Prepare Tatoeba, train for ``budget`` seconds tracking validation BLEU, keep the best
    weights, choose the decoding on the validation split, then score the test split once."""
    seed_everything(0)
    task = prepare_task(load_pairs(), train_limit=recipe["train_limit"], subwords=recipe["subwords"])
    B, multiple = recipe["batch_size"], recipe["bucket"]
    longest = bucket(task.max_len + 2, multiple)  # SOS + EOS: the longest padded sentence
    model = Seq2SeqTransformer(task.model_config(max_len=longest + 1, **recipe["model"]))
    config = TrainConfig(steps=None, max_seconds=budget, device=str(device), progress=progress,
                         compile=True, **recipe["train"])  # compiled before the clock: always pays
    loss = partial(seq2seq_loss, label_smoothing=recipe["label_smoothing"])
    best = BestWeights(greedy_valid_bleu(task, recipe["track_sentences"]), "valid_bleu",
                       resume_path("translate-best.pt"))
    state = train(model, bucketed_epochs(task, B, multiple), loss, config, evaluate=best,
                  shapes=bucket_batches(B, longest, multiple))
    start = time.perf_counter()
    kept = {"valid_bleu": best.restore(model), "step": max(state.evals, key=lambda e: e["valid_bleu"])["step"]}
    decoding = choose_decoding(model, task, recipe["beam_sizes"], recipe["length_penalties"],
                               limit=recipe["valid_limit"])
    score = heldout_bleu(model, task, beam_size=decoding["beam_size"],
                         length_penalty=decoding["length_penalty"], limit=recipe["test_limit"])
    return {"bleu": score["bleu"], "bleu_signature": score["signature"], "bleu_split": score["split"],
            "test_sentences": score["sentences"], "examples": score["examples"],
            "chosen_on_valid": {"weights": {**kept, "chosen_on": "valid"}, "decoding": decoding},
            "valid_curve": state.evals, "valid_sentences": len(task.valid[:recipe["valid_limit"]]),
            "model": describe(model), "parameters": count_parameters(model), "steps": state.step,
            "epochs": state.epoch, "train_seconds": state.seconds, "compile_seconds": state.compile_seconds,
            "compiled_shapes": len(bucket_batches(B, longest, multiple)), "train_tokens": state.tokens,
            "tokens_per_second": state.tokens / state.seconds, "final_loss": state.history[-1]["loss"],
            "decode_seconds": time.perf_counter() - start, "train_pairs": len(task.train),
            "vocab": {"joint_subwords": len(task.src_vocab)},
            "config": recipe, "train_config": asdict(config)}


def decoder_speed(pairs: int) -> dict:
    """The lecture's decoder (DLStudio-style, one pass per target position) vs one causal pass,
    CPU, B=50, L=10, d=256 (no grad), interleaved on one thread."""
    torch.manual_seed(0)
    stack = TransformerStack(2, 256, 8, cross=True).eval()
    x, memory = torch.randn(50, 10, 256), torch.randn(50, 10, 256)
    result = time_decoders(stack, x, memory, pairs=pairs).summary("lecture", "causal")
    return {"shape": "B=50, L=10, d=256, 2 decoder layers, 8 heads", **result, "goal_ratio": 4.5}


def attention_speed(pairs: int) -> dict:
    """xfl MultiHeadAttention vs torch.nn.MultiheadAttention, same weights, CPU forward,
    interleaved on one thread."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(256, 8, batch_first=True).eval()
    mine = MultiHeadAttention.from_torch(ref).eval()
    x = torch.randn(50, 32, 256)
    with torch.no_grad():
        timing = compare({"xfl": lambda: mine(x), "torch": lambda: ref(x, x, x, need_weights=False)},
                         pairs=pairs, threads=1)
    return {"shape": "B=50, L=32, d=256, 8 heads, self-attention", **timing.summary("xfl", "torch"),
            "goal_ratio": 1.1}


def cpu_timings(pairs: int) -> dict:
    """The decoder and attention timings (``pairs`` interleaved rounds each), and the CPU."""
    decoder, attention = decoder_speed(pairs), attention_speed(pairs)
    return {"decoder_speed_cpu": decoder, "attention_speed_cpu": attention,
            "cpu": device_name(torch.device("cpu")), "cpu_threads": decoder["threads"]}


def training_run(args) -> dict:
    """Train for the budget on the chosen device and score held-out BLEU."""
    device = torch.device("cpu" if args.smoke else (args.device or default_device()))
    recipe, budget = (SMOKE, args.budget or 8.0) if args.smoke else (GPU, args.budget or 420.0)
    return {"device": device_name(device), "smoke": args.smoke, "budget_seconds": budget,
            **train_and_score(recipe, budget, device, not args.no_progress)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run for the tests")
    parser.add_argument("--timings-only", action="store_true",
                        help=f"only the CPU timings, no training (default --out: {TIMINGS.name})")
    parser.add_argument("--no-timings", action="store_true", help="skip the two CPU timings")
    parser.add_argument("--budget", type=float, default=None, help="training seconds (420, issue 49; smoke 8)")
    parser.add_argument("--device", default=None, help="cuda / mps / cpu (default: best available)")
    parser.add_argument("--out", type=Path, default=None, help=f"JSON file (default {RESULTS})")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    wall = time.perf_counter()
    result = {} if args.timings_only else training_run(args)
    if not args.no_timings:
        result.update(cpu_timings(3 if args.smoke else 10))
    result.update(wall_seconds=time.perf_counter() - wall, torch=torch.__version__)
    write_results(args.out or (TIMINGS if args.timings_only else RESULTS), result)
    keys = ("device", "model", "bleu", "tokens_per_second", "compile_seconds", "wall_seconds", "cpu_threads")
    summary = {k: result[k] for k in keys if k in result}
    if not args.no_timings:
        summary["decoder_ratio"] = result["decoder_speed_cpu"]["ratio"]
        summary["attention_ratio"] = result["attention_speed_cpu"]["ratio"]
    print(json.dumps(summary, indent=2))
    return result


if __name__ == "__main__":
    main()
