"""xfl.runtime: the fast-profile switch, device choice and seeding."""

import pytest
import torch

from xfl import runtime


@pytest.mark.parametrize("value, fast", [("1", True), ("true", True), ("ON", True),
                                         ("0", False), ("", False), ("off", False)])
def test_fast_profile_reads_env(monkeypatch, value, fast):
    monkeypatch.setenv("XFL_FAST", value)
    assert runtime.fast_profile() is fast
    assert runtime.pick(full=100, fast=3) == (3 if fast else 100)


def test_fast_profile_unset_is_full(monkeypatch):
    monkeypatch.delenv("XFL_FAST", raising=False)
    assert runtime.fast_profile() is False


def test_fast_profile_rejects_garbage(monkeypatch):
    monkeypatch.setenv("XFL_FAST", "maybe")
    with pytest.raises(ValueError, match="XFL_FAST='maybe' is not understood"):
        runtime.fast_profile()


def test_default_device_is_a_working_device():
    device = runtime.default_device()
    assert device.type in {"cuda", "mps", "cpu"}
    assert torch.ones(2, device=device).sum().item() == 2
    if torch.cuda.is_available():
        assert device.type == "cuda"


def test_seed_everything_repeats():
    runtime.seed_everything(7)
    a = torch.randn(4)
    runtime.seed_everything(7)
    torch.testing.assert_close(torch.randn(4), a)
    with pytest.raises(ValueError, match="non-negative int, got -1"):
        runtime.seed_everything(-1)
