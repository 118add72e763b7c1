"""Grade a folder of submitted exercise notebooks into a CSV, locally, without Docker.

    python -m tools.grading AUTOGRADER_ZIP SUBMISSIONS_DIR -o grades.csv [--timeout 60] [--jobs 2]

SUBMISSIONS_DIR holds one notebook per student: ``<student>.ipynb``, or ``<student>/<any>.ipynb``.
The grader is four parts, each where its guarantee is enforced:

- ``collect``: finds the submissions and reads them: regular files only, never through a link,
  never blocking, size capped; anything else is a note for that entry;
- ``judge``: a process of the grader's, address space capped, that runs each notebook's tests
  (hidden ones included, from the autograder zip, never on disk) on stand-ins for the student's
  functions; one judge per parallel job, replaced when it dies or overruns;
- ``student``: the student's process in its sandbox (``sandbox``) and the protocol the judge
  accepts from it (events in order, one per cell, a fixed deadline, bounded messages);
- ``results``: each student's result written atomically as soon as it is known; the CSV and JSON
  assembled from those; student text made safe.

Verdicts the submission cannot touch: the notebook runs in its own sandboxed process
(``tools.grading.worker``: no view of the tests, solutions, other submissions, grades or
repository; bounded memory, processes, files and time; killed whole); the tests run in the
judge, where each student function is a ``Proxy`` whose calls send plain data
(``tools.grading.wire``) to the student's process and back. While a question's calls run, the
library functions that would answer it raise (``tools.grading.library_answers``), and a call that
reached one fails its test even if the student's code caught the error.

Time limits. Each code cell, and each question's calls together, get ``--timeout`` seconds (the
tests' own work in the judge does not count). A step that runs over is interrupted (the cell
counts as failed, the question scores 0) and grading goes on. Code that ignores the interrupt is
killed ``--grace`` seconds later; the notebook then runs again in a fresh process without that
cell (or, if it was a question's call, the question scores 0 and the others run again). All of
a notebook's processes share one budget fixed by the assignment (``judge.notebook_budget``), not
by the number of cells the student wrote.

Output: ``grades.csv`` (student, one column per question, total, possible, notes) and
``grades.json`` (every test case's result), assembled from ``grades-results/`` (one file per
student, written as each is graded; a rerun grades only who has no result for the same notebook
and zip, unless ``--regrade``), and ``grades-logs/`` with each student's output (cut at 4 MiB).
Where bwrap cannot run, the grader refuses to grade unless given ``--unsandboxed`` (trusted
notebooks only).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tools.grading.collect import Submission, find_submissions, read_submission
from tools.grading.feedback import feedback_folder, write_feedback
from tools.grading.judge import load_autograder, notebook_budget, plan_cells  # noqa: F401 (plan_cells: for tests)
from tools.grading.library_answers import blocked_names
from tools.grading.roster import Policy, Student, lateness, match_submissions, write_imports
from tools.grading.results import (Grade, ResultStore, csv_cell, display_name, record_id, safe_text, sha256_bytes,
                                   sha256_file, write_outputs)
from tools.grading.sandbox import Limits, SandboxCgroup, SandboxUnavailable, check_bwrap
from tools.grading.student import Sandbox

ROOT = Path(__file__).resolve().parents[2]
JUDGE_MEMORY_MB = 8192  # the judge's address space: torch and otter map ~4 GiB, tests use little
JUDGE_SLACK_S = 120.0  # beyond a notebook's budget: a judge's start and the tests' own work
MAX_RESULT = 64 << 20  # bytes of one judge's result line (messages are capped well below)


class JudgeFailed(Exception):
    """The judge died, overran or answered with something that is not a result."""


class Judge:
    """One judge process (``tools.grading.judge``), started with the run's configuration."""

    def __init__(self, config: dict):
        env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen([sys.executable, "-c", "from tools.grading.judge import main; main()"],
                                     cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, encoding="utf-8")
        self._send(config)

    def _send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except OSError as e:
            raise JudgeFailed(f"the grader's judge process ended ({e.strerror})") from None

    def grade(self, job: dict, seconds: float) -> dict:
        """The judge's result for one notebook, or ``JudgeFailed`` after ``seconds``."""
        overran = threading.Event()
        timer = threading.Timer(seconds, lambda: (overran.set(), self.proc.kill()))
        timer.start()
        try:
            self._send(job)
            line = self.proc.stdout.readline(MAX_RESULT)
        finally:
            timer.cancel()
        if overran.is_set():
            raise JudgeFailed(f"its tests did not finish within {seconds:g} s")
        if not line.endswith("\n"):
            self.kill()
            raise JudgeFailed("the grader's judge process ended while running its tests (out of memory?)")
        return json.loads(line)

    def kill(self) -> None:
        """End the judge; its sandboxes end with it (bwrap's ``--die-with-parent``); remove what
        it left: its sandboxes' cgroups and job folders (the notebook's cells)."""
        self.proc.kill()
        self.proc.wait()
        SandboxCgroup.remove_all(f"xfl-grade-{self.proc.pid}-")
        for folder in Path(tempfile.gettempdir()).glob(f"xfl-grade-{self.proc.pid}-*"):
            shutil.rmtree(folder, ignore_errors=True)


