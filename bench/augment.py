"""The cost per batch of the ViT recipe's augmentation (``xfl.augment``), on the CPU.

    python -m bench.augment                 # batch 512 of 32x32 CIFAR-sized images
    python -m bench.augment --batch 64 --repeats 3 --out /tmp/augment.json

Times, per batch: TrivialAugment as first written (every operation computed on the whole batch,
each image keeping its own with ``torch.where``: ``every_operation`` below), TrivialAugment as
``xfl.augment.trivial_augment`` computes it now (each operation only on the images that drew
it), and the recipe's whole input step (crop, flip, TrivialAugment, normalization, MixUp/CutMix).
Writes ``bench/results/augment.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from bench.report import write_results
from xfl.augment import OPS, _integers, _per_image, _uniform, apply_op, augment_batch, mix_batch, trivial_augment
from xfl.timing import time_call
from xfl.runtime import device_name

RESULTS = Path(__file__).resolve().parent / "results" / "augment.json"


def every_operation(images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """TrivialAugment as first written: all of ``OPS`` on the whole batch, then a ``where`` per
    operation keeps each image's own (the baseline: 13 operations' work per image)."""
    B = images.shape[0]
    choice = _integers(len(OPS), B, generator, images.device)  # (B,)
    magnitude = _uniform(B, generator, images.device) * 2 - 1  # (B,)
    x = images.float()
    out = x
    for k, name in enumerate(OPS):
        out = torch.where(_per_image(choice == k), apply_op(name, x, magnitude), out)
    return out.round().clamp(0, 255).to(torch.uint8)


def input_step(images: torch.Tensor, labels: torch.Tensor) -> tuple:
    """The recipe's input step: crop, flip, TrivialAugment, scale to [0, 1], then MixUp/CutMix."""
    x = augment_batch(images, trivial=True).float() / 255.0
    return mix_batch(x, labels, 10, mix_prob=1.0)


def measure(batch: int, repeats: int) -> dict:
    """Median seconds per batch of each, on CIFAR-sized random uint8 images."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch, 3, 32, 32), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, 10, (batch,), generator=g)
    timings = {"every_operation_then_where": time_call(lambda: every_operation(images), repeats),
               "selected_operation_only": time_call(lambda: trivial_augment(images), repeats),
               "whole_input_step": time_call(lambda: input_step(images, labels), repeats)}
    out = {name: {"median_ms": t.median_ms, "spread_ms": 1e3 * t.spread_s, "repeats": t.repeats}
           for name, t in timings.items()}
    ratio = timings["every_operation_then_where"].median_s / timings["selected_operation_only"].median_s
    return {"batch": batch, "image": "3x32x32 uint8", "per_batch": out, "speedup_of_selected": ratio}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = {**measure(args.batch, args.repeats), "device": device_name(torch.device("cpu")),
              "cpu_threads": torch.get_num_threads(), "torch": torch.__version__}
    write_results(args.out, result)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
