"""The grader's own guarantees (issue 52): what it reads, what it records, what bounds it.

Cheap checks first (collection, text safety, the result store, the event protocol: no student
process needed), then ONE sandboxed run of chapter 1 (built alone) over honest notebooks beside
each attack of the review's section 2: a symlink to the solutions, a symlinked classmate folder,
a FIFO, a surrogate in metadata, a non-UTF-8 name, formula names, a name clash, an answer whose
shape makes a test allocate gigabytes, forged cell events, memory spread over children, and a
notebook whose cells would outlast the fixed per-notebook budget.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.grading import collect, exercises, grader, judge, results, student  # noqa: E402
from tools.grading.sandbox import Limits, SandboxCgroup  # noqa: E402
from test_exercises import GRACE, LIMIT, submission  # noqa: E402



# --------------------------------------------------------------------------- collection
def test_only_regular_files_are_read(tmp_path):
    secret = tmp_path / "solutions.ipynb"
    secret.write_text('{"secret": 1}')
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / "nb.ipynb").write_text("{}")
    (subs / "mallory.ipynb").symlink_to(secret)
    (subs / "eve").symlink_to(subs / "alice")
    (subs / "trudy").mkdir()
    (subs / "trudy" / "nb.ipynb").symlink_to(secret)
    os.mkfifo(subs / "fifo.ipynb")
    found = collect.find_submissions(subs)
    assert sorted(found) == ["alice", "eve", "fifo", "mallory", "trudy"]
    assert collect.read_submission(found["alice"]) == b"{}"
    for name, kind in [("mallory", "symbolic link"), ("eve", "symbolic link"), ("trudy", "symbolic link"),
                       ("fifo", "FIFO")]:
        with pytest.raises(ValueError, match=f"refused: the (submission|notebook) is a {kind}"):
            collect.read_submission(found[name])


def test_a_link_swapped_in_after_listing_is_not_followed(tmp_path):
    (tmp_path / "alice.ipynb").write_text("{}")
    sub = collect.find_submissions(tmp_path)["alice"]
    (tmp_path / "alice.ipynb").unlink()
    (tmp_path / "alice.ipynb").symlink_to(ROOT / "README.md")
    with pytest.raises(ValueError, match="without following links"):
        collect.read_submission(sub)


def test_an_oversized_notebook_is_refused(tmp_path):
    (tmp_path / "big.ipynb").write_bytes(b" " * 2000)
    with pytest.raises(ValueError, match="refused: 2000 bytes, over"):
        collect.read_submission(collect.find_submissions(tmp_path)["big"], cap=1000)


def test_hard_links_are_refused_naming_the_other_file(tmp_path):
    """A hard link is a regular file (issue 63, X1, X2): to the solutions, or between two
    submissions (a later tar linking an earlier student's notebook), it is refused."""
    secret = tmp_path / "solutions.ipynb"
    secret.write_text('{"secret": 1}')
    subs = tmp_path / "subs"
    (subs / "bob").mkdir(parents=True)
    os.link(secret, subs / "mallory.ipynb")
    (subs / "alice.ipynb").write_text("{}")
    os.link(subs / "alice.ipynb", subs / "bob" / "nb.ipynb")
    (subs / "carol.ipynb").write_text("{}")
    found = collect.find_submissions(subs)
    with pytest.raises(ValueError, match="refused: a hard link: the notebook has 2 names"):
        collect.read_submission(found["mallory"])
    assert found["alice"].problem == "refused: a hard link: the notebook is the same file as 'bob/nb.ipynb'"
    assert found["bob"].problem == "refused: a hard link: the notebook is the same file as 'alice.ipynb'"
    assert collect.read_submission(found["carol"]) == b"{}"


def test_every_entry_of_the_folder_is_accounted_for(tmp_path):
    """Upper-case notebooks are graded; a hidden notebook or an archive is a note on its
    student's row (a row of its own when there is none); anything else is listed (X7)."""
    for name in ["alice.zip", "upper.IPYNB", ".hidden.ipynb", "bob.ipynb", "bob.tar.gz", "README.txt", ".DS_Store"]:
        (tmp_path / name).write_text("{}")
    skipped = []
    found = collect.find_submissions(tmp_path, skipped)
    assert sorted(found) == ["alice", "bob", "hidden", "upper"]
    assert collect.read_submission(found["upper"]) == b"{}" and found["upper"].remarks == []
    assert "an archive (.zip); unpack" in found["alice"].problem
    assert "a hidden file" in found["hidden"].problem
    assert found["bob"].problem is None and "'bob.tar.gz': an archive (.tar.gz)" in found["bob"].remarks[0]
    assert sorted(skipped) == [(".DS_Store", "a hidden entry (its name starts with '.')"),
                               ("README.txt", "not a notebook (.ipynb) nor a student's folder")]


def test_a_name_clash_is_a_note_for_that_student(tmp_path):
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "nb.ipynb").write_text("{}")
    (tmp_path / "alice.ipynb").write_text("{}")
    (tmp_path / "bob.ipynb").write_text("{}")
    found = collect.find_submissions(tmp_path)
    assert found["alice"].problem == "two submissions ('alice/nb.ipynb' and 'alice.ipynb'): keep one"
    assert found["bob"].problem is None


