"""The queue of GPU work, in priority order, that every lent GPU window continues.

A GPU window is 15 minutes of device time (the machine's start included), at most 10 per call,
64 MiB carried per call, the machine's disk bare 30 s after a call. So each step of the queue
fits one call of ``CALL_S``; a window is the queue's next steps that fit one call, plus the calls
that carry CIFAR-10 first where a step reads it. The queue's state is ``bench/results/gpu_queue.json``
in this repository (it travels with the working tree); each call returns the updated state and
``record`` here brings it, and the results, back.

    python -m tools.env.gpu_plan list                  # the queue, each step's state and minutes
    python -m tools.env.gpu_plan next                  # the next window: what to stage, each call
    python -m tools.env.gpu_plan stage                 # here: build/carry/ from ../shared/data
    python3 -m tools.env.gpu_plan window --out $OUT    # there: install, stage, run the window
    python -m tools.env.gpu_plan record FILES_AT       # here: state and results into the repository
    python -m tools.env.gpu_plan window --dry-run --out DIR   # the whole queue on the CPU, tiny

Each step runs as its own process with ``XFL_DEADLINE`` (the call's end less ``MARGIN_S``) and
``XFL_CHECKPOINT_DIR``: a training run still going at the deadline saves a checkpoint and stops
(``xfl.train.DeadlineReached``), and the step is ``resume``: a next call on the same warm machine
resumes it, a later window runs it again from its start. A call starts a step other than its
first only if the step's expected minutes fit what is left.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from xfl.atomic_files import write_text_atomic

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / "bench" / "results" / "gpu_queue.json"
RESULTS = ROOT / "bench" / "results"
CALL_S = 570  # one call: 9.5 minutes, inside the device tool's 10
MARGIN_S = 45  # the deadline comes this long before the call's end: a checkpoint, a clean exit
START_MINUTES = 1.5  # the machine's start, counted in the window
CARRY_CALL_MINUTES = 0.5  # one call that only carries two CIFAR-10 batches
WINDOW_MINUTES = 13.0  # what a window plans for, of its 15
MAX_OUT_FILES = 7  # + the state = the 8 files a device call returns
CARRY_LIMIT_MIB = 64  # what one call sends, the working tree included
PY = "python3"  # the GPU machine's Python (sys.executable in a dry run)
SHARED_DATA = ROOT.parent / "shared" / "data"
TMP = Path("/tmp")


@dataclass(frozen=True)
class Step:
    """One step: a command (``{py}`` the Python, ``{out}`` the output folder), its dry-run
    variant, the issue it serves, the minutes expected on an H100 (an estimate until the state
    records a run), and the data it reads (``text``: Tatoeba; ``cifar``: CIFAR-10)."""

    name: str
    issue: int
    argv: tuple[str, ...]
    dry_argv: tuple[str, ...]
    minutes: float
    needs: tuple[str, ...] = ("text",)
    env: dict = field(default_factory=dict)

    def command(self, out: Path, dry_run: bool, python: str) -> list[str]:
        return [a.replace("{out}", str(out)).replace("{py}", python)
                for a in (self.dry_argv if dry_run else self.argv)]


TINY = "tests/fixtures/gpu_queue/tiny"  # a two-cell notebook: the dry run's chapter
CHAPTERS = ("{py}", "-m", "tools.env.gpu_chapters")
QUEUE = [
    # issue 44: every chapter under nbval in the fast profile, the device's bf16 + compile rule,
    # and the training chapters again in fp16 (the T4's path), 8 notebooks at a time: the same
    # command as `make test-gpu` (tests/test_gpu_chapters.py keeps the two in step)
    Step("gpu_check", 44, (*CHAPTERS, "check", "--t4-path", "--out", "{out}/gpu_nbval.json"),
         (*CHAPTERS, "check", TINY, "--t4-path", "--jobs", "2", "--allow-cpu",
          "--out", "{out}/gpu_nbval.json"),
         5.5, ("text", "cifar")),
    # issue 44: 50 steps of each training chapter's full-profile model and batch, bf16 and fp16
    Step("gpu_steps", 44, ("{py}", "-m", "bench.gpu_steps", "--out", "{out}/gpu_nbval.json"),
         ("{py}", "-m", "bench.gpu_steps", "--smoke", "--out", "{out}/gpu_nbval.json"), 3.0, ()),
    # issues 49 and 50: the two benchmarks, 7 minutes of training each
    Step("translate", 49, ("{py}", "-m", "bench.translate", "--budget", "420", "--no-timings",
                           "--no-progress", "--out", "{out}/translate.json"),
         ("{py}", "-m", "bench.translate", "--smoke", "--budget", "2", "--no-timings", "--no-progress",
          "--out", "{out}/translate.json"), 8.5),
    Step("vit", 50, ("{py}", "-m", "bench.vit", "--budget", "420", "--quiet", "--out", "{out}/vit.json"),
         ("{py}", "-m", "bench.vit", "--smoke", "--budget", "2", "--quiet", "--out", "{out}/vit.json"),
         8.5, ("cifar",)),
    # issue 51: the full profile of the training chapters, two or three side by side, stored
    Step("text_chapters_a", 51, (*CHAPTERS, "execute", "ch05_encoder_decoder", "ch06_bleu", "ch06_decoding",
                                   "--out", "{out}"),
         (*CHAPTERS, "execute", TINY, "--profile", "fast", "--out", "{out}"), 8.5),
    Step("text_chapters_b", 51, (*CHAPTERS, "execute", "ch09_gpt", "ch10_modern", "--out", "{out}"),
         (*CHAPTERS, "execute", TINY, "--profile", "fast", "--out", "{out}"), 6.5),
    Step("vision_chapters", 51, (*CHAPTERS, "execute", "ch00_data", "ch07_vit", "ch08_pixel", "--out", "{out}"),
         (*CHAPTERS, "execute", TINY, "--profile", "fast", "--out", "{out}"), 7.0, ("text", "cifar")),
    # issue 47: chapter 11's full profile on the GPU (SDPA's kernels in bf16, up to 16k tokens), stored
    Step("attention_chapter", 47, (*CHAPTERS, "execute", "ch11_attention_at_scale", "--out", "{out}"),
         (*CHAPTERS, "execute", TINY, "--profile", "fast", "--out", "{out}"), 3.0),
    # issue 69: the Triton FlashAttention kernels against SDPA's flash and efficient kernels and
    # the PyTorch tiles, forward and forward + backward, 1k to 16k tokens (the dry run: the interpreter)
    Step("flash_triton", 69, ("{py}", "-m", "bench.flash_triton", "--out", "{out}/flash_triton.json"),
         ("{py}", "-m", "bench.flash_triton", "--smoke", "--out", "{out}/flash_triton.json"), 4.0, ()),
]
PRIORITY = (44, 49, 50, 51, 47, 69)  # the queue's order: issues 44, 49, 50 and 51 first, as they ask
BY_NAME = {step.name: step for step in QUEUE}


def chapters_of(step: Step) -> list[str]:
    """The chapter folders a step names (``ch05_encoder_decoder``, ...); none: every chapter."""
    return [a for a in step.argv if a[:2] == "ch" and a[2:4].isdigit()]
CIFAR_CALLS = {"cifar1": ("data_batch_1", "data_batch_2"), "cifar2": ("data_batch_3", "data_batch_4"),
               "cifar3": ("data_batch_5", "test_batch", "batches.meta")}


# ------------------------------------------------------------------------------ state
def read_state(path: Path = STATE) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"steps": {}}


def write_state(state: dict, *paths: Path) -> None:
    text = json.dumps(state, indent=2, sort_keys=True) + "\n"
    for path in paths:
        write_text_atomic(path, text)


def pending(state: dict) -> list[Step]:
    return [s for s in QUEUE if state["steps"].get(s.name, {}).get("status") != "done"]


# ---------------------------------------------------------------------------- windows
def windows(steps: list[Step]) -> list[list[Step]]:
    """The steps grouped, in order, into windows: each one call of at most ``CALL_S`` (less its
    margin) of expected minutes, its CIFAR calls and the start within ``WINDOW_MINUTES``."""
    usable = (CALL_S - MARGIN_S) / 60
    groups: list[list[Step]] = []
    for step in steps:
        group = groups[-1] if groups else None
        if group and sum(s.minutes for s in group) + step.minutes <= usable and \
                window_minutes(group + [step]) <= WINDOW_MINUTES:
            group.append(step)
        else:
            groups.append([step])
    return groups


def window_minutes(steps: list[Step]) -> float:
    """Expected device minutes of a window running ``steps``: the start, the CIFAR calls, the run."""
    cifar = any("cifar" in s.needs for s in steps)
    return START_MINUTES + (len(CIFAR_CALLS) * CARRY_CALL_MINUTES if cifar else 0) + \
        max(sum(s.minutes for s in steps), 1.0)


def calls(steps: list[Step]) -> list[dict]:
    """The device calls of a window running ``steps``: what each carries and runs."""
    plan = []
    if any("cifar" in s.needs for s in steps):
        for name in CIFAR_CALLS:
            plan.append({"carry": [f"build/carry/{name}"], "timeout_s": 120,
                         "command": f"python3 -m tools.env.gpu_plan carry build/carry/{name}"})
    plan.append({"carry": ["build/wheels", "build/carry/text"], "timeout_s": CALL_S + 20,
                 "command": "python3 -m tools.env.gpu_plan window --out $OUT"})
    return plan


# --------------------------------------------------------------------- on the machine
def carry(folder: Path, data: Path) -> int:
    """Copy a carried CIFAR folder into the data mirror; the number of CIFAR files there now."""
    cifar = data / "cifar-10-batches-py"
    cifar.mkdir(parents=True, exist_ok=True)
    for file in folder.iterdir():
        shutil.copy(file, cifar / file.name)
    count = len(list(cifar.iterdir()))
    print(f"{count} of 7 CIFAR-10 files in {cifar}")
    return count


def install(wheels: Path, site: Path, text: Path, data: Path) -> None:
    """Install the carried wheels into ``site`` (once per machine) and put the text data in place."""
    if not site.exists() and wheels.exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        "--no-compile", "--target", str(site), *map(str, sorted(wheels.glob("*.whl")))],
                       check=True)
    if text.exists():
        (data / "tatoeba-spa-eng").mkdir(parents=True, exist_ok=True)
        for file in text.iterdir():
            shutil.copy(file, data / "tatoeba-spa-eng" / file.name)


def missing_data(step: Step, data: Path) -> str | None:
    if "cifar" in step.needs and len(list((data / "cifar-10-batches-py").glob("*"))) < 7:
        return "CIFAR-10 is not all there: make the window's carry calls first (tools.env.gpu_plan next)"
    if "text" in step.needs and not (data / "tatoeba-spa-eng" / "spa-eng.zip").exists():
        return "the Tatoeba zip is not there: carry build/carry/text"
    return None


def outcome(returncode: int | None, output: str) -> str:
    """``done``, ``resume`` (stopped at the deadline or by the call's end) or ``failed``."""
    if returncode == 0:
        return "done"
    return "resume" if returncode is None or "DeadlineReached" in output else "failed"


def run_step(step: Step, out: Path, checkpoints: Path, deadline: float, dry_run: bool,
             python: str, env: dict) -> tuple[str, str]:
    """Run ``step`` until it ends or the call does; returns its outcome and its output's tail."""
    env = {**os.environ, **env, **step.env, "XFL_DEADLINE": str(deadline), "PYTHONUNBUFFERED": "1",
           "XFL_CHECKPOINT_DIR": str(checkpoints / step.name), "XFL_FAST": "1" if dry_run else "0"}
    try:
        done = subprocess.run(step.command(out, dry_run, python), cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=max(deadline + MARGIN_S - time.time(), 1))
        code, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as stopped:
        code, text = None, str(stopped.stdout or "") + str(stopped.stderr or "")
    return outcome(code, text), text[-2000:]


def device() -> str:
    from xfl.runtime import default_device, device_name
    return device_name(default_device())


def run_window(out: Path, state_path: Path, call_s: float, dry_run: bool, data: Path,
               python: str = PY, env: dict | None = None) -> dict:
    """One call: the queue's pending steps in order, while their expected minutes fit."""
    began = time.time()
    deadline = began + call_s - MARGIN_S
    out.mkdir(parents=True, exist_ok=True)
    state = read_state(state_path)
    checkpoints = TMP / "xfl-gpu-queue" / "checkpoints" if not dry_run else out.parent / "checkpoints"
    dry_outcomes = {}  # a dry run's commands already run in this call (the chapter steps share one)
    for number, step in enumerate(pending(state)):
        left = deadline - time.time()
        too_long = number and not dry_run and step.minutes * 60 > left  # the first step always starts
        if too_long or left <= 0 or len(list(out.iterdir())) >= MAX_OUT_FILES:
            break
        record = state["steps"].setdefault(step.name, {"seconds": 0.0, "calls": 0})
        problem = missing_data(step, data)
        start = time.time()
        print(f"[queue] {step.name} (issue {step.issue}): start", flush=True)
        command = tuple(step.command(out, dry_run, python))
        if problem:
            record["status"], tail = "failed", problem
        elif command in dry_outcomes:
            record["status"], tail = dry_outcomes[command], "the same dry-run command as an earlier step"
        else:
            record["status"], tail = run_step(step, out, checkpoints, deadline, dry_run, python,
                                              {**(env or {}), "XFL_DATA_MIRROR": str(data)})
            if dry_run and record["status"] == "done":
                dry_outcomes[command] = "done"
        record.update(seconds=round(record["seconds"] + time.time() - start, 1), calls=record["calls"] + 1,
                      date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), device=device(),
                      dry_run=dry_run, tail=tail[-1500:] if record["status"] != "done" else "")
        print(f"[queue] {step.name}: {record['status']} after {record['seconds']:.0f} s; output ends:\n"
              f"{tail[-600:]}", flush=True)
        write_state(state, state_path, out / "gpu_queue.json")
        if record["status"] == "resume":
            break  # the call's time is up
    left = pending(state)
    print("[queue] " + (f"next: {left[0].name} ({len(left)} steps left)" if left else "finished"))
    write_state(state, state_path, out / "gpu_queue.json")
    return state


