"""The built book: warning-free, complete, searchable, numbered, and launchable on Colab.

The build itself is the `built_book` fixture in conftest.py (once per run). The Colab install
cell checks at the bottom read the chapter sources only and need no build.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from bs4 import BeautifulSoup

from conftest import (REPO_ROOT, chapter_files, load_config, numbered_files, sphinx_problems,
                      toc_files)

CHAPTERS = chapter_files()  # every notebook page, numbered or not
NUMBERED = numbered_files()
GIT_INSTALL = re.compile(r"git\+(https?://[^\s\"'@]+)")


@lru_cache(maxsize=None)
def soup(path: Path) -> BeautifulSoup:
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


def page(built_book, docname: str) -> Path:
    path = built_book.html / f"{docname}.html"
    assert path.is_file(), f"the build made no page for {docname}"
    return path


def repository() -> tuple[str, str]:
    """(url without a trailing .git or slash, branch) from `_config.yml`."""
    repo = load_config()["repository"]
    return re.sub(r"(\.git)?/*$", "", repo["url"]), repo.get("branch", "main")


def expected_colab_link(chapter: str) -> str:
    url, branch = repository()
    colab = load_config()["launch_buttons"]["colab_url"].rstrip("/")
    owner_repo = urlsplit(url).path.strip("/")
    return f"{colab}/github/{owner_repo}/blob/{branch}/{chapter}.ipynb"


# ---------------------------------------------------------------- the build


@pytest.mark.book
def test_build_is_warning_free(built_book):
    assert sphinx_problems(built_book.log) == []


@pytest.mark.book
def test_every_toc_entry_produced_a_page(built_book):
    missing = [doc for doc in toc_files() if not (built_book.html / f"{doc}.html").is_file()]
    assert missing == []
    assert (built_book.html / "index.html").is_file()


@pytest.mark.book
def test_every_page_footer_states_the_licences(built_book):
    """The rendered footer, not only its configuration (tests/test_book_config.py)."""
    for docname in ("book/intro", *CHAPTERS[:1], *NUMBERED[-1:]):
        footer = soup(built_book.html / f"{docname}.html").find("div", class_="extra_footer")
        assert footer is not None, f"{docname}: no footer"
        text = " ".join(footer.get_text().split())
        assert "CC BY 4.0" in text and "MIT License" in text and "CC-BY 2.0 FR" in text, text
        assert footer.find("a", href="https://creativecommons.org/licenses/by/4.0/") is not None


@pytest.mark.book
def test_search_index_lists_every_page(built_book):
    assert (built_book.html / "search.html").is_file()
    text = (built_book.html / "searchindex.js").read_text(encoding="utf-8")
    index = json.loads(text[text.index("(") + 1 : text.rindex(")")])
    assert set(toc_files()) <= set(index["docnames"])
    assert len(index["terms"]) > 100  # the chapters' words, not just the titles


# ---------------------------------------------------------------- numbering and links


@pytest.mark.book
def test_chapters_are_numbered_in_toc_order(built_book):
    numbers = []
    for chapter in NUMBERED:
        number = soup(page(built_book, chapter)).select_one("h1 .section-number")
        numbers.append(number.get_text(strip=True) if number else None)
    assert numbers == [f"{i}." for i in range(1, len(NUMBERED) + 1)]


@pytest.mark.book
@pytest.mark.parametrize("chapter", NUMBERED)
def test_equation_and_figure_numbers_carry_the_chapter_number(built_book, chapter):
    html = soup(page(built_book, chapter))
    prefix = html.select_one("h1 .section-number").get_text(strip=True)  # "3."
    eqnos = [e.get_text(strip=True) for e in html.select("span.eqno")]
    captions = [c.get_text(strip=True) for c in html.select("span.caption-number")]
    assert all(e.startswith(f"({prefix}") for e in eqnos), eqnos
    assert all(re.match(rf"\w+\.? {re.escape(prefix)}\d", c) for c in captions), captions


def _local_target(page_path: Path, link: str, html_root: Path) -> tuple[Path, str] | None:
    """The file and fragment an internal link points at, or None for external links."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
        return None
    target = page_path if not parts.path else (page_path.parent / unquote(parts.path)).resolve()
    if target.is_dir():
        target = target / "index.html"
    return target, unquote(parts.fragment)


