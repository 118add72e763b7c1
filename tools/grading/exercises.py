"""Build the graded exercises: student notebooks, autograder zips and the book's exercise pages.

Each chapter's ``chapters/<chapter>/exercises.md`` is a Jupytext MyST notebook written in
otter-grader's assign format (raw cells ``# BEGIN QUESTION``, ``# BEGIN SOLUTION``,
``# BEGIN TESTS``; hidden tests carry ``hidden: true``). ``otter assign`` splits it into

    _build/exercises/student/<chapter>_exercises.ipynb      release to students (no solutions,
                                                             public tests bundled, Colab-ready)
    _build/exercises/autograder/<chapter>-autograder.zip    keep private: every test, hidden ones too
    _build/exercises/solutions/<chapter>_exercises.ipynb    keep private: the reference answers

Writing tests: compare tensors with ``torch.testing.assert_close(got, expected, rtol=..., atol=...)``
(``rtol=0, atol=0`` for exact), which checks shape and dtype; ``torch.allclose`` and
``(a == b).all()`` broadcast, so a zero-size tensor of shape (0, 1, ..., 1) passes them. Check
the shape before a property such as ``(w >= 0).all()``.

Usage (from the repository root):
    python -m tools.grading.exercises build [--out _build/exercises] [--no-run-tests] [CHAPTER ...]
    python -m tools.grading.exercises pages [--out _build/exercises] [--pages book/exercises]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jupytext
import nbformat

from xfl.atomic_files import atomic_path, write_text_atomic

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "_build" / "exercises"
DEFAULT_PAGES = ROOT / "book" / "exercises"
SETUP_MARKER = "otter.Notebook("
CHECK_PREFIX = "grader.check("
WRITTEN_PLACEHOLDER = "_Type your answer here, replacing this text._"  # otter's empty text answer

BUNDLED_SETUP = '''\
# grader.check("q1") runs the public tests of question q1. They are bundled here, so this
# notebook works on its own (Colab included); your instructor grades with more, hidden tests.
import pathlib
import tempfile

import otter

PUBLIC_TESTS = {tests}
tests_dir = pathlib.Path(tempfile.mkdtemp(prefix="xfl-tests-"))
for name, source in PUBLIC_TESTS.items():
    (tests_dir / f"{{name}}.py").write_text(source)
grader = otter.Notebook(tests_dir=str(tests_dir))'''


def sources(root: Path = ROOT, chapters: list[str] | None = None) -> list[Path]:
    """The exercise sources ``chapters/*/exercises.md``, optionally only the named chapters."""
    found = sorted(root.glob("chapters/*/exercises.md"))
    if chapters:
        found = [p for p in found if p.parent.name in chapters]
        missing = set(chapters) - {p.parent.name for p in found}
        if missing:
            raise ValueError(f"no chapters/<name>/exercises.md for {sorted(missing)}")
    return found


def chapter_of(source: Path) -> str:
    return source.parent.name


def run_otter_assign(master: Path, result: Path, run_tests: bool = True) -> None:
    """``otter assign`` in a subprocess; raises with otter's output if it fails."""
    cmd = [sys.executable, "-m", "otter", "assign", master.name, str(result)]
    if not run_tests:
        cmd.append("--no-run-tests")
    proc = subprocess.run(cmd, cwd=master.parent, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"otter assign failed for {master}:\n{proc.stdout}\n{proc.stderr}")


def bundle_public_tests(nb: nbformat.NotebookNode, tests_dir: Path) -> None:
    """Replace the ``otter.Notebook(...)`` setup cell by one that carries the public tests."""
    tests = {p.stem: p.read_text() for p in sorted(tests_dir.glob("*.py"))}
    setup = [c for c in nb.cells if c.cell_type == "code" and SETUP_MARKER in c.source]
    if len(setup) != 1:
        raise ValueError(f"expected one setup cell calling {SETUP_MARKER}...), found {len(setup)}")
    listing = "{\n" + "".join(f"    {name!r}: {src!r},\n" for name, src in tests.items()) + "}"
    setup[0].source = BUNDLED_SETUP.format(tests=listing)
    setup[0].metadata.setdefault("jupyter", {})["source_hidden"] = True  # folded in JupyterLab


def drop_written_placeholders(nb: nbformat.NotebookNode) -> None:
    """otter keeps a written (manual) question's empty answer cell in the solutions notebook,
    before the model answer: drop it, so that the solutions and the student notebook have the
    same cells."""
    cells = nb.cells
    nb.cells = [c for i, c in enumerate(cells)
                if not (c.cell_type == "markdown" and c.source.strip() == WRITTEN_PLACEHOLDER and i + 1 < len(cells)
                        and "otter_assign_solution_cell" in cells[i + 1].metadata.get("tags", []))]


