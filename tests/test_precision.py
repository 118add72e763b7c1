"""xfl.precision: the device picks bf16, fp16 + scaler or fp32, and compilation, in one place;
a T4-style fp16 step trains without overflow (run here on the CPU, with faked capabilities)."""

from functools import partial

import pytest
import torch

from toy_tasks import copy_batches, copy_model, copy_pairs
from xfl.precision import PRECISION_ENV_VAR, choose_precision
from xfl.train import TrainConfig, make_optimizer, seq2seq_loss, train, train_step

H100, A100, T4, V100 = (9, 0), (8, 0), (7, 5), (7, 0)


@pytest.fixture(autouse=True)
def no_override(monkeypatch):
    monkeypatch.delenv(PRECISION_ENV_VAR, raising=False)


@pytest.mark.parametrize("capability, name, scaler, compiled", [
    (H100, "bf16", False, True), (A100, "bf16", False, True),
    (T4, "fp16", True, False), (V100, "fp16", True, False)])
def test_cuda_choice_follows_the_capability(capability, name, scaler, compiled):
    p = choose_precision("cuda", capability=capability)
    assert (p.name, p.uses_scaler, p.compile, p.device_type) == (name, scaler, compiled, "cuda")
    assert p.dtype == {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


@pytest.mark.parametrize("device", ["cpu", "mps"])
def test_cpu_and_mps_run_fp32_uncompiled(device):
    p = choose_precision(device)
    assert (p.name, p.uses_scaler, p.compile) == ("fp32", False, False)


def test_amp_off_means_fp32_everywhere():
    for capability in (H100, T4):
        p = choose_precision("cuda", capability=capability, amp=False)
        assert (p.name, p.compile, p.uses_scaler) == ("fp32", False, False)


def test_environment_forces_the_t4_path_on_an_h100(monkeypatch):
    monkeypatch.setenv(PRECISION_ENV_VAR, "fp16")
    p = choose_precision("cuda", capability=H100)
    assert (p.name, p.uses_scaler, p.compile) == ("fp16", True, False)
    monkeypatch.setenv(PRECISION_ENV_VAR, "bf16")
    assert choose_precision("cuda", capability=T4).compile is False  # no bf16 compile below 8.0
    monkeypatch.setenv(PRECISION_ENV_VAR, "AUTO")
    assert choose_precision("cuda", capability=T4).name == "fp16"


def test_unknown_override_is_named(monkeypatch):
    monkeypatch.setenv(PRECISION_ENV_VAR, "fp8")
    with pytest.raises(ValueError, match=r"XFL_PRECISION='fp8'.*'bf16', 'fp16', 'fp32'"):
        choose_precision("cpu")


def test_scaler_is_enabled_for_fp16_only(monkeypatch):
    assert not choose_precision("cpu").grad_scaler().is_enabled()
    monkeypatch.setenv(PRECISION_ENV_VAR, "fp16")
    assert choose_precision("cpu").grad_scaler().is_enabled()


def fp16_step_setup(monkeypatch):
    monkeypatch.setenv(PRECISION_ENV_VAR, "fp16")
    precision = choose_precision("cpu")
    model = copy_model(dropout=0.0)
    config = TrainConfig(lr=1e-3, warmup=0)
    optimizer = make_optimizer(model, config)
    batch = next(copy_batches(copy_pairs(16), 16, 0))
    return precision, model, config, optimizer, batch


def test_an_overflowing_fp16_step_is_skipped_and_the_scale_halves(monkeypatch):
    precision, model, config, optimizer, batch = fp16_step_setup(monkeypatch)
    scaler = precision.grad_scaler()
    before = [p.detach().clone() for p in model.parameters()]
    scale = scaler.get_scale()

    def overflowing_loss(m, b):
        loss, n = seq2seq_loss(m, b)
        return loss * float("inf"), n

    train_step(model, overflowing_loss, batch, optimizer, scaler, precision, config.clip_norm)
    assert scaler.get_scale() == scale / 2
    assert all(torch.equal(p, q) for p, q in zip(before, model.parameters()))  # step skipped
    train_step(model, seq2seq_loss, batch, optimizer, scaler, precision, config.clip_norm)
    assert not all(torch.equal(p, q) for p, q in zip(before, model.parameters()))  # a real step


def test_a_t4_style_fp16_run_trains_without_overflow(monkeypatch):
    monkeypatch.setenv(PRECISION_ENV_VAR, "fp16")
    model = copy_model(dropout=0.0)
    config = TrainConfig(steps=60, lr=3e-3, warmup=6, log_every=10, progress=False, device="cpu")
    state = train(model, partial(copy_batches, copy_pairs(256, seed=1), 16), seq2seq_loss, config)
    losses = [h["loss"] for h in state.history]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.7 * losses[0], losses
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_compilation_pays_only_past_its_break_even():
    """COMPILE_SECONDS per shape against the time saved, 1 - 1/COMPILE_SPEEDUP of the run."""
    from xfl.precision import COMPILE_SECONDS, COMPILE_SPEEDUP, compile_pays

    break_even = COMPILE_SECONDS / (1 - 1 / COMPILE_SPEEDUP)  # eager seconds per shape: 90
    assert not compile_pays(0.01, steps=1000, max_seconds=None)  # 10 s of training
    assert compile_pays(break_even / 1000 * 1.01, steps=1000, max_seconds=None)
    assert not compile_pays(break_even / 1000 * 1.01, steps=1000, max_seconds=None, shapes=2)
    assert not compile_pays(1.0, steps=10_000, max_seconds=60.0)  # the budget caps the run
    assert compile_pays(1.0, steps=None, max_seconds=420.0, shapes=4)  # 140 s saved > 120 s
    with pytest.raises(ValueError, match="needs steps or max_seconds"):
        compile_pays(1.0, steps=None, max_seconds=None)
    with pytest.raises(ValueError, match="shapes >= 1, got 1.0 and 0"):
        compile_pays(1.0, steps=10, max_seconds=None, shapes=0)
