"""Training and evaluating an image classifier on data held on the device (chapter 7,
``chapters/ch07_vit/vision_transformer``; the benchmark ``bench/vit.py``).

The whole dataset lives on the device as uint8 ``(N, C, H, W)``; every batch is augmented
there (no data-loader workers), optionally mixed (MixUp or CutMix), and trained with
label smoothing, AdamW and a warm-up + cosine schedule. The optimizer step itself
(the device's mixed precision, gradient clipping) is ``xfl.train``'s. The schedule can follow
the step count or the clock: with ``time_budget_s`` it is a function of elapsed time, so a
run ends on time with the learning rate at zero.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .precision import choose_precision
from .runtime import default_device, seed_everything
from .train import TrainConfig, train_step, make_optimizer

Transform = Callable[[Tensor], Tensor]


@dataclass
class ClassifierConfig:
    """Hyper-parameters of :func:`fit`."""

    epochs: int = 100  # an upper bound when time_budget_s is set
    time_budget_s: float | None = None  # None: the schedule follows the step count
    batch_size: int = 512
    lr: float = 1e-3  # peak learning rate
    weight_decay: float = 0.05
    warmup: float = 0.05  # fraction of training spent warming up
    label_smoothing: float = 0.1
    mix_prob: float = 0.0  # chance that a batch is mixed (half MixUp, half CutMix)
    mixup_alpha: float = 0.8
    cutmix_alpha: float = 1.0
    clip_norm: float | None = 1.0
    amp: bool = True  # mixed precision where the device has it (xfl.precision); False = fp32
    compile: bool = True  # torch.compile where xfl.precision says it works (bf16 on CUDA >= 8.0)
    channels_last: bool = True  # memory format of the batches on CUDA
    seed: int = 0
    device: str | None = None


@dataclass
class FitResult:
    """What :func:`fit` returns: one entry per finished epoch, and totals."""

    epochs: int = 0
    steps: int = 0
    images: int = 0
    seconds: float = 0.0
    history: list = field(default_factory=list)  # dicts: epoch, loss, lr, seconds
    step_losses: list = field(default_factory=list)  # training loss of every step


# ------------------------------------------------------------------------ schedule
def warmup_cosine(progress: float, warmup: float) -> float:
    """Learning-rate multiplier at ``progress`` in [0, 1]: linear rise over the first
    ``warmup`` fraction, then a cosine decay to 0 at progress 1."""
    if not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup must be a fraction in [0, 1), got {warmup}")
    progress = min(max(progress, 0.0), 1.0)
    if progress < warmup:
        return progress / warmup
    return 0.5 * (1.0 + math.cos(math.pi * (progress - warmup) / (1.0 - warmup)))


class Progress:
    """Fraction of training done: by the clock when ``budget_s`` is set, else by steps."""

    def __init__(self, total_steps: int, budget_s: float | None):
        self.total_steps, self.budget_s, self.start = total_steps, budget_s, time.perf_counter()

    def __call__(self, step: int) -> float:
        if self.budget_s is not None:
            return (time.perf_counter() - self.start) / self.budget_s
        return step / self.total_steps


# -------------------------------------------------------------------------- mixing
def mix_batch(images: Tensor, labels: Tensor, num_classes: int, config: ClassifierConfig,
              generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """MixUp or CutMix with the batch rolled by one: ``(B, C, H, W), (B,)`` ->
    mixed images and soft targets ``(B, num_classes)``; unmixed with prob 1 - mix_prob."""
    targets = F.one_hot(labels, num_classes).to(images.dtype)
    draw = torch.rand(2, generator=generator).tolist()
    if draw[0] >= config.mix_prob:
        return images, targets
    use_cutmix = draw[1] < 0.5
    alpha = config.cutmix_alpha if use_cutmix else config.mixup_alpha
    lam = float(torch.distributions.Beta(alpha, alpha).sample())
    other, other_targets = images.roll(1, dims=0), targets.roll(1, dims=0)
    if use_cutmix:
        images, lam = _paste_box(images, other, lam, generator)
    else:
        images = lam * images + (1 - lam) * other
    return images, lam * targets + (1 - lam) * other_targets


def _paste_box(images: Tensor, other: Tensor, lam: float, generator) -> tuple[Tensor, float]:
    """CutMix: paste a box of area about (1 - lam) from ``other``; return the true kept area."""
    H, W = images.shape[-2:]
    cut = math.sqrt(1.0 - lam)
    h, w = int(H * cut), int(W * cut)
    cy, cx = (int(torch.randint(0, n, (1,), generator=generator)) for n in (H, W))
    top, bottom = max(cy - h // 2, 0), min(cy + h // 2, H)
    left, right = max(cx - w // 2, 0), min(cx + w // 2, W)
    images = images.clone()
    images[..., top:bottom, left:right] = other[..., top:bottom, left:right]
    return images, 1.0 - (bottom - top) * (right - left) / (H * W)


# ---------------------------------------------------------------------------- loop
def _batches(n: int, batch_size: int, epoch: int, seed: int, device) -> list[Tensor]:
    """Shuffled index batches of one epoch (a fixed order per (seed, epoch)); drops the last
    incomplete batch so every step has the same shape (good for torch.compile)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
    whole = n // batch_size * batch_size or n
    return list(order[:whole].to(device).split(batch_size))


