"""xfl.vit_train on xfl.train's loop: schedule, mixing, metrics, a tiny run that must learn,
a time budget, exact resumption and no weight decay on the class token and positions."""

import math

import pytest
import torch

from toy_tasks import striped_images as striped_data
from xfl.train import TrainConfig, make_optimizer, parameter_groups, train, warmup_cosine
from xfl.vit import ViT, ViTConfig
from xfl.vit_train import RECIPES, ImageClassification, accuracy, confusion_matrix, predict


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


def tiny_vit(d_model=32, num_heads=4, d_hidden=64):
    torch.manual_seed(0)
    return ViT(ViTConfig(image_size=8, patch_size=4, num_classes=2, d_model=d_model,
                         num_heads=num_heads, num_layers=1, d_hidden=d_hidden))


def normalize(x):
    return x.float() / 255 - 0.5


def test_training_learns_a_separable_task():
    images, labels = striped_data()
    model = tiny_vit()
    task = ImageClassification(images, labels, normalize, num_classes=2, batch_size=32, mix_prob=0.5)
    config = TrainConfig(steps=8 * task.steps_per_epoch, lr=3e-3, schedule="cosine", warmup_fraction=0.1,
                         weight_decay=0.05, betas=(0.9, 0.999), eps=1e-8, log_every=1, progress=False,
                         device="cpu")
    seen = []
    state = train(model, task.batches, task.loss, config, on_log=seen.append)
    assert state.step == 8 * (256 // 32) and (state.epoch, state.batch_in_epoch) == (7, 8)  # 8 epochs
    assert len(seen) == len(state.history) == state.step and state.tokens == 256 * 8
    step_losses = [h["loss"] for h in state.history]
    assert sum(step_losses[:8]) > sum(step_losses[-8:])  # the loss went down
    assert state.history[-1]["lr"] == pytest.approx(0.0, abs=1e-9)  # cosine ends at zero
    test_images, test_labels = striped_data(seed=1)
    assert accuracy(predict(model, test_images, normalize), test_labels) > 0.95


def test_time_budget_stops_the_run():
    images, labels = striped_data(64)
    model = tiny_vit(d_model=16, num_heads=2, d_hidden=None)
    task = ImageClassification(images, labels, lambda x: x.float() / 255, num_classes=2, batch_size=16)
    config = TrainConfig(steps=10_000 * task.steps_per_epoch, max_seconds=1.0, schedule="cosine",
                         progress=False, device="cpu")
    state = train(model, task.batches, task.loss, config)
    assert state.epoch < 10_000 and 1.0 <= state.seconds < 10.0
    assert state.compile_seconds > 0  # the first step, timed apart from the budget
    assert math.isfinite(state.history[-1]["loss"])


def test_training_rejects_wrong_num_classes():
    images, labels = striped_data(32)
    model = tiny_vit(d_model=16, num_heads=2)
    task = ImageClassification(images, labels, lambda x: x.float() / 255, batch_size=16)  # 10 classes
    with pytest.raises(ValueError, match="num_classes is 10"):
        train(model, task.batches, task.loss, TrainConfig(steps=1, progress=False, device="cpu"))


class Interrupted(Exception):
    pass


def vit_run(tmp_path, steps=10, crash_at=None):
    """A ViT run with crop/flip/mixing and dropout, checkpointed every 2 steps; with
    ``crash_at``, the process "dies" when that step starts (the cosine schedule still plans
    for ``steps``)."""
    from functools import partial

    from xfl.augment import augment_batch

    images, labels = striped_data(96)
    torch.manual_seed(0)
    model = ViT(ViTConfig(image_size=8, patch_size=4, num_classes=2, d_model=16, num_heads=2,
                          num_layers=1, d_hidden=32, dropout=0.1))
    task = ImageClassification(images, labels, normalize, partial(augment_batch, padding=1),
                               num_classes=2, batch_size=16, mix_prob=0.5)
    config = TrainConfig(steps=steps, lr=3e-3, schedule="cosine", warmup_fraction=0.2, log_every=2,
                         checkpoint_every=2, progress=False, device="cpu",
                         checkpoint_path=str(tmp_path / "vit.pt"))
    calls = []

    def loss(model, index):
        calls.append(1)
        if len(calls) == crash_at:
            raise Interrupted
        return task.loss(model, index)

    return train(model, task.batches, loss, config), model


def test_resumed_vit_run_follows_the_uninterrupted_trajectory(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    full, full_model = vit_run(tmp_path / "a")  # 6 batches per epoch: crosses epochs
    with pytest.raises(Interrupted):
        vit_run(tmp_path / "b", crash_at=6)  # the checkpoint of step 4 survives
    resumed, resumed_model = vit_run(tmp_path / "b")
    assert [h["step"] for h in resumed.history] == [h["step"] for h in full.history]
    for a, b in zip(full.history, resumed.history):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5) and a["lr"] == pytest.approx(b["lr"])
    for p, q in zip(full_model.parameters(), resumed_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


def test_no_weight_decay_on_class_token_positions_norms_and_biases():
    model = tiny_vit()
    decay, no_decay = parameter_groups(model, 0.05)
    names = {id(p): n for n, p in model.named_parameters()}
    exempt = {names[id(p)] for p in no_decay["params"]}
    assert {"cls_token", "pos_embedding", "head.bias", "encoder.final_norm.weight"} <= exempt
    assert all(names[id(p)].endswith("weight") and p.ndim >= 2 for p in decay["params"])
    assert "patch_embed.proj.weight" in {names[id(p)] for p in decay["params"]}
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    optimizer = make_optimizer(model, TrainConfig(weight_decay=0.05))
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.05, 0.0]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_builds_its_task_and_config(name):
    recipe = RECIPES[name]
    images, labels = torch.zeros(10 * recipe.batch_size + 3, 3, 32, 32, dtype=torch.uint8), torch.zeros(
        10 * recipe.batch_size + 3, dtype=torch.long)
    task = recipe.task(images, labels)
    assert task.steps_per_epoch == 10 and task.batch_size == recipe.batch_size
    assert (task.mix_prob, task.label_smoothing) == (recipe.mix_prob, recipe.label_smoothing)
    assert task.augment.keywords == {"trivial": recipe.trivial_augment}
    config = recipe.train_config(task.steps_per_epoch, log_every=7)
    assert config.steps == (None if recipe.epochs is None else math.ceil(recipe.epochs * 10))
    assert config.max_seconds == recipe.max_seconds and (config.steps or config.max_seconds)
    assert (config.lr, config.warmup_steps, config.weight_decay, config.log_every) == (
        recipe.lr, recipe.warmup_steps, recipe.weight_decay, 7)
    assert config.schedule == "cosine" and not config.progress
    model = ViT(recipe.model)
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_recipe_overrides_win_and_reject_unknown_settings():
    config = RECIPES["fast"].train_config(5, max_seconds=None, steps=3)
    assert config.steps == 3 and config.max_seconds is None
    with pytest.raises(TypeError, match="no_such_setting"):
        RECIPES["fast"].train_config(5, no_such_setting=1)
