"""Shared fixtures: the book, built once per test run, and the chapters' executed notebooks.

`built_book` runs `jupyter-book build -W -n --keep-going` (warnings are errors) with the fast
profile into a temporary folder and returns the HTML folder. The chapters that this run executes
under nbval while recording them (`make test`: ``-p tools.book.nbrecord --xfl-record DIR``) are
rendered from those executed notebooks, once nbval has run them, instead of being executed again;
the others are executed by the build. Under pytest-xdist every worker asks for it; a file lock
lets the first one build and the others reuse its result (or its failure).
Set ``XFL_BOOK_HTML`` to an already built ``_build/html`` folder to skip the build while
working on the tests themselves.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import torch
import yaml
from filelock import FileLock

# Triton fixes its mode when it is first imported (torch.compile imports it): without a GPU, the
# Triton kernels' tests (tests/test_triton_attention.py) need its interpreter, so it goes first.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tools.book import nbrecord  # noqa: E402
from tools.book.config import add_report, book_config  # noqa: E402
from tools.book.executed import RUN_META  # noqa: E402
from xfl.atomic_files import write_text_atomic  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Tiny models run fastest on one thread (and do not fight over a shared 2-core CI machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

BUILD_TIMEOUT_S = 3600
LOG_TAIL_LINES = 60
SPHINX_PROBLEM = re.compile(r"\b(WARNING|ERROR|CRITICAL):")
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def exercises_build(tmp_path_factory) -> Path:
    """The exercises `make exercises` built (``_build/exercises``) when its stamp is newer than
    every source and every grading tool; else every chapter built now, into a temporary folder
    (``otter assign`` without its own test run: the tests grade the solutions themselves)."""
    from concurrent.futures import ThreadPoolExecutor

    from tools.grading import exercises

    built, sources = REPO_ROOT / "_build" / "exercises", exercises.sources(REPO_ROOT)
    stamp = built / ".stamp"
    inputs = [*sources, *(REPO_ROOT / "tools" / "grading").glob("*.py")]
    if stamp.exists() and all(p.stat().st_mtime < stamp.stat().st_mtime for p in inputs):
        return built
    out = tmp_path_factory.mktemp("exercises")
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda s: exercises.build_chapter(s, out, run_tests=False), sources))
    return out


def load_config() -> dict:
    """The book's `_config.yml` as a dict."""
    return yaml.safe_load((REPO_ROOT / "_config.yml").read_text(encoding="utf-8"))