# --------------------------------------------------------------------------- student text
@pytest.mark.parametrize("raw, shown", [("m\udcffallory", "m\\xffallory"), ("ch01\ud800", "ch01\\ud800"),
                                        ("a\nb\x07c\u202e", "a\\nb\\x07c\\u202e"), ("İstanbul", "İstanbul")])
def test_student_text_becomes_printable_utf8(raw, shown):
    text = results.safe_text(raw, 80)
    assert text == shown and text.encode("utf-8")


def test_formulas_are_neutralised_and_long_text_is_cut():
    assert [results.csv_cell(t) for t in ["=1+2", "+1", "-1", "@SUM(1)", "\tx", "alice"]] == \
        ["'=1+2", "'+1", "'-1", "'@SUM(1)", "'\tx", "alice"]
    assert results.safe_text("x" * 10_000, 80) == "x" * 80 + "..."
    assert results.quoted('say "full marks"') == "\"say 'full marks'\""
    grade = results.Grade("s")
    for i in range(100):
        grade.note("n" * 1000)
    assert len(grade.notes) == results.MAX_NOTES + 1 and max(map(len, grade.notes)) <= results.MAX_NOTE + 3


def test_a_case_message_is_cut():
    assert judge._cut("m" * 10_000_000) == "m" * results.MAX_MESSAGE + " [message cut]"


# --------------------------------------------------------------------------- results as they come
class FakeJudge:
    """Stands in for a judge process: full marks, except that it crashes the whole run (a
    BaseException) on the student named in ``crash_on``."""
    calls: list[str] = []
    crash_on: str | None = None

    def __init__(self, config):
        pass

    def grade(self, job, seconds):
        FakeJudge.calls.append(job["student"])
        if job["student"] == FakeJudge.crash_on:
            raise KeyboardInterrupt("the grader dies here")
        if job["student"] == "faulty":
            raise RuntimeError("a fault of the grader's on this one notebook")
        if job["student"] == "busy":  # its process never started (judge.grade_notebook's grade_again)
            return {"scores": {"q1": 0.0}, "cases": {}, "notes": ["q1: not graded: did not start"],
                    "limited": False, "grade_again": True}
        if job["student"] == "d":  # cut short by a time limit
            return {"scores": {"q1": 0.0}, "cases": {}, "notes": ["killed: the notebook's time budget ran out"],
                    "limited": True}
        return {"scores": {"q1": 1.0}, "cases": {}, "notes": []}

    def kill(self):
        pass


@pytest.fixture
def fake_run(tmp_path, monkeypatch):
    zip_path = tmp_path / "a.zip"
    zip_path.write_bytes(b"zip")
    monkeypatch.setattr(grader, "load_autograder", lambda p: ("ch", [judge.Question("q1", 1.0, "")]))
    monkeypatch.setattr(grader, "Judge", FakeJudge)
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in ["a", "b", "c", "d", "faulty"]:
        (subs / f"{name}.ipynb").write_text(json.dumps({"name": name}))
    FakeJudge.calls, FakeJudge.crash_on = [], None

    def run(**change):
        options = {"jobs": 1, "sandbox": student.Sandbox(enabled=False)} | change
        grader.grade_folder(zip_path, subs, tmp_path / "g.csv", **options)
        return (tmp_path / "g.csv").read_text()
    return run, subs, tmp_path


