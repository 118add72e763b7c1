"""tools.env.gpu_chapters: notebooks side by side, each result (passed, or the failing cell and
its error; seconds; peak GPU memory) merged into one JSON; the memory watcher's sampling."""

import json
import sys
import types

import nbformat
import pytest

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
    assert len(paths) == 14 and paths[0].endswith("datasets")
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


# ------------------------------------------------------------------ make test-gpu (issue 61)
H100 = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.15.0", "cuda": "13.0", "auto_precision": "bf16 (compile)",
        "cores": 16, "date": "2026-11-28 09:00 UTC"}


def test_without_cuda_it_says_so_and_exits_non_zero(tmp_path, monkeypatch, capsys):
    """`make test-gpu`'s command where torch finds no CUDA device: a message, status 3, nothing run."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(gpu_chapters, "run_jobs", lambda *a, **k: pytest.fail("a notebook was started"))
    out = tmp_path / "gpu_nbval.json"
    assert gpu_chapters.main(["check", "--t4-path", "--out", str(out)]) == gpu_chapters.NO_CUDA_EXIT != 0
    printed = capsys.readouterr()
    assert printed.err.startswith(f"make test-gpu: no CUDA GPU on this machine: torch {torch.__version__}")
    assert "`make test` runs every chapter on the CPU" in printed.err and "Colab's free T4" in printed.err
    assert printed.out == "" and not out.exists()


def test_the_reason_names_a_build_without_cuda_or_a_missing_device(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert gpu_chapters.cuda_problem() == f"torch {torch.__version__} is a build without CUDA"
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    assert gpu_chapters.cuda_problem().endswith("(built for CUDA 12.8) finds no CUDA device")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert gpu_chapters.cuda_problem() is None


def test_a_faked_gpu_run_prints_the_table_and_writes_the_json(tmp_path, monkeypatch, capsys):
    """Every chapter in the H100's bf16 and the training ones in fp16; one fp16 chapter fails."""
    def fake_run(jobs, out, workers, deadline, on_result):
        results = {}
        for number, job in enumerate(jobs):
            bad = job.chapter == "ch07_vit" and job.precision == "fp16"
            results[job] = {"status": "failed" if bad else "passed", "seconds": 10.0 + number,
                            "peak_gpu_mib": None if job.chapter == "ch00_data" else 1000 + number}
            if bad:
                results[job].update(failed_cell="Cell 12", error="AssertionError: loss is nan", log_tail="")
            on_result(job, results[job])
        return results

    monkeypatch.setattr(gpu_chapters, "cuda_problem", lambda: None)
    monkeypatch.setattr(gpu_chapters, "device_info", lambda: H100)
    monkeypatch.setattr(gpu_chapters, "run_jobs", fake_run)
    out = tmp_path / "results" / "gpu_nbval.json"
    assert gpu_chapters.main(["check", "--t4-path", "--out", str(out)]) == 1  # one did not pass
    saved = json.loads(out.read_text())
    assert sorted(saved) == ["devices", "nbval"] and saved["devices"] == {H100["device"]: H100}
    assert len(saved["nbval"]["bf16"]) == 14 and sorted(saved["nbval"]["fp16"]) == sorted(gpu_chapters.TRAINING)
    vit = saved["nbval"]["fp16"]["ch07_vit"]
    assert vit["status"] == "failed" and vit["error"] == "AssertionError: loss is nan"
    assert vit["profile"] == "fast" and vit["device"] == H100["device"] and vit["date"] == H100["date"]

    lines = capsys.readouterr().out.splitlines()
    start = lines.index(f"{H100['device']} (torch 2.15.0, CUDA 13.0), {H100['date']}")
    head, rule, *rows = lines[start + 1:start + 3 + 20]
    assert head.split() == ["precision", "chapter", "status", "seconds", "peak", "GPU", "MiB"]
    assert set(rule) == {"-", " "} and len(rows) == 20
    cells = {(row.split()[0], row.split()[1]): row.split()[2:] for row in rows}
    for precision, chapter, result in ((p, c, r) for p, chapters in saved["nbval"].items()
                                       for c, r in chapters.items()):
        memory = "-" if result["peak_gpu_mib"] is None else f"{result['peak_gpu_mib']:,}"
        assert cells[precision, chapter] == [result["status"], f"{result['seconds']:.0f}", memory]
    assert [row.split()[1] for row in rows[:14]] == sorted(saved["nbval"]["bf16"])  # the book's order
    assert lines[start + 3 + 20] == "19 of 20 passed"
    assert any(line.endswith(f"results merged into {out}") for line in lines)


def test_jobs_default_to_one_per_two_cores_at_most_eight():
    assert [gpu_chapters.default_jobs(c) for c in (1, 2, 5, 16, 64)] == [1, 1, 2, 8, 8]


def test_make_test_gpu_and_the_gpu_queue_call_the_same_entry():
    """The queue's gpu_check step is `make test-gpu`'s command, but for where the JSON goes."""
    import re

    from tools.env import gpu_plan

    makefile = (gpu_chapters.ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^test-gpu:.*\n\t\$\(BIN\)/python (.+)$", makefile, re.M).group(1).split()
    queue = list(gpu_plan.BY_NAME["gpu_check"].argv[1:])  # after {py}
    assert recipe[:-1] == [*queue[:-1], "$(GPU_RESULTS)"] and recipe[-1] == "$(GPU_FLAGS)", (recipe, queue)
    assert queue[-2:] == ["--out", "{out}/gpu_nbval.json"]
    assert "--allow-cpu" not in queue and "--allow-cpu" in gpu_plan.BY_NAME["gpu_check"].dry_argv
