"""Step times of each training chapter's full-profile model and batch on a GPU: 50 optimizer steps
after warm-up (and compilation), synchronised, in bf16 and fp16, with peak memory.

    python -m bench.gpu_steps --out bench/results/gpu_nbval.json      # on the GPU machine
    python -m bench.gpu_steps --smoke --out /tmp/steps.json            # the same code on the CPU

Each workload is built as ``bench/t4_workloads.py`` builds it for the T4 estimate, at the batch
the chapter trains with (random token ids or images: a step's time does not depend on them).
Variants, all workloads' eager ones first: ``bf16`` (eager), ``fp16`` (eager, gradient scaler:
the T4's path), then ``bf16 compiled`` (what a long full-profile run uses on an H100; its
``warmup_seconds`` include compiling). Per variant: milliseconds per step, tokens (or images)
per second, TFLOPS achieved on the counted FLOPs, peak memory allocated, and the step time
``xfl.estimate``'s rule predicts for an H100 (to check the rule's assumptions). Results are
merged, workload by workload, into ``--out`` under ``steps``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import torch

from bench import t4_workloads as w
from tools.env.gpu_chapters import device_info, merge
from xfl.ablation import RECIPES as MODERN
from xfl.estimate import H100, OPTIMIZER_OPS, Work, count_flops, count_ops
from xfl.precision import Precision
from xfl.runtime import default_device
from xfl.timing import synchronize
from xfl.train import TrainConfig, _to_device, lm_loss, make_optimizer, seq2seq_loss, train_step
from xfl.vit import ViT
from xfl.vit_train import RECIPES as VIT

STEPS, WARMUP = 50, 5
VARIANTS = (("bf16", False), ("fp16", False), ("bf16", True))


@dataclass(frozen=True)
class Workload:
    """A chapter's full-profile training step: ``build(batch, device)`` -> (model, loss, batch)."""

    chapter: str
    name: str
    batch: int
    unit: str  # what a step's n_targets counts: "tokens" or "images"
    build: Callable


def _translator(layers: int, batch: int, device):
    model, d = w._translator(layers, "words")
    tokens = (w._ids(d["src_vocab"], batch, d["S"]), w._ids(d["tgt_vocab"], batch, d["L"]))
    return model, partial(seq2seq_loss, label_smoothing=0.1), _to_device(tokens, device)


def _vit(batch: int, device):
    recipe = VIT["full"]
    torch.manual_seed(0)
    images, labels = w._images(batch)
    task = recipe.task(images.to(device), labels.to(device))
    return ViT(recipe.model), task.loss, torch.arange(batch, device=device)


def _gpt(batch: int, device):
    vocab = w.DATA["chars"]["vocab"]
    return w._gpt(vocab), lm_loss, w._ids(vocab, batch, w.DATA["chars"]["L"]).to(device)


def _modern(options: dict, batch: int, device):
    recipe = MODERN["full"]["recipe"]
    tokens = w._ids(w.DATA["chars"]["vocab"], batch, recipe.length + 1).to(device)
    return w.modern_model(options), lm_loss, tokens


MODERN_BATCH = MODERN["full"]["recipe"].batch
WORKLOADS = (
    Workload("ch05_encoder_decoder", "translator 6+6 (words)", 128, "tokens", partial(_translator, 6)),
    Workload("ch06_bleu", "translator 4+4 (words)", 128, "tokens", partial(_translator, 4)),
    Workload("ch07_vit", "ViT-Lite-7/4 (cls)", VIT["full"].batch_size, "images", _vit),
    Workload("ch09_gpt", "GPT (characters)", 128, "tokens", _gpt),
    Workload("ch10_modern", "modern: 2017 block", MODERN_BATCH, "tokens", partial(_modern, {})),
    Workload("ch10_modern", "modern: all together", MODERN_BATCH, "tokens",
             partial(_modern, w.modern_variants()["all together"])),
)


def _step(net, loss_fn, batch, optimizer, scaler, precision) -> float:
    return train_step(net, loss_fn, batch, optimizer, scaler, precision)[1]


def counted(model, loss_fn, batch) -> Work:
    """FLOPs and ops of one forward and backward (plus the optimizer's ops), as the rule counts."""
    def once():
        loss_fn(model, batch)[0].backward()
        model.zero_grad(set_to_none=True)
    return Work(count_flops(once), count_ops(once) + OPTIMIZER_OPS)


def time_variant(work: Workload, device: torch.device, name: str, compiled: bool, batch: int,
                 steps: int, warmup: int) -> dict:
    """``steps`` timed optimizer steps after ``warmup`` untimed ones (compilation among them)."""
    torch.manual_seed(0)
    model, loss_fn, data = work.build(batch, device)
    model.to(device).train()
    precision = Precision(name, device.type, compile=compiled)
    net = torch.compile(model) if compiled else model
    optimizer = make_optimizer(model, TrainConfig(), device)
    scaler = precision.grad_scaler()
    began = time.perf_counter()
    for _ in range(warmup):
        _step(net, loss_fn, data, optimizer, scaler, precision)
    synchronize(device)
    warmup_seconds = time.perf_counter() - began
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    began = time.perf_counter()
    targets = 0  # a tensor on the device, for some losses: read once, after the clock
    for _ in range(steps):
        targets = targets + _step(net, loss_fn, data, optimizer, scaler, precision)
    synchronize(device)
    seconds = time.perf_counter() - began
    targets = int(targets)
    with precision.autocast():
        rule = counted(model, loss_fn, data)
    return {"step_ms": round(1000 * seconds / steps, 3), f"{work.unit}_per_second": round(targets / seconds),
            "tflops": round(rule.flops * steps / seconds / 1e12, 2), "warmup_seconds": round(warmup_seconds, 1),
            "peak_mib": round(torch.cuda.max_memory_allocated(device) / 2**20) if device.type == "cuda" else None,
            "flops_per_step": rule.flops, "ops_per_step": rule.ops,
            "h100_rule_step_ms": round(1000 * H100.seconds(rule), 3), "steps": steps, "batch": batch}


def run(out: Path, smoke: bool = False) -> dict:
    device = torch.device("cpu") if smoke else default_device()
    info = device_info()
    variants = (("fp32", False),) if smoke or device.type != "cuda" else VARIANTS
    batch_of = (lambda work: 2) if smoke else (lambda work: work.batch)
    steps, warmup = (2, 1) if smoke else (STEPS, WARMUP)
    results = {}
    for name, compiled in sorted(variants, key=lambda v: v[1]):  # eager first: compiling is slow
        label = f"{name} compiled" if compiled else name
        for work in WORKLOADS:
            result = time_variant(work, device, name, compiled, batch_of(work), steps, warmup)
            results.setdefault(work.name, {})[label] = result
            merge(out, ("steps", work.chapter, work.name, label),
                  {**result, "device": info["device"], "date": info["date"]}, info)
            print(f"{work.chapter:22} {work.name:26} {label:14} {result['step_ms']:9.2f} ms/step "
                  f"{result['peak_mib'] or 0:7} MiB  (rule: {result['h100_rule_step_ms']:.2f} ms)", flush=True)
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON file results are merged into")
    parser.add_argument("--smoke", action="store_true", help="batch 2, 2 steps, fp32 on the CPU")
    args = parser.parse_args(argv)
    return run(args.out, args.smoke)


if __name__ == "__main__":
    main()
