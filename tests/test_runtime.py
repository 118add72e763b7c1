"""xfl.runtime: the fast-profile switch, device choice and seeding."""

import pytest
import torch

from xfl import runtime


@pytest.mark.parametrize("value, fast", [("1", True), ("true", True), ("ON", True),
                                         ("0", False), ("off", False), (" no ", False)])
def test_fast_profile_reads_env(monkeypatch, value, fast):
    monkeypatch.setenv("XFL_FAST", value)
    assert runtime.fast_profile() is fast
    assert runtime.pick(full=100, fast=3) == (3 if fast else 100)


def on_device(monkeypatch, device: str, xfl_fast: str | None) -> None:
    """Pretend the best device is ``device``, with XFL_FAST set to ``xfl_fast`` (None: unset)."""
    monkeypatch.delenv("XFL_PROFILE", raising=False)
    if xfl_fast is None:
        monkeypatch.delenv("XFL_FAST", raising=False)
    else:
        monkeypatch.setenv("XFL_FAST", xfl_fast)
    monkeypatch.setattr(runtime, "default_device", lambda: torch.device(device))


@pytest.mark.parametrize("value", [None, "", "  "])
@pytest.mark.parametrize("device, fast", [("cuda", False), ("mps", True), ("cpu", True)])
def test_unset_profile_follows_the_device(monkeypatch, value, device, fast):
    """Full profile on a CUDA GPU only: a laptop or a CPU-only Colab runtime gets the fast one."""
    on_device(monkeypatch, device, xfl_fast=value)
    assert runtime.fast_profile() is fast


@pytest.mark.parametrize("value, device, expected", [
    (None, "cpu", "xfl: fast profile (no CUDA GPU) on cpu; expected run time about 2 min on a 2-core CPU"),
    (None, "cuda", "xfl: full profile (CUDA GPU found) on cuda; expected run time about 15 min on a T4 "
                   "(an estimate: book/setup.md), less on newer GPUs"),
    ("1", "cuda", "xfl: fast profile (XFL_FAST=1) on cuda; expected run time about 2 min on a 2-core CPU"),
    ("0", "cpu", "xfl: full profile (XFL_FAST=0) on cpu; expected run time the full profile is meant for "
                 "a GPU (about 15 min on a T4, an estimate); a CPU may take far longer")])
def test_run_banner_names_profile_device_and_time(monkeypatch, value, device, expected):
    on_device(monkeypatch, device, xfl_fast=value)
    assert runtime.run_banner(fast_minutes=2, t4_minutes=15) == expected


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_cpu_profile_picks_its_own_values_or_the_fast_ones(monkeypatch, device):
    on_device(monkeypatch, device, xfl_fast=None)
    monkeypatch.setenv("XFL_PROFILE", " CPU ")
    assert runtime.profile() == "cpu" and runtime.fast_profile() is False
    assert runtime.pick(full=100, fast=3, cpu=20) == 20
    assert runtime.pick(full=100, fast=3) == 3
    assert runtime.pick(full=None, fast=3, cpu=None) is None  # None is a value ("no limit"), not "as fast"
    assert runtime.run_banner(fast_minutes=2, t4_minutes=15, cpu_minutes=8) == (
        f"xfl: cpu profile (XFL_PROFILE=cpu) on {device}; expected run time about 8 min on a 2-core CPU")
    assert runtime.run_banner(fast_minutes=2, t4_minutes=15).endswith("about 2 min on a 2-core CPU")


@pytest.mark.parametrize("profile, expected", [("fast", (3, True)), ("full", (100, False))])
def test_xfl_profile_names_fast_and_full_too(monkeypatch, profile, expected):
    on_device(monkeypatch, "cpu", xfl_fast=None)
    monkeypatch.setenv("XFL_PROFILE", profile)
    assert (runtime.pick(full=100, fast=3, cpu=20), runtime.fast_profile()) == expected


@pytest.mark.parametrize("profile, fast, message", [
    ("medium", None, "XFL_PROFILE='medium' is not understood; expected one of ['fast', 'cpu', 'full']"),
    ("cpu", "1", "XFL_PROFILE=cpu and XFL_FAST=1 contradict each other"),
    ("full", "yes", "XFL_PROFILE=full and XFL_FAST=yes contradict each other")])
def test_a_bad_or_contradicting_profile_is_refused(monkeypatch, profile, fast, message):
    on_device(monkeypatch, "cpu", xfl_fast=fast)
    monkeypatch.setenv("XFL_PROFILE", profile)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        runtime.profile()


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


def test_cpu_device_name_says_cpu_and_cores():
    name = runtime.device_name(torch.device("cpu"))
    assert name.startswith("cpu (") and name.endswith(" cores)")
