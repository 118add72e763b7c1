"""Chapter notebooks side by side on one GPU machine, each in its own process.

    python -m tools.env.gpu_chapters check --out results.json                 # every chapter, nbval
    python -m tools.env.gpu_chapters check --t4-path --out results.json     # + fp16 of chapters 5-10
    python -m tools.env.gpu_chapters execute ch05_encoder_decoder ch06_bleu --out DIR

``check --t4-path`` is ``make test-gpu`` (any CUDA GPU: a workstation's, one rented for a short
time) and the GPU queue's ``gpu_check`` step (``tools.env.gpu_plan``): one entry for both. It
refuses to start without a CUDA GPU (exit status ``NO_CUDA_EXIT``, a message that says why and
what to run instead) unless ``--allow-cpu`` is given (the queue's dry run, the tests), and ends
with a table per precision and chapter: passed or not, seconds, peak GPU memory.

``check`` runs each notebook under nbval (``--nbval-lax``, the fast profile unless ``--profile``
says otherwise) and merges, per precision, each chapter's result into ``results.json``: passed
or failed (the failing cell and its error), seconds, and the peak GPU memory its kernel held.
``execute`` runs chapters in the full profile through ``tools.book.executed execute`` (their
notebooks, outputs included, go to ``DIR`` for ``tools.book.executed store``).

Why side by side: the book's models are small, so a step is mostly Python dispatching kernels
(the op term of ``xfl.estimate``), which runs on the CPU; the GPU machine has 16 cores and one
GPU that one such notebook leaves idle most of the time. ``--jobs`` notebooks run at once
(longest expected first), each with ``cores / jobs`` threads. A job still running at
``XFL_DEADLINE`` is stopped and recorded as ``timeout``; one not started by then as ``not run``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tools.book.executed import toc_chapters
from xfl.atomic_files import write_text_atomic
from xfl.train import deadline_from_env

ROOT = Path(__file__).resolve().parents[2]
WATCHER = Path(__file__).with_name("gpu_memory_watch.py")
TRAINING = ("ch05_encoder_decoder", "ch06_bleu", "ch06_decoding", "ch07_vit", "ch09_gpt", "ch10_modern")
BANNER_FAST = re.compile(r"run_banner\(fast_minutes=([\d.]+)")
ESTIMATES = ROOT / "bench" / "results" / "t4_estimate.json"
CELL_TIMEOUT_S = 600
NO_CUDA_EXIT = 3  # `check` without a CUDA GPU (1: a notebook did not pass; 2: argparse's usage error)


@dataclass(frozen=True)
class Job:
    """One notebook run: ``path`` (``chapters/<folder>/<name>``, no suffix), in ``precision``
    (``auto``: the device's own choice), checked by nbval or executed for storing."""

    path: str
    precision: str = "auto"
    mode: str = "check"  # or "execute"
    profile: str = "fast"

    @property
    def chapter(self) -> str:
        """The chapter's folder (``ch05_encoder_decoder``); another notebook's name."""
        parts = Path(self.path).parts
        return parts[1] if parts[0] == "chapters" else parts[-1]

    def argv(self, out: Path, junit: Path) -> list[str]:
        notebook = f"{self.path}.ipynb"
        if self.mode == "execute":
            return [sys.executable, "-m", "tools.book.executed", "execute", notebook, "--out", str(out)]
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                f"--nbval-cell-timeout={CELL_TIMEOUT_S}", f"--junitxml={junit}", notebook]

    def env(self, threads: int, memory_file: Path, ipython_dir: Path) -> dict:
        env = {**os.environ, "XFL_PROFILE": self.profile, "OMP_NUM_THREADS": str(threads),
               "XFL_GPU_MEMORY_FILE": str(memory_file), "IPYTHONDIR": str(ipython_dir),
               "PYTHONUNBUFFERED": "1"}
        env.pop("XFL_FAST", None)  # XFL_PROFILE decides
        env.pop("XFL_PRECISION", None)
        if self.precision != "auto":
            env["XFL_PRECISION"] = self.precision
        if env.get("XFL_CHECKPOINT_DIR"):  # notebooks side by side must not resume each other's runs
            env["XFL_CHECKPOINT_DIR"] = str(Path(env["XFL_CHECKPOINT_DIR"]) / f"{self.chapter}-{self.precision}")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        return env


