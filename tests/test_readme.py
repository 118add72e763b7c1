"""The README, the front door: its two commands are the Makefile's and the CI's, its chapter table
is the book's with the times the chapters and their stored runs print, it speaks the reader's
words, and it states the licences the repository carries."""

from __future__ import annotations

import json
import re
import tomllib

import pytest

from conftest import REPO_ROOT, chapter_files
from tools.env.gpu_chapters import TRAINING

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
FAST_MINUTES = re.compile(r"run_banner\(fast_minutes=([\d.]+), t4_minutes=([\d.]+)")
WALL = re.compile(r"\| stored run: .*, ([\d.]+) min wall")


def fenced_commands(text: str) -> list[list[str]]:
    """The commands of each ```bash block: each line without its comment, blank lines dropped."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)
    return [[c for c in (line.split("#")[0].strip() for line in block.splitlines()) if c] for block in blocks]


def test_the_two_commands_are_make_targets_and_the_ci_runs_the_test_command():
    blocks = [b for b in fenced_commands(README) if any(c.startswith("make ") for c in b)]
    assert blocks[0] == ["make book", "make test"], blocks  # the README's first commands
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    for command in blocks[0]:
        assert re.search(rf"^{command.split()[1]}:", makefile, re.M), f"no Makefile target for {command!r}"
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    make_lines = [line.strip() for line in ci.splitlines() if re.match(r"\s*make\b", line)]
    assert make_lines == [blocks[0][1]], f".ci/run runs {make_lines}, the README's test command is {blocks[0][1]!r}"
    assert "file://$(CURDIR)/_build/html/index.html" in makefile  # where make book says the book is


def _title(chapter: str) -> str:
    return re.search(r"^# (.+)$", (REPO_ROOT / f"{chapter}.md").read_text(encoding="utf-8"), re.M).group(1)


def _rows() -> dict[str, list[str]]:
    """The README's chapter table: {title: [number, title, what, cpu, t4]}."""
    table = README.split("## The chapters", 1)[1].split("\n\n", 2)[1]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    return {row[1]: row for row in cells}


def _stored_wall_minutes(chapter: str) -> str | None:
    """The wall minutes the stored run's banner prints (book/executed/), None without one."""
    stored = REPO_ROOT / "book" / "executed" / f"{chapter.split('/', 1)[1]}.ipynb"
    if not stored.exists():
        return None
    cell = next(c for c in json.loads(stored.read_text(encoding="utf-8"))["cells"] if c.get("outputs"))
    return WALL.search("".join(cell["outputs"][0].get("text", ""))).group(1)


@pytest.mark.parametrize("chapter", chapter_files())
def test_the_chapter_table_shows_the_times_the_chapter_and_its_stored_run_print(chapter):
    rows = _rows()
    assert len(rows) == len(chapter_files()), "one row per chapter of the book"
    row = rows.get(_title(chapter))
    assert row is not None, f"the README's table has no row for {_title(chapter)!r}"
    fast, t4 = FAST_MINUTES.search((REPO_ROOT / f"{chapter}.md").read_text(encoding="utf-8")).groups()
    if chapter.split("/")[1] in TRAINING:
        assert row[3:] == [f"{_stored_wall_minutes(chapter)} min", f"≈ {t4} min"], row
    else:
        assert row[3:] == [{"0.5": "½ min"}.get(fast, f"{fast} min"), "not needed"], row


def test_the_readme_speaks_of_the_readers_gpus_not_the_projects_machinery():
    """Issue 68: a reader has a CUDA GPU, a GPU rented for a short time, or Colab's free T4."""
    pages = {"README.md": README} | {
        str(p.relative_to(REPO_ROOT)): p.read_text(encoding="utf-8")
        for p in [*(REPO_ROOT / "book").glob("*.md"), *(REPO_ROOT / "chapters").glob("*/*.md")]}
    words = re.compile(r"\blent\b|GPU window|GPU queue|device time|development sessions?", re.I)
    found = {name: words.findall(text) for name, text in pages.items() if words.search(text)}
    assert found == {}, found
    assert "[`DEVELOPERS.md`](DEVELOPERS.md)" in README  # process detail lives there


def test_the_licences_are_stated_where_a_user_looks():
    assert (REPO_ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License\n\nCopyright (c) 2026")
    meta = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["license"] == "MIT"
    assert "[MIT License](LICENSE)" in README and "[CC BY 4.0](LICENSE-BOOK)" in README
    assert "CC-BY 2.0 FR" in README  # the data's licence, not redistributed
