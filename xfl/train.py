"""The one training loop: every model the book trains (chapters 3, 5-9; chapter 5 explains it,
``bench/`` uses it too).

``train(model, data, loss_fn, config)`` runs AdamW (fused on CUDA; no weight decay on biases,
norms, position embeddings or a class token) under a learning-rate schedule driven by progress
(steps, or seconds of training, whichever the config sets): Vaswani et al.'s inverse square
root or a warm-up + cosine decay. Each step runs in the device's precision (``xfl.precision``:
bf16 and ``torch.compile`` on recent GPUs where a run is long enough to repay compiling it,
fp16 with a gradient scaler on a T4, fp32 on a CPU), clips the gradient norm and reads nothing back from the device: losses, token counts
and norms stay there until a log line needs them. Compilation and the first step happen
before the training clock starts and are reported apart (``compile_seconds``). Checkpoints
(``xfl.checkpoint``) resume a run exactly; under ``torchrun`` the same call trains with
DistributedDataParallel (``xfl.distributed``).

The file reads in that order: the losses, the schedules, the config, then **the loop**
(``train``, one page: chapter 5's ``fit`` plus hooks) and one section per thing it adds: the
step, a run's state (device, DDP, precision, resumption), the time budget and clock, logging
and evaluation, compilation, checkpoints and runs over several calls, gradient diagnostics.

- ``data(epoch)`` returns the batches of one epoch, the same ones every time it is called with
  the same epoch (``xfl.batches``), so that a resumed or distributed run sees exactly the
  batches an uninterrupted single-process run would. A batch is a tensor or a tuple of them.
- ``loss_fn(model, batch) -> (mean loss, number of targets)``; the count may be a tensor (it is
  read only when logging). See ``seq2seq_loss``, ``lm_loss`` and ``xfl.vit_train``.
- ``on_log(entry)`` sees every history entry; ``evaluate(model) -> dict`` runs in eval mode
  every ``eval_every`` steps and at the end, outside the training clock.
- ``shapes``: example batches, one per input shape; a compiled model compiles each before the
  clock starts (variable shapes would recompile inside it). ``tests/test_train.py`` counts
  compilations and host reads.
- One run over several calls (``tools.env.gpu_plan``): ``XFL_CHECKPOINT_DIR`` gives every run a
  checkpoint, ``XFL_DEADLINE`` makes it save and stop (``DeadlineReached``); run the same code
  again to resume.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import re
import time
from collections import OrderedDict
from numbers import Integral
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import trusted_inputs
from .checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from .distributed import (Processes, from_main, join, mean_over_processes, shard, sum_over_processes,
                          unwrap, wrap)
from .inference import eval_mode
from .precision import Precision, choose_precision, compile_pays
from .runtime import default_device, seed_everything
from .timing import synchronize


# ----------------------------------------------------------------------------------------- losses
def seq2seq_loss(model: nn.Module, batch, *, label_smoothing: float = 0.0, pad_id: int = 0):
    """Teacher-forced loss of an encoder-decoder on ``batch = (src (B, S), tgt (B, L))``.

    ``tgt`` is SOS w1 .. wn EOS PAD..; the decoder reads ``tgt[:, :-1]`` and predicts
    ``tgt[:, 1:]``. Padding targets carry no loss (DLStudio 2.5.8's loss counts them:
    its Transformers.py, line 1004).
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


# -------------------------------------------------------------------------------------- schedules
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


def warmup_cosine(progress: float, warmup: float) -> float:
    """Multiplier at ``progress`` in [0, 1]: linear rise over the first ``warmup`` fraction,
    then a cosine decay to 0 at progress 1."""
    if not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup must be a fraction in [0, 1), got {warmup}")
    progress = min(max(progress, 0.0), 1.0)
    if progress < warmup:
        return progress / warmup
    return 0.5 * (1.0 + math.cos(math.pi * (progress - warmup) / (1.0 - warmup)))


def ramp_factor(step: int, warmup: int) -> float:
    """Multiplier at optimizer step ``step`` (0-based): the same linear rise as
    ``inverse_sqrt_factor`` over ``warmup`` steps, then a constant 1 (no decay); ``warmup == 0``
    gives a constant 1. Chapter 5's control that separates the ramp from the decay."""
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    return 1.0 if warmup == 0 else min((step + 1) / warmup, 1.0)


