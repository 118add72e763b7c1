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
import tomllib
from pathlib import Path

import pytest

from conftest import REPO_ROOT, chapter_files, chapter_run
from tools.env import colab_env
from tools.book.executed import RUN_META

CHAPTERS = chapter_files()
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_the_install_cell_upgrades_nothing_colab_has(colab):
    before, after = colab["before"], colab["after"]
    assert colab["requirements"] == colab_env.chapters_requirements()
    assert "xfl" in after
    colab_has = colab_env.colab_list()[1]
    changed = {name: (v, after.get(name)) for name, v in before.items()
               if colab_env.normalized(name) in colab_has and after.get(name) != v}
    assert changed == {}, f"installing xfl changed Colab's packages: {changed}"
    assert before["ipywidgets"] == "7.7.1" and after["torch"] == before["torch"]


def test_the_exercises_install_cell_changes_nothing_colab_has(colab):
    """The exercise notebooks' first cell (xfl, then otter-grader without the dependencies that
    would upgrade Colab's ipywidgets 7.7.1) adds packages and changes none of Colab's."""
    before, after = colab["before"], colab["after_exercises"]
    assert colab["exercise_installs"] == colab_env.exercises_installs()
    colab_has = colab_env.colab_list()[1]
    changed = {name: (v, after.get(name)) for name, v in before.items()
               if colab_env.normalized(name) in colab_has and after.get(name) != v}
    assert changed == {}, f"the exercises' install cell changed Colab's packages: {changed}"
    assert after["ipywidgets"] == "7.7.1" and "otter-grader" in after


def test_the_environment_holds_colabs_versions_but_the_printed_deviations(colab):
    """Every package of Colab's list (tools/env/colab-runtime.txt) is at Colab's version, except
    the deviations the build printed (each with its reason): Python, and the local build tags."""
    colab_python, pins = colab_env.colab_list()
    deviations = {d["package"]: d for d in colab["deviations"]}
    assert deviations.pop("python") == {"package": "python", "colab": colab_python,
                                        "here": platform.python_version(),
                                        "why": "the Python this environment is built with"}
    assert all(d["why"] and d["colab"] == pins[name] for name, d in deviations.items())
    expected = {name: deviations[name]["here"] if name in deviations else v for name, v in pins.items()}
    assert colab_env.check_against_list(colab["before"], expected) == {}
    assert expected["torch"] == "2.11.0" and expected["ipywidgets"] == "7.7.1"


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
    if "import ipywidgets" in (REPO_ROOT / f"{chapter}.md").read_text(encoding="utf-8"):
        views = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
                 if WIDGET_VIEW in o.get("data", {})]
        assert views, f"{chapter} imports ipywidgets but displayed no widget under ipywidgets 7.7.1"
        assert nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]


