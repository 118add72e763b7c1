"""One plan for a lent GPU machine: a named list of steps (benchmarks, chapters in the full
profile, the T4 precision path), run in calls of at most 9 minutes, each call going on where the
last one stopped.

    python -m tools.env.gpu_plan list recipes                       # its steps, minutes expected on an H100
    python -m tools.env.gpu_plan run recipes --out $OUT             # one call: steps until its time is up
    python -m tools.env.gpu_plan run recipes --dry-run --out DIR    # the same plan on the CPU, tiny budgets

Each step runs as its own process with ``XFL_DEADLINE`` (this call's end, less a margin) and
``XFL_CHECKPOINT_DIR`` (the step's folder under the state folder): a training run still going at
the deadline saves a checkpoint and stops (``xfl.train.DeadlineReached``), and the next call runs
the step again, which resumes it. The state (``state.json`` in ``--state``, default
``build/plan``; written atomically after every step and copied into ``--out``) says per step
``done``, ``resume`` or ``failed``, with its seconds and calls. Results go to ``--out`` as they
come: the benchmarks' JSON, the chapters' executed notebooks (``tools.book.executed execute``; store
them here with ``tools.book.executed store``). A call starts no step with less than ``MIN_START_S``
left, nor once ``--out`` holds ``MAX_OUT_FILES`` files (the device tool returns 8).
The device calls, in order: DEVELOPERS.md, "Running chapters on the lent GPU machine".
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
from pathlib import Path

from tools.book.executed import toc_chapters
from xfl.atomic_files import write_text_atomic

ROOT = Path(__file__).resolve().parents[2]
CALL_S = 540  # one call: 9 minutes, inside the device tool's 10
MARGIN_S = 45  # the deadline comes this long before the call's end: a checkpoint, a clean exit
MIN_START_S = 60  # a step is not started with less than this left
MAX_OUT_FILES = 7  # + state.json = the 8 files a device call returns
MAX_CALLS = 4  # a step still unfinished after this many calls is marked failed


@dataclass(frozen=True)
class Step:
    """One step: a command (``{out}`` is the output folder), its dry-run variant, extra
    environment, and the minutes expected on an H100 (an estimate until a run records them)."""

    name: str
    argv: tuple[str, ...]
    dry_argv: tuple[str, ...]
    minutes: float
    env: dict = field(default_factory=dict)
    start_s: float = MIN_START_S  # seconds it needs before its training starts (data, compiling)


def bench(name: str, minutes: float, args: tuple = (), dry: tuple = (), env: dict | None = None,
          module: str | None = None, start_s: float = MIN_START_S) -> Step:
    """A benchmark step writing ``{out}/<name>.json``."""
    argv = (sys.executable, "-m", f"bench.{module or name}", *args, "--out", f"{{out}}/{name}.json")
    dry_argv = (sys.executable, "-m", f"bench.{module or name}", "--smoke", *dry, "--out", f"{{out}}/{name}.json")
    return Step(name, argv, dry_argv, minutes, env or {}, start_s)


def chapter(path: str, minutes: float) -> Step:
    """A chapter executed in the full profile (the dry run: the fast one), its notebook to ``{out}``."""
    argv = (sys.executable, "-m", "tools.book.executed", "execute", f"{path}.ipynb", "--out", "{out}")
    return Step(Path(path).parts[1], argv, argv, minutes)


VIT = [bench("vit", 11.5, ("--quiet",), ("--budget", "2", "--quiet"), start_s=150),
       bench("vit_fp16", 1.5, ("--quiet", "--budget", "60"), ("--budget", "1", "--quiet"),
             env={"XFL_PRECISION": "fp16"}, module="vit")]  # the T4's path: fp16 + gradient scaler
TRANSLATE = [bench("translate", 16.0, ("--no-timings", "--no-progress"),
                   ("--budget", "2", "--no-timings", "--no-progress"), start_s=300)]
MINUTES = {"ch05_encoder_decoder": 5.0, "ch06_bleu": 9.0, "ch07_vit": 21.0, "ch09_gpt": 6.0}  # H100 guesses
CHAPTERS = [chapter(path, MINUTES.get(Path(path).parts[1], 1.0)) for path in toc_chapters()]
BY_NAME = {step.name: step for step in VIT + TRANSLATE + CHAPTERS}
SHORT = [s.name for s in CHAPTERS if s.minutes <= 1.0]
# Sessions of about 28 minutes of device time each (DEVELOPERS.md), the recipes first:
SESSIONS = [["vit", "vit_fp16", *SHORT], ["translate", "ch05_encoder_decoder"], ["ch07_vit"],
            ["ch06_bleu", "ch09_gpt"]]
PLANS = {"recipes": VIT + TRANSLATE, "chapters": CHAPTERS, "all": VIT + TRANSLATE + CHAPTERS,
         **{f"session{i}": [BY_NAME[n] for n in names] for i, names in enumerate(SESSIONS, 1)}}


# ------------------------------------------------------------------------------ state
def read_state(folder: Path, plan: str) -> dict:
    path = folder / "state.json"
    state = json.loads(path.read_text()) if path.exists() else {"plan": plan, "steps": {}}
    if state["plan"] != plan:
        raise SystemExit(f"{path} belongs to plan {state['plan']!r}, not {plan!r}: use another --state")
    return state


def write_state(folder: Path, state: dict, out: Path) -> None:
    text = json.dumps(state, indent=2) + "\n"
    write_text_atomic(folder / "state.json", text)
    write_text_atomic(out / "state.json", text)


# ------------------------------------------------------------------------------- steps
def outcome(returncode: int | None, output: str) -> str:
    """``done``, ``resume`` (stopped at the deadline or by the call's end) or ``failed``."""
    if returncode == 0:
        return "done"
    return "resume" if returncode is None or "DeadlineReached" in output else "failed"


def run_step(step: Step, folder: Path, out: Path, deadline: float, dry_run: bool) -> tuple[str, str]:
    """Run ``step`` until it ends or the call does; returns its outcome and its output's tail."""
    argv = [a.replace("{out}", str(out)) for a in (step.dry_argv if dry_run else step.argv)]
    env = {**os.environ, **step.env, "XFL_DEADLINE": str(deadline), "PYTHONUNBUFFERED": "1",
           "XFL_CHECKPOINT_DIR": str(folder / "checkpoints" / step.name), "XFL_FAST": "1" if dry_run else "0"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    try:
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=max(deadline + MARGIN_S - time.time(), 1))
        code, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as stopped:
        code, text = None, str(stopped.stdout or "") + str(stopped.stderr or "")
    result = outcome(code, text)
    if result == "resume":  # a partly run notebook is no result: keep the slot for one
        for partial in out.glob("*.failed.ipynb"):
            partial.unlink()
    return result, text[-2000:]


def pending(plan: list[Step], state: dict) -> list[Step]:
    return [s for s in plan if state["steps"].get(s.name, {}).get("status") not in ("done", "failed")]


def run_call(name: str, folder: Path, out: Path, call_s: float, dry_run: bool,
             min_start_s: float = float("inf")) -> dict:
    """One call: run the plan's pending steps while time and output slots last."""
    began = time.time()
    deadline = began + call_s - MARGIN_S
    folder.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    state = read_state(folder, name)
    for step in pending(PLANS[name], state):
        if deadline - time.time() < min(min_start_s, step.start_s) or len(list(out.iterdir())) >= MAX_OUT_FILES:
            break
        record = state["steps"].setdefault(step.name, {"seconds": 0.0, "calls": 0})
        start = time.time()
        print(f"[plan] {step.name}: start ({record['calls']} earlier calls)", flush=True)
        record["status"], tail = run_step(step, folder, out, deadline, dry_run)
        record["seconds"] += round(time.time() - start, 1)
        record["calls"] += 1
        if record["status"] == "resume" and record["calls"] >= MAX_CALLS:
            record["status"] = "failed"
        if record["status"] != "done":
            record["tail"] = tail
        print(f"[plan] {step.name}: {record['status']} after {record['seconds']:.0f} s in "
              f"{record['calls']} call(s); its output ends:\n{tail[-600:]}", flush=True)
        write_state(folder, state, out)
        if record["status"] == "resume":
            break  # the call's time is up
    left = [s.name for s in pending(PLANS[name], state)]
    print(f"[plan] {name}: " + (f"next call starts at {left[0]} ({len(left)} steps left)" if left else "finished"))
    write_state(folder, state, out)
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("list", help="the steps of a plan and their expected minutes")
    show.add_argument("plan", choices=sorted(PLANS))
    go = commands.add_parser("run", help="one call of a plan")
    go.add_argument("plan", choices=sorted(PLANS))
    go.add_argument("--out", type=Path, required=True, help="where results go ($OUT on the device)")
    go.add_argument("--state", type=Path, default=ROOT / "build" / "plan", help="state and checkpoints")
    go.add_argument("--call-seconds", type=float, default=CALL_S, help=f"this call's length (default {CALL_S})")
    go.add_argument("--dry-run", action="store_true", help="the same steps on the CPU with tiny budgets")
    go.add_argument("--min-start", type=float, default=float("inf"),
                    help="start a step with at least this many seconds left (default: what it needs)")
    args = parser.parse_args(argv)
    if args.command == "list":
        for step in PLANS[args.plan]:
            print(f"{step.name:28} {step.minutes:5.1f} min  {' '.join(step.argv[1:])}")
        print(f"{'total':28} {sum(s.minutes for s in PLANS[args.plan]):5.1f} min (H100 estimates)")
        return 0
    state = run_call(args.plan, args.state, args.out, args.call_seconds, args.dry_run, args.min_start)
    return 1 if any(s.get("status") == "failed" for s in state["steps"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
