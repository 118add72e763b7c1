"""Malicious notebooks graded in ONE sandboxed run beside honest ones (chapter 1, 5 questions).

Each attack is a cell added to a notebook whose answers are known: the honest grades must not
move, and each attacker must earn exactly what its answers earn. Issue 63's attacks run in the
same run: hard links to the solutions and to a classmate (X1, X2), names shown alike (X3, X4),
files that are no notebook (X7), ``ready`` before every cell reported (X18), a request pipe
nobody reads (X19), a user namespace (X26) and the kernel keyring (X27). Needs bwrap (``make
sandbox-deps``); without it this file fails, as the grader refuses to grade.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.grading import exercises, grader  # noqa: E402
from tools.grading.results import display_name, record_id  # noqa: E402
from tools.grading.sandbox import Limits  # noqa: E402
from test_exercises import FIXTURES, LIMIT, GRACE, submission  # noqa: E402

STARTED: list[float] = []  # when the run began (its leftovers are newer)
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
READY_EARLY = '''
import json, os, sys, time
if os.fork() == 0:  # a child says "ready" while this cell still runs (X18)
    os.write(int(sys.argv[3]), (json.dumps({"event": "ready", "functions": ["attention"]}) + "\\n").encode())
    os._exit(0)
time.sleep(3)
'''
BLOCK_WRITE = '''
_honest_lookup, _blocked = lookup_projections, []
def lookup_projections(names, facts, marker):
    """On its first call: the request pipe shrinks to one page, a child keeps its read end, and
    the worker reads an empty pipe from then on, so the grader's next (7 kB) request cannot be
    written (X19)."""
    if not _blocked:
        import fcntl, os, sys, time
        _blocked.append(1)
        request_fd = int(sys.argv[2])
        fcntl.fcntl(request_fd, 1031, 4096)  # F_SETPIPE_SZ
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        empty, _ = os.pipe()
        os.dup2(empty, request_fd)
    return _honest_lookup(names, facts, marker)
'''
KERNEL_CHANNELS = '''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
add_key, request_key = {"x86_64": (248, 249), "aarch64": (217, 218)}[os.uname().machine]
added = libc.syscall(add_key, b"user", b"xfl-answer", b"answer of the writer", 20, -4)  # to @u (X27)
print("add_key:", "added" if added > 0 else os.strerror(ctypes.get_errno()))
found = libc.syscall(request_key, b"user", b"xfl-answer", None, 0)  # what an earlier student of this uid left
print("request_key:", f"found key {found}" if found > 0 else os.strerror(ctypes.get_errno()))
r, w = os.pipe()
if os.fork() == 0:  # one thread: unshare(CLONE_NEWUSER) would work here without the filter (X26)
    ok = libc.unshare(0x10000000 | 0x00020000) == 0
    ok = ok and libc.mount(b"none", b"/tmp", b"tmpfs", 0, b"size=8g") == 0
    os.write(w, b"user namespace and tmpfs: " + (b"made" if ok else os.strerror(ctypes.get_errno()).encode()))
    os._exit(0)
os.wait()
print(os.read(r, 200).decode())
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
        "ready_early": submission(student_nb, solved, wrong, extra=READY_EARLY),
        "blocks_the_request_pipe": submission(student_nb, solved, wrong, extra=KERNEL_CHANNELS + BLOCK_WRITE),
        "classmate": submission(student_nb, solved, {}),
    }
    for name, nb in notebooks.items():  # ready_early.IPYNB: an upper-case suffix is a notebook too (X7)
        nbformat.write(nb, folder / f"{name}.{'IPYNB' if name == 'ready_early' else 'ipynb'}")
    os.link(paths["solutions"], folder / "hardlink_solutions.ipynb")  # X1
    os.link(folder / "classmate.ipynb", folder / "copies_classmate.ipynb")  # X2: both refused
    nbformat.write(notebooks["honest"], folder / ".hidden.ipynb")  # X7: a row with a note
    (folder / "zipped.zip").write_bytes(b"PK\x05\x06" + bytes(18))  # X7: a row with a note
    (folder / "notes.txt").write_text("not a submission")  # X7: listed as skipped
    for twin in SHOWN_ALIKE_NAMES:  # X3, X4: shown alike; refused links, so no time is spent grading them
        (folder / f"{twin}.ipynb").symlink_to(paths["solutions"])
    STARTED[:] = [time.time() - 1]
    grader.grade_folder(paths["autograder"], folder, output, limit=LIMIT, grace=GRACE, jobs=2,
                         sandbox=grader.Sandbox(limits=LIMITS))
    with open(output, encoding="utf-8") as f:
        rows = {row["student"] if row["student"] not in SHOWN_ALIKE else row["id"]: row for row in csv.DictReader(f)}
    for name in SHOWN_ALIKE_NAMES:
        rows[name] = rows.pop(record_id(name))
    return rows, output, writable


def scores(row: dict) -> dict[str, float]:
    return {q: float(v) for q, v in row.items() if re.fullmatch(r"q\d+", q)}


ZERO = {q: 0.0 for q in PARTLY_WRONG}
LONG = "L" * 85
SHOWN_ALIKE_NAMES = [LONG + "_alice", LONG + "_bob", "caf\u00e9", "cafe\u0301"]
SHOWN_ALIKE = {"L" * 80 + "...", "café"}  # their rows are read by id
REFUSED = {*SHOWN_ALIKE_NAMES, "hardlink_solutions", "classmate", "copies_classmate", "hidden", "zipped"}  # no log
EXPECTED = {"honest": FIXTURES["correct"][1], "honest_partly_wrong": PARTLY_WRONG, "reads_the_key": ZERO,
            "reads_a_classmate": ZERO, "tampers": PARTLY_WRONG, "kills_the_parent": PARTLY_WRONG,
            "leaves_a_survivor": PARTLY_WRONG, "memory_bomb": PARTLY_WRONG, "fork_bomb": PARTLY_WRONG,
            "floods": PARTLY_WRONG, "ghost_tensors": ZERO, "garbles_the_channel": PARTLY_WRONG,
            "keeps_itself_alive": PARTLY_WRONG, "ready_early": PARTLY_WRONG,
            "blocks_the_request_pipe": PARTLY_WRONG | {"q5": 0.0},
            "hardlink_solutions": ZERO,
            "classmate": ZERO, "copies_classmate": ZERO, "hidden": ZERO,
            "zipped": ZERO, LONG + "_alice": ZERO, LONG + "_bob": ZERO, "caf\u00e9": ZERO, "cafe\u0301": ZERO}


@pytest.mark.parametrize("student", EXPECTED)
def test_each_notebook_earns_exactly_what_it_answered(attacked, student):
    rows, _, _ = attacked
    assert scores(rows[student]) == EXPECTED[student], rows[student]


def log(output: Path, student: str) -> str:
    return log_path(output, student).read_text(errors="replace")


def log_path(output: Path, student: str) -> Path:
    return output.with_name(f"{output.stem}-logs") / f"{display_name(student)}.{record_id(student)}.log"


def test_nothing_outside_the_sandbox_was_reached(attacked):
    rows, output, writable = attacked
    assert "stole from []" in log(output, "reads_the_key") and "stole from []" in log(output, "reads_a_classmate")
    assert "touched []" in log(output, "tampers")
    assert not any((Path(p).parent / "planted.txt").exists() for p in writable)
    assert rows["honest"]["notes"] == "" and rows["tampers"]["notes"] == ""
    assert "not an event" in rows["garbles_the_channel"]["notes"]
    # its forged "started" comes before its last cell reported (it used to come instead of "ready")
    assert re.search(r"sent 'started' after \d+ of \d+ cell events; graded again without it",
                     rows["keeps_itself_alive"]["notes"]), rows["keeps_itself_alive"]


def test_no_process_of_a_student_survives(attacked):
    rows, output, _ = attacked
    alive = [p for p in Path("/proc").glob("[0-9]*/cmdline") if MARK.encode() in _read(p)]
    assert alive == [], alive
    before = output.read_text()
    import time
    time.sleep(1.5)  # a survivor would rewrite it every 0.5 s
    assert output.read_text() == before and "mallory" not in before
    details = json.loads(output.with_suffix(".json").read_text())
    assert details["sandboxed"] is True and details["students"][rows["leaves_a_survivor"]["id"]]["scores"] == PARTLY_WRONG


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
    flood = log_path(output, "floods")
    assert flood.stat().st_size < (LIMITS.output_mb << 20) + 4096 and "[output cut at" in log(output, "floods")


def test_hard_links_and_skipped_files_are_rows_with_notes(attacked):
    """X1, X2, X7: a hard link to the solutions or between two classmates is refused, naming
    the other file; an upper-case notebook is graded (``ready_early.IPYNB``, in the scores
    test); a hidden one and a zip get a row saying why; a file of no student is listed in the
    JSON."""
    rows, output, _ = attacked
    assert "refused: a hard link" in rows["hardlink_solutions"]["notes"], rows["hardlink_solutions"]
    assert "same file as 'copies_classmate.ipynb'" in rows["classmate"]["notes"], rows["classmate"]
    assert "same file as 'classmate.ipynb'" in rows["copies_classmate"]["notes"], rows["copies_classmate"]
    assert rows["hidden"]["notes"].startswith("skipped '.hidden.ipynb': a hidden file"), rows["hidden"]
    assert rows["zipped"]["notes"].startswith("skipped 'zipped.zip': an archive (.zip)"), rows["zipped"]
    details = json.loads(output.with_suffix(".json").read_text())
    assert details["skipped"] == [{"name": "notes.txt", "why": "not a notebook (.ipynb) nor a student's folder"}]


def test_every_row_has_its_own_record_and_log(attacked):
    """X3, X4: names shown alike keep a row and a JSON record each, and say so; every graded
    notebook has its own log (named by its id)."""
    rows, output, _ = attacked
    details = json.loads(output.with_suffix(".json").read_text())["students"]
    assert len(details) == len(rows) == len(EXPECTED), sorted(rows)
    for name in SHOWN_ALIKE_NAMES:
        assert "shows as another submission's" in rows[name]["notes"] and rows[name]["id"] in details
    assert len({rows[name]["id"] for name in SHOWN_ALIKE_NAMES}) == 4
    assert all(log_path(output, name).exists() for name in EXPECTED if name not in REFUSED)


def test_protocol_attacks_of_issue_63_are_refused(attacked):
    """X18: a ``ready`` before every cell reported ends that attempt; X19: a request nobody reads
    is given up at its question's deadline, not the judge's watchdog; X26, X27: no user namespace,
    no key in the kernel's keyring."""
    rows, output, _ = attacked
    started = STARTED[0]
    assert "sent 'ready' after" in rows["ready_early"]["notes"], rows["ready_early"]
    assert "q5: tests killed: it stopped reading the grader's requests" in rows["blocks_the_request_pipe"]["notes"]
    probes = log(output, "blocks_the_request_pipe")
    for line in ["add_key: Operation not permitted", "request_key: Operation not permitted",
                 "user namespace and tmpfs: Operation not permitted"]:
        assert line in probes, probes
    left = [p for p in Path(tempfile.gettempdir()).glob("xfl-grade-*")
            if p.stat().st_mtime >= started and not _alive_judge(p)]
    assert left == [], left  # no job folder of this run's judges, once they ended


def _alive_judge(folder: Path) -> bool:
    """Whether the judge whose pid names ``folder`` (``xfl-grade-<pid>-*``) still runs (another run's)."""
    try:
        return Path(f"/proc/{int(folder.name.split('-')[2])}").exists()
    except (IndexError, ValueError):
        return True
