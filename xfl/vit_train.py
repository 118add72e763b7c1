"""Training an image classifier on data held on the device, with ``xfl.train``'s loop, and
evaluating it (chapters 7 and 8, ``chapters/ch07_vit/vision_transformer``; the benchmark ``bench/vit.py``).

``RECIPES`` holds the CIFAR-10 experiment of both, one ``Recipe`` per profile (``full`` on a GPU,
``cpu`` for the stored reader run, ``fast`` for CI): the model's sizes, how batches are made, the
optimizer and schedule, the budget and the subset sizes. The chapter and the benchmark read them
from here and write none of it themselves.

The whole dataset lives on the device as uint8 ``(N, C, H, W)``. An ``ImageClassification``
hands the loop index batches (``batches``); its ``loss`` gathers, augments (``xfl.augment``),
normalizes and optionally mixes each batch there (no data-loader workers, no host
synchronisation), then scores the model against label-smoothed soft targets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .augment import augment_batch, mix_batch
from .batches import index_batches
from .data.cifar import normalize
from .inference import eval_mode
from .precision import choose_precision
from .train import TrainConfig
from .vit import ViTConfig

Transform = Callable[[Tensor], Tensor]


@dataclass
class ImageClassification:
    """A labelled image set on one device, and how each training batch is made from it."""

    images: Tensor  # (N, C, H, W) uint8, on the training device
    labels: Tensor  # (N,) int64, same device
    normalize: Transform  # uint8 -> float
    augment: Transform | None = None  # uint8 -> uint8, e.g. xfl.augment.augment_batch
    num_classes: int = 10
    batch_size: int = 512
    label_smoothing: float = 0.1
    mix_prob: float = 0.0  # chance that a batch is mixed (half MixUp, half CutMix)
    mixup_alpha: float = 0.8
    cutmix_alpha: float = 1.0
    channels_last: bool = True  # memory format of the batches on CUDA
    seed: int = 0

    @property
    def steps_per_epoch(self) -> int:
        return len(self.images) // self.batch_size

    def batches(self, epoch: int) -> list[Tensor]:
        """The index batches ``(B,)`` of one epoch, on the CPU (``data`` for ``xfl.train.train``,
        which moves each to the images' device)."""
        return index_batches(len(self.images), self.batch_size, epoch, self.seed)

    def inputs(self, index: Tensor) -> tuple[Tensor, Tensor]:
        """Images ``(B, C, H, W)`` ready for the model and soft targets ``(B, K)``, in fp32."""
        index = index.to(self.images.device, non_blocking=True)  # a no-op inside the loop
        x = self.images[index]
        x = self.normalize(self.augment(x) if self.augment is not None else x)
        if self.channels_last and x.is_cuda:
            x = x.contiguous(memory_format=torch.channels_last)
        return mix_batch(x, self.labels[index], self.num_classes, self.mix_prob, self.mixup_alpha,
                         self.cutmix_alpha)

    def loss(self, model: nn.Module, index: Tensor) -> tuple[Tensor, int]:
        """Label-smoothed cross-entropy on the batch at ``index`` (``loss_fn`` for ``train``)."""
        with torch.autocast(self.images.device.type, enabled=False):  # augmentation in full precision
            x, targets = self.inputs(index)
        logits = model(x).float()  # (B, K)
        if logits.shape != targets.shape:
            raise ValueError(f"model gives {logits.shape[-1]} logits but num_classes is {targets.shape[-1]}")
        return F.cross_entropy(logits, targets, label_smoothing=self.label_smoothing), len(index)


# ---------------------------------------------------------------------- evaluation
def predict(model: nn.Module, images: Tensor, normalize: Transform, batch_size: int = 1000,
            amp: bool = True) -> Tensor:
    """Predicted classes ``(N,)`` (on the CPU) of uint8 ``images (N, C, H, W)``."""
    device = next(model.parameters()).device
    precision = choose_precision(device, amp=amp)
    out = []
    with eval_mode(model):
        for batch in images.split(batch_size):
            with precision.autocast():
                out.append(model(normalize(batch.to(device))).argmax(-1))
    return torch.cat(out).cpu()


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


# ---------------------------------------------------------------------- the recipes
@dataclass(frozen=True)
class Recipe:
    """One CIFAR-10 experiment: the model, its batches, its optimizer and schedule, its budget.

    The run ends after ``epochs`` epochs or ``max_seconds`` of training, whichever comes first
    (the cosine schedule reaches zero there; ``epochs=None``: the clock alone ends it);
    ``n_train``/``n_test`` take the first images of each split (0 = all of it).
    """

    model: ViTConfig
    batch_size: int
    epochs: float | None
    max_seconds: float | None = None
    lr: float = 2e-3
    warmup_steps: int = 0
    weight_decay: float = 0.05
    label_smoothing: float = 0.1
    mix_prob: float = 0.3  # chance that a batch is mixed (half MixUp, half CutMix)
    trivial_augment: bool = True  # one TrivialAugment op per image after crop + flip
    n_train: int = 0
    n_test: int = 0

    def augment(self) -> Transform:
        """uint8 -> uint8: random crop (padding 4) and flip, then TrivialAugment if the recipe has it."""
        return partial(augment_batch, trivial=self.trivial_augment)

    def task(self, images: Tensor, labels: Tensor) -> ImageClassification:
        """The training set ``images (N, C, H, W)`` uint8 on its device, batched the recipe's way."""
        return ImageClassification(images, labels, normalize, self.augment(), self.model.num_classes,
                                   self.batch_size, self.label_smoothing, self.mix_prob)

    def train_config(self, steps_per_epoch: int, **overrides) -> TrainConfig:
        """``xfl.train.TrainConfig`` of the recipe for a training set of ``steps_per_epoch`` batches;
        ``overrides`` set the rest (logging, evaluation, device, a shorter budget)."""
        steps = None if self.epochs is None else max(1, math.ceil(self.epochs * steps_per_epoch))
        settings = dict(steps=steps, max_seconds=self.max_seconds, schedule="cosine", lr=self.lr,
                        warmup_steps=self.warmup_steps, weight_decay=self.weight_decay,
                        betas=(0.9, 0.999), eps=1e-8, progress=False)
        return TrainConfig(**{**settings, **overrides})


RECIPES = {
    # ViT-Lite-7/4 (Hassani et al., 2021) on all 50,000 images for 7 minutes on one GPU
    # (bench/vit.py's target: >= 90%)
    "full": Recipe(ViTConfig(d_model=256, num_heads=4, num_layers=7, d_hidden=512), batch_size=512,
                   epochs=None, max_seconds=420.0, warmup_steps=600),
    # the stored reader run: a small model, trained for a fixed number of epochs on a 2-core CPU
    "cpu": Recipe(ViTConfig(d_model=64, num_heads=4, num_layers=2, d_hidden=128), batch_size=128,
                  epochs=5, warmup_steps=100, mix_prob=0.0, trivial_augment=False),
    # CI: the small model on 2,000 images for 6 epochs or 15 seconds
    "fast": Recipe(ViTConfig(d_model=64, num_heads=4, num_layers=2, d_hidden=128), batch_size=64,
                   epochs=6, max_seconds=15.0, warmup_steps=15, n_train=2000, n_test=500),
}
