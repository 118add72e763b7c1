"""Every chapter runs as on Colab: in an environment holding only Colab's preinstalled packages
plus what the chapter's first cell installs (`tools/env/colab_env.py`), in the fast profile.

The environment is cached in `.venv-colab/` between runs. Under `make test` it is prepared before
pytest starts (`python -m tools.env.colab_env prepare`) and nbval runs every chapter on its kernel,
recording each run (`tools/book/nbrecord.py`); these checks read that record, so a chapter runs once.
Run on their own, they prepare the environment and execute the chapters themselves (nbclient).
Either way the kernel is started from the project's environment, as Colab's front end starts its.
"""

from __future__ import annotations

import platform
import re
import subprocess
import tomllib
from pathlib import Path

import nbformat
import pytest

from conftest import REPO_ROOT, chapter_files, chapter_run
from tools.book import publish
from tools.env import colab_env
from tools.grading import exercises
from tools.book.executed import RUN_META

CHAPTERS = chapter_files()
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def changed_of_colab(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple]:
    """``{package: (before or Colab's, after)}`` for each package of Colab's whole freeze that an
    install changed, and each it added at another version than Colab's (on Colab pip would have
    had to replace Colab's)."""
    freeze = colab_env.read_freeze()[1]
    norm = colab_env.normalized
    changed = {n: (v, after.get(n)) for n, v in before.items() if norm(n) in freeze and after.get(n) != v}
    added = {n: (freeze[norm(n)], v) for n, v in after.items() if n not in before and norm(n) in freeze
             and v.split("+")[0] != freeze[norm(n)].split("+")[0]}
    return changed | added


def test_the_install_cell_changes_nothing_of_colabs_freeze(colab):
    """The published chapters' install cell (xfl without dependencies, then sacreBLEU, all of
    Colab's freeze held as constraints) changes none of the ~700 packages Colab has."""
    before, after = colab["before"], colab["after"]
    assert colab["chapter_installs"] == colab_env.chapters_installs()
    assert colab["chapter_installs"][0][0] == "--no-deps" and "xfl" in after
    assert changed_of_colab(before, after) == {}, "installing xfl changed Colab's packages"
    assert before["ipywidgets"] == "7.7.1" and after["torch"] == before["torch"]
    assert set(after) - set(before) >= {"xfl", "sacrebleu"}


def test_the_exercises_install_cell_changes_nothing_of_colabs_freeze(colab):
    """The exercise notebooks' first cell (xfl, then otter-grader without the dependencies that
    would upgrade Colab's ipywidgets 7.7.1) adds packages and changes none of Colab's."""
    before, after = colab["before"], colab["after_exercises"]
    assert colab["exercise_installs"] == colab_env.exercises_installs()
    assert changed_of_colab(before, after) == {}, "the exercises' install cell changed Colab's packages"
    assert after["ipywidgets"] == "7.7.1" and "otter-grader" in after


def test_the_environment_holds_colabs_versions_but_the_printed_deviations(colab):
    """Every package of Colab's list (tools/env/colab-runtime.txt) is at Colab's version, except
    the deviations the build printed (each with its reason): Python, and the local build tags;
    and every other package of the environment is at the version of Colab's whole freeze, or is
    a printed deviation (not on Colab, or Colab's pin refused by pip, each with its reason)."""
    colab_python, pins = colab_env.colab_list()
    deviations = {d["package"]: d for d in colab["deviations"]}
    assert deviations.pop("python") == {"package": "python", "colab": colab_python,
                                        "here": platform.python_version(),
                                        "why": "the Python this environment is built with"}
    assert all(d["why"] for d in deviations.values())
    assert all(deviations[n]["colab"] == v for n, v in pins.items() if n in deviations)
    expected = {name: deviations[name]["here"] if name in deviations else v for name, v in pins.items()}
    assert colab_env.check_against_list(colab["before"], expected) == {}
    assert expected["torch"] == "2.11.0" and expected["ipywidgets"] == "7.7.1"
    freeze = colab_env.read_freeze()[1]
    unprinted = {n: (freeze.get(colab_env.normalized(n)), v) for n, v in colab["before"].items()
                 if colab_env.normalized(n) not in deviations
                 and freeze.get(colab_env.normalized(n), "").split("+")[0] != v.split("+")[0]}
    assert unprinted == {}, "packages at another version than Colab's freeze, not printed"
    assert colab["before"]["pip"] == freeze["pip"] and colab["before"]["setuptools"] == freeze["setuptools"]


