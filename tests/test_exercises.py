"""The graded exercises: sources, student build, autograder and the no-Docker grader.

One otter build of every chapter per session (in a temporary folder), then:
solutions get full marks and unfilled stubs get none (run in this process, fast); the student
files leak no solution line and no hidden test; and a set of fixture submissions go through
the real grader (subprocesses, time limits) and get the expected scores.
"""

from __future__ import annotations

import ast
import csv
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools import exercises, grading  # noqa: E402

SOURCES = exercises.sources(ROOT)
CHAPTERS = [exercises.chapter_of(s) for s in SOURCES]


def test_every_chapter_has_exercises():
    """ch01..ch09 each have an exercise source (later chapters may add theirs)."""
    numbers = {c[:4] for c in CHAPTERS}
    assert {f"ch0{i}" for i in range(1, 10)} <= numbers, sorted(numbers)


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Path:
    """Every chapter built once (otter assign without its own test run; the tests below run them)."""
    out = tmp_path_factory.mktemp("exercises")
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda s: exercises.build_chapter(s, out, run_tests=False), SOURCES))
    return out


def paths(built: Path, chapter: str) -> dict[str, Path]:
    return {"student": built / "student" / f"{chapter}_exercises.ipynb",
            "solutions": built / "solutions" / f"{chapter}_exercises.ipynb",
            "autograder": built / "autograder" / f"{chapter}-autograder.zip"}


def run_in_process(nb_path: Path, autograder: Path, tmp: Path) -> dict[str, tuple[float, float, list[bool]]]:
    """Execute a notebook's code cells in a fresh namespace and run every question's tests:
    {question: (score, possible, [passed per test case])}. No time limits: trusted notebooks only."""
    from IPython.core.inputtransformer2 import TransformerManager
    from otter.nbmeta_config import NBMetadataConfig
    from otter.test_files import create_test_file

    _, questions = grading.load_autograder(autograder, tmp)
    namespace: dict = {"__name__": "__main__"}
    transform = TransformerManager().transform_cell
    for cell in grading.plan_cells(nbformat.read(nb_path, as_version=4)):
        try:
            exec(compile(transform(cell.source), f"<{nb_path.name}>", "exec"), namespace)
        except Exception:  # an unfilled cell may fail; its tests will say so
            pass
    results = {}
    for q in questions:
        test_file = create_test_file(str(q.test_path), NBMetadataConfig())
        test_file.run(namespace)
        results[q.name] = (test_file.score, q.points, [r.passed for r in test_file.test_case_results])
    return results


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solutions_pass_and_stubs_fail(built, chapter, tmp_path):
    p = paths(built, chapter)
    solved = run_in_process(p["solutions"], p["autograder"], tmp_path / "a")
    assert len(solved) >= 3, f"{chapter} has {len(solved)} graded questions, expected at least 3"
    for name, (score, possible, passed) in solved.items():
        assert score == possible > 0 and all(passed), f"{chapter} {name}: solution scores {score}/{possible}"
        assert len(passed) >= 2, f"{chapter} {name}: expected a public and a hidden test"
    unfilled = run_in_process(p["student"], p["autograder"], tmp_path / "b")
    for name, (score, possible, passed) in unfilled.items():
        assert score == 0 and not any(passed), f"{chapter} {name}: the unfilled stub passes {passed}"


# --------------------------------------------------------------------------- leaks
def solution_lines(source: Path) -> set[str]:
    """Every code line between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` in the source."""
    lines, inside = set(), False
    for cell in jupytext.read(source).cells:
        if cell.cell_type != "code":
            continue
        for line in cell.source.splitlines():
            text = line.strip()
            if text.startswith("# BEGIN SOLUTION"):
                inside = True
            elif text.startswith("# END SOLUTION"):
                inside = False
            elif inside and text and not text.startswith("#"):
                lines.add(text)
    return lines


