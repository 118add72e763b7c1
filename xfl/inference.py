"""Running a model for inference: evaluation mode without gradients for a block of code,
restored afterwards even when the block raises (no chapter imports it: ``xfl.decode``,
``xfl.vit_train`` and the training loop's evaluation callback do)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``with eval_mode(model):`` runs without dropout and without gradients, then puts the
    model back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)
