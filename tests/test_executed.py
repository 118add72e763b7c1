"""tools/executed: stored executed notebooks belong to the current sources, or are called stale.

The stored notebooks of the repository are checked first; then `store` and `status` run on a tiny
chapter in a temporary book (fresh, then stale after an edit), `store` refuses what it must
refuse without writing anything, and the book configuration renders a fresh stored chapter
without executing it (the last test builds that tiny book with Jupyter Book to show it).
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
from pathlib import Path

import jupytext
import nbformat
import numpy as np
import pytest
import yaml
from PIL import Image

from tools.book import executed
from tools.book.config import book_config
from tools.book.executed import StoreError

from conftest import REPO_ROOT, _jupyter_book, chapter_files, load_config

FULL_BANNER = "xfl: full profile (XFL_FAST=0) on cuda; expected run time about 1 min on a T4\n"
TINY = "chapters/ch99_tiny/tiny"
TINY_MD = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3 (ipykernel)
  language: python
  name: python3
---

# A tiny chapter

```{code-cell} ipython3
print("executed by the book build")
```

```{code-cell} ipython3
picture = "a figure"
```
"""


# ---------------------------------------------------------------- the repository's stored notebooks


def test_stored_notebooks_belong_to_current_chapters():
    assert executed.strays() == [], "book/executed/ holds files that belong to no chapter"
    states = executed.chapter_states()  # raises on a malformed stored notebook
    assert [s.chapter for s in states] == chapter_files()
    for state in states:
        if state.stored is not None:
            assert state.meta["source"] == f"{state.chapter}.md"
            assert state.meta["profile"] in {"full", "cpu"}, f"{state.stored} holds a fast-profile run"
            assert "| stored run: " in executed.banner_output(nbformat.read(state.stored, 4))[0]["text"]


def test_status_reports_every_stale_notebook_and_the_book_does_not_render_it(capsys):
    assert executed.main(["status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    states = executed.chapter_states()
    assert len(lines) == len(states)
    for line, state in zip(lines, states):
        assert line.split()[:2] == [state.chapter, state.state]
        if state.state == "stale":
            assert "execute it again" in line
    rendered = [s for s in states if s.state == "fresh"]
    config = book_config(load_config(), fast=True, vendored=True, stored=rendered)
    excluded = config["execute"].get("exclude_patterns", [])
    assert excluded == [f"{s.chapter}.md" for s in rendered]


# ---------------------------------------------------------------- a tiny chapter, stored


def png(width: int, height: int) -> str:
    """A base64 PNG of noise (it does not compress, so its size follows its pixels)."""
    pixels = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


@pytest.fixture
def book(tmp_path) -> Path:
    """A book with one chapter, `chapters/ch99_tiny/tiny.md`."""
    (tmp_path / "_toc.yml").write_text(yaml.safe_dump(
        {"format": "jb-book", "root": "intro", "chapters": [{"file": TINY}]}))
    (tmp_path / "intro.md").write_text("# A tiny book\n")
    (tmp_path / f"{TINY}.md").parent.mkdir(parents=True)
    (tmp_path / f"{TINY}.md").write_text(TINY_MD, encoding="utf-8")
    return tmp_path


def executed_notebook(book: Path, folder: Path, banner: str = FULL_BANNER, name: str = "tiny",
                      error: bool = False) -> Path:
    """The tiny chapter as if executed: the banner, a large PNG, optionally an error."""
    nb = jupytext.read(book / f"{TINY}.md")
    first, second = [c for c in nb.cells if c.cell_type == "code"]
    first.execution_count = 1
    first.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                            text=banner + "from the stored run\nstep 1\rstep 2\n")]
    second.execution_count = 2
    second.outputs = [nbformat.v4.new_output("display_data", data={"image/png": png(1500, 100),
                                                                   "text/plain": "<Figure>"})]
    if error:
        second.outputs.append(nbformat.v4.new_output("error", ename="ValueError",
                                                     evalue="bad value", traceback=[]))
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_store_then_status_fresh_then_stale_after_an_edit(book, tmp_path_factory, capsys):
    runs = tmp_path_factory.mktemp("runs")
    stored = executed.store(executed_notebook(book, runs), root=book)
    assert stored == book / "book" / "executed" / "ch99_tiny" / "tiny.ipynb"
    assert files_under(book / "book" / "executed") == [stored]  # no temporary file left

    nb = nbformat.read(stored, as_version=4)
    meta = nb.metadata["xfl_executed"]
    assert meta["source_sha256"] == executed.source_sha256((book / f"{TINY}.md").read_text())
    assert (meta["profile"], meta["profile_reason"], meta["device"]) == ("full", "XFL_FAST=0", "cuda")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is None for c in code)
    assert code[0].outputs[0].text.endswith("step 2\n") and "step 1" not in code[0].outputs[0].text
    image = Image.open(io.BytesIO(base64.b64decode(code[1].outputs[0].data["image/png"])))
    assert image.width == executed.PNG_MAX_WIDTH  # downscaled from 1500 pixels

    [state] = executed.chapter_states(book)
    assert (state.chapter, state.state, state.stored) == (TINY, "fresh", stored)
    assert executed._status(book) == 0
    assert capsys.readouterr().out.split()[:2] == [TINY, "fresh"]

    (book / f"{TINY}.md").write_text(TINY_MD.replace("A tiny", "An edited"), encoding="utf-8")
    assert [s.state for s in executed.chapter_states(book)] == ["stale"]
    assert executed._status(book) == 0
    assert "stale" in capsys.readouterr().out