def chapter_paths(names: list[str] | None = None, training: bool = False) -> list[str]:
    """The book's chapters (``_toc.yml`` order) named by folder (``ch05_encoder_decoder``), or
    notebook paths given as they are; all of them, or the training chapters, when none are named."""
    book = {Path(p).parts[1]: p for p in toc_chapters()}
    if not names:
        return [p for name, p in book.items() if not training or name in TRAINING]
    unknown = [n for n in names if n not in book and not Path(f"{n}.ipynb").exists()]
    if unknown:
        raise SystemExit(f"not a chapter folder of _toc.yml nor a notebook path: {unknown}; "
                         f"expected some of {sorted(book)}")
    return [book.get(n, n) for n in names]


def expected_minutes(job: Job) -> float:
    """Minutes the job should take: the fast profile's from the chapter's banner, the full
    profile's from the H100 estimate (``bench/results/t4_estimate.json``), 1 where neither says."""
    if job.profile == "full" and ESTIMATES.exists():
        chapters = json.loads(ESTIMATES.read_text())["chapters"]
        return chapters.get(job.chapter, {}).get("h100_minutes", 1.0)
    source = ROOT / f"{job.path}.md"
    found = BANNER_FAST.search(source.read_text(encoding="utf-8")) if source.exists() else None
    return float(found.group(1)) if found else 1.0


def first_failure(junit: Path) -> tuple[str | None, str | None]:
    """(failing cell, its error) of nbval's JUnit report, or (None, None) where every cell passed."""
    if not junit.exists():
        return "no report", "pytest wrote no JUnit report (it did not start, or was killed)"
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        for bad in (*case.findall("failure"), *case.findall("error")):
            text = (bad.text or bad.get("message") or "").strip()
            return case.get("name"), text[-1500:]
    return None, None


