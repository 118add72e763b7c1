"""xfl.vit_train: schedule, mixing, metrics and a tiny fit that must learn."""

import math

import pytest
import torch

from xfl.vit import ViT
from xfl.vit_train import (ClassifierConfig, accuracy, confusion_matrix, fit, mix_batch, predict,
                           warmup_cosine)


def test_warmup_cosine_shape():
    assert warmup_cosine(0.0, 0.1) == 0.0
    assert warmup_cosine(0.05, 0.1) == pytest.approx(0.5)
    assert warmup_cosine(0.1, 0.1) == pytest.approx(1.0)
    assert warmup_cosine(0.55, 0.1) == pytest.approx(0.5)
    assert warmup_cosine(1.0, 0.1) == pytest.approx(0.0)
    assert warmup_cosine(2.0, 0.1) == pytest.approx(0.0)
    values = [warmup_cosine(p / 100, 0.1) for p in range(10, 101)]
    assert all(a >= b for a, b in zip(values, values[1:]))  # decays monotonically
    with pytest.raises(ValueError, match="warmup"):
        warmup_cosine(0.5, 1.0)


def test_confusion_matrix_and_accuracy():
    labels = torch.tensor([0, 0, 1, 2, 2, 2])
    preds = torch.tensor([0, 1, 1, 2, 0, 2])
    cm = confusion_matrix(preds, labels, 3)
    expected = torch.zeros(3, 3, dtype=torch.long)
    for t, p in zip(labels, preds):
        expected[t, p] += 1
    assert torch.equal(cm, expected)
    assert cm.sum() == 6 and cm.trace() == 4
    assert accuracy(preds, labels) == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="differ"):
        accuracy(preds, labels[:3])


@pytest.mark.parametrize("seed", range(6))
def test_mixed_targets_are_distributions_matching_the_pixels(seed):
    config = ClassifierConfig(mix_prob=1.0)
    images = torch.stack([torch.full((3, 8, 8), float(i)) for i in range(4)])  # image i is all i
    labels = torch.tensor([0, 1, 2, 3])
    mixed, targets = mix_batch(images, labels, 4, config, torch.Generator().manual_seed(seed))
    torch.testing.assert_close(targets.sum(-1), torch.ones(4))
    for b in range(4):  # the pixel mean of a mixed image equals its target-weighted label
        expected = (targets[b] * torch.arange(4.0)).sum()
        torch.testing.assert_close(mixed[b].mean(), expected)


def test_no_mixing_gives_one_hot():
    images, labels = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 1])
    out, targets = mix_batch(images, labels, 3, ClassifierConfig(mix_prob=0.0), torch.Generator())
    assert out is images
    assert torch.equal(targets.argmax(-1), labels) and torch.equal(targets.sum(-1), torch.ones(4))


def striped_data(n=256, seed=0):
    """Class 0: horizontal stripes, class 1: vertical stripes (uint8, with noise)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (n,), generator=g)
    stripes = (torch.arange(8) % 2).float() * 200
    horizontal = stripes[:, None].expand(8, 8)
    images = torch.where(labels[:, None, None, None] == 0, horizontal, horizontal.T).expand(n, 3, 8, 8)
    noise = torch.randint(0, 50, (n, 3, 8, 8), generator=g)
    return (images + noise).to(torch.uint8), labels


def test_fit_learns_a_separable_task():
    images, labels = striped_data()
    torch.manual_seed(0)
    model = ViT(image_size=8, patch_size=4, num_classes=2, d_model=32, num_heads=4, num_layers=1,
                d_hidden=64)
    config = ClassifierConfig(epochs=8, batch_size=32, lr=3e-3, warmup=0.1, device="cpu",
                              mix_prob=0.5)
    normalize = lambda x: x.float() / 255 - 0.5  # noqa: E731
    seen = []
    result = fit(model, images, labels, config, normalize, on_epoch=seen.append, num_classes=2)
    assert result.epochs == 8 and result.steps == 8 * (256 // 32) and len(seen) == 8
    assert len(result.step_losses) == result.steps
    assert sum(result.step_losses[:8]) > sum(result.step_losses[-8:])  # the loss went down
    assert result.history[-1]["lr"] == pytest.approx(0.0, abs=1e-9)  # cosine ends at zero
    test_images, test_labels = striped_data(seed=1)
    assert accuracy(predict(model, test_images, normalize), test_labels) > 0.95


def test_time_budget_stops_the_run():
    images, labels = striped_data(64)
    model = ViT(image_size=8, patch_size=4, num_classes=2, d_model=16, num_heads=2, num_layers=1)
    config = ClassifierConfig(epochs=10_000, batch_size=16, time_budget_s=1.0, device="cpu")
    result = fit(model, images, labels, config, lambda x: x.float() / 255, num_classes=2)
    assert result.epochs < 10_000 and 1.0 <= result.seconds < 10.0
    assert math.isfinite(result.history[-1]["loss"])


def test_fit_rejects_wrong_num_classes():
    images, labels = striped_data(32)
    model = ViT(image_size=8, patch_size=4, num_classes=2, d_model=16, num_heads=2, num_layers=1)
    with pytest.raises(ValueError, match="num_classes is 10"):
        fit(model, images, labels, ClassifierConfig(epochs=1, batch_size=16, device="cpu"),
            lambda x: x.float() / 255)
