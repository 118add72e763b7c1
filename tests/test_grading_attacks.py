"""Malicious notebooks graded in ONE sandboxed run beside honest ones (chapter 1, 4 questions).

Each attack is a cell added to a notebook whose answers are known: the honest grades must not
move, and each attacker must earn exactly what its answers earn. Needs bwrap (``make
sandbox-deps``); without it this file fails, as the grader refuses to grade.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.grading import exercises, grader  # noqa: E402
from tools.grading.sandbox import Limits  # noqa: E402
from test_exercises import FIXTURES, LIMIT, GRACE, submission  # noqa: E402

MARK = "xfl-attack-survivor-7f3a"  # in the detached daemon's command line
MEMORY_MB = 4608  # CUDA PyTorch alone maps ~3.3 GiB of address space: the bomb gets ~1 GiB
LIMITS = Limits(memory_mb=MEMORY_MB, processes=64, output_mb=1)
PARTLY_WRONG = FIXTURES["partly_wrong"][1]  # q1 2/3, the rest full: 11/12

STEAL = '''
import json, pathlib
found = []
for path in map(pathlib.Path, {targets!r}):
    try:
        cells = json.loads(path.read_text())["cells"]
    except OSError:
        continue
    found.append(str(path))
    for cell in cells:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if "def " in src and "grader.check" not in src and "otter" not in src:
            exec(src, globals())
print("stole from", found)
'''
TAMPER = '''
import glob, os, pathlib
touched = []
for target in glob.glob("/tmp/xfl-autograder-*/**/*.py", recursive=True) + glob.glob("/tmp/xfl-grade-*/*") + {targets!r}:
    path = pathlib.Path(target)
    for attempt in (lambda: path.write_text("points = 99"), lambda: os.remove(path),
                    lambda: (path.parent / "planted.txt").write_text("was here")):
        try:
            attempt(); touched.append(target)
        except OSError:
            pass
print("touched", touched)
'''
KILL_PARENT = '''
import os, signal
for pid in {{os.getppid(), 1}}:
    for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except OSError as e:
            print("cannot signal", pid, e)
'''
SURVIVOR = f'''
import subprocess, sys
DAEMON = """
import os, signal, time, pathlib
signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGHUP, signal.SIG_IGN)
if os.fork(): os._exit(0)
os.setsid()
if os.fork(): os._exit(0)
end = time.time() + 120  # {MARK}: bounded, whatever happens
while time.time() < end:
    for p in {{targets!r}}:
        try: pathlib.Path(p).write_text("mallory,3,2,3,4,12")
        except OSError: pass
    time.sleep(0.5)