def read_text(sub: Submission) -> tuple[str | None, str | None, str | None]:
    """(the notebook's text, its sha256, None), or (None, sha256 or None, the note) when it is
    refused (``collect``) or is not UTF-8 text."""
    try:
        data = read_submission(sub)
    except (ValueError, OSError) as e:
        refused = str(e).startswith(("refused", "two submissions", "folder", "skipped"))
        return None, None, str(e) if refused else f"unreadable notebook: {e}"
    try:
        return data.decode("utf-8"), sha256_bytes(data), None
    except UnicodeError:
        return None, sha256_bytes(data), "unreadable notebook: not UTF-8 text"


def grader_version(root: Path = ROOT) -> str:
    """The sha256 of the grader's and ``xfl``'s sources: a change of either can change a grade."""
    digest = hashlib.sha256()
    for path in sorted([*(root / "tools" / "grading").glob("*.py"), *(root / "xfl").rglob("*.py")]):
        digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


def record_ids(students) -> dict[str, str]:
    """A record id per student (``results.record_id``), lengthened until all are distinct."""
    students = list(students)
    for digits in range(12, 65, 4):
        ids = {s: record_id(s, digits) for s in students}
        if len(set(ids.values())) == len(ids):
            return ids
    raise ValueError(f"two students have one sha256: {students}")


def name_clashes(students) -> dict[str, str]:
    """``{student: note}`` for names shown alike (``display_name``: NFC, escapes, the cut at 80
    characters): the CSV's id column tells their rows apart."""
    shown: dict[str, list[str]] = {}
    for s in students:
        shown.setdefault(display_name(s), []).append(s)
    ids = record_ids(students)
    return {s: f"its name shows as another submission's (id {', '.join(ids[o] for o in group if o != s)}): "
               "tell the rows apart by the id column" for group in shown.values() if len(group) > 1 for s in group}


def grade_one(sub: Submission, store: ResultStore, judges: dict[int, Judge], config: dict, job: dict,
              seconds: float, regrade: bool) -> Grade:
    """Grade ``sub`` (or take its stored result) and record it; never raises for one student."""
    grade = Grade(sub.student)
    text, sha, problem = read_text(sub)
    if not regrade and (stored := store.have(sub.student, sha)):
        return stored
    if problem:
        grade.note(problem)
        store.record(sub.student, grade, sha)
        return grade
    Path(job["log"]).unlink(missing_ok=True)
    failed = False
    try:
        if judges.get(job["slot"]) is None:
            judges[job["slot"]] = Judge(config)
        result = judges[job["slot"]].grade(job | {"text": text}, seconds)
        grade.scores, grade.cases, grade.limited = result["scores"], result["cases"], bool(result.get("limited"))
        failed = bool(result.get("grade_again"))  # its process never started: the machine, not the notebook
        for note in result["notes"]:
            grade.note(note)
    except Exception as e:  # a judge that died or overran, a grader fault: this student's note
        if judges.get(job["slot"]) is not None:
            judges.pop(job["slot"]).kill()
        grade.note(f"not graded: {e if isinstance(e, JudgeFailed) else f'{type(e).__name__}: {e}'}")
        failed = True
    store.record(sub.student, grade, sha, grade_again=failed)
    return grade


