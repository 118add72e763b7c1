"""The judge: a process of the grader's that runs the tests of one notebook at a time.

    python -c "from tools.grading.judge import main; main()"   (started by tools.grading.grader)

The tests (hidden ones included) come from the autograder zip: otter-grader test files, where a
test receives the student's function and asserts. They run here, on ``Proxy`` stand-ins whose
calls run in the student's sandboxed process (``tools.grading.student``), so every comparison
uses this process's own, unpatched torch and builtins. This process is bounded in its turn: its
address space is capped (``RLIMIT_AS``, ``--grader-memory-mb``), so an answer whose shape makes
a test's arithmetic allocate gigabytes fails that test (a failed allocation is an error in the
test) instead of taking the machine; and if it dies anyway, the grader records a note for that
one student and starts another judge. A test case's message is cut at
``results.MAX_MESSAGE`` characters; a question's proxies are built only for the names its tests
mention.

Protocol: the first line on stdin configures it (zip, limits, sandbox); then one line per
notebook in, one line of results out (on the original stdout; what the tests print goes to
stderr).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tools.grading.magics import cell_notes
from tools.grading.results import MAX_MESSAGE, Grade, quoted
from tools.grading.sandbox import Limits
from tools.grading.student import (STARTUP_S, Cell, ProcessLost, Proxy, QuestionTimeLimit, Sandbox,
                                   StudentProcess)

ANSWER_TAGS = {"otter_answer_cell", "otter_assign_solution_cell"}  # student / solutions notebook
CHECK_PREFIX = "grader.check("
SPARE_CELLS = 10  # the notebook budget allows this many cells beyond one per question


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


def run_question(question: Question, student: StudentProcess, functions: list[str],
                 limit: float) -> tuple[float, list[dict], str | None]:
    """(score, test case results, a note) for one question, its tests run here on proxies (for
    the names its tests mention); messages cut at ``MAX_MESSAGE`` characters."""
    from otter.test_files import ExceptionTestFile

    test_file = ExceptionTestFile.from_string(question.source, path=f"{question.name}.py")
    budget = [limit]  # seconds of the student's time left to this question's calls
    mentioned = set(re.findall(r"[A-Za-z_]\w*", question.source))
    env = {name: Proxy(student, question.name, name, budget) for name in functions if name in mentioned}
    try:
        test_file.run(env)
    except QuestionTimeLimit:
        return 0.0, [], f"{question.name}: tests stopped by the time limit"
    return float(test_file.score), [
        {"name": r.test_case.name, "hidden": r.test_case.hidden, "points": r.test_case.points,
         "passed": r.passed, "message": _cut(r.message)} for r in test_file.test_case_results], None


def _cut(message) -> str | None:
    if message is None:
        return None
    message = str(message)
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE] + " [message cut]"


def notebook_budget(limit: float, grace: float, questions: int) -> float:
    """Seconds all of one notebook's processes get: fixed by the assignment, not by how many
    cells the student adds (a cell per question plus ``SPARE_CELLS``, each ``limit + grace``)."""
    return STARTUP_S + (limit + grace) * (questions + SPARE_CELLS)


def read_notebook(text: str, grade: Grade, assignment: str | None) -> list[Cell] | None:
    """The cells to run, or None (with a note) when ``text`` is not a notebook."""
    import nbformat

    try:
        nb = nbformat.reads(text, as_version=4)
        cells = plan_cells(nb)
    except Exception as e:  # not a notebook at all
        grade.note(f"unreadable notebook: {type(e).__name__} {quoted(e, 120)}")
        return None
    otter_meta = nb.metadata.get("otter", {})
    submitted_for = otter_meta.get("assignment_name") if isinstance(otter_meta, dict) else None
    if assignment and submitted_for and submitted_for != assignment:
        grade.note(f"the notebook names another assignment, {quoted(submitted_for)}; graded as {assignment}")
    return cells


def grade_notebook(student: str, text: str, questions: list[Question], limit: float,
                   grace: float, log_path: Path, assignment: str | None = None,
                   library: dict[str, list[str]] | None = None, sandbox: Sandbox | None = None,
                   slot: int = 0, budget: float | None = None) -> Grade:
    """Grade one notebook (its JSON ``text``). A cell that kills or ends the student's process
    is dropped and the notebook runs again; a question whose tests do so scores 0 and the
    others run again. All its processes together get ``budget`` seconds (``notebook_budget``),
    after which grading stops and what is not graded scores 0. A process that never started (no
    event: no student code had run) drops no cell: the grade is marked ``grade_again``."""
    grade = Grade(student, {q.name: 0.0 for q in questions})
    cells = read_notebook(text, grade, assignment)
    if cells is None:
        return grade
    pending, why = list(questions), None  # why: the last attempt's reason to stop before its questions
    budget = budget or notebook_budget(limit, grace, len(questions))
    end = time.monotonic() + budget
    while pending and time.monotonic() < end:
        with StudentProcess(cells, limit, grace, log_path, library or {}, sandbox or Sandbox(), slot,
                            end - time.monotonic()) as proc:
            ran, stopped, functions = proc.run_cells()
            if stopped and not proc.started:  # no student code ran: the machine's fault, not a cell's
                grade.grade_again = True
                why = (f"the notebook's process did not start ({stopped}; a busy machine?); no cell of it ran, "
                       "and a rerun grades it again")
                break
            for e in ran:
                if e.get("timed_out") is True:
                    grade.limited = True
                    grade.note(f"cell {cells[e['index']].number}: stopped by the time limit")
                for note in cell_notes(e, cells[e["index"]].number):  # raised, skipped a shell line
                    if note not in grade.notes:  # a notebook graded again runs its cells again
                        grade.note(note)
            grade.limited |= bool(stopped) and is_time_limit(stopped)
            if stopped and len(ran) < len(cells) and time.monotonic() < end:
                grade.note(f"cell {cells[len(ran)].number}: {stopped}; graded again without it")
                cells = cells[:len(ran)] + cells[len(ran) + 1:]
                continue
            if stopped:  # at its functions, or with no time left to run the notebook again
                if len(ran) < len(cells):
                    grade.note(f"cell {cells[len(ran)].number}: {stopped}")
                why = stopped
                break
            pending = _grade_questions(grade, pending, proc, functions, limit)
    if pending and time.monotonic() >= end:
        grade.limited, why = True, f"the notebook's time budget of {budget:g} s ran out"
    for q in pending:
        grade.scores[q.name], grade.cases[q.name] = 0.0, []
        grade.note(f"{q.name}: not graded: {why or 'the notebook stopped (see the log)'}")
    if grade.limited:
        grade.note(f"cut by this run's time limits (--timeout {limit:g}, --grace {grace:g}, budget {budget:g} s); "
                   "a rerun with other limits, or --regrade, grades it again")
    return grade


def is_time_limit(why: str) -> bool:
    """Whether a reason to stop is a time limit of the run (not the notebook's own doing)."""
    return "time" in why or "without progress" in why


def _grade_questions(grade: Grade, pending: list[Question], proc: StudentProcess,
                     functions: list[str], limit: float) -> list[Question]:
    """Grade questions until the process is lost; return the ones left to grade."""
    for i, q in enumerate(pending):
        try:
            score, cases, note = run_question(q, proc, functions, limit)
        except ProcessLost as e:
            grade.scores[q.name], grade.cases[q.name] = 0.0, []
            grade.limited |= is_time_limit(str(e))
            grade.note(f"{q.name}: tests {e}")
            return pending[i + 1:]
        grade.scores[q.name], grade.cases[q.name] = score, cases
        if note:
            grade.limited |= is_time_limit(note)
            grade.note(note)
    return []


# --------------------------------------------------------------------------- serving
def limit_memory(megabytes: int) -> None:
    """Cap this process's address space (the soft limit: the student's process, started from
    here, sets its own lower hard limit)."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, hard))


def serve(lines, out) -> None:
    """Read the configuration, then grade one notebook per line, writing one result per line."""
    config = json.loads(next(lines))
    limit_memory(config["memory_mb"])
    assignment, questions = load_autograder(Path(config["autograder"]))
    limits = Limits(**config["limits"])
    sandbox = Sandbox(enabled=config["sandboxed"], limits=limits, own_uid=config.get("own_uid", False))
    for line in lines:
        job = json.loads(line)
        grade = grade_notebook(job["student"], job["text"], questions, config["limit"], config["grace"],
                               Path(job["log"]), assignment, config["library"], sandbox, job["slot"],
                               config["budget"])
        out.write(json.dumps({"scores": grade.scores, "cases": grade.cases, "notes": grade.notes,
                              "limited": grade.limited, "grade_again": grade.grade_again}) + "\n")
        out.flush()


def main() -> None:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the tests print goes to stderr, not into the results
    serve(iter(sys.stdin.readline, ""), out)
