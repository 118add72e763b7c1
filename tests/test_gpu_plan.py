"""tools.env.gpu_plan: the GPU queue's dry run (every step's tiny variant on the CPU) over three
calls, the first stopped at its deadline; the queue's windows fit the device's 15 minutes; a
window's returned files are recorded into the repository, a dry run's refused."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tools.env import gpu_plan
from tools.book.executed import ROOT, toc_chapters


def window(tmp_path, out, *extra):
    """A dry-run call; its state goes to tmp_path / gpu_queue.json (beside --out), never the repository's."""
    return gpu_plan.main(["window", "--dry-run", "--out", str(tmp_path / out), "--data",
                          os.environ["XFL_DATA_MIRROR"], *extra])


def test_dry_run_of_the_whole_queue_stops_at_the_deadline_then_finishes(tmp_path):
    if not os.environ.get("XFL_DATA_MIRROR"):
        pytest.skip("XFL_DATA_MIRROR is not set (CI points it at ../shared/data)")
    repository_state = gpu_plan.STATE.read_bytes()
    # call 1: the deadline passes before the first step's notebook can run: it is to be resumed
    assert window(tmp_path, "call1", "--call-seconds", str(gpu_plan.MARGIN_S + 0.5)) == 0
    state = json.loads((tmp_path / "call1" / "gpu_queue.json").read_text())
    assert {n: s["status"] for n, s in state["steps"].items()} == {"gpu_check": "resume"}, state
    assert "DeadlineReached" in state["steps"]["gpu_check"]["tail"]
    # call 2: every step, in the queue's order
    assert window(tmp_path, "call2", "--call-seconds", "900") == 0
    state = json.loads((tmp_path / "call2" / "gpu_queue.json").read_text())
    assert list(state["steps"]) == sorted(s.name for s in gpu_plan.QUEUE)
    assert {n: (s["status"], s["calls"], s["dry_run"]) for n, s in state["steps"].items()} == {
        s.name: ("done", 2 if s.name == "gpu_check" else 1, True) for s in gpu_plan.QUEUE}
    assert sorted(p.name for p in (tmp_path / "call2").iterdir()) == [
        "executed.json", "flash_triton.json", "gpu_nbval.json", "gpu_queue.json", "tiny.ipynb", "translate.json",
        "vit.json"]
    results = json.loads((tmp_path / "call2" / "gpu_nbval.json").read_text())
    assert results["nbval"]["fp32"]["tiny"]["status"] == "passed"
    steps = results["steps"]
    assert sorted(steps) == ["ch05_encoder_decoder", "ch06_bleu", "ch07_vit", "ch09_gpt", "ch10_modern"]
    timed = [v["fp32"] for chapter in steps.values() for v in chapter.values()]
    assert len(timed) == 6 and all(t["step_ms"] > 0 and t["ops_per_step"] > 100 for t in timed)
    # call 3: nothing left
    assert window(tmp_path, "call3") == 0
    assert [p.name for p in (tmp_path / "call3").iterdir()] == ["gpu_queue.json"]
    # a dry run is never recorded into the repository
    assert gpu_plan.STATE.read_bytes() == repository_state
    with pytest.raises(SystemExit, match="records a dry run"):
        gpu_plan.record(tmp_path / "call2", tmp_path / "results", tmp_path / "state.json")


def test_the_queue_covers_the_book_and_each_window_fits_the_device_time():
    check = gpu_plan.BY_NAME["gpu_check"].argv
    assert "--t4-path" in check and gpu_plan.chapters_of(gpu_plan.BY_NAME["gpu_check"]) == []  # every chapter
    executed = [a for s in gpu_plan.QUEUE if "execute" in s.argv for a in gpu_plan.chapters_of(s)]
    training = {"ch05_encoder_decoder", "ch06_bleu", "ch06_decoding", "ch07_vit", "ch09_gpt", "ch10_modern"}
    assert training <= set(executed) and len(executed) == len(set(executed))
    assert set(executed) <= {Path(p).parts[1] for p in toc_chapters()}
    order = [gpu_plan.PRIORITY.index(s.issue) for s in gpu_plan.QUEUE]
    assert order == sorted(order) and gpu_plan.QUEUE[0].issue == 44  # 44 first, then by priority
    for group in gpu_plan.windows(gpu_plan.QUEUE):
        assert gpu_plan.window_minutes(group) <= gpu_plan.WINDOW_MINUTES < 15
        assert sum(s.minutes for s in group) * 60 <= gpu_plan.CALL_S - gpu_plan.MARGIN_S
    assert [s.name for s in gpu_plan.windows(gpu_plan.QUEUE)[0]] == ["gpu_check", "gpu_steps"]


def test_a_window_with_cifar_carries_it_in_three_calls_first():
    calls = gpu_plan.calls([gpu_plan.BY_NAME["vit"]])
    assert [c["carry"] for c in calls] == [["build/carry/cifar1"], ["build/carry/cifar2"],
                                          ["build/carry/cifar3"], ["build/wheels", "build/carry/text"]]
    assert all(c["timeout_s"] <= 600 for c in calls)
    assert [c["carry"] for c in gpu_plan.calls([gpu_plan.BY_NAME["translate"]])] == [
        ["build/wheels", "build/carry/text"]]
    files = [f for names in gpu_plan.CIFAR_CALLS.values() for f in names]
    assert sorted(files) == sorted(p.name for p in (ROOT.parent / "shared" / "data" / "cifar-10-batches-py").iterdir()) \
        if (ROOT.parent / "shared" / "data").exists() else len(files) == 7


