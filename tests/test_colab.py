"""Every chapter runs as on Colab: in an environment holding only Colab's preinstalled packages
plus what the chapter's first cell installs (`tools/colab_env.py`), in the fast profile.

The environment is cached in `.venv-colab/` between runs. Its kernel is started by nbclient
from this (the project's) environment, as Colab's front end starts its kernel.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO_ROOT, chapter_files, load_config
from tools import colab_env

CHAPTERS = chapter_files()
CELL_TIMEOUT_S = load_config()["execute"]["timeout"]  # as in the book build and nbval
KERNEL = "xfl-colab-like"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _requirements() -> list[str]:
    """What the chapters' first cells install (the same for every chapter)."""
    found = {json.dumps(colab_env.first_cell_requirements(REPO_ROOT / f"{c}.ipynb")) for c in CHAPTERS}
    assert len(found) == 1, f"the chapters' install cells differ: {sorted(found)}"
    return json.loads(found.pop())


@pytest.fixture(scope="module")
def colab(tmp_path_factory, monkeypatch_module):
    """The Colab-like environment, with this checkout's xfl installed the way the first cell does,
    registered as a Jupyter kernel. Returns (env, versions before, versions after the install)."""
    env = colab_env.DEFAULT_ENV
    python = colab_env.ensure_preinstalled(env)
    before = colab_env.installed_versions(env)
    colab_env.install_chapter_requirements(env, _requirements())
    after = colab_env.installed_versions(env)
    kernels = tmp_path_factory.mktemp("jupyter") / "kernels" / KERNEL
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab-like", "language": "python"}))
    monkeypatch_module.setenv("JUPYTER_PATH", str(kernels.parents[1]))
    monkeypatch_module.setenv("XFL_FAST", "1")
    return env, before, after


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_the_install_cell_upgrades_nothing_colab_has(colab):
    _, before, after = colab
    assert "xfl" in after
    changed = {name: (v, after.get(name)) for name, v in before.items() if after.get(name) != v and name != "xfl"}
    assert changed == {}, f"installing xfl changed Colab's packages: {changed}"
    assert before["ipywidgets"] == "7.7.1" and after["torch"] == before["torch"]


def _run(chapter: str) -> nbformat.NotebookNode:
    path = REPO_ROOT / f"{chapter}.ipynb"
    nb = nbformat.read(path, as_version=4)
    probe = nbformat.v4.new_code_cell("import xfl, ipywidgets; print(xfl.__file__, ipywidgets.__version__)")
    nb.cells.insert(1, probe)  # after the install cell: which xfl and ipywidgets the chapter gets
    NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT_S,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_runs_in_the_colab_like_environment(colab, chapter):
    env = colab[0]
    start = time.perf_counter()
    nb = _run(chapter)
    print(f"{chapter}: {time.perf_counter() - start:.0f} s in the Colab-like environment")
    xfl_file, widgets_version = nb.cells[1].outputs[0]["text"].split()
    assert Path(xfl_file).is_relative_to(env), f"the chapter imported xfl from {xfl_file}, not {env}"
    assert widgets_version == "7.7.1"
    banner = next(o["text"] for c in nb.cells[2:] if c.cell_type == "code" for o in c.outputs
                  if o.get("name") == "stdout")
    assert banner.startswith("xfl: fast profile (XFL_FAST=1) on cpu;"), banner
    if "import ipywidgets" in (REPO_ROOT / f"{chapter}.md").read_text(encoding="utf-8"):
        views = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
                 if WIDGET_VIEW in o.get("data", {})]
        assert views, f"{chapter} imports ipywidgets but displayed no widget under ipywidgets 7.7.1"