SCHEDULES = ("inverse_sqrt", "cosine", "ramp")


# ----------------------------------------------------------------------------------------- config
@dataclass
class TrainConfig:
    """Everything ``train`` needs besides the model, data and loss."""

    steps: int | None = 1000  # stop after this many optimizer steps (None: no step limit) ...
    max_seconds: float | None = None  # ... or this much training time, whichever comes first
    lr: float = 5e-4  # peak learning rate
    schedule: str = "inverse_sqrt"  # or "cosine" (decays to 0 when steps or max_seconds run out),
    #                                 or "ramp" (inverse_sqrt's warm-up, then constant)
    warmup: int = 400  # inverse_sqrt and ramp: warm-up steps (0 = constant lr)
    warmup_fraction: float = 0.05  # cosine: the fraction of the run spent warming up ...
    warmup_steps: int = 0  # ... or, when > 0, this many steps (a clock-based warm-up can elapse
    #                        while a GPU compiles; steps cannot)
    weight_decay: float = 0.01
    betas: tuple = (0.9, 0.98)
    eps: float = 1e-9
    clip_norm: float | None = 1.0  # None = no clipping
    amp: bool = True  # mixed precision where the device has it (xfl.precision); False = fp32
    compile: bool | str = "auto"  # where xfl.precision says it works (bf16 on CUDA >= 8.0): "auto"
    #                               compiles when xfl.precision.compile_pays, True always, False never
    seed: int = 0
    log_every: int = 10
    grad_norm_every: int = 0  # record per-layer gradient norms every k steps (0 = never)
    eval_every: int = 0  # call ``evaluate`` every k steps (0 = only at the end)
    checkpoint_path: str | None = None
    checkpoint_every: int = 0  # 0 = only at the end (when a path is given)
    progress: bool = True  # tqdm bar (rank 0 only)
    device: str | None = None  # None = xfl.runtime.default_device()

    def __post_init__(self):
        if self.steps is None and self.max_seconds is None:
            raise ValueError("steps=None (no step limit) needs a time budget, max_seconds, got None")
        if self.steps is not None and (not isinstance(self.steps, Integral) or self.steps < 0):
            raise ValueError(f"steps must be None or an int >= 0, got {self.steps!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an int >= 0, got {self.warmup_steps!r}")

    def progress_at(self, step: int, seconds: float) -> float:
        """Fraction of the run done: by steps, or by the clock when ``max_seconds`` is set."""
        done = 0.0 if self.steps is None else step / self.steps
        return done if self.max_seconds is None else max(done, seconds / self.max_seconds)

    def lr_at(self, step: int, seconds: float) -> float:
        """The learning rate of optimizer step ``step`` (0-based), ``seconds`` into the run."""
        if self.schedule == "inverse_sqrt":
            return self.lr * inverse_sqrt_factor(step, self.warmup)
        if self.schedule == "ramp":
            return self.lr * ramp_factor(step, self.warmup)
        progress = self.progress_at(step, seconds)
        if self.warmup_steps:
            return self.lr * min((step + 1) / self.warmup_steps, 1.0) * warmup_cosine(progress, 0.0)
        return self.lr * warmup_cosine(progress, self.warmup_fraction)


