"""A class graded in one sitting: N notebooks of one chapter through ``tools.grading``, measured.

    python -m bench.grade_class [--chapter ch01_qkv] [--students 200] [--jobs 2] [--out ...]

Makes N distinct notebooks from the chapter's student notebook, its solutions and its plausible
wrong answers (``tests/wrong_answers/<chapter>.py``), four kinds in turn: honest (every answer),
half-done (the first half of the questions), wrong (a wrong answer wherever the chapter has one)
and mixed (wrong and right answers alternating, and a cell that raises). Each ends with a cell of
its own number, so no two are alike and no stored result is reused (a fresh grades folder too).
Then grades them as ``make grade`` does (sandboxed, ``--jobs``) and records in
``bench/results/grade_class.json``: the wall time, the time per notebook, the peak memory (RSS
summed over the grader's whole process tree: this process, its judges, their sandboxes,
sampled every 0.2 s) and the largest single process, the machine's load average before and after
(the grader shares the machine), and each kind's mean score (honest must score full marks).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402

from xfl.atomic_files import write_text_atomic  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "grade_class.json"
KINDS = ("honest", "half_done", "wrong", "mixed")
SAMPLE_S = 0.2


def wrong_answers(chapter: str) -> dict[str, list[str]]:
    """``{question: [wrong answer cell, ...]}`` of ``tests/wrong_answers/<chapter>.py`` ({} if none)."""
    path = ROOT / "tests" / "wrong_answers" / f"{chapter}.py"
    if not path.exists():
        return {}
    spec = importlib.util.spec_from_file_location(f"wrong_answers_{chapter}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {q: list(answers.values()) for q, answers in module.WRONG_ANSWERS.items()}


def answer_cells(student: nbformat.NotebookNode) -> dict[str, list[int]]:
    """``{question: [index of each of its code answer cells]}`` of the student notebook."""
    from tools.grading.grader import plan_cells
    question_of = {c.number: c.question for c in plan_cells(student)}
    cells: dict[str, list[int]] = {}
    for number, cell in enumerate(student.cells, start=1):
        if (cell.cell_type == "code" and "otter_answer_cell" in cell.metadata.get("tags", [])
                and question_of.get(number)):
            cells.setdefault(question_of[number], []).append(number - 1)
    return cells


def class_notebook(k: int, student: nbformat.NotebookNode, solved: nbformat.NotebookNode,
                   wrong: dict[str, list[str]]) -> tuple[str, nbformat.NotebookNode]:
    """(kind, notebook) of student ``k``: kind ``KINDS[k % 4]``, its contents its own."""
    kind = KINDS[k % len(KINDS)]
    nb = nbformat.from_dict(json.loads(json.dumps(student)))
    questions = answer_cells(student)
    for i, (question, indices) in enumerate(questions.items()):
        variants = wrong.get(question, [])
        use_wrong = variants and (kind == "wrong" or (kind == "mixed" and i % 2 == 0))
        filled = kind in ("honest", "wrong", "mixed") or (kind == "half_done" and i < (len(questions) + 1) // 2)
        for j, index in enumerate(indices):
            if use_wrong:
                nb.cells[index].source = variants[k % len(variants)] if j == 0 else ""
            elif filled:
                nb.cells[index].source = solved.cells[index].source
    if kind == "mixed":
        nb.cells.append(nbformat.v4.new_code_cell("raise RuntimeError('unfinished scratch cell')"))
    nb.cells.append(nbformat.v4.new_code_cell(f"class_member = {k}  # student {k} of the class"))
    return kind, nb


class TreeMemory:
    """The peak resident memory of this process and all its descendants, sampled in a thread."""

    def __init__(self, every: float = SAMPLE_S):
        self.every, self.peak_total, self.peak_single, self.samples = every, 0, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = tree_rss(os.getpid())
            self.peak_total = max(self.peak_total, sum(rss))
            self.peak_single = max([self.peak_single, *rss])
            self.samples += 1
            self._stop.wait(self.every)


def tree_rss(root: int) -> list[int]:
    """Resident bytes of ``root`` and each of its descendants (``/proc``)."""
    parent, rss = {}, {}
    page = os.sysconf("SC_PAGE_SIZE")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            statm = (stat.parent / "statm").read_text().split()
        except (OSError, IndexError):
            continue
        pid = int(stat.parent.name)
        parent[pid], rss[pid] = int(fields[1]), int(statm[1]) * page
    tree, frontier = {root}, [root]
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in tree:
                tree.add(child)
                frontier.append(child)
    return [rss[p] for p in tree if p in rss]


def built_exercises(chapter: str, exercises: Path | None, tmp: Path) -> Path:
    """``exercises`` if given, ``_build/exercises`` if it has the chapter and is newer than its
    source and the grader, else the chapter built now into ``tmp``."""
    from tools.grading import exercises as ex
    if exercises is not None:
        return exercises
    built, source = ROOT / "_build" / "exercises", ROOT / "chapters" / chapter / "exercises.md"
    if not source.exists():
        raise ValueError(f"chapter {chapter!r}: expected chapters/{chapter}/exercises.md")
    stamp = built / "autograder" / f"{chapter}-autograder.zip"
    inputs = [source, *(ROOT / "tools" / "grading").glob("*.py")]
    if stamp.exists() and all(p.stat().st_mtime < stamp.stat().st_mtime for p in inputs):
        return built
    ex.build_chapter(source, tmp, run_tests=False)
    return tmp


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.grade_class", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chapter", default="ch01_qkv")
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0, help="as make grade's TIMEOUT")
    parser.add_argument("--exercises", type=Path, default=None, help="a built _build/exercises folder")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.students < 1 or args.jobs < 1:
        raise ValueError(f"--students and --jobs must be at least 1, got {args.students} and {args.jobs}")
    from tools.grading import grader
    with tempfile.TemporaryDirectory(prefix="xfl-bench-class-") as tmp:
        tmp = Path(tmp)
        built = built_exercises(args.chapter, args.exercises, tmp / "exercises")
        name = f"{args.chapter}_exercises.ipynb"
        student = nbformat.read(built / "student" / name, as_version=4)
        solved = nbformat.read(built / "solutions" / name, as_version=4)
        wrong = wrong_answers(args.chapter)
        folder, kinds = tmp / "submissions", {}
        folder.mkdir()
        for k in range(args.students):
            kind, nb = class_notebook(k, student, solved, wrong)
            kinds[f"student{k:04d}"] = kind
            nbformat.write(nb, folder / f"student{k:04d}.ipynb")
        output = tmp / "grades" / "grades.csv"
        load_before = os.getloadavg()
        start = time.monotonic()
        with TreeMemory() as memory:
            grades = grader.grade_folder(built / "autograder" / f"{args.chapter}-autograder.zip", folder, output,
                                         limit=args.timeout, jobs=args.jobs)
        wall = time.monotonic() - start
        load_after = os.getloadavg()
        details = json.loads(output.with_suffix(".json").read_text())
        shutil.rmtree(tmp / "grades", ignore_errors=True)
    possible = sum(details["questions"].values())
    by_kind: dict[str, list[float]] = {}
    for g in grades:
        by_kind.setdefault(kinds[g.student], []).append(sum(g.scores.values()))
    report = {
        "command": "python -m bench.grade_class " + " ".join(argv if argv is not None else sys.argv[1:]),
        "chapter": args.chapter, "students": args.students, "jobs": args.jobs, "time_limit_s": args.timeout,
        "wall_seconds": round(wall, 1), "seconds_per_notebook": round(wall / args.students, 2),
        "peak_rss_tree_mib": round(memory.peak_total / 2**20), "peak_rss_one_process_mib":
            round(memory.peak_single / 2**20), "memory_samples": memory.samples, "sample_every_s": SAMPLE_S,
        "graded": len(grades), "kept_from_earlier_runs": details["kept_from_earlier_runs"],
        "sandboxed": details["sandboxed"], "possible": possible,
        "mean_total_by_kind": {k: round(sum(v) / len(v), 3) for k, v in sorted(by_kind.items())},
        "notebooks_with_notes": sum(bool(g.notes) for g in grades),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
