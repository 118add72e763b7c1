"""The notebooks the book publishes for Colab (tools/book/publish.py) and the version xfl names
(xfl/version.py): a T4 runtime, the install cell pinned to the build's commit and changing
nothing Colab has, the exercise pages' Colab links (issue 64). Fast: no build, no kernel."""

from __future__ import annotations

import json
import subprocess
import tomllib

import jupytext
import nbformat
import pytest

from conftest import REPO_ROOT, chapter_files, load_config
from tools.book import publish
from tools.book.config import book_config
from tools.env import colab_env
from tools.grading import exercises
from xfl import version

REF = "0123456789abcdef0123456789abcdef01234567"
CHAPTERS = chapter_files()


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """Every notebook published into a folder as the build does, the student notebooks stood in
    for by the exercise sources (their first cells are the same)."""
    students = tmp_path_factory.mktemp("students")
    for source in exercises.sources(REPO_ROOT):
        nbformat.write(jupytext.read(source), students / f"{exercises.chapter_of(source)}_exercises.ipynb")
    out = tmp_path_factory.mktemp("html")
    return out, publish.publish(out, students, ref=REF)


def test_every_published_notebook_asks_colab_for_a_t4_and_installs_this_commit(published):
    out, written = published
    url = load_config()["repository"]["url"]
    expected = {out / f"{chapter}.ipynb" for chapter in CHAPTERS} | {
        out / publish.EXERCISES_FOLDER / f"{exercises.chapter_of(s)}_exercises.ipynb"
        for s in exercises.sources(REPO_ROOT)}
    assert set(written) == expected and len(written) == len(CHAPTERS) + len(exercises.sources(REPO_ROOT))
    for path in written:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata["accelerator"] == "GPU" and nb.metadata["colab"] == {"gpuType": "T4", "provenance": []}
        first = next(c.source for c in nb.cells if c.cell_type == "code")
        installs = [line.strip() for line in first.splitlines() if "%pip install" in line]
        assert installs[:2] == [f'%pip install -q --no-deps "xfl @ git+{url}@{REF}"',
                                '%pip install -q "sacrebleu==2.4.0"'], (path, first)
        chapter = path.parent.name if path.parent.parent.name == "chapters" else path.stem.removesuffix("_exercises")
        assert f'os.environ["XFL_CHAPTER"] = "{chapter}"' in first
        compile(first.replace("%pip", "pass  #"), str(path), "exec")  # still Python, magics aside


def test_only_the_install_cell_and_the_metadata_change(published):
    out, _ = published
    for chapter in CHAPTERS:
        source = nbformat.read(REPO_ROOT / f"{chapter}.ipynb", as_version=4)
        made = nbformat.read(out / f"{chapter}.ipynb", as_version=4)
        different = [i for i, (a, b) in enumerate(zip(source.cells, made.cells)) if a.source != b.source]
        first = next(i for i, c in enumerate(source.cells) if c.cell_type == "code")
        assert len(made.cells) == len(source.cells) and different == [first], chapter
        assert {k: v for k, v in made.metadata.items() if k not in publish.COLAB_METADATA} == source.metadata


def test_the_install_cell_adds_only_what_no_colab_runtime_has():
    """xfl goes in without its dependencies; the rest are xfl's dependencies that neither today's
    runtime nor an older one preinstalls, at the versions the Colab-like run tests."""
    missing = publish.missing_on_colab()
    assert missing == ["sacrebleu==2.4.0"]
    bounds = colab_env.lower_bounds()
    for freeze in (colab_env.FREEZE, *colab_env.OLDER_FREEZES):
        pins = colab_env.read_freeze(freeze)[1]
        for requirement in missing:
            name, pinned = requirement.split("==")
            assert name not in pins and bounds[name] == pinned, (freeze.name, requirement)


def test_a_cell_without_the_xfl_install_is_refused():
    with pytest.raises(ValueError, match=r'expected an install cell with `%pip install -q "xfl @ git\+<url>"`'):
        publish.install_cell("import sys\n", REF, "ch01_qkv", [])


def test_the_build_pins_the_checkouts_commit_or_the_ref_it_is_given(monkeypatch):
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    monkeypatch.delenv(publish.REF_ENV_VAR, raising=False)
    assert publish.build_ref() == head
    monkeypatch.setenv(publish.REF_ENV_VAR, "v0.1.0")
    assert publish.build_ref() == "v0.1.0"


def test_every_book_build_loads_the_publisher():
    config = book_config(load_config(), fast=True, vendored=True)
    assert config["sphinx"]["local_extensions"]["tools.book.publish"] == str(REPO_ROOT)


def test_each_exercise_page_links_its_published_notebook_in_colab():
    config = load_config()
    nb = jupytext.read(exercises.sources(REPO_ROOT)[0])
    page = exercises.page_markdown(nb, "ch00_data_exercises.ipynb")
    owner_repo = config["repository"]["url"].removeprefix("https://github.com/")
    link = (f"https://colab.research.google.com/github/{owner_repo}/blob/{config['repository']['branch']}/"
            f"{publish.EXERCISES_FOLDER}/ch00_data_exercises.ipynb")
    assert f"in Colab]({link})" in page


