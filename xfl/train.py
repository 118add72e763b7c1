"""One training loop for every chapter that trains a model (chapters 5-7, decoder-only).

Explained in chapter 5 (chapters/ch05_encoder_decoder/translation.md).

``train(model, data, loss_fn, config)`` runs AdamW with the inverse-square-root warm-up
schedule of Vaswani et al. (2017), gradient clipping, the device's mixed precision
(``xfl.precision``: bf16 on recent GPUs, fp16 with a gradient scaler on a T4), a tqdm bar,
per-layer gradient norms, atomic checkpoints and exact resumption. Launched with
``torchrun`` it wraps the model in DistributedDataParallel and shards the batches, with no
change to the calling code.

- ``data(epoch)`` returns the batches of one epoch, the same ones every time it is called
  with the same epoch (shuffle with a seed that depends on the epoch), so that a resumed or
  distributed run sees exactly the batches an uninterrupted single-process run would.
  They must not draw from the global random generators (use a ``torch.Generator``).
- ``loss_fn(model, batch) -> (mean loss, number of target tokens)`` (the count may be a
  tensor: it is read only when logging, to avoid a GPU sync per step); see ``seq2seq_loss``,
  ``lm_loss`` and ``classification_loss``.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import re
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from .files import atomic_path
from .precision import Precision, choose_precision
from .runtime import default_device, seed_everything


# ---------------------------------------------------------------------------- losses
def seq2seq_loss(model: nn.Module, batch, *, label_smoothing: float = 0.0, pad_id: int = 0):
    """Teacher-forced loss of an encoder-decoder on ``batch = (src (B, S), tgt (B, L))``.

    ``tgt`` is SOS w1 .. wn EOS PAD..; the decoder reads ``tgt[:, :-1]`` and predicts
    ``tgt[:, 1:]``. Padding targets carry no loss (DLStudio's loss counts them).
    """
    src, tgt = batch[0], batch[1]
    logits = model(src, tgt[:, :-1])  # (B, L-1, V)
    labels = tgt[:, 1:]
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=pad_id,
                           label_smoothing=label_smoothing)
    return loss, (labels != pad_id).sum()


def lm_loss(model: nn.Module, tokens: Tensor, *, label_smoothing: float = 0.0, pad_id: int = 0):
    """Next-token loss of a decoder-only model on ``tokens (B, L)``; padding carries no loss."""
    logits = model(tokens[:, :-1])  # (B, L-1, V)
    labels = tokens[:, 1:]
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=pad_id,
                           label_smoothing=label_smoothing)
    return loss, (labels != pad_id).sum()


def classification_loss(model: nn.Module, batch, *, label_smoothing: float = 0.0):
    """Cross-entropy of a classifier on ``batch = (inputs, labels (B,))``."""
    inputs, labels = batch
    loss = F.cross_entropy(model(inputs).float(), labels, label_smoothing=label_smoothing)
    return loss, labels.numel()


# -------------------------------------------------------------------------- schedule
def inverse_sqrt_factor(step: int, warmup: int) -> float:
    """Multiplier of the peak learning rate at optimizer step ``step`` (0-based).

    With ``warmup > 0``: linear rise to 1 over ``warmup`` steps, then ``sqrt(warmup/step)``
    decay — Vaswani et al.'s schedule d^-0.5·min(s^-0.5, s·w^-1.5), rescaled to peak 1.
    With ``warmup == 0``: a constant 1 (the "no warm-up" runs of chapter 5).
    """
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if warmup == 0:
        return 1.0
    s = step + 1
    return min(s / warmup, math.sqrt(warmup / s))


# ---------------------------------------------------------------------------- config
@dataclass
class TrainConfig:
    """Everything ``train`` needs besides the model, data and loss."""

    steps: int = 1000
    lr: float = 5e-4  # peak learning rate
    warmup: int = 400  # 0 = no warm-up (constant lr)
    weight_decay: float = 0.01
    betas: tuple = (0.9, 0.98)
    eps: float = 1e-9
    clip_norm: float | None = 1.0  # None = no clipping
    amp: bool = True  # mixed precision where the device has it (xfl.precision); False = fp32
    seed: int = 0
    log_every: int = 10
    grad_norm_every: int = 0  # record per-layer gradient norms every k steps (0 = never)
    checkpoint_path: str | None = None
    checkpoint_every: int = 0  # 0 = only at the end (when a path is given)
    max_seconds: float | None = None  # stop early after this much training time
    progress: bool = True  # tqdm bar (rank 0 only)
    device: str | None = None  # None = xfl.runtime.default_device()


@dataclass
class TrainState:
    """What ``train`` returns: the step reached, the logged history and timing."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    history: list = field(default_factory=list)  # dicts: step, loss, lr, grad_norm
    grad_norms: list = field(default_factory=list)  # (step, {layer: norm})
    tokens: int = 0
    seconds: float = 0.0


# ------------------------------------------------------------------- gradient norms
_LAYER_NAME = re.compile(r"^(.*?layers\.\d+)\.")


def layer_of(param_name: str) -> str:
    """``'decoder.layers.2.ffn.0.weight' -> 'decoder.layers.2'``; parameters outside numbered
    layers group by their first two module names (``'encoder.final_norm'``, ``'output'``)."""
    match = _LAYER_NAME.match(param_name)
    if match:
        return match.group(1)
    return ".".join(param_name.split(".")[:-1][:2]) or param_name


def layer_grad_norms(model: nn.Module) -> "OrderedDict[str, float]":
    """L2 norm of the gradient of each layer's parameters, in model order."""
    squares: "OrderedDict[str, float]" = OrderedDict()
    for name, p in unwrap(model).named_parameters():
        if p.grad is not None:
            key = layer_of(name)
            squares[key] = squares.get(key, 0.0) + float(p.grad.detach().float().pow(2).sum())
    return OrderedDict((k, math.sqrt(v)) for k, v in squares.items())


def grad_norms_at_init(model: nn.Module, loss_fn: Callable, batch) -> "OrderedDict[str, float]":
    """Per-layer gradient norms of ``loss_fn(model, batch)`` for the model as it is now."""
    model.zero_grad(set_to_none=True)
    loss, _ = loss_fn(model, batch)
    loss.backward()
    norms = layer_grad_norms(model)
    model.zero_grad(set_to_none=True)
    return norms


# ---------------------------------------------------------------------- distributed
def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a DistributedDataParallel wrapper (or the model itself)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup_distributed(device: torch.device) -> tuple[int, int, torch.device]:
    """Join the process group torchrun describes; return (rank, world size, device).

    NCCL on CUDA (one GPU per process, ``LOCAL_RANK``), gloo elsewhere.
    """
    if not launched_by_torchrun():
        return 0, 1, device
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    return dist.get_rank(), dist.get_world_size(), device


def shard(batches: Iterable, rank: int, world: int):
    """Batch ``rank`` of each group of ``world`` batches; an incomplete last group is dropped
    so every process takes the same number of steps."""
    iterator = iter(batches)
    while group := list(itertools.islice(iterator, world)):
        if len(group) < world:
            return
        yield group[rank]


def _mean_over_processes(value: float, world: int, device) -> float:
    if world == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t) / world


