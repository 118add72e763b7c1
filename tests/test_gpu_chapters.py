"""tools.env.gpu_chapters: notebooks side by side, each result (passed, or the failing cell and
its error; seconds; peak GPU memory) merged into one JSON; the memory watcher's sampling."""

import json
import sys
import types

import nbformat

from tools.env import gpu_chapters, gpu_memory_watch


def notebook(path, *sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return str(path.with_suffix(""))


def test_check_records_the_failing_cell_and_its_error_and_merges_by_precision(tmp_path):
    good = notebook(tmp_path / "good.ipynb", "x = 1 + 1", "assert x == 2")
    bad = notebook(tmp_path / "bad.ipynb", "x = 1", "y = [1, 2][x + 1]  # off by one")
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"nbval": {"bf16": {"ch01_qkv": {"status": "passed"}}}}))
    results = gpu_chapters.check([good, bad], ["auto"], out, workers=2, deadline=None)
    by_name = {job.path: r for job, r in results.items()}
    assert by_name[good]["status"] == "passed" and by_name[good]["seconds"] > 0
    assert by_name[bad]["status"] == "failed" and "IndexError" in by_name[bad]["error"]
    assert "Cell 1" in by_name[bad]["failed_cell"]  # the second cell, counted from 0
    saved = json.loads(out.read_text())
    assert {k: v["status"] for k, v in saved["nbval"]["fp32"].items()} == {"good": "passed", "bad": "failed"}
    assert saved["nbval"]["bf16"] == {"ch01_qkv": {"status": "passed"}}  # other results kept
    assert saved["nbval"]["fp32"]["good"]["peak_gpu_mib"] is None  # no CUDA here: nothing sampled
    assert next(iter(saved["devices"].values()))["auto_precision"].startswith("fp32")


def test_jobs_past_the_deadline_are_stopped_or_not_started(tmp_path):
    slow = notebook(tmp_path / "slow.ipynb", "import time; time.sleep(60)")
    results = gpu_chapters.run_jobs([gpu_chapters.Job(slow), gpu_chapters.Job(slow, "fp16")], tmp_path,
                                    workers=1, deadline=__import__("time").time() + 8)
    assert sorted(r["status"] for r in results.values()) == ["not run", "timeout"]


def test_t4_path_adds_fp16_for_the_training_chapters_only():
    paths = gpu_chapters.chapter_paths()
    assert len(paths) == 13 and paths[0].endswith("datasets")
    training = gpu_chapters.chapter_paths(training=True)
    assert [p.split("/")[1] for p in training] == list(gpu_chapters.TRAINING)
    try:
        gpu_chapters.chapter_paths(["ch99_nothing"])
    except SystemExit as error:
        assert "ch99_nothing" in str(error)
    else:
        raise AssertionError("an unknown chapter was accepted")


def test_the_memory_watcher_keeps_the_largest_sample(tmp_path, monkeypatch):
    reserved = iter([0, 3 * 2**20, 2**20, 5 * 2**20])
    cuda = types.SimpleNamespace(is_initialized=lambda: True, device_count=lambda: 1,
                                 memory_reserved=lambda d: next(reserved))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    path, peak = str(tmp_path / "peak"), 0
    peaks = [peak := gpu_memory_watch.sample(path, peak) for _ in range(4)]
    assert peaks == [0, 3 * 2**20, 3 * 2**20, 5 * 2**20]
    assert int((tmp_path / "peak").read_text()) == 5 * 2**20


def test_side_by_side_notebooks_get_checkpoint_folders_of_their_own(tmp_path, monkeypatch):
    monkeypatch.setenv("XFL_CHECKPOINT_DIR", str(tmp_path))
    envs = [gpu_chapters.Job(p, precision).env(2, tmp_path / "m", tmp_path / "i")
            for p in ("chapters/ch05_encoder_decoder/translation", "chapters/ch06_bleu/bleu_decoding")
            for precision in ("auto", "fp16")]
    folders = [e["XFL_CHECKPOINT_DIR"] for e in envs]
    assert len(set(folders)) == 4 and all(f.startswith(str(tmp_path)) for f in folders)
    assert [e.get("XFL_PRECISION") for e in envs] == [None, "fp16", None, "fp16"]
    assert all(e["XFL_PROFILE"] == "fast" and "XFL_FAST" not in e for e in envs)


def test_a_run_stopped_by_the_deadline_is_a_timeout_not_a_failure(tmp_path):
    job = gpu_chapters.Job("chapters/ch05_encoder_decoder/translation", mode="execute")
    log = "xfl.train.DeadlineReached: XFL_DEADLINE passed at step 120"
    assert gpu_chapters._result(job, 1, 3.0, tmp_path / "none.xml", tmp_path / "none", log)["status"] == "timeout"
    assert gpu_chapters._result(job, 1, 3.0, tmp_path / "none.xml", tmp_path / "none", "KeyError")["status"] == "failed"
