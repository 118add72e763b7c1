"""Numeric precision and compilation, chosen by the device in one place (every training chapter).

- CUDA with compute capability >= 8.0 (A100, H100, ...): bf16 autocast and ``torch.compile``.
- Older CUDA GPUs (Colab's free T4 is 7.5): bf16 is not native there and Triton will not compile
  bf16 below 8.0, so fp16 autocast with a gradient scaler, and no compilation.
- CPU and Apple's MPS: fp32, no compilation.

``XFL_PRECISION`` (``bf16``, ``fp16``, ``fp32`` or ``auto``) forces a choice, e.g.
``XFL_PRECISION=fp16`` runs the T4 path on an H100. A forced choice keeps the compilation rule:
only bf16 on CUDA compiles.

Where compilation works, a run still compiles only when it pays (:func:`compile_pays`): the book
trains many small models for a few hundred steps, and compiling each input shape costs seconds to
a minute, more than such a run saves. ``xfl.train`` times one eager step and applies the rule.
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


# The rule's two assumptions (to be replaced by measurements on a GPU): compiling one input shape
# of one of the book's models costs about COMPILE_SECONDS, and a compiled step takes
# 1 / COMPILE_SPEEDUP of an eager one. Break-even: 90 s of eager training per shape.
COMPILE_SECONDS = 30.0
COMPILE_SPEEDUP = 1.5


def compile_pays(eager_step_seconds: float, steps: int | None, max_seconds: float | None,
                 shapes: int = 1) -> bool:
    """Whether compiling a run saves time. Its expected eager training time (``steps`` steps of
    ``eager_step_seconds``, capped by the ``max_seconds`` budget) times the fraction compilation
    saves, 1 - 1/COMPILE_SPEEDUP, must exceed COMPILE_SECONDS for each of its ``shapes``."""
    if eager_step_seconds < 0 or shapes < 1:
        raise ValueError(f"expected eager_step_seconds >= 0 and shapes >= 1, got "
                         f"{eager_step_seconds} and {shapes}")
    limits = [s for s in (None if steps is None else steps * eager_step_seconds, max_seconds)
              if s is not None]
    if not limits:
        raise ValueError("a run needs steps or max_seconds to estimate its length, got neither")
    return min(limits) * (1 - 1 / COMPILE_SPEEDUP) > COMPILE_SECONDS * shapes
