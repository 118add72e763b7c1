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
    assert saved["config"]["max_seconds"] == 4.0  # the budget, or the recipe's epochs, ends the run
    assert saved["train_seconds"] >= 4.0 or saved["steps"] == saved["config"]["steps"]
    assert saved["compile_seconds"] > 0  # the first step, timed apart from the budget
    assert saved["device"].startswith("cpu") and saved["smoke"] is True
    assert saved["recipe_name"] == "fast" and saved["recipe"]["n_train"] == 2000
    assert saved["train_size"] == 2000 - 256 and saved["valid_size"] == 256  # held out of training
    curve = saved["valid_curve"]  # validation accuracy every eval_every steps and at the end
    assert curve and curve[-1]["step"] == saved["steps"] and all(0 <= e["valid_accuracy"] <= 1 for e in curve)
    best = max(curve, key=lambda e: e["valid_accuracy"])
    assert saved["kept_weights"] == {"valid_accuracy": best["valid_accuracy"], "step": best["step"]}
    assert saved["model_description"].endswith(f"{saved['parameters']:,} parameters")


def test_gpu_config_is_the_documented_recipe():
    from xfl.vit_train import RECIPES

    bench = load_bench()
    recipe, config = bench.configs(bench.argparse.Namespace(
        smoke=False, recipe="full", budget=None, no_compile=False, device="cuda"))
    assert recipe is RECIPES["full"]  # chapter 7's recipe, not a copy
    model = recipe.model
    assert (model.patch_size, model.d_model, model.num_layers) == (4, 256, 7)
    assert config.max_seconds == 420.0 and config.compile and config.amp
    assert config.schedule == "cosine" and recipe.batch_size == 512 and recipe.mix_prob == 0.3
    assert recipe.trivial_augment and recipe.label_smoothing == 0.1 and config.lr == recipe.lr
    assert config.warmup_steps > 0 and config.eval_every > 0  # warm-up in steps; validation tracked
    assert recipe.n_train == 0 and recipe.n_test == 0  # the whole dataset


def test_a_budget_replaces_the_recipes_clock():
    bench = load_bench()
    args = bench.argparse.Namespace(smoke=False, recipe="full", budget=60.0, no_compile=True, device="cpu")
    recipe, config = bench.configs(args)
    assert config.max_seconds == 60.0 and not config.compile and config.device == "cpu"


def test_the_description_and_count_come_from_the_model():
    from xfl.vit import ViT

    bench = load_bench()
    model = ViT(bench.RECIPES["full"].model)
    assert bench.describe(model) == ("ViT, 32x32 images in 4x4 patches, 7 Pre-LN layers of width 256, "
                                     "4 heads, feed-forward 512, cls pooling: "
                                     f"{sum(p.numel() for p in model.parameters()):,} parameters")


@pytest.mark.parametrize("argv", [["--budget", "x"], ["--nope"]])
def test_bad_arguments_exit(argv):
    with pytest.raises(SystemExit):
        load_bench().main(argv)