def test_xfl_names_its_release_and_commit(monkeypatch):
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert version.RELEASE == pyproject["project"]["version"]
    assert version.describe("0.1.0", REF) == "0.1.0+g0123456789ab"
    assert version.describe("0.1.0", "") == "0.1.0"

    class Installed:  # what pip records for `pip install "xfl @ git+...@<commit>"` (PEP 610)
        def read_text(self, name):
            assert name == "direct_url.json"
            return json.dumps({"url": "https://github.com/xfl-book/xfl", "vcs_info": {"vcs": "git", "commit_id": REF}})

    monkeypatch.setattr(version.metadata, "distribution", lambda name: Installed())
    assert version.installed_commit() == REF
    assert version.checkout_commit(REPO_ROOT / "xfl") is None  # not a checkout's root


def test_xfl_version_attribute_is_the_description():
    import xfl

    assert xfl.__version__ == version.describe()
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        xfl.nothing  # noqa: B018


def test_the_setup_page_prints_each_training_chapters_t4_range():
    """book/setup.md's T4 range table holds, per chapter with a pessimistic estimate, the rule's
    minutes it announces, the pessimistic ones (xfl.runtime.T4_SLOW_MINUTES) and the excess."""
    import re

    from xfl.runtime import COLAB_LIMIT_MINUTES, T4_SLOW_MINUTES

    setup = (REPO_ROOT / "book" / "setup.md").read_text(encoding="utf-8")
    found = re.findall(r"^\| ([^|]+?) \| about (\d+) min \| about (\d+) min \| (?:up to \d+ min|—) \|$", setup, re.M)
    rows = {title: (int(rule), int(slow)) for title, rule, slow in found}
    assert len(rows) == len(T4_SLOW_MINUTES)
    for chapter, slow in T4_SLOW_MINUTES.items():
        source = next((REPO_ROOT / "chapters" / chapter).glob("[!e]*.md")).read_text(encoding="utf-8")
        title = re.search(r"^# (.+)$", source, re.M).group(1)
        rule = int(re.search(r"t4_minutes=(\d+)", source).group(1))
        assert rows[title] == (rule, slow), chapter
        excess = f"up to {slow - COLAB_LIMIT_MINUTES} min" if slow > COLAB_LIMIT_MINUTES else "—"
        assert f"| about {rule} min | about {slow} min | {excess} |" in setup, chapter


def test_the_committed_old_runtime_check_found_nothing_changed():
    """`make colab-old-check` (bench/results/colab_old_runtimes.json): pip's resolution of the
    published install cells on today's Colab runtime and three older ones changes none of their
    packages, and it resolved the commands the cells run now (else: run it again)."""
    record = json.loads((REPO_ROOT / "bench" / "results" / "colab_old_runtimes.json").read_text(encoding="utf-8"))
    freezes = (colab_env.FREEZE, *colab_env.OLDER_FREEZES)
    cells = {"chapters": colab_env.chapters_installs(), "exercises": colab_env.exercises_installs()}
    assert [(r["runtime"], r["cell"]) for r in record["results"]] == [(f.name, c) for f in freezes for c in cells]
    for result in record["results"]:
        assert result["changes"] == {}, result["runtime"]
        assert result["resolved_by_pip"] == [a for a in cells[result["cell"]] if "--no-deps" not in a]
        assert {"xfl", "sacrebleu"} <= set(result["adds"]) and "torch" not in result["adds"]
        assert result["python"] == colab_env.read_freeze(REPO_ROOT / "tools/env/colab-freezes" / result["runtime"])[0]


def test_the_committed_older_runtime_run_imported_its_releases_and_ran_chapter_1():
    """`make colab-old-check`'s run (bench/results/colab_old_run.json): on 2026.07's releases
    (numpy 2.0.2, pandas 2.2.2, today's torch) xfl imported, printed its banner and chapter 1 ran
    in the fast profile; the runtimes with another torch are skipped and say so."""
    from tools.env import colab_old

    record = json.loads((REPO_ROOT / "bench" / "results" / "colab_old_run.json").read_text(encoding="utf-8"))
    results = {r["runtime"]: r for r in record["results"]}
    assert list(results) == [f.name for f in colab_env.OLDER_FREEZES]
    for freeze in colab_env.OLDER_FREEZES:
        result = results[freeze.name]
        assert result["older_releases"] == colab_old.older_releases(freeze), "stale: run make colab-old-check"
        torch_differs = "torch" in result["older_releases"]
        assert result["ran"] is not torch_differs and (torch_differs or result["imports"]["numpy"] == "2.0.2")
    ran = results["2026.07-gpu.txt"]
    assert ran["imports"]["pandas"] == ran["older_releases"]["pandas"]
    assert ran["chapter_banner"].startswith("xfl: fast profile (XFL_FAST=1) on cpu;")
    assert "no GPU found" in ran["imports"]["banner"] and "2026.07-gpu" in ran["kernel_probe"]["python"]
