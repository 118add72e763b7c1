"""Distributed data parallelism for the training loop (no chapter imports it: ``xfl.train`` does,
and chapter 5 explains it).

Launched with ``torchrun --nproc_per_node=N``, every process joins one process group (NCCL on
CUDA, one GPU per process; gloo elsewhere), trains a replica wrapped in
``DistributedDataParallel`` and takes every N-th batch. Launched plainly, everything here is a
no-op for a single process, so the calling code never changes.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Iterable

import torch
import torch.distributed as dist
from torch import Tensor, nn


@dataclass(frozen=True)
class Processes:
    """Where this process stands: its rank, how many there are, and its device."""

    rank: int
    world: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def join(device: torch.device) -> Processes:
    """Join the process group torchrun describes (or stay alone); CUDA ranks take ``LOCAL_RANK``'s GPU."""
    if not launched_by_torchrun():
        return Processes(0, 1, device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    return Processes(dist.get_rank(), dist.get_world_size(), device)


def wrap(model: nn.Module, processes: Processes) -> nn.Module:
    """``model`` in DistributedDataParallel when there are several processes."""
    return nn.parallel.DistributedDataParallel(model) if processes.world > 1 else model


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside DistributedDataParallel and/or ``torch.compile`` wrappers."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):  # torch.compile's OptimizedModule
            model = model._orig_mod
        else:
            return model


def shard(batches: Iterable, rank: int, world: int):
    """Batch ``rank`` of each group of ``world`` batches; an incomplete last group is dropped
    so every process takes the same number of steps."""
    iterator = iter(batches)
    while group := list(itertools.islice(iterator, world)):
        if len(group) < world:
            return
        yield group[rank]


def sum_over_processes(value: Tensor, processes: Processes) -> Tensor:
    """The sum of ``value`` over all processes (``value`` itself for one process)."""
    if processes.world == 1:
        return value
    value = value.detach().clone()
    dist.all_reduce(value)
    return value


def mean_over_processes(value: Tensor, processes: Processes) -> Tensor:
    """The mean of ``value`` over all processes (``value`` itself for one process)."""
    if processes.world == 1:
        return value
    return sum_over_processes(value, processes) / processes.world


def from_main(value: float, processes: Processes) -> float:
    """Rank 0's ``value`` on every process (so all processes agree on the clock)."""
    if processes.world == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=processes.device)
    dist.broadcast(t, src=0)
    return float(t)
