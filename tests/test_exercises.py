"""The graded exercises: sources, student build, autograder and the no-Docker grader.

One otter build of every chapter per session (in a temporary folder), then:
solutions get full marks and unfilled stubs get none (run in this process, fast); the student
files leak no solution line and no hidden test; and a set of fixture submissions go through
the real grader (subprocesses, time limits) and get the expected scores.
"""

from __future__ import annotations

import ast
import csv
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conftest import exercises_build  # noqa: E402
from tools.grading import exercises, grader, written  # noqa: E402
from tools.grading.library_answers import LIBRARY_ANSWERS  # noqa: E402

SOURCES = exercises.sources(ROOT)
CHAPTERS = [exercises.chapter_of(s) for s in SOURCES]


def test_every_chapter_has_exercises():
    """ch01..ch09 each have an exercise source (later chapters may add theirs)."""
    numbers = {c[:4] for c in CHAPTERS}
    assert {f"ch0{i}" for i in range(1, 10)} <= numbers, sorted(numbers)


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Path:
    """Every chapter built once (``conftest.exercises_build``; the tests below grade the solutions)."""
    return exercises_build(tmp_path_factory)


def paths(built: Path, chapter: str) -> dict[str, Path]:
    return {"student": built / "student" / f"{chapter}_exercises.ipynb",
            "solutions": built / "solutions" / f"{chapter}_exercises.ipynb",
            "autograder": built / "autograder" / f"{chapter}-autograder.zip"}


def submission(student: nbformat.NotebookNode, solved: nbformat.NotebookNode,
               edits: dict[str, str | None], fill: bool = True, extra: str | None = None) -> nbformat.NotebookNode:
    """The student notebook with every answer cell filled in from the solutions (or left
    unfilled, ``fill=False``), then the answer cell of each question in ``edits`` replaced by new
    source, or deleted (None); ``extra`` is a code cell added at the end."""
    nb = nbformat.from_dict(json.loads(json.dumps(student)))
    assert len(nb.cells) == len(solved.cells)
    question_of = {c.number: c.question for c in grader.plan_cells(nb)}
    kept = []
    for number, (cell, answer) in enumerate(zip(nb.cells, solved.cells), start=1):
        if "otter_answer_cell" in cell.metadata.get("tags", []):
            cell.source = answer.source if fill else cell.source
            edit = edits.get(question_of.get(number), cell.source)  # a written answer: no code question
            if edit is None:
                continue
            cell.source = edit
        kept.append(cell)
    if extra is not None:
        kept.append(nbformat.v4.new_code_cell(extra))
    nb.cells = kept
    return nb


def library_answer_cells(chapter: str) -> dict[str, str]:
    """Per question with a library answer, an answer cell whose functions just call it:
    generated from ``tools.grading.library_answers`` (a drop-in name, or a lambda adapting the library)."""
    cells = {}
    for question, answers in LIBRARY_ANSWERS.get(chapter, {}).items():
        lines = []
        for function, (first, *_) in answers.items():
            if first is None:
                continue
            if first.startswith("lambda"):
                names = re.findall(r"\b[a-z_]+(?:\.\w+)+", first)  # torch.nn.functional.f, x.shape, ...
                modules = sorted({importable_prefix(n) for n in names} - {None})
                call = f"({first})(*args, **kwargs)"
            else:
                dotted, _, fixed = first.partition("(")
                modules, fixed = [importable_prefix(dotted)], fixed.rstrip(")")
                call = f"{dotted}(*args, **kwargs{', ' + fixed if fixed else ''})"
            lines += [f"def {function}(*args, **kwargs):", *(f"    import {m}" for m in modules),
                      f"    return {call}"]
        if lines:
            cells[question] = "\n".join(lines)
    return cells


def importable_prefix(dotted: str) -> str | None:
    """The longest prefix of ``dotted`` that is a module (``xfl.attention`` of
    ``xfl.attention.f``), or None (``x.shape``)."""
    parts = dotted.split(".")
    for n in range(len(parts) - 1, 0, -1):
        try:
            importlib.import_module(".".join(parts[:n]))
            return ".".join(parts[:n])
        except ImportError:
            continue
    return None


