"""Grade a folder of submitted exercise notebooks into a CSV, locally, without Docker.

    python -m tools.grading AUTOGRADER_ZIP SUBMISSIONS_DIR -o grades.csv [--timeout 60] [--jobs 2]

SUBMISSIONS_DIR holds one notebook per student: ``<student>.ipynb``, or ``<student>/<any>.ipynb``.
The tests (hidden ones included) come from the autograder zip that ``tools.grading.exercises build``
writes: otter-grader test files, where a test receives the student's function and asserts.

Verdicts the submission cannot touch. The notebook runs in its own process (``tools.grading.worker``),
inside a bubblewrap sandbox (``tools.grading.sandbox``: no view of the tests, solutions, other
submissions, grades or repository; bounded memory, processes, files and time; killed whole);
the tests run here, in the grader's process, where each student function is a ``Proxy``:
calling it sends the inputs to the student's process and brings the result back as plain data
(``tools.grading.wire``: tensors as dtype, shape and bytes, numbers, strings, lists, tuples and dicts;
never a pickle). Every comparison thus uses the grader's own, unpatched torch and builtins, and
nothing the notebook prints, patches or exits with reaches the scores. While a question's calls
run, the library functions that would answer it raise (``tools.grading.library_answers``), and a call
that reached one fails its test even if the student's code caught the error.

Time limits. Each code cell, and each question's calls together, get ``--timeout`` seconds (the
tests' own work in the grader's process does not count). A
step that runs over is interrupted (the cell counts as failed, the question scores 0) and
grading goes on. Code that ignores the interrupt (it catches every exception, or hangs inside C
code) is killed ``--grace`` seconds later; the notebook then runs again in a fresh process
without that cell (or, if it was a question's call, the question scores 0 and the others run
again). A cell that ends the process (``os._exit``) is dropped the same way.

Output: ``grades.csv`` (student, one column per question, total, possible, notes), written by
the grader alone, atomically, once every notebook is graded, plus ``grades.json`` with every test
case's result and ``grades-logs/`` with each student's output (cut at 4 MiB). Where bwrap cannot
run, the grader refuses to grade unless given ``--unsandboxed`` (trusted notebooks only).
"""

from __future__ import annotations

import argparse
import builtins
import csv
import io
import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tools.grading import wire
from tools.grading.library_answers import blocked_names
from tools.grading.sandbox import Limits, bwrap_command, check_bwrap, sandbox_uid, student_env, SandboxUnavailable
from xfl.atomic_files import write_text_atomic

ROOT = Path(__file__).resolve().parents[2]
ANSWER_TAGS = {"otter_answer_cell", "otter_assign_solution_cell"}  # student / solutions notebook
CHECK_PREFIX = "grader.check("
STARTUP_S = 30.0  # extra patience for the student's process to start (Python, IPython)


# ------------------------------------------------------------------ the assignment
@dataclass
class Question:
    name: str
    points: float
    source: str  # the test file, held in the grader's memory only


def load_autograder(zip_path: Path) -> tuple[str | None, list[Question]]:
    """(assignment name, questions) of an autograder zip, every test read into memory: they are
    never unpacked to disk, so no student's process can read or change them."""
    from otter.test_files import ExceptionTestFile

    with zipfile.ZipFile(zip_path) as zf:
        names = [n for n in zf.namelist() if n.startswith("tests/") and n.endswith(".py")]
        if not names:
            raise ValueError(f"{zip_path} holds no tests/*.py: is it an otter autograder zip?")
        sources = {n: zf.read(n).decode() for n in names}
        config = json.loads(zf.read("otter_config.json")) if "otter_config.json" in zf.namelist() else {}
    questions = []
    for name in sorted(names, key=_natural_key):
        test_file = ExceptionTestFile.from_string(sources[name], path=name)
        questions.append(Question(test_file.name, float(test_file.possible), sources[name]))
    return config.get("assignment_name"), questions


def _natural_key(text: str):
    import re
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def find_submissions(folder: Path) -> dict[str, Path]:
    """``{student: notebook}`` from ``folder/<student>.ipynb`` and ``folder/<student>/*.ipynb``
    (a student folder without exactly one notebook maps to the folder: graded 0 with a note)."""
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.is_dir():
            notebooks = sorted(p for p in path.glob("*.ipynb") if not p.name.startswith("."))
            student, nb = path.name, notebooks[0] if len(notebooks) == 1 else path
        elif path.suffix == ".ipynb" and not path.name.startswith("."):
            student, nb = path.stem, path
        else:
            continue
        if student in found:
            raise ValueError(f"two submissions for {student!r}: {found[student]} and {nb}")
        found[student] = nb
    return found


