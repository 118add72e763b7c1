"""tools.env.gpu_plan: the GPU plan's dry run (the same steps on the CPU, tiny budgets) over two calls,
the first stopped at its deadline and resumed by the second; the plans name every chapter."""

import json
import sys
import time
import os

import pytest

from tools.env import gpu_plan
from tools.book.executed import ROOT, toc_chapters


def run(tmp_path, out, *extra):
    return gpu_plan.main(["run", "recipes", "--dry-run", "--out", str(tmp_path / out),
                          "--state", str(tmp_path / "state"), *extra])


def test_dry_run_stops_at_the_deadline_then_resumes_and_finishes(tmp_path):
    if not os.environ.get("XFL_DATA_MIRROR"):
        pytest.skip("XFL_DATA_MIRROR is not set (CI points it at ../shared/data)")
    # call 1: its deadline passes before the first step can train (a Python start takes longer)
    assert run(tmp_path, "call1", "--call-seconds", str(gpu_plan.MARGIN_S + 0.3), "--min-start", "0") == 0
    state = json.loads((tmp_path / "call1" / "state.json").read_text())
    assert list(state["steps"]) == ["vit"] and state["steps"]["vit"]["status"] == "resume", state
    assert "DeadlineReached" in state["steps"]["vit"]["tail"]
    assert len(list((tmp_path / "state" / "checkpoints" / "vit").glob("run000-*.pt"))) == 1
    assert sorted(p.name for p in (tmp_path / "call1").iterdir()) == ["state.json"]
    # call 2: the checkpoint resumes, the other steps run
    assert run(tmp_path, "call2", "--call-seconds", "600") == 0
    state = json.loads((tmp_path / "call2" / "state.json").read_text())
    assert {name: (s["status"], s["calls"]) for name, s in state["steps"].items()} == {
        "vit": ("done", 2), "vit_fp16": ("done", 1), "translate": ("done", 1)}
    assert sorted(p.name for p in (tmp_path / "call2").iterdir()) == [
        "state.json", "translate.json", "vit.json", "vit_fp16.json"]
    vit = json.loads((tmp_path / "call2" / "vit.json").read_text())
    assert vit["steps"] > 0 and vit["train_seconds"] >= 2.0  # its whole budget, over two calls
    # call 3: nothing left to do
    assert run(tmp_path, "call3") == 0 and sorted(p.name for p in (tmp_path / "call3").iterdir()) == ["state.json"]


def test_the_chapters_plan_runs_every_chapter_of_the_book():
    paths = [step.argv[step.argv.index("execute") + 1] for step in gpu_plan.PLANS["chapters"]]
    assert [p.removesuffix(".ipynb") for p in paths] == toc_chapters()
    assert all((ROOT / p).exists() for p in paths)
    assert gpu_plan.PLANS["all"] == gpu_plan.PLANS["recipes"] + gpu_plan.PLANS["chapters"]
    sessions = [gpu_plan.PLANS[f"session{i}"] for i in range(1, len(gpu_plan.SESSIONS) + 1)]
    in_sessions = [s.name for plan in sessions for s in plan]
    assert sorted(in_sessions) == sorted(s.name for s in gpu_plan.PLANS["all"])  # each step once
    assert all(sum(s.minutes for s in plan) <= 22 for plan in sessions)  # + setup: 28 minutes


@pytest.mark.parametrize("code, output, expected", [
    (0, "", "done"), (None, "", "resume"), (1, "xfl.train.DeadlineReached: XFL_DEADLINE passed", "resume"),
    (1, "ValueError: bad", "failed")])
def test_outcome_of_a_step(code, output, expected):
    assert gpu_plan.outcome(code, output) == expected


def test_a_state_of_another_plan_is_refused(tmp_path):
    (tmp_path / "state.json").write_text(json.dumps({"plan": "chapters", "steps": {}}))
    with pytest.raises(SystemExit, match="belongs to plan 'chapters', not 'recipes'"):
        gpu_plan.read_state(tmp_path, "recipes")


def test_a_notebook_stopped_at_the_deadline_resumes_in_the_next_call(tmp_path):
    """A chapter step's path: ``tools.book.executed execute`` on a notebook whose training run meets
    the deadline is marked ``resume`` (its partial notebook dropped); the next call completes it
    from the checkpoint and leaves the executed notebook."""
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
    step = gpu_plan.Step("tiny", (), (sys.executable, "-m", "tools.book.executed", "execute", str(notebook),
                                      "--out", "{out}"), 1.0)
    out = tmp_path / "out"
    out.mkdir()
    assert gpu_plan.run_step(step, tmp_path / "state", out, time.time() - 1, dry_run=True)[0] == "resume"
    assert list(out.iterdir()) == [] and len(list((tmp_path / "state").rglob("run000-*.pt"))) == 1
    result, tail = gpu_plan.run_step(step, tmp_path / "state", out, time.time() + 120, dry_run=True)
    assert result == "done", tail
    text = "".join(o.get("text", "") for o in nbformat.read(out / "tiny.ipynb", 4).cells[0].outputs)
    assert "steps 8 [4, 8]" in text  # resumed to the end, its history whole
