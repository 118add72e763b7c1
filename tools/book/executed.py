"""Stored executed notebooks: the book shows a chapter's larger runs without running it again.

A chapter executed in the full profile on a GPU, or in the cpu profile (``XFL_PROFILE=cpu``: the
largest run that fits about 10 minutes on a 2-core CPU), is stored as
``book/executed/<chapter folder>/<name>.ipynb``, outputs included, with the sha256 of the MyST
source it was executed from. `make book` renders a stored notebook's outputs for every chapter
whose source still has that hash (*fresh*) and executes the others (*stale*: the source changed
since; *none*: nothing stored) in the profile it picks. A stale notebook is never rendered.

Commands (from the repository root):
    python -m tools.book.executed execute CHAPTER.ipynb [...] --out DIR   # run chapters, keep outputs
    python -m tools.book.executed store DIR/NAME.ipynb [...]               # check, shrink, store
    python -m tools.book.executed restamp chapters/<folder>/<name> [...]  # prose edited since the run
    python -m tools.book.executed status                                  # fresh / stale / none
    python -m tools.book.executed times [-o bench/results/gpu_chapters.json]   # the stored run times

`execute` runs where the GPU is (it fails on the first error, like ``pytest --nbval-lax``) and
needs nbclient and ipykernel; `store` runs in the checkout (it reads the sources with jupytext).
`store` refuses a notebook with an error output, one that belongs to no chapter of `_toc.yml`,
one whose cells differ from the chapter's current source, a fast-profile run (unless
``--allow-fast``) and a cpu-profile run in place of a fresh full-profile one (the book shows the
largest run available); it writes nothing unless everything passes, and writes atomically. It
appends to the chapter's first output line (its run banner) where, when and how long the stored
run ran, so the reader sees it first. `restamp` carries a stored run over to a source whose prose
changed since (or the cpu estimate of its banner, set from the run's own wall time); a changed
code cell makes it refuse: the outputs must be what the current code prints.
For the book build, `tools/book/config.py` reads :func:`chapter_states`, and this module is a
Sphinx extension only so that myst-nb can import :func:`read_stored`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import yaml

from xfl.atomic_files import write_text_atomic

ROOT = Path(__file__).resolve().parents[2]
STORE = Path("book") / "executed"
META = "xfl_executed"  # notebook metadata key of a stored notebook
RUN_META = "xfl_run"  # what `execute` records about the run itself
BANNER = re.compile(r"^xfl: (?P<profile>fast|cpu|full) profile \((?P<reason>[^)]*)\) on (?P<device>\w+);", re.M)
PNG_BUDGET = 150_000  # bytes: a larger PNG output is downscaled...
PNG_MAX_WIDTH = 1200  # ...to at most this many pixels wide
NOTEBOOK_BUDGET = 8_000_000  # bytes: a larger stored notebook is refused
CELL_TIMEOUT_S = 600  # the Makefile's CELL_TIMEOUT: a hung cell fails within minutes
TIMES = ROOT / "bench" / "results" / "gpu_chapters.json"


class StoreError(ValueError):
    """A notebook that cannot be stored: the message says why and what to do."""


# ------------------------------------------------------------------ chapters and their state
def toc_chapters(root: Path = ROOT) -> list[str]:
    """The chapter documents of ``_toc.yml`` (``chapters/<folder>/<name>``), in reading order."""
    found: list[str] = []

    def visit(node) -> None:
        if isinstance(node, dict):
            if str(node.get("file", "")).startswith("chapters/"):
                found.append(str(Path(node["file"]).with_suffix("")))
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for item in node:
                visit(item)

    visit(yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8")))
    return found


def source_sha256(text: str) -> str:
    """The hash a stored notebook records: of the MyST text as Sphinx reads it (no BOM)."""
    return hashlib.sha256(text.lstrip("\ufeff").encode("utf-8")).hexdigest()


def stored_path(chapter: str, root: Path = ROOT) -> Path:
    """``chapters/ch07_vit/vision_transformer`` -> ``<root>/book/executed/ch07_vit/vision_transformer.ipynb``."""
    folder, name = Path(chapter).parts[-2:]
    return root / STORE / folder / f"{name}.ipynb"


@dataclass(frozen=True)
class ChapterState:
    chapter: str  # chapters/<folder>/<name>
    state: str  # "fresh", "stale" or "none"
    stored: Path | None  # the stored notebook, if any
    meta: dict  # its xfl_executed metadata ({} if none)

    def reason(self) -> str:
        """Why the book renders or executes this chapter, in a few words."""
        if self.state == "none":
            return "no stored outputs"
        run = (f"a {self.meta.get('profile')} profile run on "
               f"{self.meta.get('device_name') or self.meta.get('device')}, {self.meta.get('executed')}")
        if self.state == "fresh":
            return f"stored outputs of {run}"
        return f"stored outputs are stale (the source changed since {run}): execute it again and store it"


def read_meta(path: Path) -> dict:
    """The xfl_executed metadata of a stored notebook; StoreError if it has none or is no notebook."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))["metadata"][META]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise StoreError(f"{path}: not a stored notebook ({type(error).__name__}: {error})") from None
    if not isinstance(meta, dict) or not re.fullmatch(r"[0-9a-f]{64}", str(meta.get("source_sha256"))):
        raise StoreError(f"{path}: its {META} metadata has no source_sha256")
    return meta