@pytest.mark.parametrize("case, message", [
    ("error", "error output (cell 2: ValueError: bad value)"),
    ("no chapter", "belongs to no chapter of _toc.yml"),
    ("other cells", "other cells than chapters/ch99_tiny/tiny.md"),
    ("fast", "it ran the fast profile"),
    ("no banner", "no `xfl: <profile> profile"),
])
def test_store_refuses_and_writes_nothing(book, tmp_path_factory, case, message):
    runs = tmp_path_factory.mktemp("runs")
    path = executed_notebook(book, runs, error=case == "error",
                             name="elsewhere" if case == "no chapter" else "tiny",
                             banner={"fast": FULL_BANNER.replace("full", "fast"),
                                     "no banner": ""}.get(case, FULL_BANNER))
    if case == "other cells":
        (book / f"{TINY}.md").write_text(TINY_MD.replace('"a figure"', '"another"'))
    with pytest.raises(StoreError, match=message.replace("(", r"\(").replace(")", r"\)")):
        executed.store(path, root=book)
    assert files_under(book / "book" / "executed") == []


CPU_BANNER = "xfl: cpu profile (XFL_PROFILE=cpu) on cpu; expected run time about 9 min on a 2-core CPU\n"


def test_a_cpu_run_is_stored_with_where_when_and_how_long_on_its_first_line(book, tmp_path_factory):
    path = executed_notebook(book, tmp_path_factory.mktemp("runs"), banner=CPU_BANNER)
    nb = nbformat.read(path, as_version=4)
    nb.metadata[executed.RUN_META] = {"seconds": 543.0, "device_name": "2-core CPU", "date": "2026-11-24"}
    nbformat.write(nb, path)
    stored = nbformat.read(executed.store(path, root=book), as_version=4)
    assert stored.metadata["xfl_executed"]["profile"] == "cpu"
    first_line = stored.cells[[c.cell_type for c in stored.cells].index("code")].outputs[0].text.split("\n")[0]
    assert first_line == (CPU_BANNER.strip() + " | stored run: cpu profile on 2-core CPU, "
                          "executed 2026-11-24, 9.1 min wall")


def stored_cpu_run(book: Path, folder: Path) -> Path:
    """The tiny chapter with a cpu banner cell (``cpu_minutes=9``), executed and stored."""
    source = TINY_MD.replace('print("executed by the book build")',
                             'print(run_banner(fast_minutes=1, t4_minutes=2, cpu_minutes=9))')
    (book / f"{TINY}.md").write_text(source, encoding="utf-8")
    return executed.store(executed_notebook(book, folder, banner=CPU_BANNER), root=book)


