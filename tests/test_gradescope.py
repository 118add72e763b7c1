"""The Gradescope autograder (``tools.grading.gradescope``, ``make gradescope``) run as Gradescope runs it.

Gradescope's folders (https://gradescope-autograders.readthedocs.io/en/latest/specs/) are laid out
in a temporary root (``AUTOGRADER_ROOT``): the zip unpacked in ``source/``, ``run_autograder``
copied beside it, the student's notebook in ``submission/``, ``submission_metadata.json``; the
link to ``xfl`` that ``setup.sh`` makes after installing it is made by hand (no network here).
``run_autograder`` then grades three chapter-1 notebooks: an honest one, a half-done one that
fails hidden tests, and a malicious one (a library answer, and a cell that tries to read the
hidden tests and the metadata and to forge results.json) graded where bwrap is taken to be
missing, as the unprivileged uid of the fallback. Each results.json is checked against the
specification and against the local grader's scores for the same notebooks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.grading import exercises, gradescope, grader  # noqa: E402
from test_exercises import FIXTURES, library_answer_cells, submission  # noqa: E402

CHAPTER = "ch01_qkv"
FAILED = "❌ Test case failed"  # otter's first line of any failed case: quotes nothing
FORGED = {"score": 99, "output": "forged", "tests": []}
THIEF = '''
import json, os, pathlib
reached = []
for target in {readable!r}:
    try:
        pathlib.Path(target).read_bytes(); reached.append(target)
    except OSError:
        pass
try:
    os.listdir({results!r}); reached.append("listed results")
except OSError:
    pass
try:
    pathlib.Path({results!r}, "results.json").write_text({forged!r}); reached.append("wrote results.json")
except OSError:
    pass
print("THIEF reached", reached)
'''


def exercises_of_chapter_1(tmp: Path) -> Path:
    """``_build/exercises`` when it is newer than chapter 1's source and the grader, else ch01 built now."""
    built, stamp = ROOT / "_build" / "exercises", ROOT / "_build" / "exercises" / ".stamp"
    inputs = [ROOT / "chapters" / CHAPTER / "exercises.md", *(ROOT / "tools" / "grading").glob("*.py")]
    if stamp.exists() and all(p.stat().st_mtime < stamp.stat().st_mtime for p in inputs):
        return built
    exercises.build_chapter(ROOT / "chapters" / CHAPTER / "exercises.md", tmp, run_tests=False)
    return tmp