def test_a_grader_that_dies_keeps_who_was_graded_and_a_rerun_grades_the_rest(fake_run):
    run, subs, out = fake_run
    FakeJudge.crash_on = "c"
    with pytest.raises(KeyboardInterrupt):
        run()
    assert not (out / "g.csv").exists() and FakeJudge.calls[:3] == ["a", "b", "c"]
    FakeJudge.calls, FakeJudge.crash_on = [], None
    rows = {r["student"]: r for r in csv.DictReader(run().splitlines())}
    assert "a" not in FakeJudge.calls and "b" not in FakeJudge.calls, FakeJudge.calls  # kept from the first run
    assert {"c", "faulty"} <= set(FakeJudge.calls), FakeJudge.calls  # a grader fault is tried again
    assert [rows[s]["total"] for s in "abc"] == ["1"] * 3 and rows["d"]["total"] == "0"
    assert rows["faulty"]["total"] == "0" and "not graded: RuntimeError: a fault" in rows["faulty"]["notes"]
    (subs / "b.ipynb").write_text(json.dumps({"name": "b, changed"}))
    FakeJudge.calls = []
    run()
    assert FakeJudge.calls == ["b", "faulty"]  # a changed notebook is graded again (faulty has no score)


def test_a_rerun_under_another_configuration_grades_again(fake_run, monkeypatch):
    """A stored result is kept only for the same notebook, zip and configuration: a rerun with
    another time limit, budget, sandbox limit or grader version grades again (X30: zeros of a
    too-small budget were kept by reruns at the default)."""
    run, _, out = fake_run
    run()
    assert len(FakeJudge.calls) == 5
    for change in [{"limit": 30.0}, {"budget": 500.0}, {"sandbox": student.Sandbox(False, Limits(cpus=2.0))}]:
        FakeJudge.calls = []
        run(**change)
        assert len(FakeJudge.calls) == 5, (change, FakeJudge.calls)
        FakeJudge.calls = []
        run(**change)
        assert FakeJudge.calls == ["faulty"], (change, FakeJudge.calls)  # same configuration: kept
    monkeypatch.setattr(grader, "grader_version", lambda root=None: "another version")
    FakeJudge.calls = []
    run(sandbox=student.Sandbox(False, Limits(cpus=2.0)))
    assert len(FakeJudge.calls) == 5, FakeJudge.calls


def test_a_result_cut_by_a_time_limit_says_so_and_is_counted_when_kept(fake_run, capsys):
    run, _, out = fake_run
    run()
    run()
    details = json.loads((out / "g.json").read_text())
    assert details["kept_from_earlier_runs"] == 4 and details["kept_cut_by_time_limits"] == 1
    assert details["students"][collect_id("d")]["limited"] is True
    assert "4 results of an earlier run" in capsys.readouterr().err


class NeverStarts:
    """A student's process that sent nothing before the grader gave up (a starved machine)."""
    made = 0

    def __init__(self, cells, *args):
        NeverStarts.made += 1
        self.started = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run_cells(self):
        return [], "killed after 100 s without progress", []


def test_a_process_that_never_started_drops_no_cell_and_is_graded_again(monkeypatch, tmp_path):
    """Grading a class niced beside other work, an honest notebook's process did not start within
    100 s: its first cell was blamed and dropped, then the next, until the budget ran out (0/13,
    kept by reruns). No student code runs before ``started``, so nothing is dropped: the row
    says why and the next run grades it."""
    monkeypatch.setattr(judge, "StudentProcess", NeverStarts)
    NeverStarts.made = 0
    cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": f"x{i} = {i}"}
             for i in range(3)]
    text = json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells})
    grade = judge.grade_notebook("x", text, [judge.Question("q1", 1.0, "")], 60.0, 10.0, tmp_path / "x.log",
                                 sandbox=student.Sandbox(enabled=False))
    assert NeverStarts.made == 1 and grade.grade_again and grade.scores == {"q1": 0.0}
    assert not any("graded again without it" in n for n in grade.notes), grade.notes
    assert any(n.startswith("q1: not graded: the notebook's process did not start") for n in grade.notes), grade.notes