def _out_of_time(config: TrainConfig, seconds: float, world: int, device) -> bool:
    """True once ``max_seconds`` is spent; processes agree (rank 0's clock decides)."""
    if config.max_seconds is None or world == 1:
        return config.max_seconds is not None and seconds > config.max_seconds
    flag = torch.tensor([float(seconds > config.max_seconds)], device=device)
    dist.broadcast(flag, src=0)
    return bool(flag)


# ---------------------------------------------------------------------- checkpoints
def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str, model, optimizer, scheduler, state: TrainState, config: TrainConfig):
    """Write everything needed to resume, atomically (``xfl.files``): a crash while saving
    leaves the previous checkpoint as it was."""
    payload = {"model": unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),
               "scheduler": scheduler.state_dict(), "state": asdict(state),
               "config": asdict(config), "rng": _rng_state()}
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(payload, f)


def load_checkpoint(path: str, model, optimizer=None, scheduler=None, map_location="cpu") -> TrainState:
    """Restore model (and optimizer, scheduler, RNG when given) from ``path``; return the state."""
    payload = torch.load(path, map_location=map_location, weights_only=False)
    unwrap(model).load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(payload["scheduler"])
        _set_rng_state(payload["rng"])
    return TrainState(**payload["state"])


# ------------------------------------------------------------------------ the loop
def make_optimizer(model: nn.Module, config: TrainConfig):
    """AdamW (no weight decay on biases, norms and embeddings' 1-D params) + warm-up schedule."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=tuple(config.betas), eps=config.eps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: inverse_sqrt_factor(step, config.warmup))
    return optimizer, scheduler


def _to_device(batch, device):
    if isinstance(batch, Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device) for b in batch)
    return batch


def _batches_from(data, state: TrainState, rank: int, world: int):
    """Yield (epoch, index, batch) forever, starting where ``state`` says."""
    epoch, skip = state.epoch, state.batch_in_epoch
    while True:
        produced = False
        for i, batch in enumerate(shard(data(epoch), rank, world)):
            produced = True
            if i >= skip:
                yield epoch, i, batch
        if not produced:
            raise ValueError(f"data({epoch}) gave fewer than {world} batches: nothing to train on")
        epoch, skip = epoch + 1, 0


def train_step(model, loss_fn, batch, optimizer, scheduler, config, precision: Precision,
               scaler: torch.amp.GradScaler):
    """One optimizer step in ``precision`` (fp16 scales the loss with ``scaler``); returns (loss,
    target tokens, gradient norm before clipping), the loss and norm as tensors (reading them
    would wait for the GPU). A step whose fp16 gradients overflowed is skipped by the scaler."""
    with precision.autocast():
        loss, n_tokens = loss_fn(model, batch)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    max_norm = config.clip_norm if config.clip_norm is not None else float("inf")
    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    return loss.detach(), n_tokens, grad_norm


def _setup(model: nn.Module, config: TrainConfig, resume: bool):
    """Device, process group, seeds, optimizer, schedule and (resumed) state for ``train``."""
    device = torch.device(config.device) if config.device else default_device()
    rank, world, device = setup_distributed(device)
    seed_everything(config.seed)
    model.to(device)
    optimizer, scheduler = make_optimizer(model, config)
    state, path = TrainState(), config.checkpoint_path
    if resume and path and os.path.exists(path):
        state = load_checkpoint(path, model, optimizer, scheduler, map_location=device)
    net = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    return net.train(), optimizer, scheduler, state, device, rank, world


def train(model: nn.Module, data: Callable[[int], Iterable], loss_fn: Callable,
          config: TrainConfig, resume: bool = True) -> TrainState:
    """Train ``model`` for ``config.steps`` optimizer steps (or ``max_seconds``); see the module
    docstring for ``data`` and ``loss_fn``. With ``resume`` and an existing checkpoint at
    ``config.checkpoint_path``, training continues from it exactly."""
    from tqdm.auto import tqdm

    net, optimizer, scheduler, state, device, rank, world = _setup(model, config, resume)
    path, every = config.checkpoint_path, config.checkpoint_every
    bar = tqdm(total=config.steps, initial=state.step, disable=not config.progress or rank != 0,
               desc="train", dynamic_ncols=True)
    precision = choose_precision(device, amp=config.amp)
    scaler = precision.grad_scaler()
    window, start, grad_norm = [], time.perf_counter(), None
    batches = _batches_from(data, state, rank, world)
    while state.step < config.steps:
        if _out_of_time(config, state.seconds + time.perf_counter() - start, world, device):
            break
        state.epoch, index, batch = next(batches)
        state.batch_in_epoch = index + 1
        loss, n_tokens, grad_norm = train_step(net, loss_fn, _to_device(batch, device), optimizer,
                                                scheduler, config, precision, scaler)
        state.step += 1
        window.append((loss, n_tokens))
        if config.grad_norm_every and state.step % config.grad_norm_every == 0:
            state.grad_norms.append((state.step, dict(layer_grad_norms(net))))
        if state.step % config.log_every == 0 or state.step == config.steps:
            _log(state, window, grad_norm, scheduler, world, device, bar)
        bar.update(1)
        if path and every and state.step % every == 0:
            _checkpoint(path, net, optimizer, scheduler, state, config, rank, start, window, world)
    bar.close()
    if window:
        _log(state, window, grad_norm, scheduler, world, device, bar)
    state.seconds += time.perf_counter() - start
    if path and rank == 0:
        save_checkpoint(path, net, optimizer, scheduler, state, config)
    return state


def _count_tokens(state, window, world):
    """Add the window's not-yet-counted target tokens to ``state.tokens`` (all processes)."""
    for i, (loss, n_tokens) in enumerate(window):
        state.tokens += int(n_tokens) * world
        window[i] = (loss, 0)


def _log(state, window, grad_norm, scheduler, world, device, bar):
    """Append the window's mean loss (over steps and processes) to the history; empty the window."""
    _count_tokens(state, window, world)
    losses = torch.stack([loss.float() for loss, _ in window])
    loss = _mean_over_processes(float(losses.mean()), world, device)
    lr = scheduler.get_last_lr()[0]
    state.history.append({"step": state.step, "loss": loss, "lr": lr, "grad_norm": float(grad_norm)})
    bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}")
    window.clear()


def _checkpoint(path, net, optimizer, scheduler, state, config, rank, start, window, world):
    """Save mid-run (rank 0), with the tokens and time so far counted in the saved state."""
    _count_tokens(state, window, world)
    if rank != 0:
        return
    elapsed = time.perf_counter() - start
    state.seconds += elapsed  # saved with the elapsed time included ...
    save_checkpoint(path, net, optimizer, scheduler, state, config)
    state.seconds -= elapsed  # ... and counted once more at the end of this run
