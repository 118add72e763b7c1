"""bench/t4_estimate.py: the inventory's arithmetic, its sources, and a reduced run."""

import json
import math
import re
from pathlib import Path

import pytest

from bench import t4_estimate as est
from bench.t4_workloads import COUNT_BATCH, WORKLOADS
from xfl.estimate import T4, Work

ROOT = Path(__file__).resolve().parents[1]


def test_every_entry_names_a_counted_workload_and_a_source():
    for chapter, entries in {**est.CHAPTERS, **est.proposed()}.items():
        for e in entries:
            assert e.source, (chapter, e.what)
            if not isinstance(e, est.Fixed):
                assert e.workload in WORKLOADS, (chapter, e.what, e.workload)


def test_training_and_passes_scale_the_counted_work():
    step = Work(flops=1000.0, ops=7)
    train = est.Train("t", "w", batch=8 * COUNT_BATCH, steps=10, runs=3)
    assert train.work(step) == Work(1000.0 * 8 * 30, 7 * 30)  # FLOPs by the batch, ops per step
    passes = est.Pass("p", "w", examples=300, passes=2, batch=128)  # 3 batches, the last one short
    assert passes.work(step) == Work(1000.0 * (128 / COUNT_BATCH) * 6, 7 * 6)


def test_cpu_passes_use_the_cpu_rate_and_fixed_runs_their_seconds():
    counted = {"w": Work(flops=1e12, ops=0)}
    one = dict(examples=COUNT_BATCH, batch=COUNT_BATCH)  # one counted batch
    on_gpu, on_cpu = est.Pass("p", "w", **one), est.Pass("p", "w", **one, on_cpu=True)
    assert est.seconds(on_gpu, counted, T4) == pytest.approx(T4.seconds(Work(1e12, 0)))
    assert est.seconds(on_cpu, counted, T4) > 100 * est.seconds(on_gpu, counted, T4)
    assert est.seconds(est.Fixed("clock", 600.0), counted, T4) == 600.0


def test_proposals_change_only_the_entries_they_name():
    changed = est.proposed()
    assert set(changed) == set(est.CHAPTERS)
    for chapter, entries in est.CHAPTERS.items():
        rules = est.PROPOSALS.get(chapter, {})
        for old, new in zip(entries, changed[chapter]):
            matched = any(old.what.startswith(key) for key in rules)
            assert (new != old) == matched, (chapter, old.what)
    assert all(any(e.what.startswith(k) for e in est.CHAPTERS[c]) for c, r in est.PROPOSALS.items() for k in r)


def test_the_inventory_matches_the_chapter_sources():
    assert est.stale_sources() == [], "a chapter changed its full profile: update bench/t4_estimate.py"


def test_a_changed_value_or_a_new_study_makes_the_inventory_stale(tmp_path):
    for name, lines in est.READ_FROM.items():  # chapters holding exactly what was read
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    assert est.stale_sources(tmp_path) == []
    translation, modern = tmp_path / est.TR, tmp_path / est.MB
    translation.write_text(translation.read_text().replace("pick(full=3000,", "pick(full=1000,"))
    modern.write_text(modern.read_text() + "sweep = lr_sweep(streams, recipe)\n")
    stale = est.stale_sources(tmp_path, absent={est.MB: ["lr_sweep("]})
    assert len(stale) == 2 and "no longer holds" in stale[0] and "now calls 'lr_sweep('" in stale[1], stale


def test_a_study_in_flux_counts_only_while_its_chapter_holds_it(tmp_path):
    (tmp_path / est.MB).parent.mkdir(parents=True)
    (tmp_path / est.MB).write_text("ablation = compare_variants(streams, recipe, variants, SEEDS)\n")
    names = lambda chapters: [e.what for e in chapters["ch10_modern"]]  # noqa: E731
    without = names(est.present({"ch10_modern": est.CHAPTERS["ch10_modern"]}, tmp_path))
    assert not any(n.startswith(("lr sweep", "QK-norm study")) for n in without)
    (tmp_path / est.MB).write_text("sweep = lr_sweep(streams, recipe)\nqk = qk_norm_study(streams, recipe)\n")
    with_studies = names(est.present({"ch10_modern": est.CHAPTERS["ch10_modern"]}, tmp_path))
    # the sweep: two blocks at three more rates; QK-norm alone (its 2017 block is the sweep's top rate)
    assert len(with_studies) == len(without) + 3 and len(without) == len(est.modern_variants()) + 1