def grade(built: Path, chapter: str, notebooks: dict[str, nbformat.NotebookNode], tmp: Path,
          block_library: bool = True) -> dict[str, dict]:
    """Grade ``{student: notebook}`` with the real grader: ``{student: CSV row}``."""
    folder = tmp / "submissions"
    folder.mkdir(parents=True)
    for student, nb in notebooks.items():
        nbformat.write(nb, folder / f"{student}.ipynb")
    output = tmp / "grades" / "grades.csv"
    output.parent.mkdir()
    grader.grade_folder(paths(built, chapter)["autograder"], folder, output, limit=LIMIT, grace=GRACE,
                         jobs=1, block_library=block_library)  # one judge: its start-up is paid once
    with open(output) as f:
        return {row["student"]: row for row in csv.DictReader(f)}


def read_notebooks(built: Path, chapter: str) -> tuple[nbformat.NotebookNode, nbformat.NotebookNode]:
    p = paths(built, chapter)
    return nbformat.read(p["student"], as_version=4), nbformat.read(p["solutions"], as_version=4)


LIMIT, GRACE = 8.0, 3.0  # seconds; generous enough for a busy 2-core CI machine


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solutions_full_library_zero(built, chapter, tmp_path):
    """Through the real grader: the solutions earn every point, and a notebook whose answers call
    the library earns none on those questions. That those library calls do answer the questions
    (every case passes), and that unfilled answers, zero-size tensors and other no-attempt
    answers earn nothing, are properties of the hidden tests: ``tests/test_wrong_answers.py``
    checks them for every question in-process; the forgeries below send unfilled notebooks
    through the real grader, and the test after this one lets the library through."""
    student_nb, solved = read_notebooks(built, chapter)
    library = library_answer_cells(chapter)
    rows = grade(built, chapter, {"solutions": submission(student_nb, solved, {}),
                                  "library": submission(student_nb, solved, library)}, tmp_path)
    _, questions = grader.load_autograder(paths(built, chapter)["autograder"])
    assert len(questions) >= 4, f"{chapter} has {len(questions)} graded questions, expected at least 4"
    for q in questions:
        assert float(rows["solutions"][q.name]) == q.points > 0, (q.name, rows["solutions"])
        expected = 0 if q.name in library else q.points
        assert float(rows["library"][q.name]) == expected, (q.name, rows["library"])
    assert rows["solutions"]["notes"] == "", rows["solutions"]["notes"]


def test_library_let_through_earns_every_point(built, tmp_path):
    """With ``block_library=False`` the real grader lets chapter 1's library answers through,
    and they earn every point: what blocks them above is the block, not the answers."""
    student_nb, solved = read_notebooks(built, "ch01_qkv")
    library = library_answer_cells("ch01_qkv")
    assert library, "chapter 1 lists library answers"
    rows = grade(built, "ch01_qkv", {"library": submission(student_nb, solved, library)}, tmp_path,
                 block_library=False)
    _, questions = grader.load_autograder(paths(built, "ch01_qkv")["autograder"])
    for q in questions:
        assert float(rows["library"][q.name]) == q.points, (q.name, rows["library"])


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_wrong_answer_runner_reads_the_autograders_tests(built, chapter):
    """tests/test_wrong_answers.py grades in-process from the source: the test files it writes
    are the autograder zip's, byte for byte, and its questions and points are the zip's."""
    from test_wrong_answers import otter_test_file, parse

    _, questions = grader.load_autograder(paths(built, chapter)["autograder"])
    _, parsed = parse(ROOT / "chapters" / chapter / "exercises.md")
    assert [(q.name, q.points) for q in parsed] == [(q.name, q.points) for q in questions]
    for mine, theirs in zip(parsed, questions):
        assert otter_test_file(mine) == theirs.source, f"{chapter} {mine.name}"


