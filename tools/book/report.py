"""A Sphinx extension for `make book`: per chapter, where its outputs came from and how long it took.

`tools/book/config.py` adds it with ``xfl_chapter_origins`` (``{chapter: origin}``: rendered from
stored outputs of which run, or executed now in which profile). Sphinx reads a chapter from its
``source-read`` event to its ``doctree-read`` event, and myst-nb executes the notebook in
between, so that span is the chapter's time in this build. When the build ends, one line per
chapter, then the chapters' total and the whole build's.
"""

from __future__ import annotations

import time

from sphinx.util import logging

LOGGER = logging.getLogger(__name__)


def report_lines(origins: dict[str, str], seconds: dict[str, float], build_s: float) -> list[str]:
    """The report: one line per chapter of ``origins`` (in their order), then the totals."""
    lines = []
    for chapter, origin in origins.items():
        took = f"{seconds[chapter]:.1f} s" if chapter in seconds else "not read again (unchanged since the last build)"
        lines.append(f"book: {chapter}: {origin}: {took}")
    total = sum(seconds.get(chapter, 0.0) for chapter in origins)
    lines.append(f"book: total {total:.1f} s for the chapters, {build_s:.1f} s for the whole build")
    return lines


def _start(app) -> None:
    app.xfl_times = {"build": time.monotonic(), "began": {}, "seconds": {}}


def _began(app, docname: str, source) -> None:
    app.xfl_times["began"][docname] = time.monotonic()


def _read(app, doctree) -> None:
    docname = app.env.docname
    began = app.xfl_times["began"].pop(docname, None)
    if began is not None:
        app.xfl_times["seconds"][docname] = time.monotonic() - began


def _finished(app, exception) -> None:
    if exception is not None:
        return
    times = app.xfl_times
    for line in report_lines(app.config.xfl_chapter_origins, times["seconds"],
                             time.monotonic() - times["build"]):
        LOGGER.info(line)


def setup(app) -> dict:
    app.add_config_value("xfl_chapter_origins", {}, "")  # no re-read when it changes
    app.connect("builder-inited", _start)
    app.connect("source-read", _began)
    app.connect("doctree-read", _read)
    app.connect("build-finished", _finished)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