@pytest.mark.book
def test_internal_links_and_cross_references_resolve(built_book):
    root = built_book.html
    broken = []
    for html_file in sorted(root.rglob("*.html")):
        if "_static" in html_file.parts:
            continue
        for tag, attr in (("a", "href"), ("img", "src")):
            for element in soup(html_file).find_all(tag, attrs={attr: True}):
                target = _local_target(html_file, element[attr], root)
                if target is None:
                    continue
                path, fragment = target
                if root.resolve() not in path.resolve().parents:
                    broken.append(f"{html_file.relative_to(root)}: {element[attr]} (leaves the book)")
                elif not path.is_file():
                    broken.append(f"{html_file.relative_to(root)}: {element[attr]} (no file)")
                elif fragment and path.suffix == ".html" and not soup(path).find(id=fragment):
                    broken.append(f"{html_file.relative_to(root)}: {element[attr]} (no anchor)")
    assert broken == []


# ---------------------------------------------------------------- Colab


@pytest.mark.book
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_has_a_colab_link_to_its_notebook(built_book, chapter):
    links = {a["href"] for a in soup(page(built_book, chapter)).find_all("a", href=True)
             if "colab.research.google.com" in a["href"]}
    assert links == {expected_colab_link(chapter)}
    assert (REPO_ROOT / f"{chapter}.ipynb").is_file(), "the link points at a notebook that is missing"


def _first_code_cell(chapter: str) -> str:
    """The source of the first code cell of a chapter's paired notebook."""
    notebook = json.loads((REPO_ROOT / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in notebook["cells"] if c["cell_type"] == "code")
    return "".join(cell["source"])


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_colab_install_cell_names_the_books_repository(chapter):
    url, _ = repository()
    first = _first_code_cell(chapter)
    assert "google.colab" in first and "%pip install" in first, first
    assert [u.removesuffix(".git") for u in GIT_INSTALL.findall(first)] == [url], first
    source = (REPO_ROOT / f"{chapter}.md").read_text(encoding="utf-8")
    assert {u.removesuffix(".git") for u in GIT_INSTALL.findall(source)} == {url}


# ------------------------------------------------------------ expected run times
BANNER = re.compile(r"run_banner\(fast_minutes=([\d.]+), t4_minutes=([\d.]+)(?:, cpu_minutes=([\d.]+))?\)")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_setup_page_lists_the_times_the_chapter_announces(chapter):
    """The times a chapter prints in its first line are the ones `book/setup.md` tabulates."""
    source = (REPO_ROOT / f"{chapter}.md").read_text(encoding="utf-8")
    title = re.search(r"^# (.+)$", source, re.M).group(1)
    banners = BANNER.findall(source)
    assert len(banners) == 1, f"{chapter} should print run_banner(...) once, found {banners}"
    fast, t4, cpu = banners[0]
    setup = (REPO_ROOT / "book" / "setup.md").read_text(encoding="utf-8")
    row = re.search(rf"^\| {re.escape(title)} \| (yes|no) \| about ([\d.]+) min \| about ([\d.]+) min "
                    rf"\| (?:about ([\d.]+) min|—) \|$", setup, re.M)
    assert row is not None, f"book/setup.md has no row for {title!r}"
    said = row.group(2, 3) + (row.group(4) or "",)
    assert said == (fast, t4, cpu), f"{title}: setup.md says {said}, the chapter {(fast, t4, cpu)}"


def test_the_bibliography_parses():
    """A syntax error in references.bib stops the whole build; say so without building."""
    from pybtex.database import parse_file

    entries = parse_file(str(REPO_ROOT / "book" / "references.bib"), bib_format="bibtex").entries
    assert len(entries) >= 10 and all(entry.fields.get("title") for entry in entries.values())
