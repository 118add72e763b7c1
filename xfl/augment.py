"""Every image augmentation, on whole batches on their device (chapter 0: the datasets page;
the ViT recipes of ``xfl.vit_train.RECIPES``, which chapter 7 and ``bench/vit.py`` run).

- ``random_crop`` and ``random_flip``: the classic CIFAR pair (pad 4, cut 32x32; mirror).
- ``trivial_augment``: each image gets one operation drawn uniformly from ``OPS``, at a
  magnitude drawn uniformly from [0, 1] with a random sign (Müller & Hutter, "TrivialAugment",
  ICCV 2021).
- ``mix_batch``: MixUp (Zhang et al., 2018) or CutMix (Yun et al., 2019) with soft targets.

Every operation runs on a whole batch (or on the share of a batch that drew it): no per-image
Python loop, random numbers drawn on the images' device (or from a given generator) and nothing
read back to the host (``tests/test_train.py`` fails on any read-back in a training step), so
they suit batches that live on a GPU.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

OPS = ("identity", "brightness", "contrast", "color", "sharpness", "posterize", "solarize",
       "autocontrast", "rotate", "shear_x", "shear_y", "translate_x", "translate_y")
MAX_ENHANCE = 0.9  # brightness/contrast/color/sharpness factors in [0.1, 1.9]
MAX_DEGREES = 30.0
MAX_SHEAR = 0.3
MAX_SHIFT = 0.25  # of the image size: 8 pixels of 32


# ------------------------------------------------------------------ random numbers
def _uniform(n: int, generator: torch.Generator | None, device) -> Tensor:
    """``(n,)`` uniform numbers in [0, 1): from ``generator`` on its device, else from the
    global generator of ``device``; returned on ``device``."""
    where = generator.device if generator is not None else device
    return torch.rand(n, generator=generator, device=where).to(device)


def _integers(high: int, n: int, generator: torch.Generator | None, device) -> Tensor:
    where = generator.device if generator is not None else device
    return torch.randint(high, (n,), generator=generator, device=where).to(device)


# ------------------------------------------------------------------- crop and flip
def random_crop(images: Tensor, padding: int = 4, generator: torch.Generator | None = None) -> Tensor:
    """Zero-pad ``(B, C, H, W)`` by ``padding`` and cut a random ``H x W`` window per image."""
    if images.ndim != 4:
        raise ValueError(f"images must be (B, C, H, W), got shape {tuple(images.shape)}")
    B, C, H, W = images.shape
    padded = F.pad(images, (padding,) * 4)  # (B, C, H + 2p, W + 2p)
    top = _integers(2 * padding + 1, B, generator, images.device)  # (B,)
    left = _integers(2 * padding + 1, B, generator, images.device)
    rows = top[:, None] + torch.arange(H, device=images.device)  # (B, H)
    cols = left[:, None] + torch.arange(W, device=images.device)  # (B, W)
    b = torch.arange(B, device=images.device)[:, None, None, None]
    c = torch.arange(C, device=images.device)[None, :, None, None]
    return padded[b, c, rows[:, None, :, None], cols[:, None, None, :]]  # (B, C, H, W)


def random_flip(images: Tensor, generator: torch.Generator | None = None, p: float = 0.5) -> Tensor:
    """Mirror each image of ``(B, C, H, W)`` left-right with probability ``p``."""
    flip = _uniform(images.shape[0], generator, images.device) < p  # (B,)
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


# --------------------------------------------------------------- colour operations
def _per_image(values: Tensor) -> Tensor:
    return values[:, None, None, None]  # (B,) -> (B, 1, 1, 1)


def _blend(x: Tensor, base: Tensor, factor: Tensor) -> Tensor:
    """``base + factor * (x - base)``: factor 1 gives ``x``, 0 gives ``base``."""
    return base + _per_image(factor) * (x - base)


def grayscale(x: Tensor) -> Tensor:
    """ITU-R 601 luma of RGB ``(B, 3, H, W)`` -> ``(B, 1, H, W)``."""
    r, g, b = x.unbind(1)
    return (0.299 * r + 0.587 * g + 0.114 * b).unsqueeze(1)


def _smooth(x: Tensor) -> Tensor:
    """3x3 smoothing (centre weight 5, neighbours 1) of the inner pixels; borders kept."""
    kernel = torch.ones(3, 3, dtype=x.dtype, device=x.device)
    kernel[1, 1] = 5.0
    kernel = (kernel / kernel.sum()).expand(x.shape[1], 1, 3, 3)
    inner = F.conv2d(x, kernel, groups=x.shape[1])  # (B, C, H - 2, W - 2)
    out = x.clone()
    out[..., 1:-1, 1:-1] = inner
    return out


def _enhance(base_fn):
    return lambda x, m: _blend(x, base_fn(x), 1.0 + MAX_ENHANCE * m)


def _posterize(x: Tensor, m: Tensor) -> Tensor:
    step = 2.0 ** torch.round(4 * m.abs())  # keep 8 .. 4 bits
    return torch.floor(x / _per_image(step)) * _per_image(step)


def _solarize(x: Tensor, m: Tensor) -> Tensor:
    threshold = _per_image(256.0 * (1.0 - m.abs()))
    return torch.where(x >= threshold, 255.0 - x, x)


def _autocontrast(x: Tensor, m: Tensor) -> Tensor:
    low, high = x.amin((-2, -1), keepdim=True), x.amax((-2, -1), keepdim=True)  # (B, C, 1, 1)
    scale = torch.where(high > low, 255.0 / (high - low).clamp(min=1e-6), torch.ones_like(high))
    return torch.where(high > low, (x - low) * scale, x)


# ----------------------------------------------------------- geometric operations
def _warp(x: Tensor, theta: Tensor) -> Tensor:
    """Sample ``x`` at ``theta (B, 2, 3)`` applied to each output pixel's centre (normalised
    coordinates, nearest pixel, zeros outside)."""
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)


def _affine(a, b, c, d, e, f) -> Tensor:
    return torch.stack([torch.stack([a, b, c], -1), torch.stack([d, e, f], -1)], -2)  # (B, 2, 3)


def _rotate(x: Tensor, m: Tensor) -> Tensor:
    angle = m * math.radians(MAX_DEGREES)
    cos, sin, zero = angle.cos(), angle.sin(), torch.zeros_like(m)
    return _warp(x, _affine(cos, -sin, zero, sin, cos, zero))


def _shear(axis: int):
    def shear(x: Tensor, m: Tensor) -> Tensor:
        one, zero, s = torch.ones_like(m), torch.zeros_like(m), MAX_SHEAR * m
        rows = (one, s, zero, zero, one, zero) if axis == 0 else (one, zero, zero, s, one, zero)
        return _warp(x, _affine(*rows))
    return shear


def _translate(axis: int):
    def translate(x: Tensor, m: Tensor) -> Tensor:
        one, zero, t = torch.ones_like(m), torch.zeros_like(m), 2.0 * MAX_SHIFT * m  # width is 2
        rows = (one, zero, t, zero, one, zero) if axis == 0 else (one, zero, zero, zero, one, t)
        return _warp(x, _affine(*rows))
    return translate


OPERATIONS = {
    "identity": lambda x, m: x,
    "brightness": _enhance(torch.zeros_like),
    "contrast": _enhance(lambda x: grayscale(x).mean((-2, -1), keepdim=True)),
    "color": _enhance(grayscale),
    "sharpness": _enhance(_smooth),
    "posterize": _posterize,
    "solarize": _solarize,
    "autocontrast": _autocontrast,
    "rotate": _rotate,
    "shear_x": _shear(0),
    "shear_y": _shear(1),
    "translate_x": _translate(0),
    "translate_y": _translate(1),
}


def apply_op(name: str, images: Tensor, magnitude: Tensor) -> Tensor:
    """One operation on float pixels in [0, 255] ``(B, 3, H, W)`` with a signed magnitude
    ``(B,)`` in [-1, 1] (0 is the identity for every operation but autocontrast)."""
    if name not in OPERATIONS:
        raise ValueError(f"unknown operation {name!r}; expected one of {OPS}")
    return OPERATIONS[name](images, magnitude)


def _op_sizes(batch: int, n_ops: int) -> list[int]:
    """How many images of a batch each operation gets: ``batch`` split as evenly as possible."""
    q, r = divmod(batch, n_ops)
    return [q + 1 if k < r else q for k in range(n_ops)]


def trivial_augment(images: Tensor, generator: torch.Generator | None = None,
                    ops: tuple[str, ...] = OPS) -> Tensor:
    """uint8 ``(B, 3, H, W)`` -> uint8 ``(B, 3, H, W)``: one random operation from ``ops`` per
    image at a random signed magnitude. A random permutation deals the images out to the
    operations in equal shares (B / len(ops), give or take one), so each image draws each
    operation with the same chance and every operation runs only on its own images: one
    operation's work per image, shares known on the host, nothing read back. Random numbers come
    from ``generator`` on its own device (then move to the images'), or from the images' device's
    global generator."""
    if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"images must be uint8 (B, 3, H, W), got {images.dtype} {tuple(images.shape)}")
    B = images.shape[0]
    where = generator.device if generator is not None else images.device
    order = torch.randperm(B, generator=generator, device=where).to(images.device)  # (B,)
    magnitude = _uniform(B, generator, images.device) * 2 - 1  # (B,) in [-1, 1)
    x = images.float()
    out = torch.empty_like(x)
    for name, index in zip(ops, order.split(_op_sizes(B, len(ops)))):
        if len(index):
            out[index] = apply_op(name, x[index], magnitude[index])  # (b, 3, H, W): this op's share
    return out.round().clamp(0, 255).to(torch.uint8)


def augment_batch(images: Tensor, generator: torch.Generator | None = None, padding: int = 4,
                  trivial: bool = False) -> Tensor:
    """Random crop with ``padding`` and a random horizontal flip, for a whole uint8 batch; with
    ``trivial``, then one random TrivialAugment operation per image (the ViT recipe)."""
    images = random_flip(random_crop(images, padding, generator), generator)
    return trivial_augment(images, generator) if trivial else images


# -------------------------------------------------------------------------- mixing
def _box_mask(H: int, W: int, lam: Tensor, generator, device) -> Tensor:
    """``(H, W)`` bool, True inside a box of area about ``1 - lam`` centred at a random pixel."""
    cut = (1.0 - lam).sqrt()  # () side as a fraction of the image
    h, w = (H * cut).floor(), (W * cut).floor()
    cy = _integers(H, 1, generator, device)[0]
    cx = _integers(W, 1, generator, device)[0]
    top, bottom = (cy - (h / 2).floor()).clamp(min=0), (cy + (h / 2).floor()).clamp(max=H)
    left, right = (cx - (w / 2).floor()).clamp(min=0), (cx + (w / 2).floor()).clamp(max=W)
    rows, cols = torch.arange(H, device=device), torch.arange(W, device=device)
    return (((rows >= top) & (rows < bottom))[:, None]) & (((cols >= left) & (cols < right))[None, :])


def _beta(alpha: float, device) -> Tensor:
    """One draw ``()`` from Beta(alpha, alpha), on ``device``'s global generator."""
    a = torch.full((), alpha, device=device)  # filled there: a copy from the host would wait
    return torch.distributions.Beta(a, a, validate_args=False).sample()  # validating would read a back


def one_hot(labels: Tensor, num_classes: int, dtype: torch.dtype) -> Tensor:
    """``(B,)`` class ids -> ``(B, num_classes)`` one-hot rows in ``dtype``; unlike ``F.one_hot``
    on the CPU, it reads nothing back to check the ids (an id out of range fails in the scatter)."""
    return torch.zeros(len(labels), num_classes, dtype=dtype, device=labels.device).scatter_(
        1, labels[:, None], 1.0)


def mix_batch(images: Tensor, labels: Tensor, num_classes: int, mix_prob: float,
              mixup_alpha: float = 0.8, cutmix_alpha: float = 1.0,
              generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """MixUp or CutMix with the batch rolled by one: float ``(B, C, H, W), (B,)`` -> mixed
    images and soft targets ``(B, num_classes)``. With probability ``mix_prob`` the batch is
    mixed, half the time by MixUp, half by CutMix (whose target weight is the pasted box's true
    area). The choice and the box stay on the device (no host synchronisation); the mixing
    weight is drawn from the device's global generator."""
    targets = one_hot(labels, num_classes, images.dtype)  # (B, K)
    if mix_prob <= 0:
        return images, targets
    draw = _uniform(2, generator, images.device)
    mix, use_cutmix = draw[0] < mix_prob, draw[1] < 0.5
    lam = torch.where(use_cutmix, _beta(cutmix_alpha, images.device), _beta(mixup_alpha, images.device))
    other, other_targets = images.roll(1, dims=0), targets.roll(1, dims=0)
    box = _box_mask(*images.shape[-2:], lam, generator, images.device)  # (H, W)
    cut_images = torch.where(box, other, images)
    lam = torch.where(use_cutmix, 1.0 - box.float().mean(), lam)  # CutMix: the area kept
    mixed = torch.where(use_cutmix, cut_images, lam * images + (1 - lam) * other)
    mixed_targets = lam * targets + (1 - lam) * other_targets
    return torch.where(mix, mixed, images), torch.where(mix, mixed_targets, targets)