# ------------------------------------------------------------------------------- here
def stage(shared: Path = SHARED_DATA, build: Path = ROOT / "build") -> None:
    """``build/carry/``: the Tatoeba zip in ``text``, CIFAR-10 in ``cifar1..3`` (two batches each)."""
    (build / "carry" / "text").mkdir(parents=True, exist_ok=True)
    shutil.copy(shared / "tatoeba-spa-eng" / "spa-eng.zip", build / "carry" / "text" / "spa-eng.zip")
    for name, files in CIFAR_CALLS.items():
        (build / "carry" / name).mkdir(parents=True, exist_ok=True)
        for file in files:
            shutil.copy(shared / "cifar-10-batches-py" / file, build / "carry" / name / file)
    if not (build / "wheels").exists():
        print("build/wheels/ is missing: run `make device-wheels`")
    for call in calls(QUEUE):
        mib = carried_mib(call["carry"], build.parent)
        print(f"{' + '.join(call['carry'])} + the working tree: {mib:.1f} MiB of {CARRY_LIMIT_MIB}")
        if mib > CARRY_LIMIT_MIB:
            raise SystemExit(f"{call['carry']} with the working tree is {mib:.1f} MiB, over the "
                             f"{CARRY_LIMIT_MIB} MiB one call carries")


