"""python -m bench.grade_class, small: a class of 4 chapter-1 notebooks (one of each kind) graded with
--jobs 2 through the sandbox; the record has the times, the peak memory and scores that tell the
kinds apart (the full run of 200 is bench/results/grade_class.json)."""

import json

import pytest

from helpers import import_bench


def test_a_class_of_four_is_graded_and_measured(tmp_path):
    out = tmp_path / "grade_class.json"
    report = import_bench("grade_class").main(["--students", "4", "--jobs", "2", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(report))
    assert saved["graded"] == 4 and saved["kept_from_earlier_runs"] == 0 and saved["sandboxed"] is True
    assert saved["seconds_per_notebook"] == pytest.approx(saved["wall_seconds"] / 4, abs=0.01)
    assert saved["memory_samples"] > 3 and saved["peak_rss_tree_mib"] > saved["peak_rss_one_process_mib"] > 100
    means = saved["mean_total_by_kind"]
    assert means["honest"] == saved["possible"] == 13
    assert means["honest"] > means["mixed"] > means["wrong"] and means["honest"] > means["half_done"] > 0, means


def test_notebooks_are_distinct_and_of_every_kind():
    bench = import_bench("grade_class")
    import nbformat
    student = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    kinds = [bench.class_notebook(k, student, student, {})[0] for k in range(8)]
    texts = {nbformat.writes(bench.class_notebook(k, student, student, {})[1]) for k in range(8)}
    assert kinds == list(bench.KINDS) * 2 and len(texts) == 8
    with pytest.raises(ValueError, match="--students"):
        bench.main(["--students", "0"])
