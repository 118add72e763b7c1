"""The order of a recording test run: longest chapters first, the book's checks next, then the rest.

Registered by `tools.book.nbrecord` when it records. The checks that read this run's executed
notebooks (`AFTER_CHAPTERS`: the Colab-like checks, the book build, the browser) wait for them,
so they come after every chapter; under pytest-xdist they form one work unit (one worker builds
the book and checks it while the other runs the unit tests), and the work units keep this order
(`--dist loadfile` would reorder them by size). Chapters go longest first, by the fast-profile
minutes each announces in its ``run_banner(fast_minutes=...)`` call, so that the short ones fill
the end and both workers stay busy.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

AFTER_CHAPTERS = ("tests/test_colab.py", "tests/test_book.py", "tests/test_browser.py")
BOOK_SCOPE = "xfl-book-checks"
ANNOUNCED = re.compile(r"run_banner\(fast_minutes=([\d.]+)")


def announced_minutes(notebook: Path) -> float:
    """The fast-profile minutes a chapter announces in its MyST source (0 if it announces none)."""
    source = Path(notebook).with_suffix(".md")
    match = ANNOUNCED.search(source.read_text(encoding="utf-8")) if source.exists() else None
    return float(match.group(1)) if match else 0.0


def _file_of(item, root: Path) -> str:
    return Path(item.path).resolve().relative_to(root.resolve()).as_posix()


def run_order(items: list, root: Path) -> list:
    """``items`` reordered: notebooks (longest announced first), `AFTER_CHAPTERS`, the rest;
    items of one file keep their order."""
    minutes: dict[str, float] = {}

    def rank(item):
        name = _file_of(item, root)
        if name.endswith(".ipynb"):
            minutes.setdefault(name, announced_minutes(Path(item.path)))
            return (0, -minutes[name])
        if name in AFTER_CHAPTERS:
            return (1, AFTER_CHAPTERS.index(name))
        return (2, 0)

    return sorted(items, key=rank)  # stable: a file's items stay together and in order


def pytest_collection_modifyitems(session, config, items) -> None:
    items[:] = run_order(items, config.rootpath)


def split_scope(nodeid: str) -> str:
    """The xdist work unit of a test: its file, or `BOOK_SCOPE` for the book's checks."""
    name = nodeid.split("::", 1)[0]
    return BOOK_SCOPE if name in AFTER_CHAPTERS else name


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class BookAfterChapters(LoadScopeScheduling):
        """``--dist loadfile`` in collection order, the book's checks one unit."""

        def _split_scope(self, nodeid: str) -> str:
            return split_scope(nodeid)

    config.option.loadscopereorder = False
    return BookAfterChapters(config, log)