def grade_folder(autograder: Path, submissions: Path, output: Path, limit: float = 60.0,
                 grace: float = 10.0, jobs: int = 1, block_library: bool = True,
                 sandbox: Sandbox | None = None, budget: float | None = None,
                 judge_memory_mb: int = JUDGE_MEMORY_MB, regrade: bool = False,
                 roster: list[Student] | None = None, policy: Policy | None = None,
                 times: dict | None = None, lms_assignment: str | None = None) -> list[Grade]:
    """Grade every notebook in ``submissions``, recording each student's result as it comes
    (``<output>-results/``), then write ``output`` (CSV) and its JSON from them. Each student
    runs in a sandbox (``SandboxUnavailable`` if none can start here, unless
    ``sandbox.enabled`` is False). ``block_library=False`` lets the library answer (to check
    that its answers are right). With ``roster`` (``tools.grading.roster``): the LMS's file names
    matched to students (files of no one listed, not graded), ``policy``'s lateness, and the
    gradebook-import CSVs beside ``output``."""
    sandbox = sandbox or Sandbox()
    output = Path(output).absolute()  # the judges run in the repository root, not in the caller's folder
    if sandbox.enabled:
        check_bwrap()
    assignment, questions = load_autograder(autograder)  # before any student's code runs
    budget = budget or notebook_budget(limit, grace, len(questions))
    logs = output.with_name(f"{output.stem}-logs")
    logs.mkdir(parents=True, exist_ok=True)
    config = {"autograder": str(Path(autograder).resolve()), "limit": limit, "grace": grace, "budget": budget,
              "library": blocked_names(assignment) if block_library else {}, "memory_mb": judge_memory_mb,
              "sandboxed": sandbox.enabled, "limits": dataclasses.asdict(sandbox.limits),
              **({"own_uid": True} if sandbox.own_uid else {})}
    skipped: list[tuple[str, str]] = []
    subs = find_submissions(submissions, skipped)
    matches, owner = [], {}  # owner: {the file's student key: the roster id}
    if roster is not None:  # results stay keyed by the file's name: adding a roster later grades nothing again
        matches, unmatched = match_submissions(subs, roster, times)
        skipped += [(name, f"matches no roster student: {why}") for name, why in unmatched]
        every = list(subs)
        subs = {m.sub.student: m.sub for m in matches if m.sub is not None}
        owner = {m.sub.student: m.student.id for m in matches if m.sub is not None}
        files = {"roster_files": {csv_cell(display_name(k)): csv_cell(display_name(v)) for k, v in owner.items()},
                 "files_not_graded": [csv_cell(display_name(k)) for k in every if k not in owner]}
        for m in matches:
            if m.sub is not None:
                m.sub.remarks += m.notes
    ids = record_ids([m.student.id for m in matches]) if roster is not None else record_ids(subs)
    clashes = name_clashes(subs) if roster is None else {}
    store = ResultStore(output.with_name(f"{output.stem}-results"), sha256_file(autograder),
                        {k: v for k, v in config.items() if k != "autograder"} | {"grader": grader_version()})
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(max(1, jobs)):
        slots.put(slot)
    judges: dict[int, Judge] = {}

    def one(sub: Submission) -> Grade:
        key = owner.get(sub.student, sub.student)  # the roster id, or the file's name
        file_id = ids[key] if key == sub.student else record_id(sub.student)  # the log follows the file
        log = logs / f"{display_name(sub.student)}.{file_id}.log"
        slot = slots.get()
        try:
            job = {"student": display_name(sub.student), "log": str(log), "slot": slot}
            grade = grade_one(sub, store, judges, config, job, budget + JUDGE_SLACK_S, regrade)
        finally:
            slots.put(slot)
        grade.id, grade.student = ids[key], display_name(key)
        for note in [*sub.remarks, *filter(None, [clashes.get(sub.student)])]:  # this run's, not stored
            if note not in grade.notes:
                grade.note(note)
        return grade

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            grades = list(pool.map(one, subs.values()))
    finally:
        for judge in judges.values():
            judge.kill()
    limited = sum(g.limited for g in store.kept)
    people = roster_columns(matches, grades, ids, policy) if roster is not None else None
    write_outputs(output, grades, questions, {
        "assignment": assignment, "time_limit_s": limit, "notebook_budget_s": budget, "sandboxed": sandbox.enabled,
        "config_sha256": store.config_sha, "kept_from_earlier_runs": len(store.kept),
        "kept_cut_by_time_limits": limited, "skipped": [{"name": safe_text(n, 200), "why": w} for n, w in skipped]}
        | ({"lms_assignment": lms_assignment or assignment, "due": policy and policy.due.isoformat(),
            "late_penalty_pct_per_day": policy and policy.penalty_pct, "cutoff_days": policy and policy.cutoff_days}
           | files | {"no_submission": sum(m.sub is None for m in matches)} if roster is not None else {}), people)
    if roster is not None:
        write_imports(output, lms_assignment or assignment)
    report_run(store, skipped)
    for m in matches:
        if m.sub is None:
            print(f"no submission: {m.student.id} {m.student.name!r}", file=sys.stderr)
    return grades