def test_a_notebook_whose_process_never_started_is_graded_again_by_a_rerun(fake_run):
    run, subs, out = fake_run
    (subs / "busy.ipynb").write_text(json.dumps({"name": "busy"}))
    run()
    FakeJudge.calls = []
    run()
    assert FakeJudge.calls == ["busy", "faulty"], FakeJudge.calls


def collect_id(student_name: str) -> str:
    return results.record_id(student_name)


def test_names_shown_alike_have_their_own_rows_ids_and_notes(fake_run):
    """Names equal in their first 80 characters, an undecodable byte beside its escape spelled
    out, NFC beside NFD: one row, one JSON record and one log name each, told apart by the id
    column, each noted (X3, X4)."""
    run, subs, out = fake_run
    names = ["L" * 85 + "_alice", "L" * 85 + "_bob", "m\udcffallory", "m\\xffallory", "caf\u00e9", "cafe\u0301"]
    for name in names:
        (subs / f"{name}.ipynb").write_text(json.dumps({"name": name}))
    rows = list(csv.DictReader(run().splitlines()))
    assert len(rows) == 11 and len({r["id"] for r in rows}) == 11
    details = json.loads((out / "g.json").read_text())["students"]
    assert len(details) == 11 and {r["id"] for r in rows} == set(details)
    alike = [r for r in rows if "shows as another submission's" in r["notes"]]
    assert len(alike) == 6 and sorted({r["student"] for r in alike}) == ["L" * 80 + "...", "café", "m\\xffallory"]
    for r in alike:
        twin = next(o for o in alike if o["student"] == r["student"] and o is not r)
        assert f"(id {twin['id']})" in r["notes"]


def test_a_judge_that_dies_is_one_students_note(tmp_path):
    """A judge process that ends (here on a configuration it cannot read) raises JudgeFailed,
    which grade_one turns into that student's note (test above) instead of ending the run."""
    config = {"memory_mb": 8192}  # no autograder: the judge dies reading its configuration
    with pytest.raises(grader.JudgeFailed, match="ended"):
        grader.Judge(config).grade({"student": "x"}, 60.0)


# --------------------------------------------------------------------------- the event protocol
def channel(data: bytes, cells: int) -> student.StudentProcess:
    """A ``StudentProcess`` of ``cells`` cells reading ``data`` from its events pipe."""
    import subprocess
    import tempfile

    proc = student.StudentProcess.__new__(student.StudentProcess)
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        proc.events = os.dup(f.fileno())
    proc.buffer, proc.scanned, proc.uid, proc.cgroup, proc.n_cells = bytearray(), 0, None, None, cells
    proc.limit, proc.grace, proc.deadline = 5.0, 1.0, float("inf")
    proc.cells_deadline = time.monotonic() + 60
    proc.proc = subprocess.Popen(["true"])
    return proc


def events(*indices) -> bytes:
    return b"".join(b'{"event": "cell", "index": %d, "timed_out": false}\n' % i for i in indices)


READY = b'{"event": "ready", "functions": ["f"]}\n'


def test_cell_events_in_order_one_per_cell_are_accepted():
    ran, stopped, functions = channel(b'{"event": "started"}\n' + events(0, 1, 2) + READY, 3).run_cells()
    assert len(ran) == 3 and stopped is None and functions == ["f"]


@pytest.mark.parametrize("indices", [(0, 0), (0, 2), (1,), (0, 1, 2, 3)], ids=["repeated", "skipped", "ahead", "extra"])
def test_forged_cell_events_end_the_process(indices):
    ran, stopped, _ = channel(events(*indices) + READY, 3).run_cells()
    assert "out of order" in stopped and len(ran) < len(indices)