@dataclass
class Cell:
    number: int  # 1-based position in the notebook, as a reader counts cells
    source: str
    question: str | None  # the question an answer cell belongs to; None for shared cells


def plan_cells(nb) -> list[Cell]:
    """The code cells to run, without otter's check cells; answer cells know their question."""
    cells, pending = [], []
    for number, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code":
            continue
        source = cell.source if isinstance(cell.source, str) else "".join(map(str, cell.source))
        stripped = source.strip()
        if stripped.startswith(CHECK_PREFIX) and "\n" not in stripped:
            question = stripped[len(CHECK_PREFIX):].strip("()\"' ")
            for c in pending:
                c.question = question
            pending = []
            continue
        c = Cell(number, source, None)
        tags = cell.get("metadata", {}).get("tags", [])
        if isinstance(tags, list) and ANSWER_TAGS & {t for t in tags if type(t) is str}:
            pending.append(c)
        cells.append(c)
    return cells


# ------------------------------------------------------------------ the student's process
class ProcessLost(BaseException):
    """The student's process was killed (no progress within the limit) or ended by itself."""


class QuestionTimeLimit(BaseException):
    """A question's tests ran out of time (a BaseException: it stops the whole question)."""


MAX_MESSAGE = 256 << 20  # bytes: a longer line on the events pipe ends the student's process


@dataclass
class Sandbox:
    """How students run: in bwrap (``uid`` their own when the grader is root) or, if the
    instructor chose so, unsandboxed; with these limits."""
    enabled: bool = True
    limits: Limits = field(default_factory=Limits)

    def rlimits(self, uid: int | None) -> dict[str, int]:
        lim = self.limits
        processes = lim.processes + (0 if uid is not None else tasks_of(os.geteuid()))
        return {"RLIMIT_AS": lim.memory_mb << 20, "RLIMIT_NPROC": processes, "RLIMIT_FSIZE": lim.file_mb << 20,
                "RLIMIT_NOFILE": lim.open_files, "RLIMIT_CPU": lim.cpu_s}


