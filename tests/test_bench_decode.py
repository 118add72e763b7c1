"""python -m bench.decode --smoke: trains a tiny model, decodes 50 sentences with and without the
key-value cache, and records identical translations and positive times.

Needs the data: CI sets XFL_DATA_MIRROR=../shared/data (see tests/test_data_tatoeba.py).
"""

import json
import os

import pytest

from helpers import import_bench


def test_smoke_run_writes_results(tmp_path):
    if not os.environ.get("XFL_DATA_MIRROR"):
        pytest.skip("XFL_DATA_MIRROR is not set (CI points it at ../shared/data)")
    out = tmp_path / "decode_cache.json"
    report = import_bench("decode").main(["--smoke", "--train-seconds", "2", "--threads", "1",
                                          "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(report))
    assert saved["sentences"] == 50 and saved["identical_translations"] is True
    for decoder in ("greedy", "beam_4"):
        result = saved[decoder]
        assert result["differing_sentences"] == 0 and result["max_score_difference"] < 1e-3
        assert result["cached_seconds"] > 0 and result["uncached_seconds"] > 0 and result["speedup"] > 0
        assert result["mean_output_tokens"] >= 0
    assert saved["cpu_threads"] == 1 and saved["model"]["parameters"] > 0 and saved["torch"]
    assert saved["device"].startswith("cpu") and len(saved["examples"]) == 5


def test_full_recipe_is_the_documented_one():
    bench = import_bench("decode")
    assert bench.FULL["sentences"] == 1000 and bench.FULL["beam_size"] == 4
    assert bench.FULL["model"]["norm_first"] and bench.FULL["train_seconds"] > 120  # real sentences
    assert bench.RESULTS.name == "decode_cache.json"
