"""Train a Vision Transformer on CIFAR-10 from scratch within a fixed time budget.

    python bench/vit.py                  # the GPU run: 600 s of training, then the test set
    python bench/vit.py --budget 300     # another budget (seconds of training)
    python bench/vit.py --smoke          # CPU smoke run on a small subset (about 20 s)

Writes JSON (test accuracy, epochs, images per second, wall time, device, config) to
``bench/results/vit.json`` (or ``--out``). Target: >= 90% test accuracy in 10 minutes on
one H100. The recipe (chapter 7): patch 4, 7 Pre-LN layers of width 256 (ViT-Lite-7/4 of
Hassani et al., 2021), the whole dataset on the GPU with crop + flip and TrivialAugment
(``xfl.augment``; Müller & Hutter, 2021) there, MixUp/CutMix on part of the batches, label
smoothing, AdamW with a warm-up + cosine schedule that follows the clock, bf16 autocast,
channels-last batches and torch.compile.
Data: XFL_DATA_MIRROR (offline mirror) or a verified download.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from bench.report import device_name, write_results  # noqa: E402
from xfl.data.cifar import augment_batch, load_cifar10, normalize  # noqa: E402
from xfl.runtime import default_device  # noqa: E402
from xfl.vit import ViT  # noqa: E402
from xfl.vit_train import ClassifierConfig, accuracy, fit, predict  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "vit.json"

GPU_MODEL = dict(image_size=32, patch_size=4, in_channels=3, num_classes=10, d_model=256,
                 num_heads=4, num_layers=7, d_hidden=512, dropout=0.0)
SMOKE_MODEL = dict(GPU_MODEL, d_model=32, num_heads=2, num_layers=1, d_hidden=64)


def configs(args) -> tuple[dict, ClassifierConfig, int, int]:
    """Model kwargs, training config, and the train/test subset sizes (0 = all)."""
    if args.smoke:
        train = ClassifierConfig(epochs=1000, time_budget_s=args.budget or 8.0, batch_size=64,
                                 lr=2e-3, warmup=0.1, mix_prob=0.3, compile=False, device="cpu")
        return SMOKE_MODEL, train, 2048, 500
    train = ClassifierConfig(epochs=1000, time_budget_s=args.budget or 600.0, batch_size=512,
                             lr=2e-3, weight_decay=0.05, warmup=0.05, label_smoothing=0.1,
                             mix_prob=0.3, compile=not args.no_compile, device=args.device)
    return GPU_MODEL, train, 0, 0


def run(args) -> dict:
    wall = time.perf_counter()
    model_kw, config, n_train, n_test = configs(args)
    if config.device is None:
        config.device = str(default_device())
    device = torch.device(config.device)
    train_x, train_y = load_cifar10(train=True)
    test_x, test_y = load_cifar10(train=False)
    if n_train:
        train_x, train_y, test_x, test_y = train_x[:n_train], train_y[:n_train], test_x[:n_test], test_y[:n_test]
    torch.manual_seed(config.seed)
    model = ViT(**model_kw)
    log = (lambda e: print(f"epoch {e['epoch']:3d}  loss {e['loss']:.3f}  lr {e['lr']:.2e}  "
                           f"{e['seconds']:.0f}s", flush=True)) if not args.quiet else None
    augment = partial(augment_batch, trivial_augment=True)  # crop, flip, one TrivialAugment op
    result = fit(model, train_x, train_y, config, normalize, augment, on_epoch=log)
    test_acc = accuracy(predict(model, test_x, normalize), test_y)
    return {
        "test_accuracy": test_acc, "epochs": result.epochs, "steps": result.steps,
        "train_images_per_s": result.images / result.seconds, "train_seconds": result.seconds,
        "wall_seconds": time.perf_counter() - wall, "device": device_name(device),
        "smoke": args.smoke, "train_size": len(train_x), "test_size": len(test_x),
        "parameters": sum(p.numel() for p in model.parameters()),
        "model": model_kw, "config": asdict(config), "augment": "crop 4 + flip + TrivialAugment",
        "torch": torch.__version__,
        "final_train_loss": result.history[-1]["loss"],
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds of training (default 600; 8 with --smoke)")
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run on a subset")
    parser.add_argument("--device", default=None, help="cuda / mps / cpu (default: the best)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"JSON file (default {RESULTS})")
    parser.add_argument("--quiet", action="store_true", help="no per-epoch lines")
    args = parser.parse_args(argv)
    report = run(args)
    write_results(args.out, report)
    print(json.dumps({k: report[k] for k in ("test_accuracy", "epochs", "train_images_per_s",
                                             "wall_seconds", "device")}, indent=2))
    return report


if __name__ == "__main__":
    main()