def chapter_states(root: Path = ROOT) -> list[ChapterState]:
    """Every chapter of the toc with its state; StoreError for a malformed stored notebook."""
    states = []
    for chapter in toc_chapters(root):
        path = stored_path(chapter, root)
        if not path.exists():
            states.append(ChapterState(chapter, "none", None, {}))
            continue
        meta = read_meta(path)
        text = (root / f"{chapter}.md").read_text(encoding="utf-8")
        fresh = meta["source_sha256"] == source_sha256(text)
        states.append(ChapterState(chapter, "fresh" if fresh else "stale", path, meta))
    return states


def strays(root: Path = ROOT) -> list[str]:
    """Files under book/executed/ that are no stored notebook of a current chapter."""
    expected = {stored_path(c, root) for c in toc_chapters(root)} | {root / STORE / "README.md"}
    return sorted(str(p.relative_to(root)) for p in (root / STORE).rglob("*")
                  if p.is_file() and p not in expected)


# ------------------------------------------------------------------ checking and shrinking
def first_error(nb) -> str | None:
    """``"cell 7: ValueError: ..."`` for the first error output, None if there is none."""
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                return f"cell {index}: {output.get('ename')}: {output.get('evalue')}"
    return None


def banner_output(nb):
    """The stream output holding the run_banner line the chapter printed first, and its match."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            match = BANNER.search("".join(output.get("text", "")))
            if match:
                return output, match
    raise StoreError("no `xfl: <profile> profile (...) on <device>;` line in its outputs: a "
                     "chapter prints xfl.runtime.run_banner first; was it executed?")


def banner(nb) -> dict:
    """Profile, its reason and the device, from the run_banner line the chapter printed first."""
    return banner_output(nb)[1].groupdict()


def stamp_banner(nb, meta: dict) -> None:
    """Append to the run banner's line where, when and how long this stored run ran."""
    output, match = banner_output(nb)
    text = "".join(output["text"])
    end = text.index("\n", match.end()) if "\n" in text[match.end():] else len(text)
    minutes = f", {meta['seconds'] / 60:.1f} min wall" if meta.get("seconds") else ""
    stamp = (f" | stored run: {meta['profile']} profile on {meta.get('device_name') or meta['device']}, "
             f"executed {meta['executed']}{minutes}")
    output["text"] = text[:end] + stamp + text[end:]