def _soft_target_loss(label_smoothing: float):
    def loss_fn(model, batch):
        images, targets = batch  # targets: (B, K) probabilities
        logits = model(images).float()  # (B, K)
        if logits.shape != targets.shape:
            raise ValueError(f"model gives {logits.shape[-1]} logits but num_classes is {targets.shape[-1]}")
        loss = F.cross_entropy(logits, targets, label_smoothing=label_smoothing)
        return loss, targets.shape[0]
    return loss_fn


def _step_config(config: ClassifierConfig) -> TrainConfig:
    return TrainConfig(lr=config.lr, weight_decay=config.weight_decay, betas=(0.9, 0.999), eps=1e-8,
                       clip_norm=config.clip_norm, amp=config.amp)


def fit(model: nn.Module, images: Tensor, labels: Tensor, config: ClassifierConfig,
        normalize: Transform, augment: Transform | None = None, num_classes: int = 10,
        on_epoch: Callable[[dict], None] | None = None) -> FitResult:
    """Train ``model`` on uint8 ``images (N, C, H, W)`` and ``labels (N,)``.

    Each batch: ``augment`` (uint8 -> uint8, on the device), ``normalize`` (uint8 -> float),
    optional mixing. Stops after ``config.epochs`` or when ``time_budget_s`` runs out.
    """
    device = torch.device(config.device) if config.device else default_device()
    seed_everything(config.seed)
    model.to(device).train()
    precision = choose_precision(device, amp=config.amp)
    scaler = precision.grad_scaler()
    net = torch.compile(model) if config.compile and precision.compile else model
    images, labels = images.to(device), labels.to(device)
    optimizer, _ = make_optimizer(model, _step_config(config))
    steps_per_epoch = len(_batches(len(images), config.batch_size, 0, config.seed, "cpu"))
    clock = Progress(config.epochs * steps_per_epoch, config.time_budget_s)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(clock(step), config.warmup))
    generator, loss_fn = torch.Generator().manual_seed(config.seed), _soft_target_loss(config.label_smoothing)

    def step(index: Tensor) -> Tensor:  # one optimizer step on the images at ``index``
        x = normalize(augment(images[index]) if augment is not None else images[index])
        if config.channels_last and device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        batch = mix_batch(x, labels[index], num_classes, config, generator)
        return train_step(net, loss_fn, batch, optimizer, scheduler, _step_config(config), precision,
                          scaler)[0]

    result = FitResult()
    for epoch in range(config.epochs):
        losses = []
        for index in _batches(len(images), config.batch_size, epoch, config.seed, device):
            losses.append(step(index))
            result.steps, result.images = result.steps + 1, result.images + len(index)
            if clock(result.steps) >= 1.0:
                break
        epoch_losses = torch.stack(losses).float().cpu()  # one GPU sync per epoch, before timing
        result.epochs, result.seconds = epoch + 1, time.perf_counter() - clock.start
        result.step_losses += epoch_losses.tolist()
        entry = {"epoch": epoch + 1, "loss": float(epoch_losses.mean()),
                 "lr": scheduler.get_last_lr()[0], "seconds": result.seconds}
        result.history.append(entry)
        if on_epoch is not None:
            on_epoch(entry)
        if clock(result.steps) >= 1.0:
            break
    return result


# ---------------------------------------------------------------------- evaluation
@torch.no_grad()
def predict(model: nn.Module, images: Tensor, normalize: Transform, batch_size: int = 1000,
            amp: bool = True) -> Tensor:
    """Predicted classes ``(N,)`` (on the CPU) of uint8 ``images (N, C, H, W)``."""
    model.eval()
    device = next(model.parameters()).device
    precision = choose_precision(device, amp=amp)
    out = []
    for batch in images.split(batch_size):
        with precision.autocast():
            out.append(model(normalize(batch.to(device))).argmax(-1).cpu())
    return torch.cat(out)


def accuracy(predictions: Tensor, labels: Tensor) -> float:
    """Fraction of ``predictions (N,)`` equal to ``labels (N,)``."""
    if predictions.shape != labels.shape:
        raise ValueError(f"predictions {tuple(predictions.shape)} and labels {tuple(labels.shape)} differ")
    return float((predictions == labels.to(predictions.device)).float().mean())


def confusion_matrix(predictions: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """``(K, K)`` counts: row = true class, column = predicted class."""
    labels = labels.to(predictions.device)
    if predictions.shape != labels.shape:
        raise ValueError(f"predictions {tuple(predictions.shape)} and labels {tuple(labels.shape)} differ")
    flat = labels.long() * num_classes + predictions.long()
    return torch.bincount(flat, minlength=num_classes ** 2).reshape(num_classes, num_classes)