def lay_out(gradescope_zip: Path, notebook: nbformat.NotebookNode) -> Path:
    """Gradescope's ``/autograder`` for one submission, in a new folder others may traverse (as
    ``/autograder`` is): returns its root."""
    root = Path(tempfile.mkdtemp(prefix="xfl-gs-root-"))
    root.chmod(0o755)
    with zipfile.ZipFile(gradescope_zip) as zf:
        zf.extractall(root / "source")
    (root / "source" / "grader" / "xfl").symlink_to(ROOT / "xfl")  # what setup.sh links after pip install
    shutil.copyfile(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    (root / "results").mkdir()
    nbformat.write(notebook, root / "submission" / f"{CHAPTER}_exercises.ipynb")
    (root / "submission_metadata.json").write_text(json.dumps({"previous_submissions": [{"results": "secret"}]}))
    return root


def run_autograder(root: Path, no_bwrap: bool = False) -> subprocess.CompletedProcess:
    env = os.environ | {"AUTOGRADER_ROOT": str(root), "XFL_GRADESCOPE_PYTHON": sys.executable,
                        "OMP_NUM_THREADS": "1"}
    env.pop(gradescope.NO_SANDBOX_ENV, None)
    if no_bwrap:
        env[gradescope.NO_SANDBOX_ENV] = "1"
    return subprocess.run(["bash", str(root / "run_autograder")], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gradescope")
    built = exercises_of_chapter_1(tmp / "exercises")
    zip_path = gradescope.build(CHAPTER, tmp / "out", built, limit=20.0, grace=5.0)
    student = nbformat.read(built / "student" / f"{CHAPTER}_exercises.ipynb", as_version=4)
    solved = nbformat.read(built / "solutions" / f"{CHAPTER}_exercises.ipynb", as_version=4)
    library_question, library_cell = next(iter(library_answer_cells(CHAPTER).items()))
    notebooks = {"honest": submission(student, solved, {}),
                 "half_done": submission(student, solved, {"q1": FIXTURES["partly_wrong"][0]["q1"],
                                                           "q4": None, "q5": None}),
                 "malicious": submission(student, solved, {library_question: library_cell}, extra="pass")}
    roots = {name: lay_out(zip_path, nb) for name, nb in notebooks.items()}
    m = roots["malicious"]
    thief = THIEF.format(readable=[str(m / "source" / "private" / f"{CHAPTER}-autograder.zip"),
                                   str(m / "submission_metadata.json"),
                                   str(m / "submission" / f"{CHAPTER}_exercises.ipynb")],
                         results=str(m / "results"), forged=json.dumps(FORGED))
    notebooks["malicious"].cells[-1].source = thief
    nbformat.write(notebooks["malicious"], m / "submission" / f"{CHAPTER}_exercises.ipynb")
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            runs = dict(zip(roots, pool.map(lambda n: run_autograder(roots[n], no_bwrap=n == "malicious"), roots)))
        results = {n: json.loads((roots[n] / "results" / "results.json").read_text()) for n in roots}
        modes = {n: oct((roots[n] / "source" / "private").stat().st_mode & 0o777) for n in roots}
    finally:
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)
    local = tmp / "local"
    local.mkdir()
    for name, nb in notebooks.items():
        nbformat.write(nb, local / f"{name}.ipynb")
    output = tmp / "grades" / "grades.csv"
    grader.grade_folder(built / "autograder" / f"{CHAPTER}-autograder.zip", local, output, limit=20.0, grace=5.0,
                        jobs=2)
    details = json.loads(output.with_suffix(".json").read_text())
    return {"zip": zip_path, "runs": runs, "results": results, "modes": modes, "library_question": library_question,
            "local": {r["student"]: r for r in details["students"].values()}, "questions": details["questions"]}


def per_question(results: dict) -> dict[str, float]:
    scores: dict[str, float] = {}
    for test in results["tests"]:
        question = test["name"].split(":")[0]
        scores[question] = scores.get(question, 0.0) + test["score"]
    return scores


def test_the_zip_has_gradescopes_layout(graded):
    with zipfile.ZipFile(graded["zip"]) as zf:
        names = set(zf.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}
        setup = zf.read("setup.sh").decode()
        settings = json.loads(zf.read(gradescope.SETTINGS))
    assert {"setup.sh", "run_autograder", f"private/{CHAPTER}-autograder.zip", "grader/tools/grading/grader.py"} <= names
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755
    assert "download.pytorch.org/whl/cpu" in setup and f"git+{gradescope.repository_url(CHAPTER)}@{settings['xfl_ref']}" in setup
    ref = settings["xfl_ref"]  # the checkout's commit, as the published book pins it (others may commit meanwhile)
    assert subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", ref, "HEAD"]).returncode == 0, ref
    assert len(ref) == 40 and f"xfl pinned to {ref}" in setup
    assert f"v.commit() == {ref!r}" in setup  # setup.sh stops unless pip installed that commit


def test_results_follow_gradescopes_specification(graded):
    for name, results in graded["results"].items():
        gradescope.validate_results(results)
        assert {t["visibility"] for t in results["tests"]} == {"visible", "after_due_date"}, (name, results)
        assert all(t["visibility"] == "after_due_date" for t in results["tests"] if "hidden" in t["name"])
        assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]))
        assert sum(t["max_score"] for t in results["tests"]) == pytest.approx(sum(graded["questions"].values()))
        assert graded["runs"][name].returncode == 0, graded["runs"][name].stderr[-3000:]
    for bad in ({"score": "13"}, {"score": 1, "tests": [{"name": "q1", "score": 1, "visibility": "students"}]},
                {"tests": [{"name": "q1"}]}, {"score": 1, "stdout_visibility": "always"}):
        with pytest.raises(ValueError, match="results.json"):
            gradescope.validate_results(bad)


def test_scores_are_the_local_graders(graded):
    local, question = graded["local"], graded["library_question"]
    for name, results in graded["results"].items():
        assert per_question(results) == pytest.approx(local[name]["scores"]), (name, results)
    assert graded["results"]["honest"]["score"] == 13
    assert per_question(graded["results"]["half_done"]) == {"q1": 0.5, "q2": 1, "q3": 2, "q4": 0, "q5": 0}
    assert per_question(graded["results"]["malicious"])[question] == 0 and graded["results"]["malicious"]["score"] > 0


def test_hidden_inputs_stay_hidden_until_the_due_date(graded):
    results, local = graded["results"]["half_done"], graded["local"]["half_done"]
    hidden = [c["message"] for c in local["cases"]["q1"] if c["hidden"] and not c["passed"]]
    public = [c["message"] for c in local["cases"]["q1"] if not c["hidden"]]
    own = {line.strip() for m in hidden for line in m.splitlines()} - {
        line.strip() for m in public for line in m.splitlines()} - {"", FAILED}
    assert own, local["cases"]["q1"]
    shown_now = results["output"] + "".join(t["output"] for t in results["tests"] if t["visibility"] == "visible")
    assert not [line for line in own if line in shown_now]
    later = next(t for t in results["tests"] if t["name"] == "q1: hidden tests")
    assert all(line in later["output"] for line in own) and later["visibility"] == "after_due_date"


def test_a_submission_reaches_no_answer_key_without_bwrap(graded):
    run, results = graded["runs"]["malicious"], graded["results"]["malicious"]
    assert "THIEF reached []" in run.stdout, run.stdout[-3000:]
    assert results != FORGED and "WITHOUT it, as an unprivileged uid" in results["output"], results["output"]
    assert "Sandbox: bubblewrap (" in graded["results"]["honest"]["output"]
    assert set(graded["modes"].values()) == {"0o700"}
