"""The instructors' guide runs: its seven steps' commands, as the page writes them, on three notebooks.

``book/instructors.md`` walks one chapter from the build to the feedback in numbered sections
(``## 1.`` .. ``## 7.``); each ``bash`` block in them is a command an instructor types. The test
runs them in order, with ``make``, in a folder that looks like the repository (its sources
linked or copied, its own ``_build``, ``submissions`` and ``grades``), doing by hand what the page asks of
the instructor between them: hand in three notebooks after step 1, named as Canvas's bulk
download names them (alice complete, saved as Colab saves it, with the magics and shell lines
students leave in; bob half done, late within his extension; carol with a wrong answer and a cell
that raises, late without one), fill in the written answers' points after the export, and write
the roster (with dave, who handed in nothing) and the LMS's submission times before step 7. Then
it checks the CSV, the notes, the logs and the feedback files, hidden inputs kept out of the
default feedback and shown once revealed, and step 7's roster columns, late penalties and
gradebook imports. One grading run of three notebooks (``--jobs 2``): step 7 grades none again.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GUIDE = ROOT / "book" / "instructors.md"
CHAPTER = "ch01_qkv"
LINKED = ("Makefile", "chapters", ".venv")
COPIED = ("tools", "xfl")  # a snapshot: the grader's version (its sources' sha256) stays put during the run
OLD_INPUTS = ("requirements.txt", "requirements-dev.txt", "pyproject.toml")  # .venv's inputs: never remade here
WRONG_Q1 = '''
def attention(q, k, v):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-2)  # over the queries
    return weights @ v, weights
'''
COLAB_CELLS = [  # what students leave in notebooks saved on Colab
    "!nvidia-smi",
    "%%time\nwarm_up = sum(range(1000))",
    "%load_ext autoreload\n%autoreload 2",
    "!pip install -q sacrebleu\n%pip install -q seaborn\nafter_installs = True",
    "from google.colab import drive\ndrive.mount('/content/drive')\nafter_mount = True",
    "display(attention)",
]
ALICE_WRITTEN = "Adding c multiplies every exponential by e^c, which cancels between numerator and sum."
CANVAS = {"alice": "liddellalice_1001_90001_ch01_qkv_exercises",  # Canvas's names: lib/content_zipper.rb
          "bob": "marleybob_LATE_1002_90002_ch01_qkv_exercises",
          "carol": "danverscarol_LATE_1003_90003_ch01_qkv_exercises"}
SHORT = {v: k for k, v in CANVAS.items()}
ROSTER = ("id,name,email,extension\n1001,Alice Liddell,alice@example.edu,\n1002,Bob Marley,bob@example.edu,2\n"
          "1003,Carol Danvers,carol@example.edu,\n1004,Dave Bowman,dave@example.edu,\n")
TIMES = {"alice": "2026-12-01T20:00:00+00:00", "bob": "2026-12-02T10:00:00+00:00",  # due 2026-12-01T23:59Z
         "carol": "2026-12-03T08:00:00+00:00"}


def guide_steps(text: str) -> list[tuple[int, list[str]]]:
    """(step number, commands) of the guide's numbered sections, each command one ``bash``
    block's line (backslash continuations joined)."""
    steps = []
    for section in re.split(r"^## ", text, flags=re.M):
        if m := re.match(r"(\d)\. ", section):
            blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
            commands = [c.strip() for b in blocks for c in b.replace("\\\n", " ").splitlines() if c.strip()]
            steps.append((int(m.group(1)), commands))
    return steps


def test_the_guide_has_seven_steps_that_need_no_book_or_test_run():
    text = GUIDE.read_text()
    steps = guide_steps(text)
    assert [n for n, _ in steps] == [1, 2, 3, 4, 5, 6, 7]
    assert [n for n, cmds in steps if cmds] == [1, 4, 5, 6, 7], steps
    assert not re.search(r"make (book|test)\b", text.split("## The whole path")[1].split("## What grading")[0]), \
        "the steps must not send instructors to make book or make test"
    assert text.count("name the file\n`<student>.ipynb`") + text.count("name the file `<student>.ipynb`") == 1
    assert "keep the file name" not in text