def outputs_of(path: Path) -> list:
    return [c.outputs for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def test_restamp_carries_a_run_over_to_edited_prose_and_a_corrected_estimate(book, tmp_path_factory):
    stored = stored_cpu_run(book, tmp_path_factory.mktemp("runs"))
    before = outputs_of(stored)
    source = (book / f"{TINY}.md").read_text(encoding="utf-8")
    edited = source.replace("# A tiny chapter", "# A tiny chapter\n\nA new sentence.")
    edited = edited.replace("cpu_minutes=9)", "cpu_minutes=12.5)")
    (book / f"{TINY}.md").write_text(edited, encoding="utf-8")
    assert [s.state for s in executed.chapter_states(book)] == ["stale"]

    assert executed.restamp(TINY, root=book) == stored
    assert [s.state for s in executed.chapter_states(book)] == ["fresh"]
    nb = nbformat.read(stored, as_version=4)
    assert "A new sentence." in nb.cells[0].source
    banner, figure = outputs_of(stored)
    assert banner[0].text.startswith(CPU_BANNER.strip().replace("about 9 min", "about 12.5 min"))
    assert "| stored run: cpu profile" in banner[0].text  # the run's own stamp is kept
    assert figure == before[1]
    assert nb.metadata["xfl_executed"]["restamped"]


@pytest.mark.parametrize("edit, message", [
    (('"a figure"', '"another"'), "a code cell changed ('picture = "),
    (("cpu_minutes=9)", "cpu_minutes=9, fast=2)"), "a code cell changed ('print(run_banner"),
    (("```{code-cell} ipython3\npicture", "```{code-cell} ipython3\nx = 1\n```\n\n```{code-cell} ipython3\npicture"),
     "3 code cells, its stored run 2"),
])
def test_restamp_refuses_a_changed_code_cell_and_writes_nothing(book, tmp_path_factory, edit, message):
    stored = stored_cpu_run(book, tmp_path_factory.mktemp("runs"))
    before = stored.read_bytes()
    source = (book / f"{TINY}.md").read_text(encoding="utf-8")
    (book / f"{TINY}.md").write_text(source.replace(*edit), encoding="utf-8")
    with pytest.raises(StoreError, match=message.replace("(", r"\(")):
        executed.restamp(TINY, root=book)
    assert stored.read_bytes() == before


def test_restamp_keeps_a_gpu_runs_banner_as_its_code_printed_it(book, tmp_path_factory):
    source = TINY_MD.replace('print("executed by the book build")',
                             'print(run_banner(fast_minutes=1, t4_minutes=2, cpu_minutes=9))')
    (book / f"{TINY}.md").write_text(source, encoding="utf-8")
    stored = executed.store(executed_notebook(book, tmp_path_factory.mktemp("runs")), root=book)
    before = stored.read_bytes()
    (book / f"{TINY}.md").write_text(source.replace("cpu_minutes=9", "cpu_minutes=12"), encoding="utf-8")
    with pytest.raises(StoreError, match="a code cell changed"):
        executed.restamp(TINY, root=book)
    assert stored.read_bytes() == before


def test_a_cpu_run_does_not_replace_a_fresh_gpu_run(book, tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    stored = executed.store(executed_notebook(book, runs), root=book)
    before = stored.read_bytes()
    cpu_run = executed_notebook(book, tmp_path_factory.mktemp("cpu"), banner=CPU_BANNER)
    with pytest.raises(StoreError, match="holds a fresh full-profile run"):
        executed.store(cpu_run, root=book)
    assert stored.read_bytes() == before
    (book / f"{TINY}.md").write_text(TINY_MD.replace("A tiny", "An edited"), encoding="utf-8")
    executed.store(executed_notebook(book, tmp_path_factory.mktemp("cpu2"), banner=CPU_BANNER), root=book)
    assert executed.read_meta(stored)["profile"] == "cpu"  # the GPU run was stale: replaced


def test_the_command_line_says_why_it_refused(tmp_path, capsys):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
    nbformat.write(nb, tmp_path / "not_a_chapter.ipynb")
    before = files_under(REPO_ROOT / "book" / "executed")
    assert executed.main(["store", str(tmp_path / "not_a_chapter.ipynb")]) == 1
    assert "not stored: not_a_chapter.ipynb belongs to no chapter" in capsys.readouterr().err
    assert files_under(REPO_ROOT / "book" / "executed") == before


def test_status_fails_on_a_stray_or_malformed_file(book, tmp_path_factory, capsys):
    executed.store(executed_notebook(book, tmp_path_factory.mktemp("runs")), root=book)
    stray = book / "book" / "executed" / "ch00_gone" / "gone.ipynb"
    stray.parent.mkdir()
    stray.write_text("{}")
    assert executed._status(book) == 1
    assert "book/executed/ch00_gone/gone.ipynb is no stored notebook" in capsys.readouterr().err
    (book / "book" / "executed" / "ch99_tiny" / "tiny.ipynb").write_text("not json")
    assert executed._status(book) == 1
    assert "not a stored notebook" in capsys.readouterr().err


# ---------------------------------------------------------------- the book renders it unexecuted


def stored_config(book: Path) -> dict:
    """The book configuration of the tiny book, its chapter stored and fresh."""
    executed.store(executed_notebook(book, book), root=book)
    (book / "tiny.ipynb").unlink()
    states = executed.chapter_states(book)
    base = {"title": "tiny", "only_build_toc_files": True,
            "execute": {"execute_notebooks": "force", "timeout": 60},
            "sphinx": {"config": {}}}
    return book_config(base, fast=True, vendored=False, stored=states)


def test_config_excludes_the_fresh_chapter_and_reads_its_stored_notebook(book):
    config = stored_config(book)
    assert config["execute"]["exclude_patterns"] == [f"{TINY}.md"]
    [(suffix, (reader, kwargs, commonmark_only))] = config["sphinx"]["config"]["nb_custom_formats"].items()
    assert str(book / f"{TINY}.md").endswith(suffix) and not Path(suffix).name.endswith(suffix)
    assert reader == "tools.book.executed.read_stored" and commonmark_only is False
    assert Path(kwargs["stored"]) == book / "book" / "executed" / "ch99_tiny" / "tiny.ipynb"
    assert config["sphinx"]["local_extensions"] == {"tools.book.executed": str(REPO_ROOT),
                                                    "tools.book.publish": str(REPO_ROOT)}
    source = (book / f"{TINY}.md").read_text(encoding="utf-8")
    nb = executed.read_stored(source, **kwargs)
    assert "from the stored run" in nb.cells[1].outputs[0].text
    with pytest.raises(StoreError, match="stale"):
        executed.read_stored(source + "\nedited\n", **kwargs)


def test_only_fresh_chapters_can_be_rendered(book):
    executed.store(executed_notebook(book, book), root=book)
    (book / f"{TINY}.md").write_text(TINY_MD + "\nedited\n")
    with pytest.raises(ValueError, match="only fresh"):
        book_config(load_config(), fast=True, vendored=True, stored=executed.chapter_states(book))


@pytest.mark.book
def test_tiny_book_renders_the_stored_outputs_without_executing(book):
    config = stored_config(book)
    (book / "_build").mkdir()
    (book / "_build" / "config.yml").write_text(yaml.safe_dump(config))
    proc = subprocess.run([_jupyter_book(), "build", "-W", "-n", "--config", "_build/config.yml", "."],
                          cwd=book, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600, env={**os.environ, "XFL_FAST": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:]
    html = (book / "_build" / "html" / f"{TINY}.html").read_text(encoding="utf-8")
    assert "from the stored run" in html and "executed by the book build" in html  # the code
    assert html.count("executed by the book build") == 1  # ...but not its output
    assert "<img" in html  # the stored figure


def test_each_fresh_cpu_run_took_about_what_its_banner_announces():
    """A chapter's banner (and `book/setup.md`'s cpu column) announces its cpu profile's minutes:
    each fresh stored cpu run's wall time lies within a third of that (a quiet 2-core machine)."""
    import re

    announced = re.compile(r"run_banner\([^)]*cpu_minutes=([\d.]+)\)")
    for state in executed.chapter_states():
        if state.state != "fresh" or state.meta.get("profile") != "cpu":
            continue
        source = (REPO_ROOT / f"{state.chapter}.md").read_text(encoding="utf-8")
        minutes = float(announced.search(source).group(1))
        took = state.meta["seconds"] / 60
        assert abs(took - minutes) <= minutes / 3, (
            f"{state.chapter}: its banner announces about {minutes:g} min on a 2-core CPU, its stored "
            f"cpu run took {took:.1f} min: set cpu_minutes to the run's time and run it again")