def build_chapter(source: Path, out: Path, run_tests: bool = True) -> dict[str, Path]:
    """Student notebook, autograder zip and solutions notebook for one chapter, under ``out``."""
    chapter = chapter_of(source)
    name = f"{chapter}_exercises"
    with tempfile.TemporaryDirectory(prefix=f"xfl-assign-{chapter}-") as tmp:
        master = Path(tmp) / "master" / f"{name}.ipynb"
        master.parent.mkdir()
        nbformat.write(jupytext.read(source), master)
        result = Path(tmp) / "result"
        run_otter_assign(master, result, run_tests)
        student = nbformat.read(result / "student" / f"{name}.ipynb", as_version=4)
        bundle_public_tests(student, result / "student" / "tests")
        (zip_path,) = (result / "autograder").glob("*.zip")
        paths = {"student": out / "student" / f"{name}.ipynb",
                 "autograder": out / "autograder" / f"{chapter}-autograder.zip",
                 "solutions": out / "solutions" / f"{name}.ipynb"}
        for path in paths.values():
            path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(paths["student"]) as tmp:
            nbformat.write(student, tmp)
        with atomic_path(paths["autograder"]) as tmp:
            shutil.copyfile(zip_path, tmp)
        solutions = nbformat.read(result / "autograder" / f"{name}.ipynb", as_version=4)
        drop_written_placeholders(solutions)
        with atomic_path(paths["solutions"]) as tmp:
            nbformat.write(solutions, tmp)
    return paths


# ---------------------------------------------------------------- the book's pages
def is_setup_cell(cell) -> bool:
    """The Colab install cell and the otter setup cell: plumbing, not exercise content."""
    return cell.cell_type == "code" and (SETUP_MARKER in cell.source or "google.colab" in cell.source)


def page_markdown(student_nb: nbformat.NotebookNode, notebook_name: str) -> str:
    """A plain MyST page (not executed) showing a student notebook's prompts and stubs."""
    parts, intro_done = [], False
    for cell in student_nb.cells:
        if cell.cell_type == "markdown":
            parts.append(cell.source.strip())
            if not intro_done:  # right after the title and intro: how to get the notebook
                parts.append(_how_to_run(notebook_name))
                intro_done = True
        elif cell.cell_type == "code" and not is_setup_cell(cell):
            parts.append("```python\n" + cell.source.strip() + "\n```")
    return "\n\n".join(parts) + "\n"


def _how_to_run(notebook_name: str) -> str:
    from tools.book.publish import EXERCISES_FOLDER, colab_url  # the book publishes the notebook

    return (":::{note}\nThese exercises are graded. "
            f"[Open the notebook `{notebook_name}` in Colab]({colab_url(f'{EXERCISES_FOLDER}/{notebook_name}')}) "
            "(it asks for a T4 runtime and installs the xfl this book was built from; `grader.check` "
            "runs each question's public tests there), or work in the one your instructor releases "
            f"(see {{doc}}`/book/instructors`), locally or on Colab. Below are its questions and the "
            "cells to fill in; the solutions and the hidden tests are not part of this book.\n:::")


def write_pages(out: Path, pages: Path) -> list[Path]:
    """One page per built student notebook: ``pages/<chapter>.md``."""
    pages.mkdir(parents=True, exist_ok=True)
    written = []
    for nb_path in sorted((out / "student").glob("*_exercises.ipynb")):
        chapter = nb_path.stem.removesuffix("_exercises")
        text = page_markdown(nbformat.read(nb_path, as_version=4), nb_path.name)
        page = pages / f"{chapter}.md"
        write_text_atomic(page, text)
        written.append(page)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="student notebooks, autograder zips, solutions")
    build.add_argument("chapters", nargs="*", help="chapter folder names (default: all)")
    build.add_argument("--out", type=Path, default=DEFAULT_OUT)
    build.add_argument("--no-run-tests", action="store_true",
                       help="skip otter's check that every solution passes its tests")
    pages = sub.add_parser("pages", help="the book's exercise pages from the student notebooks")
    pages.add_argument("--out", type=Path, default=DEFAULT_OUT)
    pages.add_argument("--pages", type=Path, default=DEFAULT_PAGES)
    args = parser.parse_args(argv)
    if args.command == "build":
        for source in sources(ROOT, args.chapters):
            paths = build_chapter(source, args.out, run_tests=not args.no_run_tests)
            print(f"{chapter_of(source)}: " + ", ".join(str(p.relative_to(args.out)) for p in paths.values()))
    else:
        for page in write_pages(args.out, args.pages):
            print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
