"""tools/book_config: the full profile gets a longer cell timeout; without npm, the CDN scripts;
chapters with fresh stored outputs are rendered, the others executed (tests/test_executed.py)."""

import re
from pathlib import Path

import pytest
import yaml

from tools.book import config as book_config
from tools.book.config import FULL_PROFILE_CELL_TIMEOUT_S, VENDOR_FOLDER, VENDORED_KEYS
from tools.book.executed import ChapterState, chapter_states

from conftest import REPO_ROOT, chapter_files, load_config


def test_fast_vendored_build_is_the_config_itself():
    base = load_config()
    config = book_config.book_config(base, fast=True, vendored=True)
    # the one addition: the extension that publishes the notebooks the Colab links open
    assert config["sphinx"].pop("local_extensions") == {"tools.book.publish": str(REPO_ROOT)}
    assert config == base
    assert 60 <= base["execute"]["timeout"] <= 900, "a hang must fail within minutes"


def test_nbval_and_the_book_build_share_one_cell_timeout():
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    assert int(re.search(r"^CELL_TIMEOUT := (\d+)$", makefile, re.M).group(1)) == load_config()["execute"]["timeout"]
    assert "--nbval-cell-timeout=$(CELL_TIMEOUT)" in makefile


def test_full_profile_waits_longer_per_cell():
    config = book_config.book_config(load_config(), fast=False, vendored=True)
    assert config["execute"]["timeout"] == FULL_PROFILE_CELL_TIMEOUT_S > load_config()["execute"]["timeout"]


def test_without_npm_the_scripts_come_from_their_cdns():
    base = load_config()
    config = book_config.book_config(base, fast=True, vendored=False)
    assert all(key in base["sphinx"]["config"] for key in VENDORED_KEYS)
    assert not any(key in config["sphinx"]["config"] for key in VENDORED_KEYS)
    assert config["sphinx"]["config"]["html_static_path"] == ["book/static"]  # the CSS stays
    assert config["bibtex_bibfiles"] == base["bibtex_bibfiles"]  # the rest is unchanged
    assert base["sphinx"]["config"]["html_static_path"] == [VENDOR_FOLDER, "book/static"]  # input untouched


@pytest.mark.parametrize("fast, timeout", [("1", None), ("0", FULL_PROFILE_CELL_TIMEOUT_S)])
def test_written_file_follows_the_profile(tmp_path, monkeypatch, fast, timeout):
    monkeypatch.setenv("XFL_FAST", fast)
    out = tmp_path / "book_config.yml"
    assert book_config.main(["--assets", "cdn", "-o", str(out)]) == 0
    written = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert written["execute"]["timeout"] == (timeout or load_config()["execute"]["timeout"])
    assert "mathjax_path" not in written["sphinx"]["config"]
    assert list(tmp_path.iterdir()) == [out]  # written atomically: no temporary file left


def test_build_says_how_each_chapter_is_made(tmp_path, monkeypatch, capsys):
    """One line per chapter: rendered from fresh stored outputs, or executed, and why."""
    monkeypatch.setenv("XFL_FAST", "1")
    assert book_config.main(["--assets", "vendor", "-o", str(tmp_path / "book_config.yml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    states = chapter_states()
    assert len(lines) == len(states) == len(chapter_files())
    for line, state in zip(lines, states):
        how = "rendering" if state.state == "fresh" else "executing (fast profile)"
        assert line.startswith(f"book: {how}") and f" {state.chapter}: {state.reason()}" in line
    written = yaml.safe_load((tmp_path / "book_config.yml").read_text(encoding="utf-8"))
    origins = written["sphinx"]["config"].pop("xfl_chapter_origins")  # for the report at the end
    assert list(origins) == [state.chapter for state in states]
    assert all(origins[s.chapter] == book_config.origin(s, "fast") for s in states)
    extensions = written["sphinx"].pop("local_extensions")
    assert extensions.pop("tools.book.report") == extensions.pop("tools.book.publish") == str(REPO_ROOT)
    if not any(state.state == "fresh" for state in states):  # nothing stored: the config itself
        assert written == load_config()


def test_origins_name_the_stored_run_or_the_profile():
    state = ChapterState("chapters/a/a", "fresh", Path("a.ipynb"),
                         {"profile": "full", "device_name": "NVIDIA H100", "executed": "2026-11-20"})
    assert book_config.origin(state, "fast") == "stored outputs of a full profile run on NVIDIA H100, 2026-11-20"
    for stale in ("stale", "none"):
        assert book_config.origin(ChapterState("chapters/a/a", stale, None, {}), "full") == \
            "executed now in the full profile"


def test_this_runs_executed_chapters_are_rendered_not_executed(tmp_path):
    """The test build renders the notebooks nbval executed (tools/book/nbrecord.py)."""
    chapter = chapter_files()[0]
    config = book_config.book_config(load_config(), fast=True, vendored=True,
                                     executed={chapter: (tmp_path / "x.ipynb", "ab" * 32)})
    assert config["execute"]["exclude_patterns"][-1] == f"{chapter}.md"
    reader = config["sphinx"]["config"]["nb_custom_formats"][f"/{chapter}.md"]
    assert reader == ["tools.book.executed.read_stored", {"stored": str((tmp_path / "x.ipynb").resolve()),
                                                     "sha256": "ab" * 32}, False]
    assert config["execute"]["execute_notebooks"] == "force"  # the other chapters still run


LICENCE_URL = "https://creativecommons.org/licenses/by/4.0/"


@pytest.mark.parametrize("fast", ["1", "0"])
@pytest.mark.parametrize("assets", ["vendor", "cdn"])
def test_every_built_footer_states_the_licences_and_credits_tatoeba(tmp_path, monkeypatch, fast, assets):
    """The rendered book's footer (JB1: html.extra_footer) names the text's licence with its link,
    the code's, and the Tatoeba credit, in every configuration `make book` can write."""
    monkeypatch.setenv("XFL_FAST", fast)
    out = tmp_path / "book_config.yml"
    assert book_config.main(["--assets", assets, "-o", str(out)]) == 0
    footer = yaml.safe_load(out.read_text(encoding="utf-8"))["html"]["extra_footer"]
    assert f'<a href="{LICENCE_URL}">CC BY 4.0</a>' in footer and "code: MIT License" in footer, footer
    assert "tatoeba.org (CC-BY 2.0 FR)" in footer, footer
    assert "LICENSE-BOOK" in footer and "LICENSE " in footer, footer  # the files it names exist:
    legal = (REPO_ROOT / "LICENSE-BOOK").read_text(encoding="utf-8")
    assert "\nCreative Commons Attribution 4.0 International Public License\n" in legal
    assert all(f"\nSection {n} -- " in legal for n in range(1, 9))  # the whole legal code
    assert (REPO_ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License\n")