def run(command: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    start = time.monotonic()
    proc = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    print(f"{time.monotonic() - start:5.1f} s  {command}")
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def repository_copy(tmp: Path) -> Path:
    """A folder the guide's ``make`` commands run in: the sources linked (the grader and ``xfl`` copied), everything they write its own."""
    repo = tmp / "repo"
    repo.mkdir()
    for name in LINKED:
        (repo / name).symlink_to(ROOT / name)
    for name in COPIED:
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in OLD_INPUTS:
        shutil.copyfile(ROOT / name, repo / name)
        os.utime(repo / name, (0, 0))
    return repo


def filled(student: nbformat.NotebookNode, solved: nbformat.NotebookNode, questions: set[str],
           wrong: dict[str, str] | None = None, written: str | None = None) -> nbformat.NotebookNode:
    """The student notebook with the answers of ``questions`` copied from the solutions (or
    ``wrong``'s source), and the written answer's text cell replaced by ``written``."""
    nb = nbformat.from_dict(json.loads(json.dumps(student)))
    assert len(nb.cells) == len(solved.cells)
    pending = []  # (answer cell, solution) until the question's check cell names the question
    for cell, answer in zip(nb.cells, solved.cells):
        if cell.cell_type == "code" and cell.source.startswith("grader.check("):
            question = cell.source.split('"')[1]
            for c, a in pending:
                c.source = (wrong or {}).get(question, a.source if question in questions else c.source)
            pending = []
        elif "otter_answer_cell" in cell.metadata.get("tags", []):
            if cell.cell_type == "code":
                pending.append((cell, answer))
            elif written is not None:
                cell.source = written
    return nb


def as_colab_saves(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` as Colab writes it back: Colab's notebook metadata, cell ids as the only cell
    metadata (no tags), ``%matplotlib inline`` atop the imports, and shell lines and magics."""
    nb.metadata = nbformat.from_dict({"colab": {"provenance": [], "gpuType": "T4"}, "accelerator": "GPU",
                                      "kernelspec": {"name": "python3", "display_name": "Python 3"},
                                      "language_info": {"name": "python"}})
    imports = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("import math"))
    imports.source = "%matplotlib inline\n" + imports.source
    nb.cells += [nbformat.v4.new_code_cell(source) for source in COLAB_CELLS]
    for i, cell in enumerate(nb.cells):
        cell.metadata = nbformat.from_dict({"id": f"colab{i:04d}"})
    return nb


@pytest.fixture(scope="module")
def walked(tmp_path_factory):
    """Every command of the guide's seven steps run in order; returns the folder and each output
    (``csv6``, ``default_feedback``, ``revealed_feedback``: as they were after step 6)."""
    repo = repository_copy(tmp_path_factory.mktemp("guide"))
    env = os.environ | {"ASSIGN_FLAGS": "--no-run-tests"}  # the tests grade every solution elsewhere
    steps, outputs = dict(guide_steps(GUIDE.read_text())), {}
    for number in range(1, 8):
        if number == 3:
            hand_in(repo)
        if number == 5:
            outputs[5] = [run(steps[5][0], repo, env)]
            fill_in_points(repo / "grades" / f"{CHAPTER}-written.csv",
                           {CANVAS["alice"]: "2", CANVAS["bob"]: "0", CANVAS["carol"]: "1"})
            outputs[5].append(run(steps[5][1], repo, env))
            continue
        if number == 6:  # the default feedback first, checked before the revealed one replaces it
            outputs[6] = [run(steps[6][0], repo, env)]
            outputs["default_feedback"] = read_feedback(repo)
            outputs[6].append(run(steps[6][1], repo, env))
            outputs["csv6"] = (repo / "grades" / f"{CHAPTER}.csv").read_text()
            outputs["revealed_feedback"] = read_feedback(repo)
            continue
        if number == 7:  # what the LMS gives: the roster and the submission times
            (repo / "roster.csv").write_text(ROSTER)
            (repo / "times.csv").write_text("file,submitted\n" + "".join(
                f"{CANVAS[s]}.ipynb,{when}\n" for s, when in TIMES.items()))
        outputs[number] = [run(command, repo, env) for command in steps[number]]
    return repo, outputs


def hand_in(repo: Path) -> None:
    built = repo / "_build" / "exercises"
    student = nbformat.read(built / "student" / f"{CHAPTER}_exercises.ipynb", as_version=4)
    solved = nbformat.read(built / "solutions" / f"{CHAPTER}_exercises.ipynb", as_version=4)
    folder = repo / "submissions" / CHAPTER
    folder.mkdir(parents=True)
    all_five = {"q1", "q2", "q3", "q4", "q5"}
    notebooks = {
        "alice": as_colab_saves(filled(student, solved, all_five, written=ALICE_WRITTEN)),
        "bob": filled(student, solved, {"q1", "q2", "q3"}),
        "carol": filled(student, solved, all_five, {"q1": WRONG_Q1}, written="Because it cancels."),
    }
    notebooks["carol"].cells.append(nbformat.v4.new_code_cell("print(not_defined_anywhere)"))
    for name, nb in notebooks.items():
        nbformat.write(nb, folder / f"{CANVAS[name]}.ipynb")


def fill_in_points(sheet: Path, points: dict[str, str]) -> None:
    with open(sheet, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["points"] = points[row["student"]]
    with open(sheet, "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def read_feedback(repo: Path) -> dict[str, str]:
    folder = repo / "grades" / f"{CHAPTER}-feedback"
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def rows(outputs: dict) -> dict[str, dict]:
    """The grades CSV as step 6 left it, by the students' first names."""
    return {SHORT[row["student"]]: row for row in csv.DictReader(io.StringIO(outputs["csv6"]))}


def roster_rows(repo: Path) -> dict[str, dict]:
    with open(repo / "grades" / f"{CHAPTER}.csv", newline="") as f:
        return {row["student"]: row for row in csv.DictReader(f)}


def test_grades_are_what_a_kernel_gives(walked):
    repo, outputs = walked
    got = rows(outputs)
    scores = {s: {q: float(r[q]) for q in ("q1", "q2", "q3", "q4", "q5")} for s, r in got.items()}
    assert scores == {"alice": {"q1": 1, "q2": 1, "q3": 2, "q4": 4, "q5": 5},
                      "bob": {"q1": 1, "q2": 1, "q3": 2, "q4": 0, "q5": 0},
                      "carol": {"q1": 0, "q2": 1, "q3": 2, "q4": 4, "q5": 5}}, got


def test_notes_name_skipped_shell_lines_and_cells_that_raised(walked):
    repo, outputs = walked
    got = rows(outputs)
    alice = got["alice"]["notes"]
    for skipped in ('"!nvidia-smi"', '"!pip install -q sacrebleu"', '"%pip install -q seaborn"',
                    '"google.colab.drive.mount(...)"'):
        assert skipped in alice, alice
    assert "raised" not in alice, alice
    assert re.search(r"cell \d+ raised \"NameError: name 'not_defined_anywhere' is not defined\"",
                     got["carol"]["notes"]), got["carol"]["notes"]
    logs = list((repo / "grades" / f"{CHAPTER}-logs").iterdir())
    assert len(logs) == 3 and not any(b"\x1b" in p.read_bytes() for p in logs)
    assert "NameError" in next(p for p in logs if p.name.startswith(CANVAS["carol"])).read_text()


def test_a_rerun_that_grades_nothing_new_says_so(walked):
    _, outputs = walked
    first, again = outputs[4]
    assert "graded 3 notebooks, kept 0" in first.stdout, first.stdout
    assert "nothing new to grade: all 3 notebooks" in again.stdout, again.stdout


def test_written_answers_sheet_and_merge(walked):
    repo, outputs = walked
    with open(repo / "grades" / f"{CHAPTER}-written.csv", newline="") as f:
        sheet = {SHORT[r["student"]]: r for r in csv.DictReader(f)}
    assert sheet["alice"]["answer"] == ALICE_WRITTEN and sheet["alice"]["question"] == "w1"
    assert sheet["bob"]["answer"] == "(no answer)" and sheet["alice"]["max_points"] == "2"
    got = rows(outputs)
    assert [(got[s]["w1"], got[s]["total"], got[s]["possible"]) for s in ("alice", "bob", "carol")] == \
        [("2", "15", "15"), ("0", "4", "15"), ("1", "13", "15")]


def test_feedback_keeps_hidden_inputs_private_until_revealed(walked):
    repo, outputs = walked
    details = json.loads((repo / "grades" / f"{CHAPTER}.json").read_text())
    carol = next(r for key, r in details["students"].items() if r.get("student", key) == "1003")
    hidden = [c["message"].strip() for c in carol["cases"]["q1"] if c["hidden"] and not c["passed"]]
    public = [c["message"].strip() for c in carol["cases"]["q1"] if not c["hidden"] and not c["passed"]]
    assert hidden and public
    default, revealed = ({SHORT[Path(n).stem] + Path(n).suffix: text for n, text in outputs[key].items()}
                         for key in ("default_feedback", "revealed_feedback"))
    assert sorted(default) == sorted(revealed) == ["alice.html", "alice.md", "bob.html", "bob.md",
                                                   "carol.html", "carol.md"]
    import html
    for name, escape in (("carol.md", str), ("carol.html", html.escape)):
        assert all(escape(m) in default[name] for m in public), default[name]
        own = {line.strip() for m in hidden for line in m.splitlines()} - {
            line.strip() for m in public for line in m.splitlines()}  # lines only the hidden messages have
        assert own and not any(escape(line) in default[name] for line in own if line)
        assert all(escape(m) in revealed[name] for m in hidden), revealed[name]
        assert "raised" in default[name] and "not_defined_anywhere" in default[name]
    assert "**Total: 15 / 15 points**" in revealed["alice.md"] and "| w1 (written) | 2 / 2 |" in revealed["alice.md"]
    assert re.search(r"hidden test \S.*: failed; its inputs and message are not shown", default["carol.md"])


def test_roster_deadlines_and_gradebook_imports(walked):
    """Step 7: the Canvas names matched to the roster, bob's late work within his extension
    free, carol's two started days late 20% off (written points included), dave listed without a
    submission, the imports in Canvas's and Moodle's layouts, and no notebook graded again."""
    repo, outputs = walked
    grade, merge, feedback = outputs[7]
    assert "nothing new to grade: all 3 notebooks" in grade.stdout, grade.stdout
    assert "1 roster students have no submission" in grade.stdout
    assert "no submission: 1004 'Dave Bowman'" in grade.stderr
    got = roster_rows(repo)
    assert [(s, r["name"], r["email"], r["late_days"], r["penalty_pct"], r["w1"], r["total"])
            for s, r in got.items()] == [
        ("1001", "Alice Liddell", "alice@example.edu", "0", "0", "2", "15"),
        ("1002", "Bob Marley", "bob@example.edu", "0", "0", "0", "4"),  # late, within his 2 days
        ("1003", "Carol Danvers", "carol@example.edu", "2", "20", "1", "10.4"),  # (12 + 1) x 80%
        ("1004", "Dave Bowman", "dave@example.edu", "", "0", "0", "0")]
    assert got["1003"]["submitted"] == TIMES["carol"] and "submitted 2 days late: 20% off" in got["1003"]["notes"]
    assert got["1004"]["notes"] == "no submission"
    with open(repo / "grades" / f"{CHAPTER}-canvas.csv", newline="") as f:
        canvas = list(csv.reader(f))
    assert canvas == [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "ch01_qkv"],
                      ["Alice Liddell", "1001", "", "", "", "15"], ["Bob Marley", "1002", "", "", "", "4"],
                      ["Carol Danvers", "1003", "", "", "", "10.4"], ["Dave Bowman", "1004", "", "", "", ""]]
    with open(repo / "grades" / f"{CHAPTER}-moodle.csv", newline="") as f:
        moodle = list(csv.reader(f))
    assert moodle[0] == ["Full name", "Email address", "ch01_qkv"] and moodle[3] == ["Carol Danvers",
                                                                                    "carol@example.edu", "10.4"]
    carol = (repo / "grades" / f"{CHAPTER}-feedback" / "1003.md").read_text()
    assert "**Total: 10.4 / 15 points**" in carol and "| w1 (written) | 1 / 2 |" in carol
    assert "20% off" in carol


def test_gradescope_section_builds_the_autograder(walked):
    """The guide's Gradescope section: its command, run as written after step 1, writes a zip with
    Gradescope's two scripts at its root and the hidden tests in ``private/``
    (``tests/test_gradescope.py`` runs that zip as Gradescope would)."""
    repo, _ = walked
    section = GUIDE.read_text().split("## Grading on Gradescope\n")[1].split("\n## ")[0]
    commands = [c.strip() for b in re.findall(r"```bash\n(.*?)```", section, re.S) for c in b.splitlines() if c.strip()]
    assert commands == [f"make gradescope CHAPTER={CHAPTER}"], commands
    run(commands[0], repo, os.environ | {"ASSIGN_FLAGS": "--no-run-tests"})
    import zipfile
    with zipfile.ZipFile(repo / "_build" / "gradescope" / f"{CHAPTER}-gradescope.zip") as zf:
        names = set(zf.namelist())
    assert {"setup.sh", "run_autograder", f"private/{CHAPTER}-autograder.zip"} <= names, names
