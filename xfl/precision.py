"""Numeric precision and compilation, chosen by the device in one place (every training chapter).

- CUDA with compute capability >= 8.0 (A100, H100, ...): bf16 autocast and ``torch.compile``.
- Older CUDA GPUs (Colab's free T4 is 7.5): bf16 is not native there and Triton will not compile
  bf16 below 8.0, so fp16 autocast with a gradient scaler, and no compilation.
- CPU and Apple's MPS: fp32, no compilation.

``XFL_PRECISION`` (``bf16``, ``fp16``, ``fp32`` or ``auto``) forces a choice, e.g.
``XFL_PRECISION=fp16`` runs the T4 path on an H100. A forced choice keeps the compilation rule:
only bf16 on CUDA compiles.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

PRECISION_ENV_VAR = "XFL_PRECISION"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
NATIVE_BF16_CAPABILITY = (8, 0)


@dataclass(frozen=True)
class Precision:
    """How a training or inference step runs: autocast dtype, gradient scaling, compilation."""

    name: str  # "bf16", "fp16" or "fp32"
    device_type: str  # "cuda", "cpu" or "mps"
    compile: bool

    @property
    def dtype(self) -> torch.dtype:
        return _DTYPES[self.name]

    @property
    def uses_scaler(self) -> bool:
        """fp16 gradients underflow without loss scaling; bf16 and fp32 need none."""
        return self.name == "fp16"

    def autocast(self) -> AbstractContextManager:
        """The autocast context of this precision (a no-op for fp32)."""
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.name != "fp32")

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A gradient scaler, enabled only for fp16 (a disabled one passes everything through)."""
        return torch.amp.GradScaler(self.device_type, enabled=self.uses_scaler)

    def __str__(self) -> str:
        scaler = " + gradient scaler" if self.uses_scaler else ""
        return f"{self.name}{scaler} on {self.device_type}, {'compiled' if self.compile else 'not compiled'}"


def _requested() -> str:
    raw = os.environ.get(PRECISION_ENV_VAR, "auto").strip().lower() or "auto"
    if raw != "auto" and raw not in _DTYPES:
        raise ValueError(f"{PRECISION_ENV_VAR}={raw!r} is not understood; expected one of "
                         f"{['auto', *_DTYPES]} or unset")
    return raw


def choose_precision(device: torch.device | str, capability: tuple[int, int] | None = None,
                     amp: bool = True) -> Precision:
    """The precision for ``device``; ``capability`` defaults to the CUDA device's own (tests fake
    it); ``amp=False`` asks for fp32. ``XFL_PRECISION`` overrides the automatic choice."""
    device = torch.device(device)
    requested = _requested()
    if device.type != "cuda":
        name = requested if requested != "auto" else "fp32"
        return Precision(name if amp else "fp32", device.type, compile=False)
    if capability is None:
        capability = torch.cuda.get_device_capability(device)
    native_bf16 = tuple(capability) >= NATIVE_BF16_CAPABILITY
    name = requested if requested != "auto" else ("bf16" if native_bf16 else "fp16")
    name = name if amp else "fp32"
    return Precision(name, "cuda", compile=name == "bf16" and native_bf16)
