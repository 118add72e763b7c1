"""Train a Vision Transformer on CIFAR-10 from scratch within a fixed time budget.

    python -m bench.vit                  # the GPU run: 420 s of training, then the test set
    python -m bench.vit --budget 300     # another budget (seconds of training)
    python -m bench.vit --recipe cpu     # chapter 7's stored CPU run, as a benchmark
    python -m bench.vit --smoke          # CPU smoke run on a small subset (about 20 s)

Writes JSON (test accuracy, the validation curve, epochs, images per second, wall time, device,
the model's description and parameter count printed from it, config) to
``bench/results/vit.json`` (or ``--out``). Target: >= 90% test accuracy in 7 minutes of training on
one H100. The recipe is chapter 7's, ``xfl.vit_train.RECIPES["full"]`` (one home for both):
ViT-Lite-7/4 of Hassani et al., 2021, the whole dataset on the GPU with crop + flip and
TrivialAugment (``xfl.augment``; Müller & Hutter, 2021) there, MixUp/CutMix on part of the
batches, label smoothing, AdamW (fused on CUDA) warmed up over a number of steps, then a cosine
decay that follows the clock, bf16 autocast, channels-last batches and torch.compile (compile
time reported apart, outside the budget), all in ``xfl.train``'s one loop. The last ``VALID`` training images are held out: their accuracy is
tracked every ``eval_every`` steps (outside the clock), the best weights are kept and scored
once on the test set.
Data: XFL_DATA_MIRROR (offline mirror) or a verified download.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from bench.report import BestWeights, resume_path, write_results
from xfl.data.cifar import load_cifar10, normalize
from xfl.runtime import default_device, device_name
from xfl.train import TrainConfig, train
from xfl.vit import ViT
from xfl.vit_train import RECIPES, Recipe, accuracy, predict

RESULTS = Path(__file__).resolve().parent / "results" / "vit.json"
VALID = {"full": 5000, "cpu": 5000, "fast": 256}  # training images held out for validation


def configs(args) -> tuple[Recipe, TrainConfig]:
    """The recipe (``xfl.vit_train.RECIPES``, shared with chapter 7) and its training config."""
    name = "fast" if args.smoke else args.recipe
    recipe = RECIPES[name]
    n_train = (recipe.n_train or 50_000) - VALID[name]
    overrides = dict(log_every=50, eval_every=10 if args.smoke else 500, device=args.device,
                     compile=not args.no_compile)
    if args.smoke:
        overrides.update(max_seconds=args.budget or 8.0, device="cpu", compile=False)
    elif args.budget:
        overrides.update(max_seconds=args.budget)
    return recipe, recipe.train_config(n_train // recipe.batch_size, **overrides)


def cifar(n_train: int, n_test: int):
    """CIFAR-10's training and test images and labels, or their first n (0 = all)."""
    (train_x, train_y), (test_x, test_y) = load_cifar10(train=True), load_cifar10(train=False)
    n_train, n_test = n_train or len(train_x), n_test or len(test_x)
    return train_x[:n_train], train_y[:n_train], test_x[:n_test], test_y[:n_test]


def describe(model: ViT) -> str:
    """The recipe's model in words, read from the model itself."""
    c = model.config
    return (f"ViT, {c.image_size}x{c.image_size} images in {c.patch_size}x{c.patch_size} patches, "
            f"{c.num_layers} Pre-LN layers of width {c.d_model}, {c.num_heads} heads, feed-forward "
            f"{c.d_hidden}, {c.pool} pooling: {sum(p.numel() for p in model.parameters()):,} parameters")


def valid_accuracy(images, labels):
    """``score(model)``: accuracy on the held-out training images."""
    return lambda model: accuracy(predict(model, images, normalize), labels)


def run(args) -> dict:
    wall = time.perf_counter()
    recipe, config = configs(args)
    device = torch.device(config.device or default_device())
    config.device = str(device)
    train_x, train_y, test_x, test_y = cifar(recipe.n_train, recipe.n_test)
    n_valid = VALID["fast" if args.smoke else args.recipe]
    valid_x, valid_y, train_x, train_y = train_x[-n_valid:], train_y[-n_valid:], train_x[:-n_valid], train_y[:-n_valid]
    task = recipe.task(train_x.to(device), train_y.to(device))
    torch.manual_seed(config.seed)
    model = ViT(recipe.model)
    log = (lambda e: print(f"step {e['step']:6d}  epoch {e['epoch']:3d}  loss {e['loss']:.3f}  "
                           f"lr {e['lr']:.2e}  {e['seconds']:.0f}s", flush=True)) if not args.quiet else None
    best = BestWeights(valid_accuracy(valid_x, valid_y), "valid_accuracy", resume_path("vit-best.pt"))
    state = train(model, task.batches, task.loss, config, on_log=log, evaluate=best)
    kept = {"valid_accuracy": best.restore(model),
            "step": max(state.evals, key=lambda e: e["valid_accuracy"])["step"]}
    test_acc = accuracy(predict(model, test_x, normalize), test_y)
    return {
        "test_accuracy": test_acc, "kept_weights": kept, "valid_curve": state.evals, "valid_size": n_valid,
        "epochs": state.step / task.steps_per_epoch, "steps": state.step,
        "train_images_per_s": state.tokens / state.seconds, "train_seconds": state.seconds,
        "compile_seconds": state.compile_seconds, "wall_seconds": time.perf_counter() - wall,
        "device": device_name(device), "smoke": args.smoke, "train_size": len(train_x),
        "test_size": len(test_x), "parameters": sum(p.numel() for p in model.parameters()),
        "model_description": describe(model),
        "recipe_name": "fast" if args.smoke else args.recipe, "recipe": asdict(recipe),
        "config": asdict(config), "torch": torch.__version__,
        "final_train_loss": state.history[-1]["loss"],
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds of training (default 420, issue 50; 8 with --smoke)")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="full",
                        help="xfl.vit_train.RECIPES entry (default full: the GPU recipe)")
    parser.add_argument("--smoke", action="store_true", help="the fast recipe on the CPU, 8 s")
    parser.add_argument("--device", default=None, help="cuda / mps / cpu (default: the best)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"JSON file (default {RESULTS})")
    parser.add_argument("--quiet", action="store_true", help="no per-epoch lines")
    args = parser.parse_args(argv)
    report = run(args)
    write_results(args.out, report)
    print(json.dumps({k: report[k] for k in ("model_description", "test_accuracy", "kept_weights", "epochs",
                                             "train_images_per_s", "compile_seconds", "wall_seconds",
                                             "device")}, indent=2))
    return report


if __name__ == "__main__":
    main()