def roster_columns(matches, grades: list[Grade], ids: dict[str, str], policy: Policy | None) -> dict[str, dict]:
    """``{record id: name, email, lateness}`` per roster student; a row (appended to ``grades``)
    for each student without a submission; each lateness note on its student's row."""
    by_id = {g.id: g for g in grades}
    columns = {}
    for m in matches:
        rid = ids[m.student.id]
        if m.sub is None:
            by_id[rid] = Grade(display_name(m.student.id), notes=["no submission"], id=rid)
            grades.append(by_id[rid])
        late = lateness(m, policy)
        if late.note:
            by_id[rid].note(late.note)
        columns[rid] = {"name": m.student.name, "email": m.student.email, "submitted": late.submitted,
                        "late_days": late.late_days, "penalty_pct": f"{late.penalty_pct:g}" if policy else ""}
    grades.sort(key=lambda g: g.student)
    return columns



def report_run(store: ResultStore, skipped: list[tuple[str, str]]) -> None:
    """What a rerun kept or graded again, and every file of the folder that is no submission, on stderr."""
    if store.kept:
        limited = sum(g.limited for g in store.kept)
        print(f"kept {len(store.kept)} results of an earlier run with the same notebook, zip and configuration"
              + (f"; {limited} of them were cut by its time limits" if limited else "")
              + " (--regrade grades them again)", file=sys.stderr)
    if store.changed:
        print(f"graded {store.changed} notebooks again: their stored results were made under another "
              "configuration (limits, budget, sandbox, or the grader's version)", file=sys.stderr)
    for name, why in skipped:
        print(f"skipped {safe_text(name, 200)!r}: {why}", file=sys.stderr)


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
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds all of one notebook's processes get (default: judge.notebook_budget)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded in parallel")
    parser.add_argument("--memory-mb", type=int, default=Limits.memory_mb,
                        help="address space of each student's process, MiB (CUDA PyTorch alone maps ~3.3 GiB)")
    parser.add_argument("--sandbox-memory-mb", type=int, default=Limits.sandbox_memory_mb,
                        help="memory all of one student's processes hold together, MiB (as root, a memory cgroup)")
    parser.add_argument("--sandbox-cpus", type=float, default=Limits.cpus,
                        help="CPUs' time all of one student's processes get together (as root, a cpu cgroup)")
    parser.add_argument("--judge-memory-mb", type=int, default=JUDGE_MEMORY_MB,
                        help="address space of the grader's process that runs the tests, MiB")
    parser.add_argument("--regrade", action="store_true", help="grade again students already graded")
    parser.add_argument("--unsandboxed", action="store_true",
                        help="run students WITHOUT the bubblewrap sandbox: only for notebooks you trust")
    parser.add_argument("--reveal-hidden", action="store_true",
                        help="the feedback files show the hidden tests' messages (they can quote hidden inputs)")
    course = parser.add_argument_group("the course (tools.grading.roster)")
    course.add_argument("--roster", type=Path, help="CSV of id, name, email[, extension]: the LMS's file names "
                        "(Canvas, Moodle) matched to students; ID and email columns; gradebook-import CSVs")
    course.add_argument("--due", help="due date, ISO 8601 with its UTC offset (e.g. 2026-12-01T23:59+01:00)")
    course.add_argument("--late-penalty", type=float, default=0.0,
                        help="percent of the points off per started day late")
    course.add_argument("--cutoff-days", type=float, default=None, help="more days late than this: zero")
    course.add_argument("--times", type=Path, help="CSV of file, submitted: the times the LMS recorded")
    course.add_argument("--lms-assignment", help="the assignment's column name in the gradebook imports "
                        "(Canvas: 'Name (assignment id)' to update an existing one)")
    args = parser.parse_args(argv)
    try:
        course_args = read_course(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    limits = Limits(memory_mb=args.memory_mb, sandbox_memory_mb=args.sandbox_memory_mb, cpus=args.sandbox_cpus)
    sandbox = Sandbox(enabled=not args.unsandboxed, limits=limits)
    try:
        grades = grade_folder(args.autograder, args.submissions, args.output, args.timeout, args.grace,
                              args.jobs, sandbox=sandbox, budget=args.budget,
                              judge_memory_mb=args.judge_memory_mb, regrade=args.regrade, **course_args)
    except SandboxUnavailable as e:
        print(f"refusing to grade: {e}.\n{NO_SANDBOX}", file=sys.stderr)
        return 2
    print(run_summary(grades, args.output))
    files = write_feedback(args.output.with_suffix(".json"), reveal_hidden=args.reveal_hidden)
    print(f"feedback for {len(files) // 2} students -> {feedback_folder(args.output.with_suffix('.json'))}"
          + (" (hidden tests' messages shown)" if args.reveal_hidden else ""))
    return 0


def read_course(args) -> dict:
    """The roster, late policy and times of the command line, all checked before anything is
    graded or written (``ValueError`` naming the value and what was expected)."""
    from tools.grading.roster import make_policy, read_roster, read_times

    if args.roster is None:
        given = [f"--{n.replace('_', '-')}" for n in ("due", "times", "lms_assignment") if getattr(args, n)]
        if given or args.late_penalty or args.cutoff_days is not None:
            raise ValueError(f"{' '.join(given) or '--late-penalty/--cutoff-days'} needs --roster (a CSV of id, "
                             "name, email)")
        return {}
    if args.due is None and (args.late_penalty or args.cutoff_days is not None):
        raise ValueError("--late-penalty and --cutoff-days need --due (the due date)")
    return {"roster": read_roster(args.roster),
            "policy": make_policy(args.due, args.late_penalty, args.cutoff_days) if args.due else None,
            "times": read_times(args.times) if args.times else None, "lms_assignment": args.lms_assignment}


NO_SANDBOX = ("Each notebook runs in a bubblewrap sandbox, which needs Linux (user namespaces). Without it "
              "a notebook can read the solutions and other students' work, change the hidden tests and the "
              "grades, and kill the grader. On Linux: install bubblewrap (make sandbox-deps). On macOS or "
              "Windows: grade inside a Linux virtual machine or container that allows user namespaces "
              "(e.g. docker run --security-opt seccomp=unconfined). Or pass --unsandboxed, only for "
              "notebooks you trust.")


def run_summary(grades: list[Grade], output: Path) -> str:
    """What this run did: how many notebooks it graded and how many results it kept from an
    earlier run (read back from the JSON it wrote)."""
    details = json.loads(output.with_suffix(".json").read_text())
    kept, absent = details.get("kept_from_earlier_runs", 0), details.get("no_submission", 0)
    missing = f"; {absent} roster students have no submission" if absent else ""
    if kept == len(grades) - absent:
        return (f"nothing new to grade: all {kept} notebooks have results for the same notebook, zip and "
                f"configuration (--regrade grades them again){missing} -> {output}")
    return f"graded {len(grades) - absent - kept} notebooks, kept {kept} earlier results{missing} -> {output}"


if __name__ == "__main__":
    sys.exit(main())