def tasks_of(uid: int) -> int:
    """How many processes and threads ``uid`` runs now (what RLIMIT_NPROC counts)."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:  # the real uid, as RLIMIT_NPROC counts
            count += int(fields.get("Threads", "1"))
    return count


class StudentProcess:
    """A submitted notebook running in its own process (``tools.grading.worker``), in a sandbox: its
    cells run once, then ``call`` sends a function's inputs there and brings its result back as
    plain data. ``deadline`` (monotonic seconds) ends it, whatever it is doing."""

    def __init__(self, cells: list[Cell], limit: float, grace: float, log_path: Path,
                 library: dict[str, list[str]], sandbox: Sandbox, slot: int = 0, budget: float = 3600.0):
        self.limit, self.grace, self.buffer, self.next_id = limit, grace, bytearray(), 0
        self.deadline = time.monotonic() + budget
        self.uid = sandbox_uid(slot) if sandbox.enabled else None
        self.tmp = tempfile.TemporaryDirectory(prefix="xfl-grade-")
        job = Path(self.tmp.name) / "job.json"
        job.write_text(json.dumps({"cells": [c.source for c in cells], "limit": limit, "library": library,
                                   "rlimits": sandbox.rlimits(self.uid)}))
        job.chmod(0o644)
        req_read, self.requests = os.pipe()
        self.events, evt_write = os.pipe()
        entry = "import sys; from tools.grading.worker import main; main(sys.argv[1:])"
        if sandbox.enabled:
            cmd, cwd, env = bwrap_command([sys.executable, "-c", entry, "/grader/job.json", str(req_read),
                                           str(evt_write)], job, sandbox.limits, self.uid), None, {}
        else:
            work = Path(self.tmp.name) / "work"
            work.mkdir()
            cmd, cwd = [sys.executable, "-c", entry, str(job), str(req_read), str(evt_write)], work
            env = student_env(ROOT) | {"HOME": str(work), "TMPDIR": str(work), "MPLCONFIGDIR": str(work)}
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, pass_fds=(req_read, evt_write),
                                     start_new_session=True)
        os.close(req_read)
        os.close(evt_write)
        self.log = threading.Thread(target=keep_output, daemon=True,
                                    args=(self.proc.stdout, log_path, sandbox.limits.output_mb << 20))
        self.log.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        for fd in (self.requests, self.events):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.join(timeout=10)
        self.tmp.cleanup()

    def kill(self) -> None:
        """End the student's process and everything it started: in the sandbox, killing bwrap
        kills its PID namespace's first process, and with it every process of that namespace."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        if self.uid is not None:
            wait_until_gone(self.uid)

    def receive(self, patience: float) -> dict:
        """The next event; ``ProcessLost`` if none comes within ``patience`` s (or before the
        notebook's deadline), if the process ends, or if it sends something that is not an event."""
        deadline = min(time.monotonic() + patience, self.deadline)
        while (end := self.buffer.find(b"\n")) < 0:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.events], [], [], left)[0]:
                self.kill()
                raise ProcessLost(f"killed after {patience:g} s without progress" if deadline < self.deadline
                                  else "killed: the notebook's time budget ran out")
            chunk = os.read(self.events, 1 << 20)
            if not chunk:
                raise ProcessLost("ended the grader")
            self.buffer += chunk
            if len(self.buffer) > MAX_MESSAGE:
                self.kill()
                raise ProcessLost(f"sent a message over {MAX_MESSAGE >> 20} MiB")
        line = bytes(self.buffer[:end])
        del self.buffer[:end + 1]
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):  # bad UTF-8 or JSON, a huge int, deep nesting
            event = None
        if type(event) is not dict or type(event.get("event")) is not str:
            self.kill()
            raise ProcessLost(f"sent something that is not an event: {line[:80]!r}")
        return event

    def run_cells(self) -> tuple[list[dict], str | None, list[str]]:
        """(cell events, why the process stopped early or None, the functions it defines). Each
        cell has ``limit + grace`` seconds from the end of the one before; nothing extends that."""
        cells = []
        try:
            event = self.receive(self.limit + self.grace + STARTUP_S)
            if event["event"] == "started":
                event = self.receive(self.limit + self.grace)
            while event["event"] == "cell" and type(event.get("index")) is int and type(event.get("timed_out")) is bool:
                cells.append(event)
                event = self.receive(self.limit + self.grace)
        except ProcessLost as e:
            return cells, str(e), []
        if event["event"] != "ready" or type(event.get("functions")) is not list:
            self.kill()
            return cells, f"sent {event['event'][:40]!r} instead of its functions", []
        return cells, None, [f for f in event["functions"] if type(f) is str]

    def call(self, question: str, function: str, args: tuple, kwargs: dict, seconds: float):
        """``function(*args, **kwargs)`` in the student's process, within ``seconds``."""
        self.next_id += 1
        request = {"id": self.next_id, "question": question, "function": function, "seconds": seconds,
                   "args": wire.to_plain(list(args)), "kwargs": wire.to_plain(kwargs)}
        try:
            os.write(self.requests, (json.dumps(request) + "\n").encode())
        except BrokenPipeError:
            raise ProcessLost("ended the grader") from None
        reply = self.receive(seconds + self.grace)
        if reply.get("event") != "reply" or reply.get("id") != self.next_id:
            self.kill()
            raise ProcessLost(f"answered request {self.next_id} with {str(reply)[:80]!r}")
        if reply.get("timed_out") is True:
            raise QuestionTimeLimit(f"{function} ran past the time limit")
        if reply.get("library"):
            raise LibraryUsed(f"{function} called {', '.join(map(str, reply['library']))[:500]}, the library's "
                              "answer to this question: write it yourself")
        if reply.get("error") is not None:
            raise student_exception(reply.get("error_type"), f"{function} raised {str(reply['error'])[:2000]}")
        return wire.from_plain(reply.get("value"))  # NotPlain (a failed test) if malformed


def keep_output(stream, log_path: Path, cap: int) -> None:
    """Copy what the student's process prints into its log, at most ``cap`` bytes; read (and
    drop) the rest, so that printing never blocks the student."""
    kept = 0
    with stream, open(log_path, "ab") as log:
        while chunk := stream.read1(1 << 16):
            if kept < cap:
                log.write(chunk[:cap - kept])
                kept += len(chunk)
                if kept >= cap:
                    log.write(f"\n[output cut at {cap} bytes]\n".encode())


def wait_until_gone(uid: int, seconds: float = 10.0) -> None:
    """Wait until no process runs as ``uid`` (a killed sandbox's processes are being reaped)."""
    end = time.monotonic() + seconds
    while tasks_of(uid) and time.monotonic() < end:
        time.sleep(0.05)


class StudentError(Exception):
    """The student's function raised, or its result could not travel as plain data."""