def test_a_reduced_run_writes_totals_that_add_up(tmp_path):
    out = tmp_path / "t4.json"
    result = est.main(["--only", "ch03_masking,ch08_pixel", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    for chapter in ("ch03_masking", "ch08_pixel"):
        r = result["chapters"][chapter]
        assert r["t4_minutes"] == pytest.approx(sum(x["t4_minutes"] for x in r["rows"]))
        assert r["t4_minutes"] == pytest.approx(r["t4_flop_minutes"] + r["t4_op_minutes"])
        assert 0 < r["h100_minutes"] < r["t4_minutes"]
    assert result["book"]["t4_minutes"] == pytest.approx(sum(r["t4_minutes"] for r in result["chapters"].values()))
    assert result["rule"]["devices"]["T4"]["peak_flops"] == 65e12
    with pytest.raises(SystemExit, match="ch99"):
        est.main(["--only", "ch99", "--out", str(out)])


def test_sensitivity_scales_each_term():
    result = {"c": {"t4_minutes": 13.0, "t4_flop_minutes": 4.0, "t4_op_minutes": 6.0}}  # 3 min clock-bound
    faster, slower = est.sensitivity(result).values()
    assert faster["c"] == pytest.approx(3.0 + 2.0 + 3.0) and slower["c"] == pytest.approx(3.0 + 8.0 + 9.0)


def test_every_estimated_chapter_prints_its_t4_estimate_and_fits_fifteen_minutes():
    """The banner of each chapter the estimate covers announces its T4 minutes rounded up from
    ``bench/results/t4_estimate.json``, and none announces more than 15 (issue 53)."""
    results = json.loads((ROOT / "bench" / "results" / "t4_estimate.json").read_text(encoding="utf-8"))
    banner = re.compile(r"run_banner\(fast_minutes=[\d.]+, t4_minutes=([\d.]+)")
    announced = {}
    for chapter, row in results["chapters"].items():
        (source,) = (ROOT / "chapters" / chapter).glob("[!e]*.md")  # the chapter, not exercises.md
        announced[chapter] = (float(banner.search(source.read_text(encoding="utf-8")).group(1)),
                              max(1, math.ceil(row["t4_minutes"])))
    assert {c: said for c, (said, _) in announced.items()} == {c: rule for c, (_, rule) in announced.items()}
    assert max(said for said, _ in announced.values()) <= 15, announced


def test_side_by_side_bounds_each_queue_step_by_its_longest_chapter_and_its_sum():
    from tools.env.gpu_plan import QUEUE
    result = {"ch05_encoder_decoder": {"h100_minutes": 6.0}, "ch06_bleu": {"h100_minutes": 5.0},
              "ch09_gpt": {"h100_minutes": 4.0}, "ch10_modern": {"h100_minutes": 2.0}}
    bounds = est.side_by_side(result)
    steps = {s.name for s in QUEUE if "execute" in s.argv}
    assert set(bounds["queue_steps"]) == steps
    assert bounds["queue_steps"]["text_chapters_a"] == {
        "chapters": ["ch05_encoder_decoder", "ch06_bleu", "ch06_decoding"], "at_least": 6.0, "at_most": 11.0}
    assert (bounds["book"]["at_least"], bounds["book"]["at_most"]) == (6.0, 17.0)
    recorded = json.loads((ROOT / "bench" / "results" / "t4_estimate.json").read_text())
    book = recorded["h100_side_by_side"]["book"]
    assert book["at_least"] <= recorded["book"]["h100_minutes"] == pytest.approx(book["at_most"])