def carried_mib(carry: list[str], root: Path = ROOT) -> float:
    """MiB a call sends: the working tree's tracked files plus the carried folders."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    files = [root / name for name in tracked.decode().split("\0") if name]
    files += [f for folder in carry for f in (root / folder).rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files if f.exists()) / 2**20


def merge_results(new: dict, old: dict) -> dict:
    """``old`` updated with ``new``, nested dictionaries merged key by key."""
    merged = dict(old)
    for key, value in new.items():
        merged[key] = merge_results(value, old[key]) if isinstance(value, dict) and isinstance(
            old.get(key), dict) else value
    return merged


def record(files_at: Path, results: Path = RESULTS, state_path: Path = STATE) -> list[str]:
    """A window's returned files into the repository: the state; ``gpu_nbval.json`` merged into
    ``bench/results/``; a benchmark's run appended to its file's ``gpu_runs``; executed chapters
    stored (``tools.book.executed store``). Returns what it did, one line each."""
    done = []
    returned = read_state(files_at / "gpu_queue.json")
    if any(r.get("dry_run") for r in returned["steps"].values()):
        raise SystemExit(f"{files_at / 'gpu_queue.json'} records a dry run: not recorded")
    write_state(merge_results(returned, read_state(state_path)), state_path)
    done.append(f"state -> {state_path}")
    if (files_at / "gpu_nbval.json").exists():
        path = results / "gpu_nbval.json"
        old = json.loads(path.read_text()) if path.exists() else {}
        write_text_atomic(path, json.dumps(merge_results(json.loads((files_at / "gpu_nbval.json").read_text()),
                                                         old), indent=2, sort_keys=True) + "\n")
        done.append(f"gpu_nbval.json merged into {path}")
    for name in ("translate", "vit"):
        if (files_at / f"{name}.json").exists():
            path = results / f"{name}.json"
            data = json.loads(path.read_text()) if path.exists() else {}
            data.setdefault("gpu_runs", []).append(json.loads((files_at / f"{name}.json").read_text()))
            write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            done.append(f"{name}.json appended to {path} (gpu_runs)")
    if (files_at / "flash_triton.json").exists():  # issue 69: the newest run replaces the last
        path = results / "flash_triton.json"
        write_text_atomic(path, (files_at / "flash_triton.json").read_text())
        done.append(f"flash_triton.json -> {path}")
    for notebook in sorted(files_at.glob("*.ipynb")):
        if not notebook.name.endswith(".failed.ipynb"):
            from tools.book.executed import store
            done.append(f"{notebook.name} stored as {store(notebook)}")
    return done


def describe_next(state: dict) -> str:
    left = pending(state)
    if not left:
        return "The queue is finished."
    window = windows(left)[0]
    lines = [f"Next window: {', '.join(s.name for s in window)} (issues "
             f"{sorted({s.issue for s in window})}), about {window_minutes(window):.1f} device minutes.",
             "Here first: make device-wheels && python -m tools.env.gpu_plan stage", "Then, back to back:"]
    for number, call in enumerate(calls(window), 1):
        lines.append(f"  call {number}: carry {json.dumps(call['carry'])}, timeout_s {call['timeout_s']}: "
                     f"{call['command']}")
    lines.append("Then: give_back, and python -m tools.env.gpu_plan record <files_at>")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the queue: each step's state and expected minutes")
    commands.add_parser("next", help="the next window's calls")
    commands.add_parser("stage", help="build/carry/ from ../shared/data")
    go = commands.add_parser("window", help="one call of the queue (on the GPU machine)")
    go.add_argument("--out", type=Path, required=True, help="where results go ($OUT on the device)")
    go.add_argument("--state", type=Path, help=f"the queue's state (default {STATE}; a dry run's: "
                                                "gpu_queue.json beside --out, never the repository's)")
    go.add_argument("--call-seconds", type=float, default=CALL_S, help=f"this call's length ({CALL_S})")
    go.add_argument("--dry-run", action="store_true", help="every step's tiny variant, on the CPU")
    go.add_argument("--data", type=Path, default=TMP / "data", help="the data mirror (default /tmp/data)")
    go.add_argument("--site", type=Path, default=TMP / "site", help="where the wheels go (default /tmp/site)")
    load = commands.add_parser("carry", help="a carried CIFAR folder into the data mirror")
    load.add_argument("folder", type=Path)
    load.add_argument("--data", type=Path, default=TMP / "data")
    back = commands.add_parser("record", help="a window's returned files into the repository")
    back.add_argument("files_at", type=Path)
    args = parser.parse_args(argv)
    if args.command == "list":
        state = read_state()
        for step in QUEUE:
            got = state["steps"].get(step.name, {})
            print(f"{step.name:18} issue {step.issue}  {step.minutes:4.1f} min  {got.get('status', 'not run'):8} "
                  f"{got.get('date', '')}")
        return 0
    if args.command == "next":
        print(describe_next(read_state()))
        return 0
    if args.command == "stage":
        stage()
        return 0
    if args.command == "carry":
        return 0 if carry(args.folder, args.data) else 1
    if args.command == "record":
        print("\n".join(record(args.files_at)))
        return 0
    if not args.dry_run:
        install(ROOT / "build" / "wheels", args.site, ROOT / "build" / "carry" / "text", args.data)
    python = sys.executable if args.dry_run else PY
    state_path = args.state or (args.out.parent / "gpu_queue.json" if args.dry_run else STATE)
    path = os.pathsep.join(filter(None, [str(args.site), str(ROOT), os.environ.get("PYTHONPATH")]))
    state = run_window(args.out, state_path, args.call_seconds, args.dry_run, args.data, python,
                       {"PYTHONPATH": path})
    return 1 if any(s.get("status") == "failed" for s in state["steps"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