def test_a_million_forged_events_cost_nothing():
    start = time.monotonic()
    ran, stopped, _ = channel(events(0) * 1_000_000, 12).run_cells()
    assert len(ran) == 1 and "out of order" in stopped and time.monotonic() - start < 5


def test_ready_before_every_cell_event_ends_the_process():
    """A forked child's ``ready`` after 2 of 3 cell events is refused (X18: it then answered the
    grader's calls outside the library block)."""
    ran, stopped, functions = channel(events(0, 1) + READY, 3).run_cells()
    assert stopped == "sent 'ready' after 2 of 3 cell events" and functions == [] and len(ran) == 2


def test_a_request_nobody_reads_has_a_deadline():
    """The grader's write of a request to a student's process that stopped reading its pipe ends
    at the call's deadline (X19: it blocked the judge until its watchdog, budget + 120 s)."""
    proc = channel(b"", 0)
    proc.next_id = 0
    read_end, proc.requests = os.pipe()
    os.set_blocking(proc.requests, False)
    import fcntl
    fcntl.fcntl(proc.requests, 1031, 4096)  # F_SETPIPE_SZ: one page, as the attack set it
    start = time.monotonic()
    with pytest.raises(student.ProcessLost, match="stopped reading the grader's requests"):
        proc.call("q1", "f", ("x" * 100_000,), {}, 0.5)
    assert time.monotonic() - start < 5, time.monotonic() - start
    os.close(read_end)


def test_a_killed_judge_leaves_no_job_folder(tmp_path):
    """Folders a judge's sandboxes were given (``xfl-grade-<judge pid>-*``, the notebook's
    cells) go when the judge is killed, as its cgroups do."""
    import subprocess
    import tempfile

    judge_ = grader.Judge.__new__(grader.Judge)
    judge_.proc = subprocess.Popen(["sleep", "60"])
    left = Path(tempfile.mkdtemp(prefix=f"xfl-grade-{judge_.proc.pid}-"))
    (left / "job.json").write_text("{}")
    other = Path(tempfile.mkdtemp(prefix=f"xfl-grade-{judge_.proc.pid}0-"))  # another judge's
    judge_.kill()
    assert not left.exists() and other.exists()
    other.rmdir()


def test_too_many_functions_are_refused():
    flood = json.dumps({"event": "ready", "functions": [f"f{i}" for i in range(student.MAX_FUNCTIONS + 1)]})
    _, stopped, functions = channel(flood.encode() + b"\n", 0).run_cells()
    assert "over the 10000 the grader accepts" in stopped and functions == []


def test_a_long_line_is_read_in_linear_time():
    line = b'{"event": "ready", "functions": [], "pad": "' + b"x" * (64 << 20) + b'"}\n'
    start = time.monotonic()
    assert channel(line, 0).receive(60.0)["event"] == "ready"
    assert time.monotonic() - start < 10  # was 4.6 s for 64 MiB, scanning the buffer again per read


# --------------------------------------------------------------------------- one real run
BROADCAST = '''
def score_scale(d_k, sigma):
    return torch.full((8000, 1), float(d_k) ** 0.5 * sigma ** 2)  # 32 kB; times (100000,): 3.2 GB
'''
CELL_FLOOD = '''
import os, sys
line = b'{"event": "cell", "index": 0, "timed_out": true}\\n'
for _ in range(10_000 // 80):
    os.write(int(sys.argv[3]), line * 80)
'''
CELL_KEEPALIVE = '''
import json, os, signal, sys, threading, time
def pretend():  # a forged "cell" event every 0.5 s, index counting up, while this cell hangs
    for i in range(120):
        os.write(int(sys.argv[3]), (json.dumps({"event": "cell", "index": i, "timed_out": False}) + "\\n").encode())
        time.sleep(0.5)
threading.Thread(target=pretend, daemon=True).start()
signal.signal(signal.SIGALRM, signal.SIG_IGN)
time.sleep(60)
'''
CHILDREN_MIB, CHILDREN = 400, 4
MEMORY_SPREAD = f'''
import os, time
r, w = os.pipe()
pids = []
for _ in range({CHILDREN}):
    pid = os.fork()
    if pid == 0:
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")  # the kernel ends a child, not the notebook's process, when memory runs out
            block = b"x" * ({CHILDREN_MIB} << 20)  # written, so really held
            os.write(w, b"1")
            time.sleep(8)
        finally:
            os._exit(0)
    pids.append(pid)
time.sleep(5)
os.set_blocking(r, False)
try:
    done = len(os.read(r, 100))
except BlockingIOError:
    done = 0
alive = sum(os.waitpid(pid, os.WNOHANG) == (0, 0) for pid in pids)
print(f"children held {{min(done, alive) * {CHILDREN_MIB}}} MiB at once")
'''
SLOW_CELLS = 60  # legal cells of 1 s each: the old budget grew 11 s with each
SANDBOX_MB = 1280
BUDGET_S = 12.0  # seconds: well past a start-up under load, far short of the 60 cells