def device_info() -> dict:
    """The GPU (or CPU), torch and CUDA versions, the precision ``auto`` means here, the date."""
    import torch

    from xfl.precision import choose_precision
    from xfl.runtime import default_device, device_name

    device = default_device()
    return {"device": device_name(device), "torch": torch.__version__, "cuda": torch.version.cuda,
            "auto_precision": str(choose_precision(device)), "cores": os.cpu_count(),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def cuda_problem() -> str | None:
    """Why this machine cannot run ``check`` on a CUDA GPU, or None where it can."""
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a build without CUDA"
    return f"torch {torch.__version__} (built for CUDA {torch.version.cuda}) finds no CUDA device"


def no_cuda_message(problem: str) -> str:
    """What ``make test-gpu`` says on a machine without a CUDA GPU, and what to run instead."""
    return (f"make test-gpu: no CUDA GPU on this machine: {problem}.\n"
            "It runs every chapter under nbval on a CUDA GPU (a workstation's, or a GPU rented for a "
            "short time), in the GPU's own precision and again in fp16, the path of Colab's free T4.\n"
            "Without one: `make test` runs every chapter on the CPU (fast profile), and a chapter's "
            "Colab button runs it on Colab's free T4 (Runtime > Change runtime type > T4 GPU).")


def default_jobs(cores: int | None = None) -> int:
    """Notebooks at once: one per two cores, at most 8 (8 on the 16 cores of an H100 machine)."""
    return max(1, min(8, (cores if cores is not None else os.cpu_count() or 1) // 2))


def by_precision(results: dict[Job, dict], device: dict) -> dict[str, dict[str, dict]]:
    """``{precision: {chapter: result}}``, as ``check`` merges them into its JSON under ``nbval``."""
    nested: dict[str, dict[str, dict]] = {}
    for job, result in sorted(results.items(), key=lambda item: item[0].chapter):  # the book's order
        nested.setdefault(precision_name(job.precision, device), {})[job.chapter] = result
    return nested


def table(nbval: dict[str, dict[str, dict]], device: dict) -> str:
    """One row per precision and chapter: its status, seconds and peak GPU memory (MiB), then the
    count that passed; ``nbval`` is ``by_precision``'s shape (or the JSON's ``nbval`` section)."""
    rows = [(precision, chapter, r["status"], f"{r['seconds']:.0f}",
             "-" if r.get("peak_gpu_mib") is None else f"{r['peak_gpu_mib']:,}")
            for precision, chapters in nbval.items() for chapter, r in chapters.items()]
    head = ("precision", "chapter", "status", "seconds", "peak GPU MiB")
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head))]

    def line(row: tuple[str, ...]) -> str:  # text left-aligned, numbers right-aligned
        return "  ".join(f"{cell:>{w}}" if i >= 3 else f"{cell:<{w}}"
                         for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
    passed = sum(row[2] == "passed" for row in rows)
    cuda = f"CUDA {device['cuda']}" if device.get("cuda") else "no CUDA"
    return "\n".join([f"{device['device']} (torch {device['torch']}, {cuda}), {device['date']}",
                      line(head), line(tuple("-" * w for w in widths)), *map(line, rows),
                      f"{passed} of {len(rows)} passed"])


def _ipython_dir(folder: Path) -> Path:
    startup = folder / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    shutil.copy(WATCHER, startup / "00-xfl-gpu-memory.py")
    return folder


def _result(job: Job, code: int | None, seconds: float, junit: Path, memory_file: Path, log: str) -> dict:
    """Passed, failed (the failing cell and its error), or timeout: killed at the deadline, or a
    training run in it stopped by ``XFL_DEADLINE`` (``xfl.train.DeadlineReached``)."""
    if code is None:
        status, cell, error = "timeout", None, "stopped at the deadline"
    elif code == 0:
        status, cell, error = "passed", None, None
    else:
        cell, error = first_failure(junit) if job.mode == "check" else (None, None)
        status = "timeout" if "DeadlineReached" in f"{error}{log}" else "failed"
    peak = int(memory_file.read_text()) if memory_file.exists() else None
    result = {"status": status, "seconds": round(seconds, 1),
              "peak_gpu_mib": None if peak is None else round(peak / 2**20)}
    if status != "passed":
        result.update(failed_cell=cell, error=error, log_tail=log[-1500:])
    return result


def run_jobs(jobs: list[Job], out: Path, workers: int, deadline: float | None,
             on_result=lambda job, result: None) -> dict[Job, dict]:
    """Run ``jobs`` ``workers`` at a time, longest expected first, until they end or ``deadline``."""
    pending = sorted(jobs, key=expected_minutes, reverse=True)
    threads = max(1, (os.cpu_count() or 1) // max(1, min(workers, len(jobs))))
    results, running = {}, {}
    with tempfile.TemporaryDirectory(prefix="xfl-gpu-chapters-") as scratch:
        scratch = Path(scratch)
        ipython_dir = _ipython_dir(scratch / "ipython")
        while pending or running:
            late = deadline is not None and time.time() >= deadline
            while pending and len(running) < workers and not late:
                job = pending.pop(0)
                tag = f"{job.chapter}-{job.precision}-{len(results) + len(running)}"
                junit, memory = scratch / f"{tag}.xml", scratch / f"{tag}.mib"
                log = open(scratch / f"{tag}.log", "w")
                process = subprocess.Popen(job.argv(out, junit), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                           env=job.env(threads, memory, ipython_dir), start_new_session=True)
                running[job] = (process, time.time(), junit, memory, log)
                print(f"[chapters] {job.chapter} ({job.precision}, {job.mode}): start", flush=True)
            for job, (process, began, junit, memory, log) in list(running.items()):
                code = process.poll()
                if code is None and not late:
                    continue
                if code is None:
                    os.killpg(process.pid, 9)
                    process.wait()
                log.close()
                text = Path(log.name).read_text(errors="replace")
                results[job] = _result(job, code, time.time() - began, junit, memory, text)
                del running[job]
                print(f"[chapters] {job.chapter} ({job.precision}): {results[job]['status']} in "
                      f"{results[job]['seconds']:.0f} s", flush=True)
                on_result(job, results[job])
            if late:
                for job in pending:
                    results[job] = {"status": "not run", "seconds": 0.0, "peak_gpu_mib": None}
                    on_result(job, results[job])
                pending = []
            time.sleep(0.5)
    return results


def merge(path: Path, keys: tuple[str, ...], value: dict, device: dict) -> None:
    """Put ``value`` at ``keys`` (nested) in the JSON file ``path`` (written atomically), and the
    device it ran on under ``devices``."""
    data = json.loads(path.read_text()) if path.exists() else {}
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    data.setdefault("devices", {})[device["device"]] = device
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def precision_name(precision: str, device: dict) -> str:
    """``auto`` as the device resolves it (``bf16`` on an H100, ``fp32`` on a CPU)."""
    return device["auto_precision"].split()[0] if precision == "auto" else precision


def check(paths: list[str], precisions: list[str], out: Path, workers: int, deadline: float | None,
          profile: str = "fast", t4_path: bool = False) -> dict[Job, dict]:
    """nbval on ``paths`` in each of ``precisions`` (``t4_path``: the training chapters among them
    in fp16 too); results merged into ``out`` as they come, under ``nbval/<precision>/<chapter>``."""
    device = device_info()
    out.parent.mkdir(parents=True, exist_ok=True)
    jobs = [Job(p, precision, "check", profile) for precision in precisions for p in paths]
    if t4_path and "fp16" not in precisions:
        jobs += [Job(p, "fp16", "check", profile) for p in paths if Path(p).parts[-2] in TRAINING]

    def record(job: Job, result: dict) -> None:
        name = precision_name(job.precision, device)
        merge(out, ("nbval", name, job.chapter), {**result, "profile": job.profile,
                                                       "device": device["device"], "date": device["date"]}, device)
    return run_jobs(jobs, out.parent, workers, deadline, record)


def execute(paths: list[str], out: Path, workers: int, deadline: float | None,
            profile: str = "full") -> dict[Job, dict]:
    """``tools.book.executed execute`` on ``paths``, notebooks to ``out``; a summary in
    ``out/executed.json``."""
    device = device_info()
    out.mkdir(parents=True, exist_ok=True)
    jobs = [Job(p, "auto", "execute", profile) for p in paths]
    return run_jobs(jobs, out, workers, deadline,
                    lambda job, result: merge(out / "executed.json", ("executed", job.chapter), result, device))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("check", "execute"):
        command = commands.add_parser(name)
        command.add_argument("chapters", nargs="*", help="chapter folders or notebook paths (default: all)")
        command.add_argument("--out", type=Path, required=True,
                             help="check: the results JSON; execute: the notebooks' folder")
        command.add_argument("--jobs", type=int, default=default_jobs(),
                             help=f"notebooks at once (default {default_jobs()}: one per two cores, at most 8)")
        command.add_argument("--training", action="store_true", help="only the training chapters")
        command.add_argument("--profile", default="fast" if name == "check" else "full",
                             choices=("fast", "cpu", "full"))
    commands.choices["check"].add_argument("--precision", nargs="+", default=["auto"],
                                           choices=("auto", "bf16", "fp16", "fp32"))
    commands.choices["check"].add_argument("--t4-path", action="store_true",
                                           help="also the training chapters in fp16 (the T4's path)")
    commands.choices["check"].add_argument("--allow-cpu", action="store_true",
                                           help="run without a CUDA GPU (the queue's dry run, tests)")
    args = parser.parse_args(argv)
    paths = chapter_paths(args.chapters, args.training)
    if args.command == "check":
        problem = None if args.allow_cpu else cuda_problem()
        if problem:
            print(no_cuda_message(problem), file=sys.stderr)
            return NO_CUDA_EXIT
        results = check(paths, args.precision, args.out, args.jobs, deadline_from_env(), args.profile,
                        args.t4_path)
        device = device_info()
        print(table(by_precision(results, device), device))
        print(f"[chapters] results merged into {args.out}")
    else:
        results = execute(paths, args.out, args.jobs, deadline_from_env(), args.profile)
    bad = {f"{job.chapter} ({job.precision})": r["status"] for job, r in results.items() if r["status"] != "passed"}
    print(f"[chapters] {len(results) - len(bad)} of {len(results)} passed" + (f"; not passed: {bad}" if bad else ""))
    if any(r["status"] in ("timeout", "not run") for r in results.values()):
        print("DeadlineReached: XFL_DEADLINE stopped notebooks or left them unstarted (tools.env.gpu_plan: resume)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
