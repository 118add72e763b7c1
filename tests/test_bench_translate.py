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
    curve = saved["valid_curve"]  # greedy validation BLEU every eval_every steps and at the end
    assert len(curve) >= 2 and all(0.0 <= e["valid_bleu"] <= 100.0 and e["eval_seconds"] > 0 for e in curve)
    assert [e["step"] for e in curve] == sorted({e["step"] for e in curve}) and curve[-1]["step"] == saved["steps"]
    best = max(curve, key=lambda e: e["valid_bleu"])
    assert chosen["weights"] == {"valid_bleu": best["valid_bleu"], "step": best["step"], "chosen_on": "valid"}
    assert saved["model"].endswith(f"{saved['parameters']:,} parameters")  # printed from the model
    assert f"{saved['vocab']['joint_subwords']:,} subwords" in saved["model"]
    assert saved["decoder_speed_cpu"]["ratio"] > 1.0  # N passes cost more than one
    assert saved["attention_speed_cpu"]["ratio"] > 0 and saved["device"].startswith("cpu")


def test_gpu_recipe_is_fixed():
    bench = load_bench()
    assert bench.GPU["model"]["norm_first"] and bench.GPU["model"]["d_model"] == 512
    assert bench.GPU["train_limit"] is None and bench.GPU["test_limit"] is None  # all the data
    assert bench.GPU["subwords"] and bench.GPU["train"]["schedule"] == "cosine"  # decays to 0 on the clock
    assert bench.GPU["train"]["warmup_steps"] > 0 and bench.GPU["bucket"] % 8 == 0  # fixed shapes
    assert 100 <= bench.GPU["track_sentences"] <= 500 and bench.GPU["train"]["eval_every"] > 0


def test_the_description_and_count_come_from_the_model():
    from xfl.model import Seq2SeqConfig, Seq2SeqTransformer

    bench = load_bench()
    sizes = dict(bench.GPU["model"], num_encoder_layers=1, num_decoder_layers=2)
    model = Seq2SeqTransformer(Seq2SeqConfig(src_vocab=100, tgt_vocab=100, share_embeddings=True, **sizes))
    text = bench.describe(model)
    assert text.startswith("Pre-LN encoder-decoder, 1+2 layers of width 512, 8 heads, feed-forward 2048")
    assert text.endswith(f"{sum(p.numel() for p in model.parameters()):,} parameters")


def test_timings_only_skips_training_and_writes_its_own_file(tmp_path):
    out = tmp_path / "timings.json"
    bench = load_bench()
    assert bench.TIMINGS.name == "translate_timings.json" and bench.TIMINGS != bench.RESULTS
    report = bench.main(["--timings-only", "--smoke", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert "bleu" not in report and report["cpu_threads"] >= 1
    assert report["decoder_speed_cpu"]["ratio"] > 1.0 and report["attention_speed_cpu"]["ratio"] > 0
