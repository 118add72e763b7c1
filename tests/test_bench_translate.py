"""python -m bench.translate --smoke: trains on a Tatoeba subset, scores BLEU, times the decoders.

Needs the data: CI sets XFL_DATA_MIRROR=../shared/data (see tests/test_data_tatoeba.py).
"""

import json
import math
import os

import pytest

from helpers import import_bench


def load_bench():
    return import_bench("translate")


def test_smoke_run_writes_results(tmp_path):
    if not os.environ.get("XFL_DATA_MIRROR"):
        pytest.skip("XFL_DATA_MIRROR is not set (CI points it at ../shared/data)")
    out = tmp_path / "translate.json"
    report = load_bench().main(["--smoke", "--budget", "4", "--no-progress", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(report))
    for key in ("bleu", "bleu_signature", "parameters", "tokens_per_second", "wall_seconds", "device"):
        assert key in saved
    assert 0.0 <= saved["bleu"] <= 100.0 and saved["test_sentences"] == 40
    assert "case:lc" in saved["bleu_signature"]  # case-insensitive, as documented
    assert saved["train_seconds"] >= 4.0 and saved["tokens_per_second"] > 0
    uniform = math.log(saved["vocab"]["joint_subwords"])  # ~6.5: a uniform guess over ~640 subwords
    assert saved["final_loss"] < uniform - 0.2  # it learned (2 s of training: 0.7 below)
    assert saved["bleu_split"] == "test" and saved["valid_sentences"] == 30
    chosen = saved["chosen_on_valid"]
    assert chosen["weights"]["chosen_on"] == chosen["decoding"]["chosen_on"] == "valid"
    table = chosen["decoding"]["table"]
    assert len(table) == 3 and max(r["valid_bleu"] for r in table) == max(
        r["valid_bleu"] for r in table if (r["beam_size"], r["length_penalty"]) ==
        (chosen["decoding"]["beam_size"], chosen["decoding"]["length_penalty"]))
    assert saved["decoder_speed_cpu"]["ratio"] > 1.0  # N passes cost more than one
    assert saved["attention_speed_cpu"]["ratio"] > 0 and saved["device"].startswith("cpu")


def test_gpu_recipe_is_fixed():
    bench = load_bench()
    assert bench.GPU["model"]["norm_first"] and bench.GPU["model"]["d_model"] == 512
    assert bench.GPU["train_limit"] is None and bench.GPU["test_limit"] is None  # all the data
    assert bench.GPU["subwords"] and bench.GPU["train"]["schedule"] == "cosine"  # decays to 0 on the clock


def test_timings_only_skips_training_and_writes_its_own_file(tmp_path):
    out = tmp_path / "timings.json"
    bench = load_bench()
    assert bench.TIMINGS.name == "translate_timings.json" and bench.TIMINGS != bench.RESULTS
    report = bench.main(["--timings-only", "--smoke", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert "bleu" not in report and report["cpu_threads"] >= 1
    assert report["decoder_speed_cpu"]["ratio"] > 1.0 and report["attention_speed_cpu"]["ratio"] > 0