def test_every_lower_bound_we_claim_is_a_version_the_colab_like_run_uses(colab):
    """requirements.txt's lower bounds (and pyproject's, which repeat them) are the versions the
    Colab-like run has: Colab's own, or the constrained oldest for what Colab lacks."""
    bounds = colab_env.lower_bounds()
    assert {"torch", "torchvision", "numpy", "sacrebleu", "ipywidgets"} <= set(bounds)
    after = {colab_env.normalized(name): v for name, v in colab["after"].items()}
    untested = {name: (v, after.get(name)) for name, v in bounds.items()
                if after.get(name, "").split("+")[0] != v}
    assert untested == {}, f"lower bounds no test run uses: {untested}"
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = project["dependencies"] + [r for rs in project["optional-dependencies"].values() for r in rs]
    claimed = dict(re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", r).groups() for r in requirements)
    assert claimed and {n: bounds[colab_env.normalized(n)] for n in claimed} == claimed


def test_a_release_colab_has_that_does_not_install_here_gets_the_nearest(monkeypatch):
    chosen, deviations = colab_env.public_releases({"torch": "2.11.0+cu128", "oldpkg": "1.2.3"})
    assert chosen == {"torch": "2.11.0", "oldpkg": "1.2.3"}
    assert [(d["package"], d["colab"], d["here"]) for d in deviations] == [("torch", "2.11.0+cu128", "2.11.0")]
    installable = {"torch==2.11.0", "oldpkg==1.2.5"}
    monkeypatch.setattr(colab_env, "_dry_run_ok", lambda env, reqs: set(reqs) <= installable)
    monkeypatch.setattr(colab_env, "_available_versions", lambda env, name: ["2.0.0", "1.3.0", "1.2.5"])
    chosen, deviations = colab_env.stand_ins(Path("env"), chosen)
    assert chosen == {"torch": "2.11.0", "oldpkg": "1.2.5"}
    assert [(d["package"], d["colab"], d["here"]) for d in deviations] == [("oldpkg", "1.2.3", "1.2.5")]
    assert colab_env.check_against_list({"Torch": "2.11.0+cpu", "numpy": "2.4.0"},
                                        {**chosen, "numpy": "2.1.3"}) == {
        "oldpkg": ("1.2.5", None), "numpy": ("2.1.3", "2.4.0")}
    with pytest.raises(ValueError, match="no installable version to stand in for 1.2.3"):
        colab_env.nearest_version("1.2.3", [])


def test_a_pin_of_colabs_freeze_that_pip_refuses_is_dropped_with_pips_reason(monkeypatch):
    """The whole freeze is the build's constraints; a pin pip refuses (known up front, or named
    by pip's conflict report) is dropped, recorded with pip's reason, and the install retried."""
    refusal = ("The conflict is caused by:\n    torch 2.11.0 depends on cuda-pathfinder>=1.7\n"
               "    The user requested (constraint) cuda-pathfinder==1.6.0\n")
    tries = []

    def install(env, chosen, constraints):
        tries.append(dict(constraints))
        if "cuda-pathfinder" in constraints:
            raise subprocess.CalledProcessError(1, ["pip"], output=refusal)

    monkeypatch.setattr(colab_env, "_install_pinned", install)
    freeze = {"torch": "2.11.0+cu128", "cuda-toolkit": "12.8.1", "cuda-pathfinder": "1.6.0", "numpy": "2.1.3"}
    kept, dropped = colab_env.install_under_freeze(Path("env"), {"torch": "2.11.0"}, freeze)
    assert kept == {"torch": "2.11.0", "numpy": "2.1.3"} and len(tries) == 2
    assert [(d["package"], d["colab"]) for d in dropped] == [("cuda-toolkit", "12.8.1"), ("cuda-pathfinder", "1.6.0")]
    assert "depends on cuda-pathfinder>=1.7" in dropped[1]["why"]
    monkeypatch.setattr(colab_env, "_install_pinned", lambda *a: (_ for _ in ()).throw(
        subprocess.CalledProcessError(1, ["pip"], output="ERROR: something else")))
    with pytest.raises(RuntimeError, match="naming no constraint"):
        colab_env.install_under_freeze(Path("env"), {"torch": "2.11.0"}, {"numpy": "2.1.3"})


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_runs_in_the_colab_like_environment(colab, request, chapter):
    env = Path(colab["env"])
    nb = chapter_run(request, chapter, colab["kernel"])
    run = nb.metadata[RUN_META]
    print(f"{chapter}: {run['seconds']:.0f} s in the Colab-like environment (kernel {run['kernel']})")
    assert run["kernel"] == colab["kernel"] and run["problems"] == []
    probe = run["probe"]  # asked of the kernel after the chapter's last cell
    assert Path(probe["python"]).is_relative_to(env), f"the kernel ran {probe['python']}, not {env}"
    assert Path(probe["xfl"]).is_relative_to(env), f"the chapter imported xfl from {probe['xfl']}, not {env}"
    assert probe["ipywidgets"] == "7.7.1"
    assert probe["torch"].split("+")[0] == colab["after"]["torch"]  # 2.15.0+cu132 lists as 2.15.0
    banner = next(o["text"] for c in nb.cells if c.cell_type == "code" for o in c.outputs
                  if o.get("name") == "stdout")
    assert banner.startswith("xfl: fast profile (XFL_FAST=1) on cpu;"), banner
    assert banner.splitlines()[0].endswith(f"; xfl {colab['after']['xfl']}"), banner  # installed from a folder: no commit
    if "import ipywidgets" in (REPO_ROOT / f"{chapter}.md").read_text(encoding="utf-8"):
        views = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
                 if WIDGET_VIEW in o.get("data", {})]
        assert views, f"{chapter} imports ipywidgets but displayed no widget under ipywidgets 7.7.1"
        assert nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]




@pytest.mark.book
def test_the_built_book_carries_every_notebook_its_colab_links_open(built_book):
    """Each chapter's launch button and each exercise page's link open a notebook the build wrote
    into the HTML (tools/book/publish.py): a T4 runtime, xfl pinned to this build's commit."""
    ref, url = publish.build_ref(), publish.colab_url("")
    names = [f"{chapter}.ipynb" for chapter in CHAPTERS]
    for source in exercises.sources(REPO_ROOT):
        chapter = exercises.chapter_of(source)
        names.append(f"{publish.EXERCISES_FOLDER}/{chapter}_exercises.ipynb")
        page = (built_book.html / publish.EXERCISES_FOLDER / f"{chapter}.html").read_text(encoding="utf-8")
        assert f'href="{url}{publish.EXERCISES_FOLDER}/{chapter}_exercises.ipynb"' in page, chapter
    for name in names:
        nb = nbformat.read(built_book.html / name, as_version=4)
        assert nb.metadata["accelerator"] == "GPU" and nb.metadata["colab"]["gpuType"] == "T4", name
        first = next(c.source for c in nb.cells if c.cell_type == "code")
        assert f'--no-deps "xfl @ git+https://github.com/xfl-book/xfl@{ref}"' in first, (name, first)