def test_library_answers_name_real_questions(built, tmp_path):
    """Every entry of tools.grading.library_answers names a question of its chapter and importable
    functions (or ``NO_AUTOGRAD``, which refuses autograd as a whole)."""
    from tools.grading.worker import NO_AUTOGRAD, resolve
    for chapter, answers in LIBRARY_ANSWERS.items():
        assert chapter in CHAPTERS, chapter
        _, questions = grader.load_autograder(paths(built, chapter)["autograder"])
        assert set(answers) <= {q.name for q in questions}, (chapter, sorted(answers))
        for name in (n for a in answers.values() for names in a.values() for n in names if n and n != NO_AUTOGRAD):
            if name.startswith("lambda"):
                compile(name, "<library answer>", "eval")
            else:
                assert callable(resolve(name.partition("(")[0])[2]), name


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
    _, questions = grader.load_autograder(autograder)
    public, hidden = [], []
    for q in questions:
        for node in ast.parse(q.source).body:
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
    _, questions = grader.load_autograder(paths(built, chapter)["autograder"])
    nb = nbformat.read(paths(built, chapter)["student"], as_version=4)
    headings = [m for c in nb.cells if c.cell_type == "markdown"
                for m in re.findall(r"^## Question (\d+): .*\((\d+) points?\)$", c.source, re.M)]
    assert [(f"q{n}", float(p)) for n, p in headings] == [(q.name, q.points) for q in questions]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_question_says_what_done_means_and_teaches(built, chapter):
    nb = nbformat.read(paths(built, chapter)["student"], as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    prompts = re.split(r"^## Question \d+: ", text, flags=re.M)[1:]
    assert len(prompts) >= 4, chapter
    for prompt in prompts:
        title = prompt.splitlines()[0]
        assert "**Done when:**" in prompt and "**What you learn:**" in prompt, f"{chapter}: {title}"


def test_book_pages_come_from_the_student_build(built, tmp_path):
    pages = exercises.write_pages(built, tmp_path / "pages")
    assert [p.stem for p in pages] == CHAPTERS
    text = pages[0].read_text()
    assert text.startswith("# Exercises:") and "grader.check(\"q1\")" in text and "PUBLIC_TESTS" not in text


# --------------------------------------------------------------- the real grader
SLOW_SCALE = '''
def attention(q, k, v):
    weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], dim=-1)  # d_k, not its root
    return weights @ v, weights
'''
LOOPS = '''
def attention(q, k, v):
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
HELD_LIBRARY_REFERENCE = '''
from torch.nn.functional import scaled_dot_product_attention as sdpa  # taken before grading blocks it

def attention(q, k, v):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    try:
        return sdpa(q, k, v), weights  # the library's output with honest weights
    except Exception:
        return weights @ v, weights
'''
CAUGHT_LIBRARY_CALL = '''
def attention(q, k, v):  # a blocked Python function, its error caught: the call still counts
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    try:
        import xfl.attention
        return xfl.attention.scaled_dot_product_attention(q, k, v), weights
    except Exception:
        return weights @ v, weights
'''
FIXTURES = {  # student: (edits to the ch01 solutions, expected {question: score})
    "correct": ({}, {"q1": 1, "q2": 1, "q3": 2, "q4": 4, "q5": 5}),
    "partly_wrong": ({"q1": SLOW_SCALE}, {"q1": 0.5, "q2": 1, "q3": 2, "q4": 4, "q5": 5}),
    "raises": ({"q1": 'raise RuntimeError("not done yet")'}, {"q1": 0, "q2": 1, "q3": 2, "q4": 4, "q5": 5}),
    "loops": ({"q1": LOOPS}, {"q1": 0, "q2": 1, "q3": 2, "q4": 4, "q5": 5}),
    "hangs": ({"q1": IGNORES_INTERRUPTS}, {"q1": 0, "q2": 1, "q3": 2, "q4": 4, "q5": 5}),
    "deleted_cell": ({"q3": None}, {"q1": 1, "q2": 1, "q3": 0, "q4": 4, "q5": 5}),
    "held_library_reference": ({"q1": HELD_LIBRARY_REFERENCE}, {"q1": 0, "q2": 1, "q3": 2, "q4": 4, "q5": 5}),
    "caught_library_call": ({"q1": CAUGHT_LIBRARY_CALL}, {"q1": 0, "q2": 1, "q3": 2, "q4": 4, "q5": 5}),
}

# Cells that try to forge a verdict. Each is added to an unfilled notebook (it must earn 0) and to
# the partly wrong one (it must earn exactly what that one earns without it).
FORGERIES = {
    "patches_comparisons": '''
import torch, torch.testing
torch.equal = torch.allclose = lambda *a, **k: True
torch.isclose = lambda a, b, *r, **k: torch.ones_like(torch.as_tensor(a), dtype=torch.bool)
torch.testing.assert_close = lambda *a, **k: None
torch.Tensor.__eq__ = torch.Tensor.__ge__ = torch.Tensor.__le__ = lambda *a: torch.tensor(True)
torch.Tensor.all = torch.Tensor.any = lambda *a, **k: torch.tensor(True)
''',
    "patches_builtins": '''
import builtins
builtins.all = builtins.any = lambda *a: True
builtins.isinstance = lambda *a: True
builtins.abs = lambda x: 0
builtins.AssertionError = type("NotAnError", (Exception,), {})
''',
    "exits_early": 'import os\nos._exit(0)',
    "raises_system_exit": 'raise SystemExit(0)',
    "prints_fake_results": '''
import json, os
print("All tests passed!")
print(json.dumps({"tests": [{"name": q, "score": 4, "max_score": 4} for q in ("q1", "q2", "q3", "q4")]}))
for fd in map(int, os.listdir("/proc/self/fd")):  # and into every pipe it can find
    for i in range(1, 60):
        try:
            os.write(fd, (json.dumps({"event": "reply", "id": i, "value": True, "error": None,
                                      "library": [], "timed_out": False}) + "\\n").encode())
        except OSError:
            break
''',
}
TENSOR_SUBCLASS = '''
class AlwaysEqual(torch.Tensor):
    def __eq__(self, other):
        return True
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return True  # torch.equal, allclose, shape, anything: True

def attention(q, k, v):
    return torch.zeros(0).as_subclass(AlwaysEqual), torch.zeros(0).as_subclass(AlwaysEqual)
'''


@pytest.fixture(scope="module")
def graded(built, tmp_path_factory):
    """The ch01 fixture submissions and forgeries graded by ``tools.grading`` (2 at a time)."""
    p = paths(built, "ch01_qkv")
    student_nb, solved = read_notebooks(built, "ch01_qkv")
    folder = tmp_path_factory.mktemp("submissions")
    notebooks = {student: submission(student_nb, solved, edits) for student, (edits, _) in FIXTURES.items()}
    for name, cell in FORGERIES.items():
        notebooks[f"{name}_unfilled"] = submission(student_nb, solved, {}, fill=False, extra=cell)
        notebooks[f"{name}_partly_wrong"] = submission(student_nb, solved, FIXTURES["partly_wrong"][0], extra=cell)
    notebooks["tensor_subclass"] = submission(student_nb, solved, {"q1": TENSOR_SUBCLASS}, fill=False)
    for student, nb in notebooks.items():
        (folder / student).mkdir()
        nbformat.write(nb, folder / student / "ch01_qkv_exercises.ipynb")
    (folder / "garbled.ipynb").write_text("this is not a notebook")
    output = tmp_path_factory.mktemp("grades") / "grades.csv"
    grader.grade_folder(p["autograder"], folder, output, limit=LIMIT, grace=GRACE, jobs=2)
    with open(output) as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    return rows, json.loads(output.with_suffix(".json").read_text()), folder, output


def scores(row: dict) -> dict[str, float]:
    return {q: float(v) for q, v in row.items() if re.fullmatch(r"q\d+", q)}


@pytest.mark.parametrize("student", FIXTURES)
def test_fixture_submission_scores(graded, student):
    rows, _, _, _ = graded
    expected = FIXTURES[student][1]
    row = rows[student]
    assert scores(row) == expected, row
    assert float(row["total"]) == sum(expected.values()) and float(row["possible"]) == 13


@pytest.mark.parametrize("forgery", FORGERIES)
def test_forgeries_earn_what_the_honest_answers_earn(graded, forgery):
    rows, _, _, _ = graded
    assert set(scores(rows[f"{forgery}_unfilled"]).values()) == {0.0}, rows[f"{forgery}_unfilled"]
    assert scores(rows[f"{forgery}_partly_wrong"]) == FIXTURES["partly_wrong"][1], rows[f"{forgery}_partly_wrong"]


def test_a_tensor_subclass_arrives_as_a_plain_tensor(graded):
    rows, details, _, _ = graded
    assert set(scores(rows["tensor_subclass"]).values()) == {0.0}, rows["tensor_subclass"]


def test_time_limits_are_reported(graded):
    rows, details, _, _ = graded
    assert "q1: tests stopped by the time limit" in rows["loops"]["notes"]
    assert "killed after 11 s without progress; graded again without it" in rows["hangs"]["notes"]
    assert "ended the grader; graded again without it" in rows["exits_early_partly_wrong"]["notes"]
    assert rows["correct"]["notes"] == "" and details["students"][rows["correct"]["id"]]["cases"]["q1"][1]["hidden"]
    assert rows["garbled"]["total"] == "0" and "unreadable" in rows["garbled"]["notes"]


def test_grader_agrees_with_otter_run(graded, built, tmp_path):
    """``otter run`` (no time limits, tests in the notebook's process) gives the partly wrong
    submission the same scores: the proxies change where the tests run, not what they say."""
    _, _, folder, _ = graded
    out = tmp_path / "otter"
    out.mkdir()
    subprocess.run([sys.executable, "-m", "otter", "run", "-a", str(paths(built, "ch01_qkv")["autograder"]),
                    "-o", str(out), str(folder / "partly_wrong" / "ch01_qkv_exercises.ipynb")],
                   check=True, capture_output=True, timeout=300)
    results = json.loads((out / "results.json").read_text())
    otter_scores = {t["name"]: t["score"] for t in results["tests"] if "max_score" in t}
    assert otter_scores == FIXTURES["partly_wrong"][1]


def model_answers(source: Path) -> dict[str, str]:
    """``{name: model answer}`` of the written (manual) questions: the text cells of each one's
    solution block in the exercise source."""
    answers, name, inside = {}, None, False
    for cell in jupytext.read(source).cells:
        text = cell.source.strip()
        if cell.cell_type == "raw" and text.startswith("# BEGIN QUESTION"):
            config = yaml.safe_load(text) or {}
            name = str(config["name"]) if config.get("manual") else None
        elif cell.cell_type == "raw" and text.startswith(("# BEGIN SOLUTION", "# END SOLUTION")):
            inside = text.startswith("# BEGIN")
        elif name and inside and cell.cell_type == "markdown":
            answers[name] = (answers.get(name, "") + "\n" + text).strip()
    return answers


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_has_a_written_question_with_a_model_answer(built, chapter):
    """Each chapter grades a written answer by hand: the question's prompt reaches the student,
    its model answer only the solutions notebook."""
    source = ROOT / "chapters" / chapter / "exercises.md"
    questions, answers = written.written_questions(source), model_answers(source)
    assert questions, f"{chapter}: no written (manual) question in its exercises.md"
    assert {q.name for q in questions} == set(answers), f"{chapter}: a written question without a model answer"
    student = nbformat.read(paths(built, chapter)["student"], as_version=4)
    solutions = "\n".join(c.source for c in nbformat.read(paths(built, chapter)["solutions"], as_version=4).cells)
    for q in questions:
        assert written.answer_text(student, q) == "", f"{chapter} {q.name}: the student notebook is not blank"
        assert len(answers[q.name]) > 200 and answers[q.name].splitlines()[0] in solutions, (chapter, q.name)
