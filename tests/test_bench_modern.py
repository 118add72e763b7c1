"""python -m bench.modern --smoke: every study of chapter 10 runs on a tiny model and writes
its numbers (equal parameters within 2%, smaller caches with fewer kv heads, finite bits).

Needs the data: CI sets XFL_DATA_MIRROR=../shared/data (see tests/test_data_tatoeba.py).
"""

import json
import math
import os

import pytest

from helpers import import_bench


def test_smoke_run_writes_results(tmp_path):
    if not os.environ.get("XFL_DATA_MIRROR"):
        pytest.skip("XFL_DATA_MIRROR is not set (CI points it at ../shared/data)")
    out = tmp_path / "modern.json"
    report = import_bench("modern").main(["--smoke", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(report)) and saved["profile"] == "smoke"
    ablation = saved["ablation"]
    assert list(ablation)[0] == "2017 block" and list(ablation)[-1] == "all together" and len(ablation) == 12
    base = ablation["2017 block"]["params"]
    for name, r in ablation.items():
        assert abs(r["params"] / base - 1) <= 0.02, name
        assert len(r["bits"]) == 2 and all(0 < b < 10 for b in r["bits"]) and r["tokens_per_s"] > 0
        assert math.isclose(r["mean"], sum(r["bits"]) / 2) and r["spread"] >= 0
        assert r["vs_2017 block"].startswith(("better", "worse", "no clear")), r["vs_2017 block"]
        assert name == "2017 block" or "95% CI [" in r["vs_2017 block"]
    half = ablation["GQA kv=heads/2"]["cache_bytes_per_token"]
    assert half * 2 == base_cache(ablation) and saved["kv_heads"]["1"]["cache_bytes_per_token"] * 4 == base_cache(ablation)
    assert set(saved["extrapolation"]) == {"learned", "sinusoidal", "RoPE", "none"}
    for r in saved["extrapolation"].values():
        assert list(r["at_length"]) == ["16", "32", "64"] and all(len(b) == 2 for b in r["at_length"].values())
        assert len(r["per_position"]) == 2 and all(len(p) == 64 for p in r["per_position"])
        assert set(r["beyond_L"]) == {"L..2L", "2L..4L"}
        assert r is saved["extrapolation"]["none"] or set(r["beyond_L_vs_none"]) == {"L..2L", "2L..4L"}
    assert len(saved["extrapolation"]["learned"]["table_rms"]) == 2
    assert [float(rate) for rate in saved["lr_sweep"]] == [3e-3, 9e-3, 1.8e-2, 3e-2]  # 1, 3, 6 and 10 x 3e-3
    assert all(set(r) == {"2017 block", "all together"} for r in saved["lr_sweep"].values())
    rate = saved["ablation_lr"]  # the 2017 block's best rate of the sweep; its runs there are reused
    assert min(saved["lr_sweep"], key=lambda r: saved["lr_sweep"][r]["2017 block"]["mean"]) == str(rate)
    assert saved["lr_sweep"][str(rate)]["all together"]["bits"] == ablation["all together"]["bits"]
    qk = saved["qk_norm_high_lr"]
    assert set(qk) == {"2017 block", "QK-norm"} and all(len(r["max_logit"]) == 2 for r in qk.values())
    assert qk["2017 block"]["bits"] == saved["lr_sweep"]["0.03"]["2017 block"]["bits"]  # the sweep's top
    holm = saved["ablation_holm"]
    assert set(holm) == set(ablation) - {"2017 block"}
    assert all(h["p"] <= h["p_holm"] <= 1 and h["verdict"] in ("better", "worse", "unclear") for h in holm.values())
    assert set(saved["timings"]["fused"]["median_s"]) == {"mask", "is_causal"}


def base_cache(ablation):
    return ablation["2017 block"]["cache_bytes_per_token"]


def test_recipes():
    bench = import_bench("modern")
    assert all(len(bench.RECIPES[p]["seeds"]) >= 5 for p in ("full", "cpu", "fast"))
    from xfl.ablation import RECIPES
    assert bench.RECIPES is RECIPES  # chapter 10's recipes, not a copy
    assert bench.RESULTS.name == "modern.json"