def refuse_downgrade(destination: Path, profile: str, root: Path) -> None:
    """A cpu-profile run never replaces a fresh full-profile (GPU) run of the same source."""
    if profile != "full" and destination.exists():
        meta = read_meta(destination)
        source = (root / meta["source"]).read_text(encoding="utf-8")
        if meta.get("profile") == "full" and meta["source_sha256"] == source_sha256(source):
            raise StoreError(f"{destination} holds a fresh full-profile run; a {profile}-profile run "
                             f"would replace the larger run: remove it first if that is meant")


def _cells(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def chapter_of(nb, name: str, root: Path) -> str:
    """The chapter a notebook called ``name`` belongs to: same name, same cells as its source."""
    import jupytext

    matches = [c for c in toc_chapters(root) if Path(c).name == name]
    if len(matches) != 1:
        raise StoreError(f"{name}.ipynb belongs to no chapter of _toc.yml (chapter notebooks: "
                         f"{', '.join(Path(c).name for c in toc_chapters(root))})")
    chapter = matches[0]
    if _cells(jupytext.read(root / f"{chapter}.md")) != _cells(nb):
        raise StoreError(f"{name}.ipynb has other cells than {chapter}.md: the source changed "
                         f"since it was executed (or it is another notebook); execute it again")
    return chapter


def _carriage_returns(text: str) -> str:
    """What a terminal shows of progress-bar text: each line after its last carriage return."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def shrink_png(data: str) -> str:
    """A base64 PNG, downscaled to PNG_MAX_WIDTH pixels and re-encoded if over PNG_BUDGET bytes."""
    raw = base64.b64decode(data)
    if len(raw) <= PNG_BUDGET:
        return data
    from PIL import Image

    image = Image.open(io.BytesIO(raw))
    if image.width > PNG_MAX_WIDTH:
        image = image.resize((PNG_MAX_WIDTH, round(image.height * PNG_MAX_WIDTH / image.width)),
                             Image.LANCZOS)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    smaller = buffer.getvalue()
    return base64.b64encode(smaller).decode("ascii") if len(smaller) < len(raw) else data


def shrink(nb) -> None:
    """Drop execution counts and timings, settle progress bars, downscale large PNGs (in place)."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.execution_count = None
        cell.metadata.pop("execution", None)
        for output in cell.outputs:
            if "execution_count" in output:
                output.execution_count = None
            if output.output_type == "stream":
                output.text = _carriage_returns(output.text)
            if "image/png" in output.get("data", {}):
                output.data["image/png"] = shrink_png(output.data["image/png"])


# ------------------------------------------------------------------ the commands
def store(executed: Path, root: Path = ROOT, allow_fast: bool = False) -> Path:
    """Check, shrink and store one executed notebook; return where it was written."""
    try:
        nb = nbformat.read(executed, as_version=4)
    except (OSError, ValueError) as error:
        raise StoreError(f"cannot read it as a notebook: {error}") from None
    error = first_error(nb)
    if error:
        raise StoreError(f"it has an error output ({error}): fix the chapter and execute it again")
    chapter = chapter_of(nb, executed.stem, root)
    run = banner(nb)
    if run["profile"] == "fast" and not allow_fast:
        raise StoreError(f"it ran the fast profile ({run['reason']}); the book stores full-profile "
                         f"runs (XFL_FAST=0 on a GPU) and cpu-profile ones (XFL_PROFILE=cpu); "
                         f"--allow-fast stores it anyway")
    destination = stored_path(chapter, root)
    refuse_downgrade(destination, run["profile"], root)
    shrink(nb)
    details = nb.metadata.pop(RUN_META, {})
    nb.metadata[META] = {
        "source": f"{chapter}.md",
        "source_sha256": source_sha256((root / f"{chapter}.md").read_text(encoding="utf-8")),
        "profile": run["profile"], "profile_reason": run["reason"], "device": run["device"],
        "device_name": details.get("device_name"), "seconds": details.get("seconds"),
        "executed": details.get("date", "unknown"),
        "stored": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    }
    stamp_banner(nb, nb.metadata[META])
    text = nbformat.writes(nb) + "\n"
    if len(text) > NOTEBOOK_BUDGET:
        raise StoreError(f"it is {len(text) / 1e6:.1f} MB after shrinking, over the "
                         f"{NOTEBOOK_BUDGET / 1e6:.0f} MB budget: lower the figures' DPI or size")
    write_text_atomic(destination, text)
    return destination


CPU_MINUTES = re.compile(r"cpu_minutes=([\d.]+)")


def _banner_estimate_only(before: str, after: str) -> tuple[float, float] | None:
    """(old, new) cpu_minutes if the two code cells differ in that number alone, else None."""
    old, new = CPU_MINUTES.search(before), CPU_MINUTES.search(after)
    if old is None or new is None or CPU_MINUTES.sub("", before) != CPU_MINUTES.sub("", after):
        return None
    return float(old[1]), float(new[1])


def _restate_estimate(outputs: list, old: float, new: float) -> None:
    """Rewrite the banner's printed cpu estimate, ``about <old> min on a 2-core CPU`` (in place)."""
    said, now = f"about {old:g} min on a 2-core CPU", f"about {new:g} min on a 2-core CPU"
    found = [o for o in outputs if o.get("output_type") == "stream" and said in "".join(o["text"])]
    if len(found) != 1:
        raise StoreError(f"the banner's output does not say {said!r} once: execute it again")
    found[0]["text"] = "".join(found[0]["text"]).replace(said, now, 1)


def restamp(chapter: str, root: Path = ROOT) -> Path:
    """Carry a stored cpu or full run over to its chapter's edited text; return its path.

    Allowed: any change of the prose (markdown cells), and a new ``cpu_minutes`` in the banner of
    a cpu-profile run (the estimate its own wall time corrects: the printed estimate is rewritten
    to match). Every other code cell must be unchanged, so every output is what that code printed.
    The notebook takes the current cells, keeps its outputs and records the restamp's date.
    """
    import jupytext

    path = stored_path(chapter, root)
    if not path.exists():
        raise StoreError(f"{chapter} has no stored run to restamp: execute it and store it")
    read_meta(path)  # a malformed stored notebook is refused
    stored = nbformat.read(path, as_version=4)
    meta = stored.metadata[META]
    text = (root / f"{chapter}.md").read_text(encoding="utf-8")
    current = jupytext.reads(text, fmt="md:myst")
    before = [c for c in stored.cells if c.cell_type == "code"]
    after = [c for c in current.cells if c.cell_type == "code"]
    if len(before) != len(after):
        raise StoreError(f"{chapter}.md has {len(after)} code cells, its stored run "
                         f"{len(before)}: execute it again")
    for old_cell, new_cell in zip(before, after):
        new_cell.outputs, new_cell.execution_count = old_cell.outputs, None
        if old_cell.source.strip() == new_cell.source.strip():
            continue
        estimate = _banner_estimate_only(old_cell.source, new_cell.source)
        if estimate is None or meta.get("profile") != "cpu":
            first = new_cell.source.strip().splitlines()[0] if new_cell.source.strip() else ""
            raise StoreError(f"a code cell changed ({first[:60]!r}): execute it again")
        _restate_estimate(new_cell.outputs, *estimate)
    current.metadata = stored.metadata
    meta.update(source_sha256=source_sha256(text),
                restamped=datetime.now(timezone.utc).strftime("%Y-%m-%d"))
    write_text_atomic(path, nbformat.writes(current) + "\n")
    return path


def execute(notebook: Path, out: Path, timeout: int = CELL_TIMEOUT_S) -> Path:
    """Run a chapter's notebook in its folder; write it, outputs included, to ``out``.

    On an error the partly executed notebook goes to ``<name>.failed.ipynb`` and the error
    propagates. The run's seconds, device and date go into the notebook's metadata.
    """
    from nbclient import NotebookClient

    from xfl.runtime import default_device, device_name

    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(notebook.resolve().parent)}})
    start = time.monotonic()
    try:
        client.execute()
    except Exception:
        write_text_atomic(out / f"{notebook.stem}.failed.ipynb", nbformat.writes(nb) + "\n")
        raise
    nb.metadata[RUN_META] = {"seconds": round(time.monotonic() - start, 1),
                             "device_name": device_name(default_device()),
                             "date": datetime.now(timezone.utc).strftime("%Y-%m-%d")}
    shrink(nb)
    write_text_atomic(out / notebook.name, nbformat.writes(nb) + "\n")
    return out / notebook.name