def student_exception(type_name, message: str) -> Exception:
    """The grader's own exception for one the student's code raised: the built-in class of that
    name (so a test can expect a ``ValueError``), else ``StudentError``."""
    cls = getattr(builtins, type_name, None) if type(type_name) is str else None
    if isinstance(cls, type) and issubclass(cls, Exception) and cls is not AssertionError:
        return cls(message)
    return StudentError(message)


class LibraryUsed(Exception):
    """The student's function called the library's answer to its question."""


class Proxy:
    """Stands in the grader's process for a student's function; calling it runs the real one
    in the student's process. Only plain data crosses, in both directions. The question's time
    budget (shared by its proxies) counts only the time spent waiting for the student's process."""

    def __init__(self, student: StudentProcess, question: str, name: str, budget: list[float]):
        self.student, self.question, self.__name__, self.budget = student, question, name, budget

    def __call__(self, *args, **kwargs):
        if self.budget[0] <= 0:
            raise QuestionTimeLimit(f"no time left for {self.__name__}")
        start = time.monotonic()
        try:
            return self.student.call(self.question, self.__name__, args, kwargs, self.budget[0])
        finally:
            self.budget[0] -= time.monotonic() - start

    def __repr__(self):
        return f"<the student's {self.__name__}>"


def run_question(question: Question, student: StudentProcess, functions: list[str],
                 limit: float) -> tuple[float, list[dict], str | None]:
    """(score, test case results, a note) for one question, its tests run here on proxies."""
    from otter.test_files import ExceptionTestFile

    test_file = ExceptionTestFile.from_string(question.source, path=f"{question.name}.py")
    budget = [limit]  # seconds of the student's time left to this question's calls
    env = {name: Proxy(student, question.name, name, budget) for name in functions}
    try:
        test_file.run(env)
    except QuestionTimeLimit:
        return 0.0, [], f"{question.name}: tests stopped by the time limit"
    return float(test_file.score), [
        {"name": r.test_case.name, "hidden": r.test_case.hidden, "points": r.test_case.points,
         "passed": r.passed, "message": r.message} for r in test_file.test_case_results], None


@dataclass
class Grade:
    student: str
    scores: dict[str, float] = field(default_factory=dict)
    cases: dict[str, list] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def grade_notebook(student: str, nb_path: Path, questions: list[Question], limit: float,
                   grace: float, log_path: Path, assignment: str | None = None,
                   library: dict[str, list[str]] | None = None, sandbox: Sandbox | None = None,
                   slot: int = 0) -> Grade:
    """Grade one notebook. A cell that kills or ends the student's process is dropped and the
    notebook runs again; a question whose tests do so scores 0 and the others run again. The
    notebook's processes together get ``limit`` seconds per cell and per question (plus grace
    and start-up), after which grading stops and what is not graded scores 0."""
    import nbformat

    grade = Grade(student)
    try:
        if nb_path.is_dir():
            raise ValueError(f"{nb_path.name}/ must hold exactly one .ipynb")
        nb = nbformat.read(nb_path, as_version=4)
        cells = plan_cells(nb)
    except Exception as e:  # not a notebook at all
        grade.notes.append(f"unreadable notebook: {str(e)[:300]}")
        grade.scores = {q.name: 0.0 for q in questions}
        return grade
    otter_meta = nb.metadata.get("otter", {})
    submitted_for = otter_meta.get("assignment_name") if isinstance(otter_meta, dict) else None
    if assignment and submitted_for and submitted_for != assignment:
        grade.notes.append(f"notebook is for {str(submitted_for)[:80]}, graded as {assignment}")
    pending = list(questions)
    end = time.monotonic() + (limit + grace) * (len(cells) + len(questions)) + STARTUP_S
    while pending and time.monotonic() < end:
        with StudentProcess(cells, limit, grace, log_path, library or {}, sandbox or Sandbox(), slot,
                            end - time.monotonic()) as proc:
            ran, stopped, functions = proc.run_cells()
            grade.notes += [f"cell {cells[e['index']].number}: stopped by the time limit"
                            for e in ran if e.get("timed_out") is True and 0 <= e["index"] < len(cells)]
            if stopped and len(ran) < len(cells):
                grade.notes.append(f"cell {cells[len(ran)].number}: {stopped}; graded again without it")
                cells = cells[:len(ran)] + cells[len(ran) + 1:]
                continue
            if stopped:
                break
            pending = _grade_questions(grade, pending, proc, functions, limit)
    for q in pending:
        grade.scores[q.name], grade.cases[q.name] = 0.0, []
        grade.notes.append(f"{q.name}: not graded (the notebook's process failed; see the log)")
    return grade


