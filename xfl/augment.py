"""TrivialAugment on whole uint8 image batches, on their device (the ViT recipe of chapter 7,
``chapters/ch07_vit/vision_transformer``, and ``bench/vit.py``).

Each image gets one operation drawn uniformly from ``OPS``, at a magnitude drawn uniformly
from [0, 1] with a random sign (Müller & Hutter, "TrivialAugment", ICCV 2021). Every
operation is computed for the whole batch and each image keeps its own: no per-image Python
loop and no host synchronisation, so it suits batches that live on a GPU.
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


def trivial_augment(images: Tensor, generator: torch.Generator | None = None,
                    ops: tuple[str, ...] = OPS) -> Tensor:
    """uint8 ``(B, 3, H, W)`` -> uint8 ``(B, 3, H, W)``: one random operation from ``ops`` per
    image at a random signed magnitude. Random numbers come from ``generator`` (or the global
    generator) on its own device, then move to the images' device."""
    if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"images must be uint8 (B, 3, H, W), got {images.dtype} {tuple(images.shape)}")
    B, gen_device = images.shape[0], generator.device if generator is not None else "cpu"
    choice = torch.randint(len(ops), (B,), generator=generator, device=gen_device).to(images.device)
    magnitude = torch.rand(B, generator=generator, device=gen_device) * 2 - 1  # (B,) in [-1, 1)
    magnitude = magnitude.to(images.device)
    x = images.float()
    out = x
    for k, name in enumerate(ops):
        out = torch.where(_per_image(choice == k), apply_op(name, x, magnitude), out)
    return out.round().clamp(0, 255).to(torch.uint8)