@dataclass
class TrainState:
    """How far a run got; saved in checkpoints and returned by ``train``."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of ``epoch`` already trained on
    tokens: int = 0  # targets trained on (tokens; images for a classifier), all processes
    seconds: float = 0.0  # training time, compilation and first steps excluded
    compile_seconds: float = 0.0  # compilation + the first step of each (resumed) run
    history: list = field(default_factory=list)  # dicts: step, epoch, loss, lr, grad_norm, seconds
    grad_norms: list = field(default_factory=list)  # (step, {layer: norm})
    evals: list = field(default_factory=list)  # dicts: step and what ``evaluate`` returned


# --------------------------------------------------------------------------------------- the loop
def train(model: nn.Module, data: Callable[[int], Iterable], loss_fn: Callable, config: TrainConfig,
          resume: bool = True, evaluate: Callable[[nn.Module], dict] | None = None,
          on_log: Callable[[dict], None] | None = None, shapes: Iterable | None = None) -> TrainState:
    """Train ``model`` until ``config.steps`` or ``config.max_seconds`` runs out; see the module
    docstring for the arguments. With ``resume`` and a checkpoint at ``config.checkpoint_path``,
    training continues from it exactly. ``shapes``: one example batch per input shape, compiled
    before the clock starts (``precompile``). Chapter 5's ``fit`` is this loop's core."""
    run = start(model, split_over_calls(config, model, resume), resume)  # device, DDP, precision, state
    config, state = run.config, run.state
    shapes = None if shapes is None else list(shapes)
    if config.compile == "auto" and run.precision.compile and not finished(run):
        compile_if_it_pays(run, loss_fn, shapes or [next(iter(data(state.epoch)))])
    if shapes is not None and not finished(run):
        precompile(run, loss_fn, shapes)
    batches, bar = _batches_from(data, state, run.processes), progress_bar(run)
    while not finished(run):  # out of steps, or out of time
        stop_at_deadline(run)
        state.epoch, index, batch = next(batches)
        state.batch_in_epoch = index + 1  # where a resumed run goes on
        began = time.perf_counter()
        set_lr(run.optimizer, config.lr_at(state.step, state.seconds))
        loss, n_targets, run.grad_norm = train_step(run.net, loss_fn, _to_device(batch, run.device),
                                                    run.optimizer, run.scaler, run.precision, config.clip_norm)
        run.loss_sum += loss.float()  # on the device: read only by a log line
        run.target_sum += n_targets
        run.window, state.step = run.window + 1, state.step + 1
        advance_clock(run, began)
        bar.update(1)
        if run.every(config.log_every):
            entry = log(run, on_log)
            bar.set_postfix(loss=f"{entry['loss']:.3f}", lr=f"{entry['lr']:.2e}")
        if run.every(config.grad_norm_every):
            state.grad_norms.append((state.step, dict(layer_grad_norms(run.net))))
        if evaluate is not None and run.every(config.eval_every):
            evaluate_now(run, evaluate)
        if config.checkpoint_path and run.every(config.checkpoint_every):
            checkpoint(run)
    bar.close()
    finish(run, evaluate, on_log)
    return state


# --------------------------------------------------------------------------------------- one step
def train_step(model, loss_fn, batch, optimizer, scaler: torch.amp.GradScaler, precision: Precision,
               clip_norm: float | None = 1.0):
    """One optimizer step in ``precision`` (fp16 scales the loss with ``scaler``); returns (loss,
    target count, gradient norm before clipping), the loss and norm as tensors (reading them
    would wait for the GPU). A step whose fp16 gradients overflowed is skipped by the scaler."""
    with precision.autocast(), trusted_inputs():  # no input checks: they would read back
        loss, n_targets = loss_fn(model, batch)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    max_norm = clip_norm if clip_norm is not None else float("inf")
    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=True)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach(), n_targets, grad_norm


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay for weight matrices only: not for biases and norms (1-D), nor for the names
    a model lists in ``no_weight_decay`` (position embeddings, a class token)."""
    model = unwrap(model)
    exempt = tuple(getattr(model, "no_weight_decay", ()))
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            keep = p.ndim >= 2 and not name.startswith(exempt)
            (decay if keep else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, config: TrainConfig, device: torch.device | str = "cpu",
                   fused: bool | None = None):
    """AdamW over :func:`parameter_groups`, fused into one kernel per step on CUDA (``fused``
    None), or wherever ``fused`` says (a fused step reads nothing back, nor does GradScaler's).
    Unfused, it updates all tensors at once ("foreach"): the per-tensor loop's numbers, faster."""
    groups = parameter_groups(model, config.weight_decay)
    fused = torch.device(device).type == "cuda" if fused is None else fused
    return torch.optim.AdamW(groups, lr=config.lr, betas=tuple(config.betas), eps=config.eps, fused=fused,
                             foreach=not fused)


def _to_device(batch, device: torch.device):
    """Move a batch (a tensor or a tuple of them) to ``device`` without waiting for it."""
    if isinstance(batch, Tensor):
        if batch.device.type == "cpu" and device.type == "cuda":
            batch = batch.pin_memory()  # an asynchronous copy needs page-locked memory
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device) for b in batch)
    return batch


