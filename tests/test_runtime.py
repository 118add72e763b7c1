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


VERSION = "0.1.0+g0123456789ab"  # xfl.version.describe, pinned for the exact banners below


def pin_version(monkeypatch, chapter: str = "elsewhere") -> None:
    """Fix the version the banner names and the chapter it thinks it runs (XFL_CHAPTER)."""
    monkeypatch.setattr("xfl.version.describe", lambda: VERSION)
    monkeypatch.setenv("XFL_CHAPTER", chapter)


@pytest.mark.parametrize("value, device, expected", [
    (None, "cpu", f"xfl: fast profile (no CUDA GPU) on cpu; {runtime.NO_GPU_HINT}; expected run time "
                  f"about 2 min on a 2-core CPU; xfl {VERSION}"),
    (None, "cuda", "xfl: full profile (CUDA GPU found) on cuda; expected run time about 15 min on a T4 "
                   f"(an estimate: book/setup.md), less on newer GPUs; xfl {VERSION}"),
    ("1", "cuda", f"xfl: fast profile (XFL_FAST=1) on cuda; expected run time about 2 min on a 2-core CPU; xfl {VERSION}"),
    ("1", "cpu", f"xfl: fast profile (XFL_FAST=1) on cpu; expected run time about 2 min on a 2-core CPU; xfl {VERSION}"),
    ("0", "cpu", "xfl: full profile (XFL_FAST=0) on cpu; expected run time the full profile is meant for "
                 f"a GPU (about 15 min on a T4 (an estimate: book/setup.md)); a CPU may take far longer; xfl {VERSION}")])
def test_run_banner_names_profile_device_time_and_version(monkeypatch, value, device, expected):
    on_device(monkeypatch, device, xfl_fast=value)
    pin_version(monkeypatch)
    assert runtime.run_banner(fast_minutes=2, t4_minutes=15) == expected


def test_on_a_cpu_the_first_line_says_no_gpu_how_to_get_one_and_what_is_missing(monkeypatch):
    """A Colab runtime without a GPU: one line, naming the menu path to a T4 and what the fast
    profile leaves out; the stored-run parser still reads its profile and device."""
    from tools.book.executed import BANNER

    on_device(monkeypatch, "cpu", xfl_fast=None)
    line = runtime.run_banner(fast_minutes=3, t4_minutes=15, cpu_minutes=8.5)
    assert "\n" not in line and "no GPU found" in line
    assert "Runtime → Change runtime type → T4 GPU" in line and "not the trained results" in line
    assert BANNER.match(line).groupdict() == {"profile": "fast", "reason": "no CUDA GPU", "device": "cpu"}


@pytest.mark.parametrize("chapter, expected", [
    ("ch05_encoder_decoder", "about 15–24 min on a T4 (estimates: 15 by the rule, 16 TFLOPS and 10 µs per op; "
                             "24 if slower, 8 TFLOPS and 15 µs per op; book/setup.md); on a T4 it may take "
                             "9 min longer than 15 min, less on newer GPUs"),
    ("ch07_vit", "about 10–14 min on a T4 (estimates: 10 by the rule, 16 TFLOPS and 10 µs per op; "
                 "14 if slower, 8 TFLOPS and 15 µs per op; book/setup.md), less on newer GPUs")])
def test_on_a_gpu_a_training_chapter_prints_its_t4_range(monkeypatch, chapter, expected):
    on_device(monkeypatch, "cuda", xfl_fast=None)
    pin_version(monkeypatch, chapter)
    t4 = {"ch05_encoder_decoder": 15, "ch07_vit": 10}[chapter]
    assert runtime.run_banner(fast_minutes=1, t4_minutes=t4) == (
        f"xfl: full profile (CUDA GPU found) on cuda; expected run time {expected}; xfl {VERSION}")


def test_the_pessimistic_t4_minutes_are_the_estimates_slower_case():
    """T4_SLOW_MINUTES holds, rounded up, bench/t4_estimate.py's slower case (fraction 0.125,
    15 µs per op) for every chapter where it is longer than the minutes the chapter announces."""
    import json
    import math
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    result = json.loads((root / "bench" / "results" / "t4_estimate.json").read_text(encoding="utf-8"))
    slower = result["sensitivity"]["slower: fraction 0.125, 15 us per op"]
    announced = {}
    for chapter in slower:
        source = next((root / "chapters" / chapter).glob("[!e]*.md")).read_text(encoding="utf-8")
        announced[chapter] = float(re.search(r"t4_minutes=([\d.]+)", source).group(1))
    expected = {c: math.ceil(m) for c, m in slower.items() if math.ceil(m) > announced[c]}
    assert runtime.T4_SLOW_MINUTES == expected
    assert max(expected.values()) > runtime.COLAB_LIMIT_MINUTES  # some chapter may pass 15 min


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_cpu_profile_picks_its_own_values_or_the_fast_ones(monkeypatch, device):
    on_device(monkeypatch, device, xfl_fast=None)
    monkeypatch.setenv("XFL_PROFILE", " CPU ")
    assert runtime.profile() == "cpu" and runtime.fast_profile() is False
    assert runtime.pick(full=100, fast=3, cpu=20) == 20
    assert runtime.pick(full=100, fast=3) == 3
    assert runtime.pick(full=None, fast=3, cpu=None) is None  # None is a value ("no limit"), not "as fast"
    pin_version(monkeypatch)
    assert runtime.run_banner(fast_minutes=2, t4_minutes=15, cpu_minutes=8) == (
        f"xfl: cpu profile (XFL_PROFILE=cpu) on {device}; expected run time about 8 min on a 2-core CPU; xfl {VERSION}")
    assert runtime.run_banner(fast_minutes=2, t4_minutes=15).endswith(f"about 2 min on a 2-core CPU; xfl {VERSION}")


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