def toc_files() -> list[str]:
    """Every document named in `_toc.yml` (root first), without extension, in reading order."""
    toc = yaml.safe_load((REPO_ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(str(Path(entry["file"]).with_suffix("")))
            for key in ("parts", "chapters", "sections"):
                walk(entry.get(key))

    walk(toc.get("parts"))
    walk(toc.get("chapters"))
    return files


def numbered_files() -> list[str]:
    """The documents in the toc's numbered parts, in reading order (numbered 1, 2, ...)."""
    toc = yaml.safe_load((REPO_ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return [str(Path(entry["file"]).with_suffix(""))
            for part in toc.get("parts", []) if part.get("numbered")
            for entry in part.get("chapters", [])]


def chapter_files() -> list[str]:
    """The toc entries that are chapters (notebooks under `chapters/`)."""
    return [f for f in toc_files() if f.startswith("chapters/")]


@dataclass(frozen=True)
class BuiltBook:
    html: Path  # the `_build/html` folder
    log: str  # everything the build printed


def _jupyter_book() -> str:
    """The jupyter-book next to this interpreter (the project's .venv), else the one on PATH."""
    candidate = Path(sys.executable).parent / "jupyter-book"
    return str(candidate) if candidate.exists() else "jupyter-book"


def _log_tail(log: str) -> str:
    return "\n".join(log.splitlines()[-LOG_TAIL_LINES:])


def _build(out: Path, executed: dict[str, tuple[Path, str]]) -> tuple[int, str]:
    """Build the book into `out`, rendering the ``executed`` chapters from their notebooks;
    return the exit status and the combined log."""
    vendor = REPO_ROOT / "book" / "vendor" / "mathjax" / "tex-chtml.js"
    if not vendor.exists():
        return 1, f"{vendor} is missing: run `make vendor` first (the book serves MathJax itself)."
    config = book_config(load_config(), fast=True, vendored=True, executed=executed)
    add_report(config, {chapter: "rendered from this run's nbval execution" if chapter in executed
                        else "executed now in the fast profile" for chapter in chapter_files()})
    write_text_atomic(out / "book_config.yml", yaml.safe_dump(config, sort_keys=False))
    cmd = [_jupyter_book(), "build", "-W", "-n", "--keep-going", "--config", str(out / "book_config.yml"),
           "--path-output", str(out), "."]
    env = {**os.environ, "XFL_FAST": "1"}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=BUILD_TIMEOUT_S)
    return proc.returncode, ANSI_COLOUR.sub("", proc.stdout)


def _build_once(shared: Path, executed: dict[str, tuple[Path, str]]) -> tuple[int, str]:
    """Build into `shared` unless another worker already did; return its status and log."""
    shared.mkdir(parents=True, exist_ok=True)
    status_file, log_file = shared / "status", shared / "build.log"
    with FileLock(str(shared / "build.lock")):
        if not status_file.exists():
            status, log = _build(shared, executed)
            log_file.write_text(log, encoding="utf-8")
            status_file.write_text(str(status), encoding="utf-8")
    return int(status_file.read_text()), log_file.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def built_book(request, tmp_path_factory) -> BuiltBook:
    """The book built once for the whole run (shared between xdist workers)."""
    prebuilt = os.environ.get("XFL_BOOK_HTML")
    if prebuilt:
        return BuiltBook(html=Path(prebuilt).resolve(), log="")
    executed = {chapter: (path, nb.metadata[RUN_META]["source_sha256"])
                for chapter, (path, nb) in recorded_chapters(request).items()}
    if "PYTEST_XDIST_WORKER" not in os.environ:  # no xdist: a private folder
        status, log = _build(out := tmp_path_factory.mktemp("book"), executed)
    else:  # xdist: the workers' common parent folder belongs to this run only
        out = tmp_path_factory.getbasetemp().parent / "xfl-book"
        status, log = _build_once(out, executed)
    if status != 0:
        problems = "\n".join(sphinx_problems(log)) or "(none reported)"
        pytest.fail(f"jupyter-book build failed (exit {status}).\nWarnings and errors:\n{problems}"
                    f"\nLast lines of the log:\n{_log_tail(log)}", pytrace=False)
    return BuiltBook(html=out / "_build" / "html", log=log)


def sphinx_problems(log: str) -> list[str]:
    """The lines of a build log that report a Sphinx warning or error."""
    return [line for line in log.splitlines() if SPHINX_PROBLEM.search(line)]


def recorded_chapters(request) -> dict[str, tuple[Path, nbformat.NotebookNode]]:
    """``{chapter: (record, notebook)}`` for the chapters this run executes under nbval while
    recording them, each once its run is written; fails the test if one failed or never comes."""
    records = nbrecord.recorded(request.config, request.session.items)
    found = {}
    for chapter in chapter_files():
        if chapter in records:
            try:
                found[chapter] = records[chapter], nbrecord.wait_for(records[chapter], BUILD_TIMEOUT_S)
            except nbrecord.RecordError as error:
                pytest.fail(str(error), pytrace=False)
    return found


def chapter_run(request, chapter: str, kernel: str) -> nbformat.NotebookNode:
    """The executed notebook of ``chapter``: this run's nbval execution if it records it (on the
    kernel it names), else executed now on ``kernel`` (a test file run on its own)."""
    records = nbrecord.recorded(request.config, request.session.items)
    if chapter not in records:
        return nbrecord.execute_now(REPO_ROOT / f"{chapter}.ipynb", kernel, load_config()["execute"]["timeout"])
    try:
        return nbrecord.wait_for(records[chapter], BUILD_TIMEOUT_S)
    except nbrecord.RecordError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="module")
def colab(request, tmp_path_factory) -> dict:
    """What `tools.env.colab_env.prepare` recorded: the environment, the versions before and after
    the install cells' installs, its kernel. This run's record when nbval runs on that kernel
    (`make test`); else prepared now, with its kernel on JUPYTER_PATH for the module's tests."""
    from tools.env import colab_env

    if request.config.getoption("nbval_kernel_name", None) == colab_env.KERNEL:
        yield json.loads(colab_env.RECORD.read_text(encoding="utf-8"))
        return
    folder = tmp_path_factory.mktemp("colab")
    facts = colab_env.prepare(jupyter_dir=folder / "jupyter", record=folder / "colab-env.json")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(folder / "jupyter"))
        mp.setenv("XFL_FAST", "1")
        yield facts