# -------------------------------- a run's state: device, DDP, precision, optimizer, resumed state
@dataclass
class Run:
    """Everything one call of ``train`` holds: what it trains and how, and how far it got."""

    config: TrainConfig
    model: nn.Module  # the plain model (what checkpoints hold)
    net: nn.Module  # what the steps call: compiled and/or wrapped in DDP
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    precision: Precision
    processes: Processes
    state: TrainState
    loss_sum: Tensor  # () summed losses since the last log line, on the device
    target_sum: Tensor  # () targets since they were last counted, on the device
    window: int = 0  # steps since the last log line
    grad_norm: Tensor | None = None
    seconds_before: float = 0.0  # training time of earlier (resumed-from) runs
    clock_start: float | None = None  # set after the first step of this run
    deadline: float | None = None  # Unix time (XFL_DEADLINE) at which to checkpoint and stop

    @property
    def device(self) -> torch.device:
        return self.processes.device

    def every(self, k: int) -> bool:
        return bool(k) and self.state.step % k == 0


def start(model: nn.Module, config: TrainConfig, resume: bool) -> Run:
    """Device, processes, seeds, precision, optimizer and the (resumed) state of a run."""
    processes = join(torch.device(config.device) if config.device else default_device())
    seed_everything(config.seed)
    model.to(processes.device)
    precision = choose_precision(processes.device, amp=config.amp)
    optimizer, scaler = make_optimizer(model, config, processes.device), precision.grad_scaler()
    state = TrainState()
    if resume and config.checkpoint_path and os.path.exists(config.checkpoint_path):
        state = TrainState(**load_checkpoint(config.checkpoint_path, model, optimizer, scaler,
                                             map_location=processes.device))
    if config.compile not in (True, False, "auto"):
        raise ValueError(f"compile must be True, False or 'auto', got {config.compile!r}")
    net = torch.compile(model) if config.compile is True and precision.compile else model
    zeros = partial(torch.zeros, (), device=processes.device)
    return Run(config, model, wrap(net, processes).train(), optimizer, scaler, precision, processes,
               state, loss_sum=zeros(), target_sum=zeros(dtype=torch.int64), seconds_before=state.seconds,
               deadline=deadline_from_env())


def _batches_from(data: Callable[[int], Iterable], state: TrainState, processes: Processes):
    """Yield (epoch, index, batch) forever, starting where ``state`` says."""
    epoch, skip = state.epoch, state.batch_in_epoch
    while True:
        produced = False
        for i, batch in enumerate(shard(data(epoch), processes.rank, processes.world)):
            produced = True
            if i >= skip:
                yield epoch, i, batch
        if not produced:
            raise ValueError(f"data({epoch}) gave fewer than {processes.world} batches: nothing to train on")
        epoch, skip = epoch + 1, 0


def progress_bar(run: Run):
    """A tqdm bar over the steps (rank 0 only, when the config asks for one)."""
    from tqdm.auto import tqdm

    total = run.config.steps if run.config.max_seconds is None else None
    return tqdm(total=total, initial=run.state.step, desc="train", dynamic_ncols=True,
                disable=not run.config.progress or not run.processes.is_main)


# ------------------------------------------------------------- time budget and the training clock
def finished(run: Run) -> bool:
    """Out of steps, or out of time. Under DDP with a time budget, rank 0's clock decides for
    all processes (one broadcast per step: the one read-back a step makes, and only there)."""
    config, state = run.config, run.state
    if run.clock_start is not None and config.max_seconds is not None:
        state.seconds = from_main(run.seconds_before + time.perf_counter() - run.clock_start, run.processes)
    out_of_time = config.max_seconds is not None and state.seconds >= config.max_seconds
    return (config.steps is not None and state.step >= config.steps) or out_of_time


def advance_clock(run: Run, began: float) -> None:
    """After a step that began at ``began``: the first step of a run (compilation included) is
    timed apart and starts the training clock; later steps advance ``state.seconds`` (with a
    time budget, ``finished`` reads the clock instead, agreed over the processes)."""
    if run.clock_start is None:
        synchronize(run.device)
        run.state.compile_seconds += time.perf_counter() - began
        run.clock_start = time.perf_counter()
    elif run.config.max_seconds is None:
        run.state.seconds = run.seconds_before + time.perf_counter() - run.clock_start


def stop_clock(run: Run) -> None:
    """Wait for the steps still queued on the device, then read the training clock a last time:
    their time counts too (the loop itself never waits)."""
    if run.clock_start is not None:
        synchronize(run.device)
        run.state.seconds = run.seconds_before + time.perf_counter() - run.clock_start


