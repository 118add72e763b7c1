"""bench.report: the atomic results file shared by the benchmarks."""

import json

import pytest

from helpers import import_bench


def load_report():
    return import_bench("report")


def test_results_round_trip_and_leave_no_temporary_file(tmp_path):
    path = tmp_path / "results" / "run.json"
    load_report().write_results(path, {"bleu": 12.5, "device": "cpu", "text": "¿qué?"})
    assert json.loads(path.read_text(encoding="utf-8")) == {"bleu": 12.5, "device": "cpu", "text": "¿qué?"}
    assert [p.name for p in path.parent.iterdir()] == ["run.json"]


def test_a_failed_write_keeps_the_previous_results(tmp_path):
    path, report = tmp_path / "run.json", load_report()
    report.write_results(path, {"accuracy": 0.9})
    with pytest.raises(TypeError):
        report.write_results(path, {"accuracy": object()})  # not JSON
    assert json.loads(path.read_text()) == {"accuracy": 0.9}
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]
