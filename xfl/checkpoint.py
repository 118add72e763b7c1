"""Checkpoints that resume a run exactly and cannot run code when opened (chapters 5 and 6 load
them; ``xfl.train`` writes them).

A checkpoint holds the model, the optimizer, the fp16 gradient scaler, the loop's state, the
configuration and every random generator's state, all as tensors and plain Python data, so
``torch.load(..., weights_only=True)`` opens it: a file someone crafted to execute code on
load is refused instead. Writes are atomic (``xfl.files``): a crash while saving leaves the
previous checkpoint as it was.
"""

from __future__ import annotations

import pickle
import random

import numpy as np
import torch

from .distributed import unwrap
from .files import atomic_path


# ------------------------------------------------------------------- random states
def rng_state() -> dict:
    """The state of Python's, NumPy's and torch's (CPU and CUDA) generators, as tensors and
    plain data."""
    version, keys, gauss = random.getstate()
    name, np_keys, pos, has_gauss, cached = np.random.get_state()
    state = {"torch": torch.get_rng_state(),
             "python": {"version": version, "keys": torch.tensor(keys, dtype=torch.int64), "gauss": gauss},
             "numpy": {"name": name, "keys": torch.from_numpy(np_keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached": float(cached)}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what :func:`rng_state` saved."""
    torch.set_rng_state(state["torch"].cpu())
    py = state["python"]
    random.setstate((py["version"], tuple(py["keys"].tolist()), py["gauss"]))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


# --------------------------------------------------------------------- save / load
def save_checkpoint(path: str, model, optimizer, scaler, state: dict, config: dict) -> None:
    """Write model, optimizer, scaler, loop state, config and random states to ``path``."""
    payload = {"model": unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),
               "scaler": scaler.state_dict(), "state": state, "config": config, "rng": rng_state()}
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(payload, f)


def read_checkpoint(path: str, map_location="cpu") -> dict:
    """The payload of ``path``, loaded with ``weights_only=True``; anything that is not a tensor
    or plain data (a pickled object that would run code) raises ValueError."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise ValueError(f"refusing to load {path}: it holds objects other than tensors and plain "
                         f"data, which could run code when unpickled ({err})") from err


def load_checkpoint(path: str, model, optimizer=None, scaler=None, map_location="cpu") -> dict:
    """Restore ``model`` (and, to resume, ``optimizer``, ``scaler`` and the random states) from
    ``path``; return the saved loop state (a dict)."""
    payload = read_checkpoint(path, map_location)
    unwrap(model).load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
        set_rng_state(payload["rng"])
    if scaler is not None:
        scaler.load_state_dict(payload["scaler"])
    return payload["state"]


# ------------------------------------------------------------------- averaging
class LastWeights:
    """Keeps copies of the last ``keep`` weights it is shown; ``average()`` is their mean.

    Pass it as ``evaluate`` to ``xfl.train.train`` (with ``eval_every``) to average the last
    checkpoints of a run, as Vaswani et al. (2017) did (the last 5 checkpoints of their base
    model). Floating-point tensors are averaged; others (counters) are taken from the last copy.
    """

    def __init__(self, keep: int):
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive int, got {keep!r}")
        self.keep, self.saved = keep, []

    def __call__(self, model) -> dict:
        weights = {k: v.detach().to("cpu", copy=True) for k, v in unwrap(model).state_dict().items()}
        self.saved = (self.saved + [weights])[-self.keep:]
        return {"weights_kept": len(self.saved)}

    def average(self) -> dict:
        """The mean of the kept weights, a ``state_dict`` for ``model.load_state_dict``."""
        if not self.saved:
            raise ValueError("no weights kept yet: call this object with a model first")
        last = self.saved[-1]
        return {k: torch.stack([w[k].float() for w in self.saved]).mean(0).to(v.dtype)
                if v.is_floating_point() else v for k, v in last.items()}