def times(root: Path = ROOT) -> dict:
    """The stored fresh runs' seconds, profile and device, chapter by chapter."""
    return {s.chapter: {k: s.meta.get(k) for k in ("seconds", "profile", "device_name", "executed")}
            for s in chapter_states(root) if s.state == "fresh"}


def read_stored(text: str, stored: str, sha256: str):
    """myst-nb reader for a fresh chapter: the stored notebook, if ``text`` still has its hash."""
    if source_sha256(text) != sha256:
        raise StoreError(f"the chapter's source changed after the book's configuration was "
                         f"written, so {stored} is stale: run `make book` again")
    return nbformat.read(stored, as_version=4)


def setup(app) -> dict:
    """Sphinx extension entry point: loading it puts this module on myst-nb's import path."""
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def _status(root: Path) -> int:
    try:
        states = chapter_states(root)
    except StoreError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for state in states:
        print(f"{state.chapter:45} {state.state:5}  {state.reason()}")
    unexpected = strays(root)
    for stray in unexpected:
        print(f"error: {stray} is no stored notebook of a chapter in _toc.yml: remove it",
              file=sys.stderr)
    return 1 if unexpected else 0


def _each(items: list, action, done: str) -> int:
    """Apply ``action`` (item -> path written) to every item, saying what it wrote or why not."""
    failed = 0
    for item in items:
        try:
            print(f"{done} {item} -> {action(item).relative_to(ROOT)}")
        except StoreError as error:
            print(f"error: {item}: not {done}: {error}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("execute", help="run chapter notebooks, keeping their outputs")
    run.add_argument("notebooks", nargs="+", type=Path)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--timeout", type=int, default=CELL_TIMEOUT_S, help="seconds per cell")
    keep = commands.add_parser("store", help="store executed notebooks in book/executed/")
    keep.add_argument("notebooks", nargs="+", type=Path)
    keep.add_argument("--allow-fast", action="store_true", help="store a fast-profile run too")
    again = commands.add_parser("restamp", help="carry stored runs over to edited prose")
    again.add_argument("chapters", nargs="+", help="chapters/<folder>/<name>")
    commands.add_parser("status", help="fresh / stale / none, per chapter")
    record = commands.add_parser("times", help="write the stored runs' times as JSON")
    record.add_argument("-o", "--output", type=Path, default=TIMES)
    args = parser.parse_args(argv)
    if args.command == "status":
        return _status(ROOT)
    if args.command == "times":
        write_text_atomic(args.output, json.dumps(times(), indent=2) + "\n")
        print(f"wrote {args.output}")
        return 0
    if args.command == "restamp":
        return _each([str(Path(c).with_suffix("")) for c in args.chapters], restamp, "restamped")
    if args.command == "execute":
        for notebook in args.notebooks:
            print(f"executed {notebook} -> {execute(notebook, args.out, args.timeout)}", flush=True)
        return 0
    return _each(args.notebooks, lambda notebook: store(notebook, allow_fast=args.allow_fast), "stored")


if __name__ == "__main__":
    sys.exit(main())
