"""Which xfl this is: its release and, when known, the commit it was installed from (issue 64).

A chapter published by the book pins its install cell to the commit the book was built from
(``tools/book/publish.py``), so the banner a chapter prints first (``xfl.runtime.run_banner``)
names that commit and a reader can see that the page and the package match. The commit comes
from pip's record of a ``git+...@<commit>`` install (PEP 610 ``direct_url.json``), else from the
git checkout xfl is imported from (an editable install, or the repository itself); otherwise it
is unknown and only the release is named.
"""

from __future__ import annotations

import json
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

RELEASE = "0.1.0"  # pyproject.toml's version (tests/test_publish.py checks that they agree)
CHECKOUT = Path(__file__).resolve().parents[1]  # the repository root, when imported from one


def release() -> str:
    """The installed distribution's version, else :data:`RELEASE` (xfl imported from a folder)."""
    try:
        return metadata.version("xfl")
    except metadata.PackageNotFoundError:
        return RELEASE


def installed_commit() -> str | None:
    """The commit pip recorded for a ``git+`` install of xfl, else None."""
    try:
        raw = metadata.distribution("xfl").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    vcs = json.loads(raw).get("vcs_info", {}) if raw else {}
    return vcs.get("commit_id")


def checkout_commit(root: Path = CHECKOUT) -> str | None:
    """``git rev-parse HEAD`` of ``root`` when xfl is imported from a git checkout, else None."""
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


@lru_cache(maxsize=1)
def commit() -> str | None:
    """The full commit xfl came from, or None when unknown."""
    return installed_commit() or checkout_commit()


def describe(release_: str | None = None, commit_: str | None = None) -> str:
    """``0.1.0+g1a2b3c4d5e6f`` (PEP 440: the release, then the commit's first 12 hex digits as a
    local label), or the release alone when the commit is unknown."""
    release_ = release_ or release()
    commit_ = commit_ if commit_ is not None else commit()
    return f"{release_}+g{commit_[:12]}" if commit_ else release_