def split_test_cases(autograder: Path, tmp: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(public, hidden) test cases of an autograder zip as (function name, unparsed body)."""
    _, questions = grading.load_autograder(autograder, tmp)
    public, hidden = [], []
    for q in questions:
        for node in ast.parse(q.test_path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                (decorator,) = node.decorator_list
                is_hidden = any(k.arg == "hidden" and k.value.value for k in decorator.keywords)
                body = "\n".join(ast.unparse(stmt) for stmt in node.body)
                (hidden if is_hidden else public).append((node.name, body))
    return public, hidden


def student_text(built: Path, chapter: str) -> str:
    """Everything a student sees: the notebook's cells and the book's page for the chapter."""
    nb = nbformat.read(paths(built, chapter)["student"], as_version=4)
    page = exercises.page_markdown(nb, f"{chapter}_exercises.ipynb")
    return "\n".join(c.source for c in nb.cells) + "\n" + page


def visible_source_lines(source: Path) -> set[str]:
    """Lines of the source that students are meant to see: everything outside test blocks and
    solution blocks (prompts, imports, setup)."""
    lines, hidden_block = set(), False
    for cell in jupytext.read(source).cells:
        text = cell.source.strip()
        if cell.cell_type == "raw":
            if text.startswith(("# BEGIN TESTS", "# BEGIN SOLUTION")):
                hidden_block = True
            elif text.startswith(("# END TESTS", "# END SOLUTION")):
                hidden_block = False
        elif not hidden_block:
            lines |= {ln.strip() for ln in cell.source.splitlines()}
    return lines


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_student_files_leak_no_solution_and_no_hidden_test(built, chapter, tmp_path):
    source = ROOT / "chapters" / chapter / "exercises.md"
    text = student_text(built, chapter)
    student_lines = {line.strip() for line in text.splitlines()}
    for line in solution_lines(source):
        assert line not in student_lines, f"{chapter}: solution line leaks into the student build: {line!r}"
    public, hidden = split_test_cases(paths(built, chapter)["autograder"], tmp_path)
    assert public and hidden
    # the public tests are what a student runs: all of them ship, bundled in the setup cell
    for name, _ in public:
        assert f"def {name}(" in text, f"{chapter}: public test {name} missing from the student notebook"
    allowed = visible_source_lines(source) | {ln.strip() for _, body in public for ln in body.splitlines()}
    for name, body in hidden:
        assert name not in text, f"{chapter}: hidden test {name} leaks into the student build"
        for line in {ln.strip() for ln in body.splitlines()} - allowed:
            assert line not in student_lines, f"{chapter}: hidden test line leaks: {line!r}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_student_notebook_is_colab_ready(built, chapter):
    """First code cell installs xfl from the book's repository on Colab, and only there."""
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    nb = nbformat.read(paths(built, chapter)["student"], as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code").source
    assert 'if "google.colab" in sys.modules:' in first and f"git+{repo}" in first and "otter-grader" in first
    setup = [c.source for c in nb.cells if "otter.Notebook(" in c.source]
    assert len(setup) == 1 and "PUBLIC_TESTS" in setup[0], "the setup cell must bundle the public tests"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_points_in_headings_match_the_tests(built, chapter, tmp_path):
    _, questions = grading.load_autograder(paths(built, chapter)["autograder"], tmp_path)
    nb = nbformat.read(paths(built, chapter)["student"], as_version=4)
    headings = [m for c in nb.cells if c.cell_type == "markdown"
                for m in re.findall(r"^## Question (\d+): .*\((\d+) points?\)$", c.source, re.M)]
    assert [(f"q{n}", float(p)) for n, p in headings] == [(q.name, q.points) for q in questions]


def test_book_pages_come_from_the_student_build(built, tmp_path):
    pages = exercises.write_pages(built, tmp_path / "pages")
    assert [p.stem for p in pages] == CHAPTERS
    text = pages[0].read_text()
    assert text.startswith("# Exercises:") and "grader.check(\"q1\")" in text and "PUBLIC_TESTS" not in text


# --------------------------------------------------------------- the real grader
LIMIT, GRACE = 8.0, 3.0  # seconds; generous enough for a busy 2-core CI machine


def submission(student: nbformat.NotebookNode, solved: nbformat.NotebookNode,
               edits: dict[str, str | None]) -> nbformat.NotebookNode:
    """The student notebook with every answer cell filled in from the solutions, then the
    answer cell of each question in ``edits`` replaced by new source, or deleted (None)."""
    nb = nbformat.from_dict(json.loads(json.dumps(student)))
    assert len(nb.cells) == len(solved.cells)
    question_of = {c.number: c.question for c in grading.plan_cells(nb)}
    kept = []
    for number, (cell, answer) in enumerate(zip(nb.cells, solved.cells), start=1):
        if "otter_answer_cell" in cell.metadata.get("tags", []):
            cell.source = answer.source
            edit = edits.get(question_of[number], cell.source)
            if edit is None:
                continue
            cell.source = edit
        kept.append(cell)
    nb.cells = kept
    return nb


SLOW_SCALE = '''
def attention(q, k, v):
    weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], dim=-1)  # d_k, not its root
    return weights @ v, weights
'''
LOOPS = '''
def attention_scores(q, k):
    while True:
        pass
'''
IGNORES_INTERRUPTS = '''
import time
while True:  # catches the time limit's interrupt too: only a kill stops it
    try:
        time.sleep(0.05)
    except BaseException:
        pass
'''
FIXTURES = {  # student: (edits to the ch01 solutions, expected {question: score})
    "correct": ({}, {"q1": 3, "q2": 4, "q3": 3}),
    "partly_wrong": ({"q2": SLOW_SCALE}, {"q1": 3, "q2": 2, "q3": 2}),
    "raises": ({"q1": 'raise RuntimeError("not done yet")'}, {"q1": 0, "q2": 4, "q3": 3}),
    "loops": ({"q1": LOOPS}, {"q1": 0, "q2": 4, "q3": 3}),
    "hangs": ({"q1": IGNORES_INTERRUPTS}, {"q1": 0, "q2": 4, "q3": 3}),
    "deleted_cell": ({"q3": None}, {"q1": 3, "q2": 4, "q3": 0}),
}


@pytest.fixture(scope="module")
def graded(built, tmp_path_factory):
    """The ch01 fixture submissions graded by ``tools.grading`` (2 notebooks at a time)."""
    p = paths(built, "ch01_qkv")
    student_nb, solved = (nbformat.read(p[k], as_version=4) for k in ("student", "solutions"))
    folder = tmp_path_factory.mktemp("submissions")
    for student, (edits, _) in FIXTURES.items():
        (folder / student).mkdir()
        nbformat.write(submission(student_nb, solved, edits), folder / student / "ch01_qkv_exercises.ipynb")
    (folder / "garbled.ipynb").write_text("this is not a notebook")
    output = tmp_path_factory.mktemp("grades") / "grades.csv"
    grading.grade_folder(p["autograder"], folder, output, limit=LIMIT, grace=GRACE, jobs=2)
    with open(output) as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    return rows, json.loads(output.with_suffix(".json").read_text()), folder, output


@pytest.mark.parametrize("student", FIXTURES)
def test_fixture_submission_scores(graded, student):
    rows, _, _, _ = graded
    expected = FIXTURES[student][1]
    row = rows[student]
    assert {q: float(row[q]) for q in expected} == expected, row
    assert float(row["total"]) == sum(expected.values()) and float(row["possible"]) == 10


def test_time_limits_are_reported(graded):
    rows, details, _, _ = graded
    assert "q1: tests stopped by the time limit" in rows["loops"]["notes"]
    assert "killed after 11 s without progress; graded again without it" in rows["hangs"]["notes"]
    assert rows["correct"]["notes"] == "" and details["students"]["correct"]["cases"]["q2"][1]["hidden"]
    assert rows["garbled"]["total"] == "0" and "unreadable" in rows["garbled"]["notes"]


def test_grader_agrees_with_otter_run(graded, built, tmp_path):
    """``otter run`` (no time limits) gives the partly wrong submission the same scores."""
    _, _, folder, _ = graded
    out = tmp_path / "otter"
    out.mkdir()
    subprocess.run([sys.executable, "-m", "otter", "run", "-a", str(paths(built, "ch01_qkv")["autograder"]),
                    "-o", str(out), str(folder / "partly_wrong" / "ch01_qkv_exercises.ipynb")],
                   check=True, capture_output=True, timeout=300)
    results = json.loads((out / "results.json").read_text())
    scores = {t["name"]: t["score"] for t in results["tests"] if "max_score" in t}
    assert scores == FIXTURES["partly_wrong"][1]
