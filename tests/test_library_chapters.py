"""The library and the chapters stay in step.

1. A module's chapter claim matches the chapters that import it. The convention: the first
   paragraph of a module's docstring may hold one parenthetical that starts with ``chapter`` or
   ``chapters`` followed by numbers, e.g. ``(chapter 7)``, ``(chapters 1-3)``,
   ``(chapters 5 and 6; ...)`` or ``(chapters 5-7, 9 ...)``; the numbers up to the first word
   that is not a number, ``and``, ``,`` or a range are the claim. ``(no chapter ...)`` claims
   none. A module without such a parenthetical makes no claim. "Import" means a line
   ``from xfl.<module> import ...``, ``import xfl.<module>`` or ``from xfl[.<package>] import
   <module>`` in a chapter's folder (its page and its exercises); a chapter's number is its
   folder's (``ch07_vit`` is 7, ``ch00_data`` 0, ``ch04b_subwords`` 4.5: the page between 4 and 5).

2. A chapter page does not define a function or class that the library already has (a public
   top-level name of an ``xfl`` module), unless building it from scratch is the lesson: then
   the ``def``/``class`` line ends with the comment ``# from scratch``, or the line just above
   it is that comment (any text may follow; a comment line of its own keeps code lines short).
   Exercise files are not checked: an exercise is always a from-scratch build.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
XFL = ROOT / "xfl"
CHAPTERS = ROOT / "chapters"
CLAIM = re.compile(r"\((?:(no) chapter|chapters? ((?:\d+(?:\s*[-–]\s*\d+)?(?:\s*,\s*|\s+and\s+)?)+))")
MARKER = "# from scratch"


def module_names() -> list[str]:
    """``attention``, ``data.cifar``, ...: every module of the package."""
    paths = [p.relative_to(XFL).with_suffix("") for p in XFL.rglob("*.py")]
    return sorted(".".join(p.parts) for p in paths if p.name != "__init__")


def chapter_number(folder: str) -> float:
    """``ch07_vit`` -> 7; ``ch04b_subwords`` -> 4.5 (a ``b`` page sits between its chapter and the next)."""
    digits, between = re.match(r"ch(\d+)(b?)_", folder).groups()
    return int(digits) + (0.5 if between else 0)


def parse_claim(paragraph: str) -> set[int] | None:
    """The chapter numbers a claim in ``paragraph`` names, or None when there is no claim."""
    match = CLAIM.search(" ".join(paragraph.split()))
    if match is None:
        return None
    if match.group(1):
        return set()
    numbers = set()
    listed = re.sub(r"(\s*,|\s+and)?\s*$", "", match.group(2))
    for part in re.split(r"\s*,\s*|\s+and\s+", listed):
        low, _, high = re.sub(r"\s*[-–]\s*", "-", part).partition("-")
        numbers.update(range(int(low), int(high or low) + 1))
    return numbers


def claimed_chapters(module: str) -> set[int] | None:
    """The chapters a module's docstring claims, or None when it makes no claim."""
    source = (XFL / Path(*module.split("."))).with_suffix(".py").read_text(encoding="utf-8")
    return parse_claim((ast.get_docstring(ast.parse(source)) or "").split("\n\n")[0])


def imported_modules(text: str, modules: set[str]) -> set[str]:
    """The xfl modules that the import lines of ``text`` name."""
    found = set()
    for line in text.splitlines():
        line = line.strip()
        if m := re.match(r"from xfl((?:\.\w+)*) import (.+)", line):
            package, names = m.group(1).lstrip("."), m.group(2).strip("()").split(",")
            candidates = [".".join(filter(None, [package, n.split(" as ")[0].strip()])) for n in names]
            inside = [c for c in candidates if c in modules]
            found.update(inside or ([package] if package in modules else []))
        elif m := re.match(r"import xfl\.([\w.]+)", line):
            found.add(m.group(1))
    return found


def importers() -> dict[str, set[float]]:
    modules, result = set(module_names()), {}
    for md in sorted(CHAPTERS.glob("*/*.md")):
        for module in imported_modules(md.read_text(encoding="utf-8"), modules):
            result.setdefault(module, set()).add(chapter_number(md.parent.name))
    return result


# Known mismatches in files this change could not edit; strict: the test fails once they are fixed,
# so the entry must then be removed.
@pytest.mark.parametrize("module", module_names())
def test_a_modules_chapter_claim_names_the_chapters_that_import_it(module):
    claim = claimed_chapters(module)
    if claim is not None:
        assert claim == importers().get(module, set()), f"xfl.{module}: docstring claims {sorted(claim)}"


def test_the_claim_parser_reads_the_convention():
    assert parse_claim("Attention (chapters 1-3, 8 and 9; built in\nchapter 2).") == {1, 2, 3, 8, 9}
    assert parse_claim("Translation (chapters 5-6 and bench/translate.py).") == {5, 6}
    assert parse_claim("Blocks (chapter 5): one class.") == {5}
    assert parse_claim("Timing for the chapters and bench/.") is None
    assert claimed_chapters("distributed") == set()  # "(no chapter imports it ...)"
    assert claimed_chapters("atomic_files") is None
    assert imported_modules("from xfl.data import cifar, text\nimport xfl.bleu\nfrom xfl.train import x",
                            set(module_names())) == {"data.cifar", "data.text", "bleu", "train"}


def library_names() -> dict[str, str]:
    """Public top-level function and class names of the package -> their module."""
    names = {}
    for module in module_names():
        tree = ast.parse((XFL / Path(*module.split("."))).with_suffix(".py").read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                names[node.name] = module
    return names


def chapter_pages() -> list[str]:
    return sorted(p.parent.name for p in CHAPTERS.glob("*/*.md") if p.name != "exercises.md")


@pytest.mark.parametrize("chapter", chapter_pages())
def test_a_chapter_defines_no_library_function_unless_built_from_scratch(chapter):
    library = library_names()
    copies = []
    for page in (CHAPTERS / chapter).glob("*.md"):
        if page.name == "exercises.md":
            continue
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            m = re.match(r"(?:def|class) (\w+)", line)
            above = lines[number - 2].strip() if number > 1 else ""
            if m and m.group(1) in library and MARKER not in line and not above.startswith(MARKER):
                copies.append(f"{page.name}:{number} {m.group(1)} (xfl.{library[m.group(1)]})")
    assert not copies, f"use the library's version or mark the line '{MARKER}': {copies}"