def test_next_names_the_first_pending_window():
    state = {"steps": {"gpu_check": {"status": "done"}, "gpu_steps": {"status": "failed"}}}
    text = gpu_plan.describe_next(state)
    assert text.startswith("Next window: gpu_steps") and "call 1: carry" in text
    done = {"steps": {s.name: {"status": "done"} for s in gpu_plan.QUEUE}}
    assert gpu_plan.describe_next(done) == "The queue is finished."


@pytest.mark.parametrize("code, output, expected", [
    (0, "", "done"), (None, "", "resume"), (1, "xfl.train.DeadlineReached: XFL_DEADLINE passed", "resume"),
    (1, "ValueError: bad", "failed")])
def test_outcome_of_a_step(code, output, expected):
    assert gpu_plan.outcome(code, output) == expected


def test_a_missing_data_file_fails_the_step_by_name(tmp_path):
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_text("x")
    assert "CIFAR-10 is not all there" in gpu_plan.missing_data(gpu_plan.BY_NAME["vit"], tmp_path)
    assert "Tatoeba zip" in gpu_plan.missing_data(gpu_plan.BY_NAME["translate"], tmp_path)
    assert gpu_plan.missing_data(gpu_plan.BY_NAME["gpu_steps"], tmp_path) is None


def test_record_merges_results_and_keeps_every_benchmark_run(tmp_path):
    back, results = tmp_path / "back", tmp_path / "results"
    back.mkdir(), results.mkdir()
    state = {"steps": {"vit": {"status": "done", "dry_run": False, "date": "2026-12-01 10:00 UTC"}}}
    (back / "gpu_queue.json").write_text(json.dumps(state))
    (back / "gpu_nbval.json").write_text(json.dumps({"nbval": {"fp16": {"ch07_vit": {"status": "passed"}}}}))
    (back / "vit.json").write_text(json.dumps({"test_accuracy": 0.91}))
    (results / "gpu_nbval.json").write_text(json.dumps({"nbval": {"bf16": {"ch07_vit": {"status": "passed"}}}}))
    (results / "vit.json").write_text(json.dumps({"cpu": 1, "gpu_runs": [{"test_accuracy": 0.85}]}))
    old_state = tmp_path / "state.json"
    old_state.write_text(json.dumps({"steps": {"gpu_check": {"status": "done"}}}))
    gpu_plan.record(back, results, old_state)
    assert set(json.loads(old_state.read_text())["steps"]) == {"gpu_check", "vit"}
    assert json.loads((results / "gpu_nbval.json").read_text())["nbval"] == {
        "bf16": {"ch07_vit": {"status": "passed"}}, "fp16": {"ch07_vit": {"status": "passed"}}}
    vit = json.loads((results / "vit.json").read_text())
    assert vit["cpu"] == 1 and [r["test_accuracy"] for r in vit["gpu_runs"]] == [0.85, 0.91]


def test_a_notebook_stopped_at_the_deadline_resumes_in_the_next_call(tmp_path):
    """A chapter's path: ``tools.book.executed execute`` on a notebook whose training run meets
    the deadline is marked ``resume``; the next call completes it from the checkpoint."""
    import nbformat

    notebook = tmp_path / "tiny.ipynb"
    code = ("import sys; sys.path.insert(0, {tests!r})\\n"
            "from functools import partial\\n"
            "from toy_tasks import copy_batches, copy_model, copy_pairs\\n"
            "from xfl.train import TrainConfig, seq2seq_loss, train\\n"
            "state = train(copy_model(), partial(copy_batches, copy_pairs(32), 8), seq2seq_loss,\\n"
            "              TrainConfig(steps=8, log_every=4, progress=False, device='cpu'))\\n"
            "print('steps', state.step, [h['step'] for h in state.history])")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        code.replace("\\n", "\n").format(tests=str(ROOT / "tests")))]), notebook)
    step = gpu_plan.Step("tiny", 0, (), ("{py}", "-m", "tools.book.executed", "execute", str(notebook),
                                         "--out", "{out}"), 1.0)
    out, checkpoints = tmp_path / "out", tmp_path / "checkpoints"
    out.mkdir()
    env = {"PYTHONPATH": str(ROOT)}
    assert gpu_plan.run_step(step, out, checkpoints, time.time() - 1, True, sys.executable, env)[0] == "resume"
    assert len(list(checkpoints.rglob("run000-*.pt"))) == 1
    result, tail = gpu_plan.run_step(step, out, checkpoints, time.time() + 120, True, sys.executable, env)
    assert result == "done", tail
    text = "".join(o.get("text", "") for o in nbformat.read(out / "tiny.ipynb", 4).cells[0].outputs)
    assert "steps 8 [4, 8]" in text  # resumed to the end, its history whole


def test_the_repositorys_queue_state_names_every_step_and_holds_no_dry_run():
    state = gpu_plan.read_state()
    assert sorted(state["steps"]) == sorted(s.name for s in gpu_plan.QUEUE)
    assert all(s["status"] in ("not run", "done", "resume", "failed") for s in state["steps"].values())
    assert not any(s.get("dry_run") for s in state["steps"].values())
