"""Grade a folder of submitted exercise notebooks into a CSV, locally, without Docker.

    python -m tools.grading AUTOGRADER_ZIP SUBMISSIONS_DIR -o grades.csv [--timeout 60] [--jobs 2]

SUBMISSIONS_DIR holds one notebook per student: ``<student>.ipynb``, or ``<student>/<any>.ipynb``.
The tests (hidden ones included) come from the autograder zip that ``tools.exercises build``
writes; they are otter-grader test files, run with otter's own test runner.

Time limits. ``otter run`` executes a whole notebook with no time limit, so one endless loop
stops everything. Here the notebook runs in a separate process where every step has a limit
of ``--timeout`` seconds: each code cell, and each question's tests. A step that runs over is
interrupted (the cell counts as failed, the question scores 0) and grading goes on with the
next step. Code that ignores the interrupt (it catches every exception, or hangs inside C
code) is killed ``--grace`` seconds later; the notebook is then graded again in a fresh process
without that cell (or, if it was a question's tests, without that question, which scores 0).

Output: ``grades.csv`` (student, one column per question, total, possible, notes), written
atomically, plus ``grades.json`` with every test case's result and ``grades-logs/`` with each
student's cell output. Student code runs with your user's rights: grade in a throwaway
account or container if you do not trust the submissions.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from xfl.files import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
ANSWER_TAGS = {"otter_answer_cell", "otter_assign_solution_cell"}  # student / solutions notebook
CHECK_PREFIX = "grader.check("


# ------------------------------------------------------------------ the assignment
@dataclass
class Question:
    name: str
    points: float
    test_path: Path


def load_autograder(zip_path: Path, dest: Path) -> tuple[str | None, list[Question]]:
    """Unpack the tests of an autograder zip into ``dest``; return (assignment name, questions)."""
    from otter.test_files import ExceptionTestFile

    with zipfile.ZipFile(zip_path) as zf:
        names = [n for n in zf.namelist() if n.startswith("tests/") and n.endswith(".py")]
        if not names:
            raise ValueError(f"{zip_path} holds no tests/*.py: is it an otter autograder zip?")
        zf.extractall(dest, members=names)
        config = json.loads(zf.read("otter_config.json")) if "otter_config.json" in zf.namelist() else {}
    questions = []
    for name in sorted(names, key=_natural_key):
        path = dest / name
        test_file = ExceptionTestFile.from_file(str(path))
        questions.append(Question(test_file.name, float(test_file.possible), path))
    return config.get("assignment_name"), questions


def _natural_key(text: str):
    import re
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def find_submissions(folder: Path) -> dict[str, Path]:
    """``{student: notebook}`` from ``folder/<student>.ipynb`` and ``folder/<student>/*.ipynb``."""
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.is_dir():
            notebooks = sorted(p for p in path.glob("*.ipynb") if not p.name.startswith("."))
            if len(notebooks) != 1:
                raise ValueError(f"{path} must hold exactly one .ipynb, found {len(notebooks)}")
            student, nb = path.name, notebooks[0]
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
        source = cell.source if isinstance(cell.source, str) else "".join(cell.source)
        stripped = source.strip()
        if stripped.startswith(CHECK_PREFIX) and "\n" not in stripped:
            question = stripped[len(CHECK_PREFIX):].strip("()\"' ")
            for c in pending:
                c.question = question
            pending = []
            continue
        c = Cell(number, source, None)
        if ANSWER_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            pending.append(c)
        cells.append(c)
    return cells


# ----------------------------------------------------------------------- the worker
class TimeLimit(BaseException):
    """Raised inside student code when a step runs out of time (not an Exception, so a
    test runner's ``except Exception`` does not swallow it)."""


def _on_alarm(signum, frame):
    raise TimeLimit("time limit")


def call_with_limit(fn, seconds: float):
    """``(fn(), False)``, or ``(None, True)`` when it ran longer than ``seconds``."""
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return fn(), False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except TimeLimit:
        return None, True


def worker(job_path: Path, progress_path: Path) -> None:
    """Run a job's cells in an IPython shell, then its questions' tests; one JSON line per step."""
    job = json.loads(job_path.read_text())
    limit = job["limit"]
    signal.signal(signal.SIGALRM, _on_alarm)
    from IPython.core.interactiveshell import InteractiveShell
    from otter.nbmeta_config import NBMetadataConfig
    from otter.test_files import create_test_file

    shell = InteractiveShell.instance()
    with open(progress_path, "a") as progress:
        def report(**event):
            progress.write(json.dumps(event) + "\n")
            progress.flush()

        report(event="started")
        for index, source in enumerate(job["cells"]):
            result, timed_out = call_with_limit(lambda: shell.run_cell(source, store_history=False), limit)
            timed_out = timed_out or isinstance(getattr(result, "error_in_exec", None), TimeLimit)
            error = None if timed_out or result is None or result.success else repr(
                result.error_in_exec or result.error_before_exec)
            report(event="cell", index=index, timed_out=timed_out, error=error)
        for question in job["questions"]:
            test_file = create_test_file(question["path"], NBMetadataConfig())
            _, timed_out = call_with_limit(lambda: test_file.run(shell.user_ns), limit)
            report(event="question", name=question["name"], timed_out=timed_out,
                   score=0.0 if timed_out else float(test_file.score),
                   cases=[] if timed_out else [
                       {"name": r.test_case.name, "hidden": r.test_case.hidden,
                        "points": r.test_case.points, "passed": r.passed, "message": r.message}
                       for r in test_file.test_case_results])


# ----------------------------------------------------------------------- the parent
def run_job(cells: list[Cell], questions: list[Question], limit: float, grace: float,
            log_path: Path) -> tuple[list[dict], bool]:
    """Run a worker process; kill it (and its children) when a step outlasts limit + grace.
    Returns (the events it reported, whether it was killed)."""
    env = dict(os.environ, XFL_FAST="1", MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory(prefix="xfl-grade-") as tmp:
        job_path, progress = Path(tmp) / "job.json", Path(tmp) / "progress.jsonl"
        job_path.write_text(json.dumps({"cells": [c.source for c in cells], "limit": limit, "questions": [
            {"name": q.name, "path": str(q.test_path)} for q in questions]}))
        progress.touch()
        work = Path(tmp) / "work"  # the student's code runs here
        work.mkdir()
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "tools.grading", "worker", str(job_path),
                                     str(progress)], cwd=work, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            killed = _watch(proc, progress, limit + grace)
        events = []
        for line in progress.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by the kill
                pass
    return events, killed


def _watch(proc: subprocess.Popen, progress: Path, patience: float) -> bool:
    """Wait for ``proc``; kill its process group if ``progress`` stops growing for ``patience`` s."""
    size, last_change = -1, time.monotonic()
    while proc.poll() is None:
        time.sleep(0.1)
        new_size = progress.stat().st_size
        if new_size != size:
            size, last_change = new_size, time.monotonic()
        elif time.monotonic() - last_change > patience:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            return True
    return False


@dataclass
class Grade:
    student: str
    scores: dict[str, float] = field(default_factory=dict)
    cases: dict[str, list] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def grade_notebook(student: str, nb_path: Path, questions: list[Question], limit: float,
                   grace: float, log_path: Path, assignment: str | None = None) -> Grade:
    """Grade one notebook. When the worker is killed (or dies) in a cell, that cell is dropped
    and the notebook is run again; when it dies in a question's tests, that question scores 0
    and the others are run again."""
    import nbformat

    grade = Grade(student)
    try:
        nb = nbformat.read(nb_path, as_version=4)
    except Exception as e:  # not a notebook at all
        grade.notes.append(f"unreadable notebook: {e}")
        grade.scores = {q.name: 0.0 for q in questions}
        return grade
    submitted_for = nb.metadata.get("otter", {}).get("assignment_name")
    if assignment and submitted_for and submitted_for != assignment:
        grade.notes.append(f"notebook is for {submitted_for}, graded as {assignment}")
    cells, pending = plan_cells(nb), list(questions)
    while pending:
        events, killed = run_job(cells, pending, limit, grace, log_path)
        _record(grade, events, cells)
        pending = [q for q in pending if q.name not in grade.scores]
        if not pending or not events:  # done, or the worker could not even start
            break
        how = f"killed after {limit + grace:g} s without progress" if killed else "ended the grader"
        cells_run = sum(e["event"] == "cell" for e in events)
        if cells_run < len(cells):
            grade.notes.append(f"cell {cells[cells_run].number}: {how}; graded again without it")
            cells = cells[:cells_run] + cells[cells_run + 1:]
        else:
            culprit = pending.pop(0)
            grade.scores[culprit.name], grade.cases[culprit.name] = 0.0, []
            grade.notes.append(f"{culprit.name}: tests {how}")
    for q in pending:
        grade.scores[q.name], grade.cases[q.name] = 0.0, []
        grade.notes.append(f"{q.name}: not graded (the grader failed to start; see the log)")
    return grade


def _record(grade: Grade, events: list[dict], cells: list[Cell]) -> None:
    for e in events:
        if e["event"] == "cell" and e["timed_out"]:
            grade.notes.append(f"cell {cells[e['index']].number}: stopped by the time limit")
        elif e["event"] == "question":
            grade.scores[e["name"]] = e["score"]
            grade.cases[e["name"]] = e["cases"]
            if e["timed_out"]:
                grade.notes.append(f"{e['name']}: tests stopped by the time limit")


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
                 grace: float = 10.0, jobs: int = 1) -> list[Grade]:
    """Grade every notebook in ``submissions``; write ``output`` (CSV) and its JSON and logs."""
    students = find_submissions(submissions)
    logs = output.with_name(f"{output.stem}-logs")
    logs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="xfl-autograder-") as tmp:
        assignment, questions = load_autograder(autograder, Path(tmp))

        def one(item):
            student, nb_path = item
            log = logs / f"{student}.log"
            log.unlink(missing_ok=True)
            return grade_notebook(student, nb_path, questions, limit, grace, log, assignment)

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            grades = list(pool.map(one, students.items()))
    details = {"assignment": assignment, "time_limit_s": limit,
               "questions": {q.name: q.points for q in questions},
               "students": {g.student: {"scores": g.scores, "notes": g.notes, "cases": g.cases}
                            for g in grades}}
    write_text_atomic(output.with_suffix(".json"), json.dumps(details, indent=1))
    write_text_atomic(output, grades_csv(grades, questions))
    return grades


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        worker(Path(argv[1]), Path(argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("autograder", type=Path, help="the chapter's autograder zip")
    parser.add_argument("submissions", type=Path, help="folder of submitted notebooks")
    parser.add_argument("-o", "--output", type=Path, default=Path("grades.csv"))
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds allowed to each code cell and to each question's tests")
    parser.add_argument("--grace", type=float, default=10.0,
                        help="extra seconds before a step that ignores the time limit is killed")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded in parallel")
    args = parser.parse_args(argv)
    grades = grade_folder(args.autograder, args.submissions, args.output, args.timeout, args.grace, args.jobs)
    print(f"graded {len(grades)} notebooks -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
