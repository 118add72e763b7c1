"""bench/vit.py --smoke: the CIFAR-10 ViT benchmark runs end to end and writes its JSON."""

import json

import pytest

from helpers import load_script


def load_bench():
    return load_script("bench/vit.py", "bench_vit")


def test_smoke_run_writes_results(tmp_path):
    out = tmp_path / "vit.json"
    report = load_bench().main(["--smoke", "--budget", "4", "--quiet", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(report))
    for key in ("test_accuracy", "epochs", "train_images_per_s", "wall_seconds", "device", "config"):
        assert key in saved
    assert 0.0 <= saved["test_accuracy"] <= 1.0 and saved["test_size"] == 500
    assert saved["epochs"] >= 1 and saved["train_images_per_s"] > 0
    assert saved["train_seconds"] >= 4.0 and saved["config"]["time_budget_s"] == 4.0
    assert saved["device"].startswith("cpu") and saved["smoke"] is True


def test_gpu_config_is_the_documented_recipe():
    bench = load_bench()
    model, config, n_train, n_test = bench.configs(bench.argparse.Namespace(
        smoke=False, budget=None, no_compile=False, device="cuda"))
    assert (model["patch_size"], model["d_model"], model["num_layers"]) == (4, 256, 7)
    assert config.time_budget_s == 600.0 and config.compile and config.amp
    assert n_train == 0 and n_test == 0  # the whole dataset


@pytest.mark.parametrize("argv", [["--budget", "x"], ["--nope"]])
def test_bad_arguments_exit(argv):
    with pytest.raises(SystemExit):
        load_bench().main(argv)