def attack_notebooks(student_nb, solved) -> dict[str, nbformat.NotebookNode]:
    surrogate = submission(student_nb, solved, {})
    surrogate.metadata["otter"] = {"assignment_name": "ch01_qkv\ud800"}
    return {"alice": submission(student_nb, solved, {}), "surrogate": surrogate,
            "broadcast": submission(student_nb, solved, {"q3": BROADCAST}),
            "cell_flood": submission(student_nb, solved, {}, extra=CELL_FLOOD),
            "cell_keepalive": submission(student_nb, solved, {}, extra=CELL_KEEPALIVE),
            "memory_spread": submission(student_nb, solved, {}, extra=MEMORY_SPREAD)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Chapter 1 alone: paths and the student and solved notebooks."""
    paths = exercises.build_chapter(ROOT / "chapters" / "ch01_qkv" / "exercises.md",
                                    tmp_path_factory.mktemp("built"), run_tests=False)
    return paths, nbformat.read(paths["student"], as_version=4), nbformat.read(paths["solutions"], as_version=4)


@pytest.fixture(scope="module")
def attacked(built, tmp_path_factory):
    paths, student_nb, solved = built
    folder, output = tmp_path_factory.mktemp("submissions"), tmp_path_factory.mktemp("grades") / "grades.csv"
    for name, nb in attack_notebooks(student_nb, solved).items():
        (folder / f"{name}.ipynb").write_text(json.dumps(nb))  # JSON escapes the surrogate, as an editor may
    honest = (folder / "alice.ipynb").read_bytes()
    for name in ["m\udcffallory", '=HYPERLINK("http:\\\\evil.example";"click")']:
        (folder / f"{name}.ipynb").write_bytes(honest)
    (folder / "mallory.ipynb").symlink_to(paths["solutions"])
    (folder / "eve").symlink_to(folder / "bob")
    (folder / "bob").mkdir()
    (folder / "bob" / "nb.ipynb").write_bytes(honest)
    (folder / "carol").mkdir()
    (folder / "carol" / "nb.ipynb").write_bytes(honest)
    (folder / "carol.ipynb").write_bytes(honest)
    os.mkfifo(folder / "fifo.ipynb")
    limits = Limits(memory_mb=4608, sandbox_memory_mb=SANDBOX_MB, output_mb=1)
    start = time.monotonic()
    grader.grade_folder(paths["autograder"], folder, output, limit=LIMIT, grace=GRACE, jobs=2,
                        sandbox=grader.Sandbox(limits=limits), judge_memory_mb=5120)
    seconds = time.monotonic() - start
    with open(output, encoding="utf-8") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    full = {q.name: q.points for q in judge.load_autograder(paths["autograder"])[1]}
    return rows, output, seconds, full


def scores(row):
    return {q: float(v) for q, v in row.items() if re.fullmatch(r"q\d+", q)}


HONEST = ["alice", "bob", "m\\xffallory", '\'=HYPERLINK("http:\\\\evil.example";"click")',
          "surrogate", "cell_flood", "cell_keepalive", "memory_spread"]


@pytest.mark.parametrize("name", HONEST)
def test_honest_answers_earn_full_marks_whatever_else_the_notebook_does(attacked, name):
    rows, _, _, full = attacked
    assert scores(rows[name]) == full, rows[name]


@pytest.mark.parametrize("name, note", [("mallory", "symbolic link"), ("eve", "symbolic link"), ("fifo", "a FIFO"),
                                        ("carol", "two submissions")])
def test_what_is_not_a_regular_file_earns_nothing(attacked, name, note):
    rows, _, _, full = attacked
    assert set(scores(rows[name]).values()) == {0.0} and note in rows[name]["notes"], rows[name]


def test_the_csv_holds_every_student_and_no_formula(attacked):
    rows, output, _, _ = attacked
    assert len(rows) == 13, sorted(rows)
    assert not any(line.startswith(("=", "+", "-", "@", '"=', '"@')) for line in output.read_text().splitlines())
    assert 'another assignment, "ch01_qkv\\ud800"' in rows["surrogate"]["notes"]
    assert len(list(output.with_name("grades-results").iterdir())) == 13


def test_an_answer_that_makes_a_test_allocate_gigabytes_fails_only_that_test(attacked):
    rows, output, _, full = attacked
    assert scores(rows["broadcast"]) == full | {"q3": 0.0}, rows["broadcast"]
    cases = json.loads(output.with_suffix(".json").read_text())["students"][rows["broadcast"]["id"]]["cases"]["q3"]
    assert any("memory" in (c["message"] or "") for c in cases), cases


def test_forged_cell_events_are_refused(attacked):
    rows, _, _, _ = attacked
    for name in ["cell_flood", "cell_keepalive"]:
        assert "out of order; graded again without it" in rows[name]["notes"], rows[name]
        assert rows[name]["notes"].count("out of order") == 1 and len(rows[name]["notes"]) < 600, rows[name]


def log_of(output, row) -> str:
    return (output.with_name(f"{output.stem}-logs") / f"{row['student']}.{row['id']}.log").read_text()


def test_memory_is_bounded_per_sandbox(attacked):
    rows, output, _, _ = attacked
    log = log_of(output, rows["memory_spread"])
    held = int(re.search(r"children held (\d+) MiB at once", log).group(1))
    probe = SandboxCgroup.create(f"xfl-grade-probe-{os.getpid()}", 64)
    if probe is None:
        pytest.fail("no memory cgroup can be made here (run as root with a memory controller); the "
                    "bound is then processes x memory_mb, as tools/grading/README.md says")
    probe.remove()
    assert held < SANDBOX_MB <= CHILDREN * CHILDREN_MIB, log


def test_the_notebook_budget_is_fixed_whatever_its_cells(built, tmp_path):
    """Legal cells of 1 s each: graded until the fixed budget, whatever their number (the old
    budget grew by limit + grace with every cell: here (8 + 3) s x (60 + 5) + 30 s = 745 s)."""
    paths, student_nb, solved = built
    slow = submission(student_nb, solved, {})
    slow.cells[1:1] = [nbformat.v4.new_code_cell("import time; time.sleep(1)") for _ in range(SLOW_CELLS)]
    (tmp_path / "subs").mkdir()
    nbformat.write(slow, tmp_path / "subs" / "slow.ipynb")
    start = time.monotonic()
    grader.grade_folder(paths["autograder"], tmp_path / "subs", tmp_path / "g.csv", limit=LIMIT, grace=GRACE,
                        budget=BUDGET_S)
    seconds = time.monotonic() - start
    row = next(csv.DictReader((tmp_path / "g.csv").read_text().splitlines()))
    assert "the notebook's time budget ran out" in row["notes"] and row["total"] == "0", row
    assert seconds < BUDGET_S + grader.JUDGE_SLACK_S, seconds
    # the notes blame the budget, not "the notebook's process", and say a rerun with other limits grades it again
    assert f"q1: not graded: the notebook's time budget of {BUDGET_S:g} s ran out" in row["notes"], row
    assert "process failed" not in row["notes"], row
    assert "cut by this run's time limits" in row["notes"] and json.loads((tmp_path / "g.json").read_text())[
        "students"][row["id"]]["limited"] is True
