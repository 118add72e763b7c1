"""Every exercise notebook runs as a student's would on Colab: the student notebook, its answers
filled in from the solutions, executed on the Colab-like kernel (`tools/env/colab_env.py`, which
has installed what the notebook's first cell installs), and every public check passes.

Under `make test` the exercises are already built (`_build/exercises/`) and the environment is
prepared; run on its own, this file builds and prepares them itself.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO_ROOT, exercises_build
from tools.book import publish
from tools.grading import exercises

SOURCES = exercises.sources(REPO_ROOT)
CHECK_TIMEOUT_S = 300
PASSED = "{} results: All test cases passed!"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The exercises `make exercises` built, when fresh; else built now (``conftest.exercises_build``)."""
    return exercises_build(tmp_path_factory)


def solved_student_notebook(built: Path, chapter: str) -> nbformat.NotebookNode:
    """The student notebook as the book publishes it (tools/book/publish.py: Colab's T4 metadata,
    the install cell pinned) with each answer cell replaced by the solution's."""
    name = f"{chapter}_exercises.ipynb"
    student = nbformat.read(built / "student" / name, as_version=4)
    solved = nbformat.read(built / "solutions" / name, as_version=4)
    assert len(student.cells) == len(solved.cells), chapter
    for cell, answer in zip(student.cells, solved.cells):
        if "otter_answer_cell" in cell.metadata.get("tags", []):
            cell.source = answer.source
    return publish.published(student, chapter, publish.build_ref(), publish.missing_on_colab())


@pytest.mark.parametrize("chapter", [exercises.chapter_of(s) for s in SOURCES])
def test_exercise_notebook_passes_its_public_checks_in_the_colab_like_environment(
        colab, built, chapter, tmp_path):
    nb = solved_student_notebook(built, chapter)
    NotebookClient(nb, kernel_name=colab["kernel"], timeout=CHECK_TIMEOUT_S,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    checks = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(exercises.CHECK_PREFIX)]
    assert checks, f"{chapter}: no grader.check cell"
    for cell in checks:
        question = cell.source.split('"')[1]
        shown = [o.get("data", {}).get("text/plain", "") for o in cell.outputs]
        assert any(s.startswith(PASSED.format(question)) for s in shown), (chapter, question, shown)