# ---------------------------------------------------------- logging, evaluation, the end of a run
def count_targets(run: Run) -> None:
    """Add the targets counted on the device (every process's) to ``state.tokens``."""
    run.state.tokens += int(sum_over_processes(run.target_sum, run.processes))
    run.target_sum.zero_()


def log(run: Run, on_log: Callable[[dict], None] | None) -> dict:
    """Append the window's mean loss (over steps and processes) to the history. Reads numbers
    back from the device, as only logging, per-layer gradient norms and checkpoints do."""
    count_targets(run)
    loss = float(mean_over_processes(run.loss_sum / max(run.window, 1), run.processes))
    state = run.state
    entry = {"step": state.step, "epoch": state.epoch, "loss": loss,
             "lr": run.config.lr_at(state.step, state.seconds), "grad_norm": float(run.grad_norm),
             "seconds": state.seconds}
    state.history.append(entry)
    run.loss_sum.zero_()
    run.window = 0
    if on_log is not None:
        on_log(entry)
    return entry


def evaluate_now(run: Run, evaluate: Callable[[nn.Module], dict]) -> None:
    """Run ``evaluate`` in eval mode, outside the training clock; the entry records the step,
    the training seconds so far and the evaluation's own seconds."""
    began = time.perf_counter()
    with eval_mode(run.model):
        result = evaluate(run.model)
    took = time.perf_counter() - began
    run.state.evals.append({"step": run.state.step, "seconds": run.state.seconds, "eval_seconds": took, **result})
    if run.clock_start is not None:
        run.clock_start += took


def finish(run: Run, evaluate: Callable[[nn.Module], dict] | None, on_log) -> None:
    """The end of a run: the clock's last reading, then the last log line, evaluation and
    checkpoint, each unless the last step already wrote it."""
    stop_clock(run)
    if run.window:
        log(run, on_log)
    if evaluate is not None and not run.every(run.config.eval_every):
        evaluate_now(run, evaluate)
    if run.config.checkpoint_path:
        checkpoint(run)


# ------------------------------------------------------------ compilation before the clock starts
def eager_step_seconds(run: Run, loss_fn: Callable, batch) -> float:
    """Seconds of one eager forward and backward of ``run.model`` on ``batch`` (after one
    untimed warm-up), the slowest process's under DDP; gradients and random states are left as
    they were."""
    saved, model = rng_state(), run.model.train()
    seconds = []
    for _ in range(2):
        began = time.perf_counter()
        with run.precision.autocast(), trusted_inputs():
            loss, _ = loss_fn(model, _to_device(batch, run.device))
        run.scaler.scale(loss).backward()
        synchronize(run.device)
        seconds.append(time.perf_counter() - began)
    run.optimizer.zero_grad(set_to_none=True)
    set_rng_state(saved)
    slowest = torch.tensor(seconds[-1], device=run.device)
    if run.processes.world > 1:
        torch.distributed.all_reduce(slowest, op=torch.distributed.ReduceOp.MAX)
    return float(slowest)


def compile_if_it_pays(run: Run, loss_fn: Callable, shapes: list) -> None:
    """Compile the model when ``xfl.precision.compile_pays`` says that this run's steps (timed
    eagerly on ``shapes[0]``) save more than compiling its ``len(shapes)`` shapes costs."""
    began = time.perf_counter()
    step = eager_step_seconds(run, loss_fn, shapes[0])
    remaining = None if run.config.steps is None else run.config.steps - run.state.step
    budget = None if run.config.max_seconds is None else run.config.max_seconds - run.state.seconds
    if compile_pays(step, remaining, budget, shapes=len(shapes)):
        run.net = torch.compile(run.net)  # around DDP where there is one, as PyTorch advises
    run.state.compile_seconds += time.perf_counter() - began


def precompile(run: Run, loss_fn: Callable, batches: Iterable) -> None:
    """Run ``loss_fn`` forward and backward on each of ``batches`` (one per input shape the data
    will produce) with no optimizer step, so that a compiled model compiles every shape before
    the training clock starts; gradients and random states are left as they were."""
    began, saved = time.perf_counter(), rng_state()
    for batch in batches:
        with run.precision.autocast(), trusted_inputs():  # as in train_step: the same graphs
            loss, _ = loss_fn(run.net, _to_device(batch, run.device))
        run.scaler.scale(loss).backward()
    run.optimizer.zero_grad(set_to_none=True)
    set_rng_state(saved)
    synchronize(run.device)
    run.state.compile_seconds += time.perf_counter() - began


