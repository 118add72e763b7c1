"""python -m bench.vit --smoke: the CIFAR-10 ViT benchmark runs end to end on xfl.train's loop and
writes its JSON."""

import json

import pytest

from helpers import import_bench


def load_bench():
    return import_bench("vit")


def test_smoke_run_writes_results(tmp_path):
    out = tmp_path / "vit.json"
    report = load_bench().main(["--smoke", "--budget", "4", "--quiet", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(report))
    for key in ("test_accuracy", "epochs", "train_images_per_s", "wall_seconds", "device", "config"):
        assert key in saved
    assert 0.0 <= saved["test_accuracy"] <= 1.0 and saved["test_size"] == 500
    assert saved["epochs"] > 0 and saved["train_images_per_s"] > 0  # a loaded machine may not finish an epoch in 4 s
    assert saved["train_seconds"] >= 4.0 and saved["config"]["max_seconds"] == 4.0
    assert saved["compile_seconds"] > 0  # the first step, timed apart from the budget
    assert saved["device"].startswith("cpu") and saved["smoke"] is True


def test_gpu_config_is_the_documented_recipe():
    bench = load_bench()
    model, config, recipe, n_train, n_test = bench.configs(bench.argparse.Namespace(
        smoke=False, budget=None, no_compile=False, device="cuda"))
    assert (model.patch_size, model.d_model, model.num_layers) == (4, 256, 7)
    assert config.max_seconds == 600.0 and config.compile and config.amp
    assert config.schedule == "cosine" and recipe["batch_size"] == 512 and recipe["mix_prob"] == 0.3
    assert n_train == 0 and n_test == 0  # the whole dataset


@pytest.mark.parametrize("argv", [["--budget", "x"], ["--nope"]])
def test_bad_arguments_exit(argv):
    with pytest.raises(SystemExit):
        load_bench().main(argv)
