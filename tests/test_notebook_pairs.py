"""Each chapter's MyST source and its committed notebook hold the same cells, without outputs."""

from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for p in ROOT.glob("chapters/*/*.md")
                 if p.with_suffix(".ipynb").exists() or "formats: ipynb,md:myst" in p.read_text())


def cells(nb):
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def test_there_are_chapters():
    assert len(SOURCES) >= 2, SOURCES


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.parent.name)
def test_pair_in_sync(source):
    notebook = source.with_suffix(".ipynb")
    assert notebook.exists(), f"{notebook} missing: run `make sync`"
    from_md = jupytext.read(source)
    committed = nbformat.read(notebook, as_version=4)
    assert cells(committed) == cells(from_md), f"{notebook.name} differs from {source.name}: run `make sync`"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.parent.name)
def test_notebook_is_stripped(source):
    committed = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    code = [c for c in committed.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), \
        f"{source.with_suffix('.ipynb').name} carries outputs: strip them"
