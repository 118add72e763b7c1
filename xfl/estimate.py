"""How long a chapter's full profile takes on a GPU, estimated before a GPU measures it
(issue 53; ``bench/t4_estimate.py`` applies it to every training chapter).

The rule, per piece of work (one training step, one decoding step):

    seconds = FLOPs / (peak * fraction) + aten ops * op_seconds

- FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode`` on the CPU, under
  ``SDPBackend.MATH``: with torch 2.14 the fused CPU attention kernel is not counted at all
  (``tests/test_estimate.py`` checks that attention is). A training step counts forward and
  backward; AdamW's update is not counted (a few FLOPs per parameter, under 0.1% here).
- aten ops are counted with the default attention backend (what a GPU runs): in eager mode
  (no ``torch.compile`` on a T4) every op costs host time to dispatch and launch, and small
  models are bound by it. A training step is counted under autocast, as a GPU runs it (fp16 on
  a T4, bf16 on an H100); ``OPTIMIZER_OPS`` adds the clip, GradScaler and fused AdamW kernels.
- ``fraction`` and ``op_seconds`` are assumptions (``Device``'s docstring) until a T4, or the
  recorded H100 step times, measure them.

FLOPs of a transformer step are linear in the batch at a fixed sequence length, so a step is
counted on a small batch and scaled (``Work.scaled``): counting the full batch on a CPU would
take minutes for nothing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

OPTIMIZER_OPS = 20  # clip_grad_norm_ (foreach), GradScaler unscale/update, fused AdamW: kernels per step


@dataclass(frozen=True)
class Device:
    """A GPU (or CPU) for the estimate: its dense peak at the precision the book uses there, the
    achieved fraction of it on counted FLOPs and the host seconds per eager aten op.

    ``fraction`` 0.25 (assumed): model-FLOP utilisation reported for large-model training is
    21-46% (Chowdhery et al. 2022, PaLM, Table 3); this book's small layers (a few thousand rows
    by 256..1024) run smaller matrix products, and a T4 under its 70 W cap rarely holds its
    boost clock, so a quarter is taken for the FLOP term, the small-kernel overhead being the
    op term's. ``op_seconds`` (assumed): eager PyTorch spends some microseconds of host time per
    op (dispatcher, autograd, kernel launch); Colab's 2.2 GHz Xeon host is taken at 10 us, an
    H100 machine's at 5 us. Both are assumptions until measured."""

    name: str
    peak_flops: float
    fraction: float
    op_seconds: float
    source: str

    def terms(self, work: "Work") -> tuple[float, float]:
        """Seconds of ``work``'s FLOPs at the achieved rate, and of its ops' host time."""
        return work.flops / (self.peak_flops * self.fraction), work.ops * self.op_seconds

    def seconds(self, work: "Work") -> float:
        """The rule: FLOPs over the achieved rate plus the ops' host time."""
        return sum(self.terms(work))


T4 = Device("T4", 65e12, 0.25, 10e-6, "NVIDIA T4 datasheet: 65 TFLOPS fp16 tensor-core peak")
H100 = Device("H100 SXM", 989e12, 0.25, 5e-6, "NVIDIA H100 SXM datasheet: 989 TFLOPS bf16 dense peak")
# Work a chapter runs on the CPU even on Colab: one physical core of a 2.2 GHz Xeon (Colab's 2
# vCPUs), AVX2 with two FMA units: 2.2e9 * 32 fp32 FLOPs per cycle; an assumption like the rest.
COLAB_CPU = Device("Colab CPU (2 vCPU)", 2.2e9 * 32, 0.25, 10e-6, "assumed: one Xeon core at 2.2 GHz, AVX2 FMA")


@dataclass(frozen=True)
class Work:
    """FLOPs and aten ops of one piece of work (a step, a decode), or of many (``*``, ``+``)."""

    flops: float
    ops: float

    def __add__(self, other: "Work") -> "Work":
        return Work(self.flops + other.flops, self.ops + other.ops)

    def __mul__(self, times: float) -> "Work":
        return Work(self.flops * times, self.ops * times)

    __rmul__ = __mul__

    def scaled(self, batch_factor: float) -> "Work":
        """The same work on a batch ``batch_factor`` times larger: FLOPs scale, ops do not."""
        return Work(self.flops * batch_factor, self.ops)


class _OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of ``fn()`` with attention on the math path (so that it is counted)."""
    counter = FlopCounterMode(display=False)
    with sdpa_kernel(SDPBackend.MATH), counter:
        fn()
    return counter.get_total_flops()


def count_ops(fn: Callable[[], object]) -> int:
    """aten ops dispatched by ``fn()`` on the default attention path."""
    counter = _OpCounter()
    with counter:
        fn()
    return counter.ops


def count_work(fn: Callable[[], object], grad: bool = False) -> Work:
    """``Work`` of ``fn()``: its FLOPs and its ops (``fn`` runs twice, with autograd if ``grad``)."""
    with contextlib.nullcontext() if grad else torch.no_grad():
        return Work(count_flops(fn), count_ops(fn))


def training_step(model: torch.nn.Module, loss_fn: Callable, batch, autocast: bool = True) -> Work:
    """Forward and backward of ``loss_fn(model, batch)`` plus ``OPTIMIZER_OPS`` (the update's
    FLOPs are not counted). ``autocast``: under CPU autocast (bf16), so that the ops include the
    casts a GPU's mixed-precision step dispatches (about a sixth more ops; FLOPs unchanged).
    Gradients are cleared after each count."""
    model.train()

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(model, batch)[0]
        loss.backward()
        model.zero_grad(set_to_none=True)
    return count_work(step, grad=True) + Work(0, OPTIMIZER_OPS)


def attention_flops(batch: int, heads: int, queries: int, keys: int, head_dim: int,
                    backward: bool = False) -> int:
    """Hand count of attention's two matrix products (scores q k^T, then weights v):
    2 * 2 * B h Tq Tk d forward; the backward has four such products, twice the forward."""
    forward = 4 * batch * heads * queries * keys * head_dim
    return 3 * forward if backward else forward