"""
subprocess.Popen([sys.executable, "-c", DAEMON], start_new_session=True)
'''
MEMORY_BOMB = '''
chunks = []
try:
    for _ in range(128):  # at most 8 GiB, written so that it is really used
        chunks.append(b"x" * (64 << 20))
except MemoryError:
    pass
print(f"memory bomb stopped at {len(chunks) * 64} MiB")
del chunks
'''
FORK_BOMB = '''
import os, time
children = 0
for _ in range(300):  # bounded even if no limit held
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children += 1
print(f"fork bomb stopped at {children} children")
'''
FLOOD = '''
import sys
line = "x" * 1023 + "\\n"
for _ in range(200 * 1024):  # 200 MiB
    sys.stdout.write(line)
'''
GARBLE = '''
import os, sys
os.write(int(sys.argv[3]), b"\\x80\\x81 not an event\\n")  # invalid UTF-8 on the events pipe
'''
KEEP_ALIVE = '''
import json, os, signal, sys, threading, time
def pretend():  # "started" every 0.5 s, for at most 60 s, while the cell hangs
    for _ in range(120):
        os.write(int(sys.argv[3]), (json.dumps({"event": "started"}) + "\\n").encode())
        time.sleep(0.5)
threading.Thread(target=pretend, daemon=True).start()
signal.signal(signal.SIGALRM, signal.SIG_IGN)
time.sleep(60)
'''
GHOST = '''
def attention(q, k, v):
    return torch.zeros(0, 1, 1, 1, 1, 1, 1, 1), torch.zeros(0, 1, 1, 1, 1, 1, 1, 1)

def self_attention(X, W_Q, W_K, W_V):
    return torch.zeros(0, 1, 1, 1, 1, 1, 1, 1)

def next_word_projections(*args, **kwargs):
    return torch.zeros(0, 1, 1, 1, 1, 1, 1, 1), torch.zeros(0, 1, 1, 1, 1, 1, 1, 1)

def score_scale(*args, **kwargs):
    return torch.zeros(0, 1, 1, 1, 1, 1, 1, 1)
'''


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """Two honest notebooks and one per attack, graded together, 2 at a time, in the sandbox."""
    built = tmp_path_factory.mktemp("built")
    paths = exercises.build_chapter(ROOT / "chapters" / "ch01_qkv" / "exercises.md", built, run_tests=False)
    student_nb = nbformat.read(paths["student"], as_version=4)
    solved = nbformat.read(paths["solutions"], as_version=4)
    folder, out = tmp_path_factory.mktemp("submissions"), tmp_path_factory.mktemp("grades")
    output = out / "grades.csv"
    secrets = [str(paths["solutions"]), str(folder / "honest.ipynb"), str(paths["autograder"])]
    writable = [str(output), str(folder / "honest.ipynb"), str(paths["autograder"]), str(ROOT / "tools" / "grading" / "grader.py")]
    wrong = FIXTURES["partly_wrong"][0]
    notebooks = {
        "honest": submission(student_nb, solved, {}),
        "honest_partly_wrong": submission(student_nb, solved, wrong),
        "reads_the_key": submission(student_nb, solved, {}, fill=False, extra=STEAL.format(targets=secrets[:1])),
        "reads_a_classmate": submission(student_nb, solved, {}, fill=False, extra=STEAL.format(targets=secrets[1:2])),
        "tampers": submission(student_nb, solved, wrong, extra=TAMPER.format(targets=writable)),
        "kills_the_parent": submission(student_nb, solved, wrong, extra=KILL_PARENT.format()),
        "leaves_a_survivor": submission(student_nb, solved, wrong, extra=SURVIVOR.format(targets=writable[:1])),
        "memory_bomb": submission(student_nb, solved, wrong, extra=MEMORY_BOMB),
        "fork_bomb": submission(student_nb, solved, wrong, extra=FORK_BOMB),
        "floods": submission(student_nb, solved, wrong, extra=FLOOD),
        "ghost_tensors": submission(student_nb, solved, {}, fill=False, extra=GHOST),
        "garbles_the_channel": submission(student_nb, solved, wrong, extra=GARBLE),
        "keeps_itself_alive": submission(student_nb, solved, wrong, extra=KEEP_ALIVE),
    }
    for name, nb in notebooks.items():
        nbformat.write(nb, folder / f"{name}.ipynb")
    grader.grade_folder(paths["autograder"], folder, output, limit=LIMIT, grace=GRACE, jobs=2,
                         sandbox=grader.Sandbox(limits=LIMITS))
    with open(output) as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    return rows, output, writable


def scores(row: dict) -> dict[str, float]:
    return {q: float(v) for q, v in row.items() if re.fullmatch(r"q\d+", q)}


ZERO = {q: 0.0 for q in PARTLY_WRONG}
EXPECTED = {"honest": FIXTURES["correct"][1], "honest_partly_wrong": PARTLY_WRONG, "reads_the_key": ZERO,
            "reads_a_classmate": ZERO, "tampers": PARTLY_WRONG, "kills_the_parent": PARTLY_WRONG,
            "leaves_a_survivor": PARTLY_WRONG, "memory_bomb": PARTLY_WRONG, "fork_bomb": PARTLY_WRONG,
            "floods": PARTLY_WRONG, "ghost_tensors": ZERO, "garbles_the_channel": PARTLY_WRONG,
            "keeps_itself_alive": PARTLY_WRONG}


@pytest.mark.parametrize("student", EXPECTED)
def test_each_notebook_earns_exactly_what_it_answered(attacked, student):
    rows, _, _ = attacked
    assert scores(rows[student]) == EXPECTED[student], rows[student]


def log(output: Path, student: str) -> str:
    return (output.with_name(f"{output.stem}-logs") / f"{student}.log").read_text(errors="replace")


def test_nothing_outside_the_sandbox_was_reached(attacked):
    rows, output, writable = attacked
    assert "stole from []" in log(output, "reads_the_key") and "stole from []" in log(output, "reads_a_classmate")
    assert "touched []" in log(output, "tampers")
    assert not any((Path(p).parent / "planted.txt").exists() for p in writable)
    assert rows["honest"]["notes"] == "" and rows["tampers"]["notes"] == ""
    assert "not an event" in rows["garbles_the_channel"]["notes"]
    assert "instead of its functions; graded again without it" in rows["keeps_itself_alive"]["notes"]


def test_no_process_of_a_student_survives(attacked):
    rows, output, _ = attacked
    alive = [p for p in Path("/proc").glob("[0-9]*/cmdline") if MARK.encode() in _read(p)]
    assert alive == [], alive
    before = output.read_text()
    import time
    time.sleep(1.5)  # a survivor would rewrite it every 0.5 s
    assert output.read_text() == before and "mallory" not in before
    details = json.loads(output.with_suffix(".json").read_text())
    assert details["sandboxed"] is True and details["students"]["leaves_a_survivor"]["scores"] == PARTLY_WRONG


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def test_bombs_and_floods_hit_their_limits(attacked):
    _, output, _ = attacked
    memory = int(re.search(r"memory bomb stopped at (\d+) MiB", log(output, "memory_bomb")).group(1))
    assert 0 < memory < MEMORY_MB, memory
    children = int(re.search(r"fork bomb stopped at (\d+) children", log(output, "fork_bomb")).group(1))
    assert children < LIMITS.processes, children
    flood = output.with_name(f"{output.stem}-logs") / "floods.log"
    assert flood.stat().st_size < (LIMITS.output_mb << 20) + 4096 and "[output cut at" in log(output, "floods")
