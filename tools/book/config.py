"""Write the Jupyter Book configuration for one build of the book.

`_config.yml` is the book's configuration for the fast profile with its scripts served by the
book itself (MathJax, RequireJS and the widget manager, vendored by `make vendor` with npm).
Three things change with the build, and this tool writes the variant:

- the full profile trains for minutes in one cell, so its per-cell timeout is longer (the fast
  and cpu profiles keep `_config.yml`'s);
- without npm the scripts cannot be vendored: the book then loads them from their CDNs
  (Jupyter Book's defaults), which works online only;
- a chapter with fresh stored outputs (`tools/book/executed.py`, `book/executed/`) is not executed:
  it is excluded from execution and myst-nb reads it from its stored notebook instead of its
  `.md` (same page, same URL, same Colab button). The tool prints which chapters are rendered
  from stored outputs and which are executed, and why.

Every build also loads `tools/book/publish.py`, which writes the notebooks the Colab links open
(GPU metadata, the install cell pinned to this commit) into the built HTML.

The profile is the one the chapters will run (`xfl.runtime.profile`: `XFL_PROFILE` or `XFL_FAST`,
else the device). The configuration it writes also loads `tools/book/report.py`: the build ends by
printing, per chapter, where its outputs came from and how long it took, then the total.
Usage (from the repository root; `make book` runs it):
    XFL_FAST=1 python -m tools.book.config --assets vendor -o _build/book_config.yml
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import yaml

from tools.book.executed import ChapterState, chapter_states
from xfl.atomic_files import write_text_atomic
from xfl.runtime import profile

ROOT = Path(__file__).resolve().parents[2]
FULL_PROFILE_CELL_TIMEOUT_S = 3600  # a full-profile training cell on a T4 takes up to ~30 min
VENDORED_KEYS = ("mathjax_path", "nb_ipywidgets_js")
VENDOR_FOLDER = "book/vendor"  # in html_static_path beside the book's own CSS (book/static)


def book_config(base: dict, fast: bool, vendored: bool, stored: list[ChapterState] = (),
                executed: dict[str, tuple[Path, str]] | None = None) -> dict:
    """``base`` (the parsed `_config.yml`) adjusted for the profile, the script source and the
    chapters rendered from notebooks instead of executed: the fresh ``stored`` ones and the
    ``executed`` ones (``{chapter: (notebook, sha256 of its source)}``, this test run's)."""
    config = copy.deepcopy(base)
    # the notebooks the Colab links open, written into the HTML when it is built (issue 64)
    config.setdefault("sphinx", {}).setdefault("local_extensions", {})["tools.book.publish"] = str(ROOT)
    if not fast:
        config["execute"]["timeout"] = FULL_PROFILE_CELL_TIMEOUT_S
    if not vendored:
        sphinx = config["sphinx"]["config"]
        for key in VENDORED_KEYS:
            sphinx.pop(key, None)
        sphinx["html_static_path"] = [folder for folder in sphinx.get("html_static_path", [])
                                      if folder != VENDOR_FOLDER]
    if stored:
        render_stored(config, stored)
    if executed:
        render_notebooks(config, executed)
    return config


def render_stored(config: dict, stored: list[ChapterState]) -> None:
    """Render the fresh stored chapters from their stored notebooks."""
    if any(state.state != "fresh" for state in stored):
        raise ValueError(f"only fresh stored outputs are rendered, got {[s.state for s in stored]}")
    render_notebooks(config, {s.chapter: (s.stored, s.meta["source_sha256"]) for s in stored})


def render_notebooks(config: dict, notebooks: dict[str, tuple[Path, str]]) -> None:
    """Exclude these chapters from execution; myst-nb reads each from its executed notebook,
    which `tools.book.executed.read_stored` refuses once the source no longer has that sha256."""
    sources = [f"{chapter}.md" for chapter in notebooks]
    execute = config["execute"]
    execute["exclude_patterns"] = [p for p in execute.get("exclude_patterns", []) if p not in sources] + sources
    # myst-nb reads a source with the custom format whose key ends its path; Sphinx matches
    # suffixes against file names only, so a key with a "/" is no source suffix to it.
    formats = config["sphinx"]["config"].setdefault("nb_custom_formats", {})
    for source, (notebook, sha256) in zip(sources, notebooks.values()):
        formats[f"/{source}"] = ["tools.book.executed.read_stored",
                                 {"stored": str(Path(notebook).resolve()), "sha256": sha256}, False]
    config["sphinx"].setdefault("local_extensions", {})["tools.book.executed"] = str(ROOT)


def announce(states: list[ChapterState], profile: str) -> None:
    """Say which chapters the build renders from stored outputs and which it executes, and why."""
    for state in states:
        how = "rendering" if state.state == "fresh" else f"executing ({profile} profile)"
        print(f"book: {how:26} {state.chapter}: {state.reason()}")


def origin(state: ChapterState, profile: str) -> str:
    """Where the book's outputs of a chapter come from, for the report after the build."""
    if state.state == "fresh":
        seconds = state.meta.get("seconds")
        return (f"stored outputs of a {state.meta.get('profile')} profile run on "
                f"{state.meta.get('device_name') or state.meta.get('device')}, {state.meta.get('executed')}"
                + (f", {seconds / 60:.1f} min wall" if seconds else ""))
    return f"executed now in the {profile} profile"


def add_report(config: dict, origins: dict[str, str]) -> None:
    """Make the build end with each chapter's origin (``{chapter: origin}``) and time, then the
    total (tools/book/report.py)."""
    config["sphinx"]["config"]["xfl_chapter_origins"] = origins
    config["sphinx"].setdefault("local_extensions", {})["tools.book.report"] = str(ROOT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", choices=["vendor", "cdn"], required=True,
                        help="vendor: scripts served by the book (needs npm); cdn: loaded online")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args(argv)
    base = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    states, chosen = chapter_states(), profile()
    announce(states, chosen)
    config = book_config(base, fast=chosen != "full", vendored=args.assets == "vendor",
                         stored=[state for state in states if state.state == "fresh"])
    add_report(config, {state.chapter: origin(state, chosen) for state in states})
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.output, "# Written by tools/book/config.py from _config.yml: edit that.\n"
                      + yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