# ---------------------------------------------------- checkpoints, and one run over several calls
def checkpoint(run: Run) -> None:
    """Save everything needed to resume (rank 0 writes; every process counts its targets)."""
    count_targets(run)
    if run.processes.is_main:
        save_checkpoint(run.config.checkpoint_path, run.model, run.optimizer, run.scaler,
                        asdict(run.state), asdict(run.config))


CHECKPOINT_DIR_ENV, DEADLINE_ENV = "XFL_CHECKPOINT_DIR", "XFL_DEADLINE"
_runs_started = itertools.count()  # train() calls in this process, in order


class DeadlineReached(RuntimeError):
    """``train`` passed ``XFL_DEADLINE`` and saved its checkpoint: run it again to resume."""


def deadline_from_env() -> float | None:
    """``XFL_DEADLINE``: the Unix time (seconds) at which runs checkpoint and stop, or None."""
    value = os.environ.get(DEADLINE_ENV)
    try:
        return float(value) if value else None
    except ValueError:
        raise ValueError(f"{DEADLINE_ENV} must be a Unix time in seconds, got {value!r}") from None


def split_over_calls(config: TrainConfig, model: nn.Module, resume: bool) -> TrainConfig:
    """With ``XFL_CHECKPOINT_DIR`` set (``tools.env.gpu_plan`` sets it), a run that has no checkpoint
    path of its own gets one in that folder, named by its order among this process's runs and a
    digest of its configuration and parameter shapes: the same notebook, run again, finds each
    run's checkpoint, so a finished run returns at once and an interrupted one resumes. What an
    ``evaluate`` callback keeps outside the returned state is not restored."""
    number, folder = next(_runs_started), os.environ.get(CHECKPOINT_DIR_ENV)
    if not folder or config.checkpoint_path or not resume:
        return config
    shapes = [tuple(p.shape) for p in model.parameters()]
    digest = hashlib.sha256(repr((asdict(config), type(model).__name__, shapes)).encode()).hexdigest()
    return replace(config, checkpoint_path=os.path.join(folder, f"run{number:03d}-{digest[:12]}.pt"))


def stop_at_deadline(run: Run) -> None:
    """Past ``run.deadline``, a run that has a checkpoint path saves it and raises
    ``DeadlineReached`` (one process only: the decision is not shared under DDP)."""
    if run.deadline is not None and run.config.checkpoint_path and time.time() >= run.deadline:
        checkpoint(run)
        raise DeadlineReached(f"{DEADLINE_ENV} passed at step {run.state.step}; checkpoint saved to "
                              f"{run.config.checkpoint_path}: run again to resume")


# ----------------------------------------------------------------------- per-layer gradient norms
_LAYER_NAME = re.compile(r"^(.*?layers\.\d+)\.")


def layer_of(param_name: str) -> str:
    """``'decoder.layers.2.ffn.0.weight' -> 'decoder.layers.2'``; parameters outside numbered
    layers group by their first two module names (``'encoder.final_norm'``, ``'output'``)."""
    match = _LAYER_NAME.match(param_name)
    if match:
        return match.group(1)
    return ".".join(param_name.split(".")[:-1][:2]) or param_name


def layer_grad_norms(model: nn.Module) -> "OrderedDict[str, float]":
    """L2 norm of the gradient of each layer's parameters, in model order (one read-back)."""
    squares: "OrderedDict[str, Tensor]" = OrderedDict()
    for name, p in unwrap(model).named_parameters():
        if p.grad is not None:
            key = layer_of(name)
            squares[key] = squares.get(key, 0.0) + p.grad.detach().float().pow(2).sum()
    values = torch.stack(list(squares.values())).sqrt().tolist() if squares else []
    return OrderedDict(zip(squares, values))


def grad_norms_at_init(model: nn.Module, loss_fn: Callable, batch) -> "OrderedDict[str, float]":
    """Per-layer gradient norms of ``loss_fn(model, batch)`` for the model as it is now."""
    model.zero_grad(set_to_none=True)
    loss, _ = loss_fn(model, batch)
    loss.backward()
    norms = layer_grad_norms(model)
    model.zero_grad(set_to_none=True)
    return norms
