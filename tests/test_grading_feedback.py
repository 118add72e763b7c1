"""The grader's kernel-like shell, its plain-text logs, the feedback files and the written-answers
sheet, each on small inputs (no grading run; ``tests/test_instructors_guide.py`` runs them all
through the guide's commands on real notebooks)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.grading import feedback, written  # noqa: E402
from tools.grading.magics import cell_notes  # noqa: E402
from tools.grading.student import plain_text  # noqa: E402

CELLS = [
    "%matplotlib inline\nimport math\nimport matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()\nafter_matplotlib = 1",
    "%%time\nafter_time = 2",
    "%timeit -n1 -r1 sum(range(10))\nafter_timeit = 3",
    "%load_ext autoreload\n%autoreload 2\nafter_autoreload = 4",
    "!pip install -q sacrebleu\n%pip install -q seaborn\nlisting = !ls /\nafter_installs = 5",
    "%%bash\ntouch /tmp/should-not-exist",
    "from google.colab import drive, files\ndrive.mount('/content/drive')\nafter_mount = 6",
    "display(math.pi)\n%config InlineBackend.figure_format = 'retina'\nafter_display = 7",
    "1 / 0",
]
RUN = f'''
import json, sys
from tools.grading import worker
events = []
shell = worker.magics.grading_shell()
worker.run_cells(shell, {CELLS!r}, 30, lambda **e: events.append(e))
ns = shell.user_ns
print("EVENTS", json.dumps(events))
print("NAMES", json.dumps({{k: ns.get(k) for k in ns if k.startswith("after_")}}), "LISTING", ns["listing"])
'''


@pytest.fixture(scope="module")
def shell_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("shell")
    proc = subprocess.run([sys.executable, "-c", RUN], cwd=work, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg",
                               "HOME": str(work), "MPLCONFIGDIR": str(work)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = json.loads(proc.stdout.split("EVENTS ", 1)[1].splitlines()[0])
    names = json.loads(proc.stdout.split("NAMES ", 1)[1].split(" LISTING")[0])
    return events, names, proc.stdout, work


def test_magics_behave_as_in_a_kernel_and_shell_lines_are_skipped(shell_run):
    events, names, out, _ = shell_run
    assert [e["error"] for e in events[:-1]] == [None] * (len(CELLS) - 1), events
    assert names == {f"after_{n}": i for i, n in enumerate(
        ["matplotlib", "time", "timeit", "autoreload", "installs", "mount", "display"], start=1)}, names
    assert "Wall time" in out and "per loop" in out and "3.14159" in out
    skipped = [e["skipped"] for e in events]
    assert skipped[4] == ["!pip install -q sacrebleu", "%pip install -q seaborn", "!ls /"]
    assert skipped[5] == ["%%bash"] and skipped[6] == ["google.colab.drive.mount(...)"]
    assert "LISTING []" in out and not Path("/tmp/should-not-exist").exists()


def test_a_cell_that_raised_is_noted_and_tracebacks_are_plain_text(shell_run):
    events, _, out, _ = shell_run
    assert events[-1]["error"] == "ZeroDivisionError: division by zero"
    assert cell_notes(events[-1], 12) == ['cell 12 raised "ZeroDivisionError: division by zero"']
    assert "ZeroDivisionError" in out and "\x1b" not in out
    assert cell_notes({"skipped": ["!nvidia-smi"], "error": None}, 3) == [
        'cell 3: skipped "!nvidia-smi" (the grader runs no shell commands or installs; the rest of the cell ran)']
    assert cell_notes({"error": ["not text"], "skipped": "nor a list"}, 1) == []  # a forged event: no note


def test_logs_lose_terminal_escapes_even_split_across_reads():
    text, held = plain_text(b"\x1b[0;31mred\x1b[0m and \x1b]0;title\x07plain \x1b[1")
    assert (text, held) == (b"red and plain ", b"\x1b[1")
    text, held = plain_text(held + b";32mgreen\x1b[0m")
    assert (text, held) == (b"green", b"")


DETAILS = {"assignment": "ch01_qkv", "questions": {"q1": 1.0, "q2": 2.0}, "students": {
    "abc123": {"student": "carol", "notes": ['cell 7 raised "NameError: x"'], "scores": {"q1": 0.5, "q2": 0.0},
               "cases": {"q1": [{"name": "q1 - 1", "hidden": False, "points": 0.5, "passed": True, "message": ""},
                                {"name": "q1 - 2", "hidden": True, "points": 0.5, "passed": False,
                                 "message": "d_k=7, SECRET-INPUT 3.25: variance 8.9"}],
                         "q2": [{"name": "q2 - 1", "hidden": False, "points": 2, "passed": False,
                                 "message": "public says ``` no"}]}}}}


def test_feedback_hides_hidden_messages_unless_revealed(tmp_path):
    grades = tmp_path / "ch01_qkv.json"
    grades.write_text(json.dumps(DETAILS))
    feedback.write_feedback(grades)
    md, page = (tmp_path / "ch01_qkv-feedback" / "carol.md").read_text(), (tmp_path / "ch01_qkv-feedback" / "carol.html").read_text()
    for text in (md, page):
        assert "SECRET-INPUT" not in text and "d_k=7" not in text
        assert "public says" in text and "NameError: x" in text and "q1 - 2" in text
    assert "**Total: 0.5 / 3 points**" in md and "````text\npublic says ``` no\n````" in md
    feedback.write_feedback(grades, reveal_hidden=True)
    assert "SECRET-INPUT 3.25" in (tmp_path / "ch01_qkv-feedback" / "carol.md").read_text()
    assert "SECRET-INPUT 3.25" in (tmp_path / "ch01_qkv-feedback" / "carol.html").read_text()


def sheet(path: Path, points: str) -> Path:
    path.write_text("question,max_points,student,answer,points\n"
                    f"w1,2,carol,\"it cancels\",{points}\n")
    return path


def test_merge_adds_written_points_once_and_refuses_bad_ones(tmp_path):
    grades = tmp_path / "ch01_qkv.csv"
    grades.write_text("student,id,q1,q2,total,possible,notes\ncarol,abc123,0.5,0,0.5,3,\n")
    grades.with_suffix(".json").write_text(json.dumps(DETAILS))
    for _ in range(2):  # merging again replaces the column
        written.merge(sheet(tmp_path / "w.csv", "1.5"), grades)
        rows = list(csv.DictReader(grades.open()))
        assert list(rows[0]) == ["student", "id", "q1", "q2", "w1", "total", "possible", "notes"]
        assert (rows[0]["w1"], rows[0]["total"], rows[0]["possible"]) == ("1.5", "2", "5")
    with pytest.raises(ValueError, match=r"row 2 \(w1, carol\): points must be a number in \[0, 2\], got ''"):
        written.merge(sheet(tmp_path / "w.csv", ""), grades)
    with pytest.raises(ValueError, match=r"points must lie in \[0, 2\], got 3"):
        written.merge(sheet(tmp_path / "w.csv", "3"), grades)
    feedback.write_feedback(grades.with_suffix(".json"), written=sheet(tmp_path / "w.csv", "2"))
    assert "**Total: 2.5 / 5 points**" in (tmp_path / "ch01_qkv-feedback" / "carol.md").read_text()


def test_written_questions_come_from_the_exercise_source():
    (w1,) = written.written_questions(ROOT / "chapters" / "ch01_qkv" / "exercises.md")
    assert (w1.name, w1.points, w1.heading) == ("w1", 2.0, "## Written question 1:")