def _grade_questions(grade: Grade, pending: list[Question], proc: StudentProcess,
                     functions: list[str], limit: float) -> list[Question]:
    """Grade questions until the process is lost; return the ones left to grade."""
    for i, q in enumerate(pending):
        try:
            score, cases, note = run_question(q, proc, functions, limit)
        except ProcessLost as e:
            grade.scores[q.name], grade.cases[q.name] = 0.0, []
            grade.notes.append(f"{q.name}: tests {e}")
            return pending[i + 1:]
        grade.scores[q.name], grade.cases[q.name] = score, cases
        if note:
            grade.notes.append(note)
    return []


# ------------------------------------------------------------------------ outputs
def grades_csv(grades: list[Grade], questions: list[Question]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["student", *(q.name for q in questions), "total", "possible", "notes"])
    possible = sum(q.points for q in questions)
    for g in grades:
        scores = [g.scores.get(q.name, 0.0) for q in questions]
        writer.writerow([g.student, *(_num(s) for s in scores), _num(sum(scores)), _num(possible),
                         "; ".join(g.notes)])
    return out.getvalue()


def _num(x: float) -> str:
    return f"{x:g}"


def grade_folder(autograder: Path, submissions: Path, output: Path, limit: float = 60.0,
                 grace: float = 10.0, jobs: int = 1, block_library: bool = True,
                 sandbox: Sandbox | None = None) -> list[Grade]:
    """Grade every notebook in ``submissions``; write ``output`` (CSV) and its JSON and logs,
    once, atomically, after every notebook is graded. Each student runs in a sandbox
    (``tools.grading.sandbox``; ``SandboxUnavailable`` if none can start here, unless
    ``sandbox.enabled`` is False). ``block_library=False`` lets the library answer (to check
    that its answers are right)."""
    sandbox = sandbox or Sandbox()
    if sandbox.enabled:
        check_bwrap()
    assignment, questions = load_autograder(autograder)  # before any student's code runs
    students = find_submissions(submissions)
    logs = output.with_name(f"{output.stem}-logs")
    logs.mkdir(parents=True, exist_ok=True)
    library = blocked_names(assignment) if block_library else {}
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(max(1, jobs)):
        slots.put(slot)

    def one(item):
        student, nb_path = item
        log = logs / f"{student}.log"
        log.unlink(missing_ok=True)
        slot = slots.get()
        try:
            return grade_notebook(student, nb_path, questions, limit, grace, log, assignment, library, sandbox, slot)
        except Exception as e:  # a fault of the grader's on this notebook: a zero and a note, not a lost run
            return Grade(student, {q.name: 0.0 for q in questions}, {}, [f"grader error: {type(e).__name__}: {str(e)[:300]}"])
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        grades = list(pool.map(one, students.items()))
    details = {"assignment": assignment, "time_limit_s": limit, "sandboxed": sandbox.enabled,
               "questions": {q.name: q.points for q in questions},
               "students": {g.student: {"scores": g.scores, "notes": g.notes, "cases": g.cases}
                            for g in grades}}
    write_text_atomic(output.with_suffix(".json"), json.dumps(details, indent=1))
    write_text_atomic(output, grades_csv(grades, questions))
    return grades


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m tools.grading", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("autograder", type=Path, help="the chapter's autograder zip")
    parser.add_argument("submissions", type=Path, help="folder of submitted notebooks")
    parser.add_argument("-o", "--output", type=Path, default=Path("grades.csv"))
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds allowed to each code cell and to each question's calls")
    parser.add_argument("--grace", type=float, default=10.0,
                        help="extra seconds before a step that ignores the time limit is killed")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded in parallel")
    parser.add_argument("--memory-mb", type=int, default=Limits.memory_mb,
                        help="address space of each student's process, MiB (CUDA PyTorch alone maps ~3.3 GiB)")
    parser.add_argument("--unsandboxed", action="store_true",
                        help="run students WITHOUT the bubblewrap sandbox: only for notebooks you trust")
    args = parser.parse_args(argv)
    sandbox = Sandbox(enabled=not args.unsandboxed, limits=Limits(memory_mb=args.memory_mb))
    try:
        grades = grade_folder(args.autograder, args.submissions, args.output, args.timeout, args.grace,
                              args.jobs, sandbox=sandbox)
    except SandboxUnavailable as e:
        print(f"refusing to grade: {e}.\nWithout a sandbox a notebook can read the solutions and other "
              "students' work, change the hidden tests and the grades, and kill the grader. Install "
              "bubblewrap (make sandbox-deps), or pass --unsandboxed to grade notebooks you trust.",
              file=sys.stderr)
        return 2
    print(f"graded {len(grades)} notebooks -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
