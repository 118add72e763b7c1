"""The notebooks the book publishes for Colab, written into the built HTML (issue 64).

Every Colab link of the book opens a notebook of the *published* book: a chapter's launch button
opens ``chapters/<chapter>/<name>.ipynb`` and an exercise page links
``book/exercises/<chapter>_exercises.ipynb``, both at the branch `_config.yml` names
(``repository.branch``: where the built HTML is pushed, e.g. ``ghp-import -n -p -f _build/html``).
This Sphinx extension writes them there when the HTML build finishes, from the committed chapter
notebooks and the student notebooks of ``make exercises``, each changed in two ways:

- its metadata asks Colab for a GPU runtime, a T4 (:data:`COLAB_METADATA`, as d2l's notebooks do);
- its install cell installs the xfl of the commit the book was built from (``git rev-parse
  HEAD``, or ``XFL_BOOK_REF``, e.g. a release tag), without its dependencies, then the ones
  Colab lacks at the versions the Colab-like run tests (:func:`missing_on_colab`): nothing that
  Colab has is changed, on today's runtime or an older one; and it names the chapter for the run
  banner's T4 estimate (``XFL_CHAPTER``).

The sources stay as they are (a stored run's freshness is its `.md`'s checksum).
``tools/book/config.py`` loads this extension into every build (`make book`, the tests' build).
Its install-cell functions use the standard library only: the Colab-like environment's build
(``tools/env/colab_env.py``, on the system Python) installs what they write.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
STUDENTS = ROOT / "_build" / "exercises" / "student"  # `make exercises` writes them here
EXERCISES_FOLDER = "book/exercises"  # beside the exercise pages, in the source tree and the HTML
COLAB_METADATA = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}
REF_ENV_VAR = "XFL_BOOK_REF"
XFL_INSTALL = re.compile(r'^(?P<indent>[ \t]*)%pip install -q "xfl @ git\+(?P<url>[^"@\s]+)"[ \t]*$', re.M)
REQUIREMENT = re.compile(r"^([A-Za-z0-9_.-]+)>=([0-9.]+)$")


def build_ref(root: Path = ROOT) -> str | None:
    """What the published install cells pin: ``XFL_BOOK_REF`` if set (a release tag), else the
    checkout's commit; None (with a warning printed) when neither is known."""
    ref = os.environ.get(REF_ENV_VAR, "").strip()
    if ref:
        return ref
    out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"publish: no git commit here and no {REF_ENV_VAR}: the notebooks install xfl unpinned")
        return None
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "xfl"],
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        print(f"publish: xfl/ has uncommitted changes; the notebooks pin {out.stdout.strip()[:12]}, without them")
    return out.stdout.strip()


def missing_on_colab(root: Path = ROOT) -> list[str]:
    """xfl's dependencies Colab does not preinstall, each ``name==lower bound`` (the version the
    Colab-like run installs and tests), from pyproject.toml and Colab's freeze."""
    from tools.env.colab_env import normalized, read_freeze

    colab = read_freeze()[1]
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found = []
    for requirement in project["dependencies"]:
        match = REQUIREMENT.match(requirement)
        if match is None:
            raise ValueError(f"pyproject.toml: dependency {requirement!r} is not of the form name>=version")
        if normalized(match.group(1)) not in colab:
            found.append(f"{match.group(1)}=={match.group(2)}")
    return found


def install_cell(source: str, ref: str | None, chapter: str, missing: list[str]) -> str:
    """The published install cell: ``source``'s ``%pip install -q "xfl @ git+URL"`` line becomes
    xfl at ``ref`` without dependencies plus ``missing``; ``XFL_CHAPTER`` is set first."""
    match = XFL_INSTALL.search(source)
    if match is None:
        raise ValueError(f'expected an install cell with `%pip install -q "xfl @ git+<url>"`, got:\n{source}')
    indent, url = match.group("indent"), match.group("url")
    lines = [f"{indent}# xfl as of the commit this book was built from, without its dependencies (Colab has",
             f"{indent}# them; this changes none of its packages), then the one Colab lacks",
             f'{indent}%pip install -q --no-deps "xfl @ git+{url}{"@" + ref if ref else ""}"']
    if missing:
        lines.append(f"{indent}%pip install -q " + " ".join(f'"{m}"' for m in missing))
    body = (source[:match.start()] + "\n".join(lines) + source[match.end():]).splitlines(keepends=True)
    comments = next((i for i, line in enumerate(body) if not line.startswith("#")), len(body))
    chapter_line = f'import os\nos.environ["XFL_CHAPTER"] = "{chapter}"  # for the run banner\'s T4 estimate\n'
    return "".join(body[:comments]) + chapter_line + "".join(body[comments:])


def published(nb, chapter: str, ref: str | None, missing: list[str]):
    """A copy of the notebook ``nb`` with Colab's GPU metadata and its first code cell as
    :func:`install_cell`."""
    nb = copy.deepcopy(nb)
    nb.metadata.update(copy.deepcopy(COLAB_METADATA))
    first = next((c for c in nb.cells if c.cell_type == "code"), None)
    if first is None:
        raise ValueError(f"{chapter}: a published notebook needs an install cell, found no code cell")
    first.source = install_cell(first.source, ref, chapter, missing)
    return nb


def chapter_sources(root: Path = ROOT) -> list[Path]:
    """The committed chapter notebooks (``chapters/<chapter>/<name>.ipynb``)."""
    return sorted(root.glob("chapters/*/*.ipynb"))


def publish(outdir: Path, students: Path = STUDENTS, root: Path = ROOT, ref: str | None = None) -> list[Path]:
    """Write every published notebook under ``outdir`` (the built HTML) at its path in the book:
    the chapters', and each student notebook of ``students`` under ``book/exercises/``."""
    import nbformat

    ref = build_ref(root) if ref is None else ref
    missing, written = missing_on_colab(root), []
    jobs = [(nb, nb.parent.name, nb.relative_to(root)) for nb in chapter_sources(root)]
    jobs += [(nb, nb.stem.removesuffix("_exercises"), Path(EXERCISES_FOLDER) / nb.name)
             for nb in sorted(students.glob("*_exercises.ipynb"))]
    for source, chapter, relative in jobs:
        target = outdir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(published(nbformat.read(source, as_version=4), chapter, ref, missing), target)
        written.append(target)
    return written


def colab_url(path: str, root: Path = ROOT) -> str:
    """The Colab link to the published notebook at ``path`` (relative to the book's root)."""
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    repo = config["repository"]
    owner_repo = urlsplit(re.sub(r"(\.git)?/*$", "", repo["url"])).path.strip("/")
    colab = config["launch_buttons"]["colab_url"].rstrip("/")
    return f"{colab}/github/{owner_repo}/blob/{repo.get('branch', 'main')}/{path}"


def _on_build_finished(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from sphinx.util import logging

    students = Path(app.config.xfl_publish_students)
    if not any(students.glob("*_exercises.ipynb")):
        logging.getLogger(__name__).warning(f"publish: no student notebooks in {students}: run `make exercises`")
    written = publish(Path(app.outdir), students)
    logging.getLogger(__name__).info(f"publish: {len(written)} notebooks for Colab written into {app.outdir}")


def setup(app) -> dict:
    """Sphinx entry point: publish the notebooks once the HTML is built."""
    app.add_config_value("xfl_publish_students", str(STUDENTS), "env")
    app.connect("build-finished", _on_build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main() -> int:
    """Publish into ``_build/html`` (after a build): ``python -m tools.book.publish``."""
    for path in publish(ROOT / "_build" / "html"):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
