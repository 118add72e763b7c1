"""The Vision Transformer (chapter 7, ``chapters/ch07_vit/vision_transformer``).

An image becomes a sequence: cut it into ``P x P`` patches, project each patch to
``d_model``, prepend a learned class token, add learned positional embeddings, run the
Pre-LN encoder of :mod:`xfl.blocks`, classify from the class token (Dosovitskiy et al., 2021).
``ViTConfig.pool`` picks the other two ways to classify with an encoder (Berkeley Data C182,
lecture 14): the mean of the patch outputs, or all of them flattened into one vector.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

import torch
from torch import Tensor, nn

from .attention import check_finite
from .attention_maps import record_attention
from .blocks import TransformerStack


def _check_images(images: Tensor, patch_size: int) -> None:
    if not isinstance(patch_size, int) or patch_size < 1:
        raise ValueError(f"patch_size must be a positive int, got {patch_size!r}")
    _check_4d(images)
    H, W = images.shape[-2:]
    if H % patch_size or W % patch_size:
        raise ValueError(f"image size {H}x{W} is not divisible by patch_size={patch_size}")


def _check_4d(images: Tensor) -> None:
    if not isinstance(images, Tensor) or images.ndim != 4:
        shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
        raise ValueError(f"images must be a 4-D tensor (B, C, H, W), got {shape}")


def _check_channels(images: Tensor, channels: int) -> None:
    """``(B, C, H, W)`` with ``C == channels``; a channels-last ``(B, H, W, C)`` batch is named."""
    if images.shape[1] != channels:
        hint = (f"; its last dimension holds the channels, (B, H, W, C): expected (B, C, H, W), "
                f"use images.permute(0, 3, 1, 2)" if images.shape[-1] == channels else "")
        raise ValueError(f"images must have {channels} channels (in_channels), got {images.shape[1]} "
                         f"in shape {tuple(images.shape)}{hint}")


def _check_pixels(images: Tensor, weight: Tensor) -> None:
    """A non-empty batch of float images in the dtype and on the device of ``weight`` (the patch
    projection's, ``(D, C, P, P)``) with its ``C`` channels and finite pixels (uint8 must be
    normalised first)."""
    if images.shape[0] == 0:
        raise ValueError(f"images must hold at least one image, got an empty batch {tuple(images.shape)}")
    if not images.is_floating_point():
        raise ValueError(f"images must be floating point, got {images.dtype}; convert uint8 pixels "
                         f"first (e.g. xfl.data.cifar.normalize)")
    if images.device != weight.device:
        raise ValueError(f"images are on {images.device}, the model on {weight.device}; expected one "
                         f"device (move them with images.to({str(weight.device)!r}))")
    if images.dtype != weight.dtype:
        raise ValueError(f"images must have the weights' dtype {weight.dtype}, got {images.dtype} "
                         f"(convert with images.to({weight.dtype}))")
    _check_channels(images, weight.shape[1])
    check_finite(images, "images", on_accelerators=True)


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """``(B, C, H, W) -> (B, N, C*P*P)`` with ``N = (H/P)(W/P)``.

    Patches come in row-major order (left to right, then top to bottom); each patch is
    flattened in the order of a Conv2d kernel ``(C, P, P)``. Same as
    ``F.unfold(images, P, stride=P).transpose(1, 2)``.
    """
    _check_images(images, patch_size)
    B, C, H, W = images.shape
    P = patch_size
    x = images.reshape(B, C, H // P, P, W // P, P)  # (B, C, rows, P, cols, P)
    # (B, rows, cols, C, P, P): the permute DLStudio 2.5.8 skips (its Transformers.py, line 2429)
    x = x.permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // P) * (W // P), C * P * P)


def unpatchify(patches: Tensor, patch_size: int, image_size: tuple[int, int]) -> Tensor:
    """Inverse of :func:`patchify`: ``(B, N, C*P*P) -> (B, C, H, W)``."""
    B, N, CPP = patches.shape
    P, (H, W) = patch_size, image_size
    C = CPP // (P * P)
    if C * P * P != CPP or N != (H // P) * (W // P):
        raise ValueError(f"patches {tuple(patches.shape)} do not fit P={P} and image {H}x{W}")
    x = patches.reshape(B, H // P, W // P, C, P, P).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(B, C, H, W)


class PatchEmbedding(nn.Module):
    """``(B, C, H, W) -> (B, N, D)``: a Conv2d with kernel = stride = P, i.e. one Linear
    applied to every :func:`patchify` patch (the two share weights, see :meth:`as_linear`)."""

    def __init__(self, patch_size: int, in_channels: int, d_model: int):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: Tensor) -> Tensor:
        _check_images(images, self.patch_size)
        _check_pixels(images, self.proj.weight)
        return self.proj(images).flatten(2).transpose(1, 2)  # (B, D, rows, cols) -> (B, N, D)

    def as_linear(self) -> nn.Linear:
        """The ``nn.Linear(C*P*P, D)`` that maps patchify(images) to the same embeddings."""
        D = self.proj.out_channels
        linear = nn.Linear(self.proj.weight[0].numel(), D).to(self.proj.weight)
        with torch.no_grad():
            linear.weight.copy_(self.proj.weight.reshape(D, -1))
            linear.bias.copy_(self.proj.bias)
        return linear


@dataclass
class ViTConfig:
    """Sizes of a ``ViT`` (the defaults: ViT-Lite-7/4 of Hassani et al., 2021, for 32x32 images);
    ``d_hidden=None`` means 4·d_model. ``pool``: what the classifier reads, ``"cls"`` (the class
    token's output), ``"mean"`` (the mean of the patch outputs, no class token) or ``"flatten"``
    (all patch outputs concatenated, ``N·d_model`` numbers; no class token)."""

    image_size: int = 32
    patch_size: int = 4
    in_channels: int = 3
    num_classes: int = 10
    d_model: int = 256
    num_heads: int = 4
    num_layers: int = 7
    d_hidden: int | None = 512
    dropout: float = 0.0
    pool: str = "cls"

    def __post_init__(self):
        for name in ("image_size", "patch_size", "in_channels", "num_classes", "d_model", "num_heads",
                     "num_layers"):
            _check_size(f"ViTConfig.{name}", getattr(self, name))
        if self.d_hidden is not None:
            _check_size("ViTConfig.d_hidden", self.d_hidden)
        if self.pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}, got {self.pool!r}")


def _check_size(name: str, value) -> None:
    if not isinstance(value, Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


POOLS = ("cls", "mean", "flatten")


class ViT(nn.Module):
    """Vision Transformer classifier: ``(B, C, H, W)`` images -> ``(B, num_classes)`` logits.

    Every learned piece (patch projection, class token, positional embeddings) is a
    registered parameter, so ``model.parameters()`` hands all of them to the optimizer.
    """

    no_weight_decay = ("cls_token", "pos_embedding")  # read by xfl.train.parameter_groups

    def __init__(self, config: ViTConfig):
        super().__init__()
        c = self.config = config
        if c.image_size % c.patch_size:
            raise ValueError(f"image_size={c.image_size} is not divisible by patch_size={c.patch_size}")
        self.image_size, self.patch_size = c.image_size, c.patch_size
        self.grid = c.image_size // c.patch_size  # patches per side
        self.patch_embed = PatchEmbedding(c.patch_size, c.in_channels, c.d_model)
        n_cls = 1 if c.pool == "cls" else 0
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.d_model)) if n_cls else None
        self.pos_embedding = nn.Parameter(torch.zeros(1, n_cls + self.grid ** 2, c.d_model))
        self.dropout = nn.Dropout(c.dropout)
        self.encoder = TransformerStack(c.num_layers, c.d_model, c.num_heads, c.d_hidden, c.dropout,
                                        norm_first=True, activation="gelu")
        features = c.d_model * (self.grid ** 2 if c.pool == "flatten" else 1)
        self.head = nn.Linear(features, c.num_classes)
        nn.init.trunc_normal_(self.pos_embedding, std=0.02)
        if n_cls:
            nn.init.trunc_normal_(self.cls_token, std=0.02)

    def tokens(self, images: Tensor) -> Tensor:
        """Encoder input: ``(B, C, H, W) -> (B, 1 + N, D)``, class token first, positions added
        (``(B, N, D)`` without a class token)."""
        _check_4d(images)
        _check_channels(images, self.config.in_channels)
        if images.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"expected {self.image_size}x{self.image_size} images, "
                             f"got {tuple(images.shape[-2:])}")
        x = self.patch_embed(images)  # (B, N, D)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)  # (B, 1 + N, D)
        return self.dropout(x + self.pos_embedding)

    def pooled(self, x: Tensor) -> Tensor:
        """Encoder output ``(B, T, D)`` -> what the head reads: ``(B, D)``, or ``(B, N·D)`` flattened."""
        pool = self.config.pool
        return x[:, 0] if pool == "cls" else x.mean(1) if pool == "mean" else x.flatten(1)

    def forward(self, images: Tensor) -> Tensor:
        x = self.encoder(self.tokens(images))  # (B, 1 + N, D) or (B, N, D)
        return self.head(self.pooled(x))  # (B, num_classes)

    @torch.no_grad()
    def attention_maps(self, images: Tensor) -> Tensor:
        """Self-attention weights of every layer: ``(B, layers, heads, 1 + N, 1 + N)``,
        recorded with :func:`xfl.attention_maps.record_attention` during one forward pass."""
        with record_attention(self.encoder) as maps:
            self.encoder(self.tokens(images))
        return torch.stack([maps[f"layers.{i}.self_attn"] for i in range(len(self.encoder.layers))], dim=1)

    def class_token_attention(self, images: Tensor, layer: int = -1) -> Tensor:
        """Attention from the class token to the patches, ``(B, heads, grid, grid)``."""
        if self.cls_token is None:
            raise ValueError(f"class_token_attention needs pool='cls', this model has pool={self.config.pool!r}")
        weights = self.attention_maps(images)[:, layer, :, 0, 1:]  # (B, heads, N)
        return weights.reshape(*weights.shape[:2], self.grid, self.grid)


# ------------------------------------------------------------ torchvision's twin
TORCHVISION_NAMES = (  # xfl name pattern -> torchvision's VisionTransformer name, applied in order
    (r"^cls_token$", "class_token"), (r"^patch_embed\.proj\.", "conv_proj."),
    (r"^pos_embedding$", "encoder.pos_embedding"), (r"^encoder\.final_norm\.", "encoder.ln."),
    (r"^encoder\.layers\.(\d+)\.", r"encoder.layers.encoder_layer_\1."),
    (r"residuals\.0\.norm\.", "ln_1."), (r"residuals\.1\.norm\.", "ln_2."),
    (r"self_attn\.in_proj\.(weight|bias)$", r"self_attention.in_proj_\1"),
    (r"self_attn\.out_proj\.", "self_attention.out_proj."), (r"ffn\.", "mlp."), (r"^head\.", "heads.head."),
)


def torchvision_state_dict(model: ViT) -> dict[str, Tensor]:
    """``model``'s weights under the names of ``torchvision.models.VisionTransformer``."""
    import re

    if model.config.pool != "cls":
        raise ValueError(f"torchvision's ViT classifies from a class token: need pool='cls', got "
                         f"{model.config.pool!r}")
    state = {}
    for name, tensor in model.state_dict().items():
        for pattern, new in TORCHVISION_NAMES:
            name = re.sub(pattern, new, name)
        state[name] = tensor
    return state


def to_torchvision(model: ViT) -> nn.Module:
    """A ``torchvision.models.VisionTransformer`` of ``model``'s sizes holding a copy of its
    weights. Bridges: the names (``TORCHVISION_NAMES``), and LayerNorm's epsilon (torchvision
    uses 1e-6, xfl PyTorch's default 1e-5). Both use the [q; k; v] in-projection, exact GELU,
    Pre-LN blocks and a final LayerNorm before the head."""
    from functools import partial

    from torchvision.models import VisionTransformer

    c = model.config
    if c.in_channels != 3:
        raise ValueError(f"torchvision's ViT reads 3-channel images, this model has in_channels={c.in_channels}")
    eps = model.encoder.final_norm.eps
    twin = VisionTransformer(c.image_size, c.patch_size, c.num_layers, c.num_heads, c.d_model,
                             c.d_hidden or 4 * c.d_model, dropout=c.dropout, num_classes=c.num_classes,
                             norm_layer=partial(nn.LayerNorm, eps=eps))
    twin.load_state_dict(torchvision_state_dict(model))  # strict: every name and shape must match
    return twin.to(next(model.parameters()).device)
