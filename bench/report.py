"""How every benchmark saves its results, and how it keeps the best weights on validation while it
trains (where it ran: ``xfl.runtime.device_name``)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from xfl.atomic_files import atomic_path, write_text_atomic


def write_results(path: Path, results: dict) -> None:
    """Save ``results`` as indented JSON, atomically (a failed write keeps the old file)."""
    write_text_atomic(path, json.dumps(results, indent=2, ensure_ascii=False) + "\n")


class BestWeights:
    """An ``evaluate`` hook for ``xfl.train.train``: scores the model on validation data with
    ``score(model) -> float`` (higher is better) and keeps a CPU copy of the best weights so
    far; the scores, with their steps, land in the run's ``state.evals`` (the curve). With
    ``path``, the best weights are also written there (atomically) and read back when the hook is
    made again, so a run resumed in a later call (``tools.env.gpu_plan``) keeps its best."""

    def __init__(self, score: Callable[[nn.Module], float], name: str, path: Path | None = None):
        self.score, self.name, self.path = score, name, path
        self.best, self.weights = -math.inf, None
        if path is not None and Path(path).exists():
            saved = torch.load(path, map_location="cpu", weights_only=True)
            self.best, self.weights = saved["score"], saved["weights"]

    def __call__(self, model: nn.Module) -> dict:
        value = float(self.score(model))
        if value > self.best:
            self.best = value
            self.weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            if self.path is not None:
                with atomic_path(self.path) as tmp, open(tmp, "wb") as f:
                    torch.save({"score": value, "weights": self.weights}, f)
        return {self.name: value}

    def restore(self, model: nn.Module) -> float:
        """Load the best weights into ``model``; returns their score."""
        if self.weights is None:
            raise ValueError("no weights scored yet: pass this hook as train(..., evaluate=...)")
        model.load_state_dict(self.weights)
        return self.best


def resume_path(name: str) -> Path | None:
    """A file in ``XFL_CHECKPOINT_DIR`` (set by ``tools.env.gpu_plan``) for what a resumed run must
    find again, or None when the variable is unset."""
    folder = os.environ.get("XFL_CHECKPOINT_DIR")
    return Path(folder) / name if folder else None
