"""xfl.inference.eval_mode: evaluation mode and no gradients inside, the old mode restored after,
even when the block raises."""

import pytest
import torch
from torch import nn

from xfl.inference import eval_mode


@pytest.mark.parametrize("training", [True, False])
def test_mode_is_restored_even_after_an_error(training):
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5)).train(training)
    with pytest.raises(RuntimeError, match="boom"):
        with eval_mode(model):
            assert not model.training and not model[1].training
            assert not model(torch.ones(1, 3)).requires_grad  # no graph is built
            raise RuntimeError("boom")
    assert model.training is training and model[1].training is training
