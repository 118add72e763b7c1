"""One chapter's exercises as a Gradescope autograder, graded by this project's grader.

    python -m tools.grading.gradescope build ch01_qkv [--out _build/gradescope]   (make gradescope)
    python -m tools.grading.gradescope run [--root /autograder]                   (run_autograder)

Gradescope's autograder format (https://gradescope-autograders.readthedocs.io/en/latest/specs/):
a zip with ``setup.sh`` and ``run_autograder`` at its root, unpacked into
``/autograder/source``; ``setup.sh`` runs once as root when Gradescope builds the image (Ubuntu);
``run_autograder`` is copied to ``/autograder/run_autograder`` and runs once per submission, as
root, in ``/autograder``, with the student's files in ``/autograder/submission``; it must write
``/autograder/results/results.json``: ``score``, ``output``, and ``tests``, each with ``name``,
``score``, ``max_score``, ``output`` and ``visibility`` (``visible``, ``hidden``,
``after_due_date``, ``after_published``). ``AUTOGRADER_ROOT`` moves ``/autograder`` (the
tests lay Gradescope's folders out in a temporary one).

The zip holds the chapter's otter autograder zip (its hidden tests) in ``private/``, the grader's
sources in ``grader/tools/grading/``, and ``xfl_gradescope.json`` (the chapter, the xfl commit
pinned as the published book pins it, the time limits). ``setup.sh`` installs CPU torch, then
``xfl`` at that commit with otter-grader, and links the installed ``xfl`` beside the grader.

Where the answer key lives: the grader reads the hidden tests from ``private/`` into its own
process (``tools.grading.judge``) and the notebook runs in another. ``run`` first makes
``source/private``, ``results``, ``submission`` and ``submission_metadata.json`` (which carries
earlier submissions' results) root's alone (0700/0600). The notebook then runs in the bubblewrap
sandbox (which shows it none of ``/autograder``), or, where bwrap cannot start (Gradescope's
containers may refuse user namespaces), as an unprivileged uid of its own (``setpriv``, no
capabilities): it can read the grader's sources and ``xfl`` (public), not those folders. Only
when neither holds (not root, no bwrap) does it run as the grader's user: results.json's output
then says UNSAFE. The library-answer block holds in every case (``tools.grading.worker``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = "xfl_gradescope.json"
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")  # Gradescope's values
PRIVATE = "private"  # folder of the zip holding the otter autograder zip (the hidden tests)
NO_SANDBOX_ENV = "XFL_GRADESCOPE_NO_BWRAP"  # "1": behave as where bwrap cannot start (tests, trials)
MAX_OUTPUT = 20_000  # characters of one test's output

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu):
# https://gradescope-autograders.readthedocs.io/en/latest/specs/ . Written by
# tools/grading/gradescope.py for {chapter}; xfl pinned to {ref}.
set -euo pipefail
root="${{AUTOGRADER_ROOT:-/autograder}}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip git ca-certificates bubblewrap util-linux
python3 -m venv "$root/venv"
# CPU torch first, from PyTorch's CPU index: xfl's requirement is then met and pip keeps it.
"$root/venv/bin/pip" install --index-url https://download.pytorch.org/whl/cpu "torch{torch}" "torchvision{torchvision}"
"$root/venv/bin/pip" install "xfl[book] @ git+{url}{at_ref}" "otter-grader{otter}" nbformat ipython
ln -sfn "$(cd / && "$root/venv/bin/python" -c 'import os, xfl; print(os.path.dirname(xfl.__file__))')" \\
  "$root/source/grader/xfl"
chmod 0700 "$root/source/{private}"
(cd / && "$root/venv/bin/python" -c 'import xfl.version as v; print("installed xfl", v.describe())')
{check}"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope copies this to /autograder/run_autograder and runs it as root in /autograder, once per
# submission (https://gradescope-autograders.readthedocs.io/en/latest/specs/): it grades the
# notebook in $root/submission with xfl's grader and writes $root/results/results.json.
set -euo pipefail
root="${{AUTOGRADER_ROOT:-/autograder}}"
python="${{XFL_GRADESCOPE_PYTHON:-$root/venv/bin/python}}"
cd "$root/source/grader"
exec "$python" -m tools.grading.gradescope run --root "$root"
"""


def requirement(name: str, files=("requirements.txt", "requirements-dev.txt")) -> str:
    """The version specifier ``name`` has in the project's requirements (``>=2.11.0``), else ''."""
    for file in files:
        for line in (ROOT / file).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line.lower().startswith(name.lower()) and line[len(name):len(name) + 1] in "<>=!~ ":
                return line[len(name):].strip()
    return ""


def build(chapter: str, out: Path = ROOT / "_build" / "gradescope",
          exercises: Path = ROOT / "_build" / "exercises", limit: float = 60.0, grace: float = 10.0) -> Path:
    """``<out>/<chapter>-gradescope.zip`` from the chapter's otter autograder zip (``make
    release``) and the grader's sources; returns its path."""
    otter_zip = exercises / "autograder" / f"{chapter}-autograder.zip"
    if not (ROOT / "chapters" / chapter / "exercises.md").exists():
        raise ValueError(f"chapter {chapter!r}: expected a folder chapters/<chapter>/ with exercises.md")
    if not otter_zip.is_file():
        raise ValueError(f"{otter_zip} is missing: build it first (make release CHAPTER={chapter})")
    from tools.book.publish import build_ref
    ref = build_ref(ROOT)
    url = repository_url(chapter)
    settings = {"chapter": chapter, "xfl_ref": ref, "repository": url, "limit": limit, "grace": grace,
                "autograder": f"{PRIVATE}/{otter_zip.name}"}
    scripts = {"setup.sh": SETUP_SH.format(chapter=chapter, ref=ref or "(unpinned)", url=url,
                                           at_ref=f"@{ref}" if ref else "", private=PRIVATE,
                                           torch=requirement("torch"), torchvision=requirement("torchvision"),
                                           otter=requirement("otter-grader") or ">=7,<8", check=pin_check(ref)),
               "run_autograder": RUN_AUTOGRADER.format()}
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{chapter}-gradescope.zip"
    tmp = target.with_name(f".{target.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in scripts.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | 0o755) << 16
            zf.writestr(info, text)
        zf.writestr(SETTINGS, json.dumps(settings, indent=1))
        zf.write(otter_zip, settings["autograder"])
        zf.write(ROOT / "tools" / "__init__.py", "grader/tools/__init__.py")
        for module in sorted((ROOT / "tools" / "grading").glob("*.py")):
            zf.write(module, f"grader/tools/grading/{module.name}")
    os.replace(tmp, target)
    return target


def pin_check(ref: str | None) -> str:
    """setup.sh's last line: stop unless the installed xfl is the pinned commit (nothing if unpinned)."""
    if not ref:
        return ""
    code = f"import sys, xfl.version as v; sys.exit(None if v.commit() == {ref!r} else f'xfl is {{v.commit()}}, not {ref}')"
    return f"(cd / && \"$root/venv/bin/python\" -c \"{code}\")\n"


def repository_url(chapter: str) -> str:
    """The git URL the chapter's exercise notebook installs xfl from (its install cell, the line
    ``tools.book.publish`` pins when it publishes the book)."""
    from tools.book.publish import XFL_INSTALL
    source = ROOT / "chapters" / chapter / "exercises.md"
    match = XFL_INSTALL.search(source.read_text())
    if not match:
        raise ValueError(f'{source}: expected an install cell with `%pip install -q "xfl @ git+<url>"`')
    return match.group("url")


# ---------------------------------------------------------------- results.json


def gradescope_results(details: dict, sandbox_line: str, notebook: str) -> dict:
    """Gradescope's results.json for the one student in the grades JSON ``details``
    (``tools.grading.results.write_outputs``): per question a visible test of its public cases
    (their messages) and an ``after_due_date`` test of its hidden cases (their messages, which
    can quote hidden inputs, shown only after the due date); ``output`` says how it ran."""
    (record,) = details["students"].values()
    tests, total = [], 0.0
    for question, points in details["questions"].items():
        score = float(record["scores"].get(question, 0.0))
        total += score
        cases = record["cases"].get(question, [])
        public = [c for c in cases if not c.get("hidden")]
        hidden = [c for c in cases if c.get("hidden")]
        if not cases:  # no test ran (time limit, the notebook lost): the question as one test
            why = [n for n in record["notes"] if n.startswith(f"{question}:")] or ["its tests did not run"]
            tests.append(_test(question, score, points, "visible", "\n".join(why)))
            continue
        public_max = sum(float(c.get("points") or 0) for c in public)
        public_score = sum(float(c.get("points") or 0) for c in public if c.get("passed"))
        if public:
            tests.append(_test(f"{question}: public tests", min(public_score, score), public_max, "visible",
                               _case_lines(public)))
        if hidden:
            tests.append(_test(f"{question}: hidden tests", max(score - public_score, 0.0), points - public_max,
                               "after_due_date", _case_lines(hidden)))
    notes = "".join(f"\n- {n}" for n in record["notes"])
    output = (f"{notebook}: {total:g} / {sum(details['questions'].values()):g} points from the tests.\n"
              f"{sandbox_line}\nHidden tests and their messages are shown after the due date."
              + (f"\nNotes:{notes}" if notes else ""))
    return {"score": total, "output": output, "stdout_visibility": "hidden", "tests": tests,
            "extra_data": {"chapter": details.get("assignment"), "sandboxed": details.get("sandboxed")}}


def _test(name: str, score: float, max_score: float, visibility: str, output: str) -> dict:
    return {"name": name, "score": round(score, 6), "max_score": round(max_score, 6), "visibility": visibility,
            "output": output[:MAX_OUTPUT]}


def _case_lines(cases: list[dict]) -> str:
    lines = []
    for c in cases:
        if c.get("passed"):
            lines.append(f"{c.get('name', '')}: passed")
        else:
            lines.append(f"{c.get('name', '')}: failed\n{(c.get('message') or '').strip()}")
    return "\n".join(lines)


def validate_results(data: dict) -> None:
    """ValueError naming the field unless ``data`` is results.json as Gradescope's specification
    has it (the fields this grader writes, with their types and Gradescope's visibility values)."""
    def number(value, where):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"results.json: {where} must be a number, got {value!r}")

    if not isinstance(data, dict):
        raise ValueError(f"results.json must be a JSON object, got {type(data).__name__}")
    tests = data.get("tests")
    if "score" not in data and not (isinstance(tests, list) and all("score" in t for t in tests)):
        raise ValueError("results.json: expected a score, at the top or on every test")
    if "score" in data:
        number(data["score"], "score")
    for key in ("output", "stdout_visibility", "visibility"):
        if key in data and not isinstance(data[key], str):
            raise ValueError(f"results.json: {key} must be a string, got {data[key]!r}")
    for key in ("stdout_visibility", "visibility"):
        if key in data and data[key] not in VISIBILITIES:
            raise ValueError(f"results.json: {key} must be one of {VISIBILITIES}, got {data[key]!r}")
    if tests is None:
        return
    if not isinstance(tests, list):
        raise ValueError(f"results.json: tests must be a list, got {type(tests).__name__}")
    for i, test in enumerate(tests):
        if not isinstance(test, dict) or not isinstance(test.get("name"), str):
            raise ValueError(f"results.json: tests[{i}] must be an object with a string name, got {test!r}")
        for key in ("score", "max_score"):
            if key in test:
                number(test[key], f"tests[{i}].{key}")
        if test.get("visibility", "visible") not in VISIBILITIES:
            raise ValueError(f"results.json: tests[{i}].visibility must be one of {VISIBILITIES}, "
                             f"got {test.get('visibility')!r}")
        if not isinstance(test.get("output", ""), str):
            raise ValueError(f"results.json: tests[{i}].output must be a string")


# ---------------------------------------------------------------- run_autograder


def lock_down(root: Path) -> list[str]:
    """Make what a submission must not read root's alone; the paths changed."""
    changed = []
    for path, mode in ((root / "source" / PRIVATE, 0o700), (root / "results", 0o700), (root / "submission", 0o700),
                       (root / "submission_metadata.json", 0o600)):
        if path.exists():
            path.chmod(mode)
            changed.append(str(path))
    return changed


def choose_sandbox():
    """(``Sandbox``, the line results.json's output carries about it)."""
    from tools.grading.sandbox import SandboxUnavailable, check_bwrap
    from tools.grading.student import Sandbox
    why = "forced off (" + NO_SANDBOX_ENV + "=1)" if os.environ.get(NO_SANDBOX_ENV) == "1" else None
    if why is None:
        try:
            check_bwrap()
            return Sandbox(), "Sandbox: bubblewrap (the notebook saw none of the grader's files)."
        except SandboxUnavailable as e:
            why = str(e)
    if os.geteuid() == 0 and shutil.which("setpriv"):
        return Sandbox(enabled=False, own_uid=True), (
            f"Sandbox: bubblewrap could not run here ({why}); the notebook ran WITHOUT it, as an unprivileged "
            "uid of its own that cannot read the hidden tests or the results. The library-answer block held.")
    return Sandbox(enabled=False), (
        f"UNSAFE: bubblewrap could not run here ({why}) and the grader is not root: the notebook ran as the "
        "grader's own user and could read the hidden tests. The library-answer block held.")


def find_notebook(submission: Path) -> Path | None:
    """The submitted notebook: the first ``*.ipynb`` (by name) that is a regular file, not hidden."""
    found = sorted(p for p in submission.rglob("*") if p.suffix.lower() == ".ipynb" and p.is_file()
                   and not p.is_symlink() and not any(part.startswith(".") for part in p.relative_to(submission).parts))
    return found[0] if found else None


def run(root: Path) -> dict:
    """Grade ``root/submission``'s notebook and write ``root/results/results.json``; returns it."""
    from tools.grading.grader import grade_folder
    from xfl.atomic_files import write_text_atomic
    start = time.monotonic()
    source = root / "source"
    settings = json.loads((source / SETTINGS).read_text())
    if os.geteuid() == 0:
        lock_down(root)
    (root / "results").mkdir(exist_ok=True)
    if not (source / "grader" / "xfl").exists():
        raise ValueError(f"{source / 'grader' / 'xfl'} is missing: setup.sh links the installed xfl there")
    notebook = find_notebook(root / "submission")
    if notebook is None:
        results = {"score": 0.0, "output": "No notebook (.ipynb) was submitted: upload the chapter's exercise "
                                           "notebook.", "stdout_visibility": "hidden", "tests": []}
    else:
        sandbox, line = choose_sandbox()
        with tempfile.TemporaryDirectory(prefix="xfl-gradescope-") as tmp:  # 0700: root's alone
            folder = Path(tmp) / "submissions"
            folder.mkdir()
            shutil.copyfile(notebook, folder / "submission.ipynb")  # a plain copy: the grader refuses links
            output = Path(tmp) / "grades" / "grades.csv"
            grade_folder(source / settings["autograder"], folder, output, limit=settings["limit"],
                         grace=settings["grace"], jobs=1, sandbox=sandbox)
            details = json.loads(output.with_suffix(".json").read_text())
            log = next(output.with_name("grades-logs").glob("*.log"), None)
            print(f"{notebook.name}: graded; {line}\n--- its output ---\n"
                  + (log.read_text(errors="replace")[-4000:] if log else "(none)"))
        results = gradescope_results(details, line, notebook.name)
    results["execution_time"] = round(time.monotonic() - start)
    validate_results(results)
    write_text_atomic(root / "results" / "results.json", json.dumps(results, indent=1))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.grading.gradescope", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="the Gradescope autograder zip of one chapter")
    b.add_argument("chapter")
    b.add_argument("--out", type=Path, default=ROOT / "_build" / "gradescope")
    b.add_argument("--exercises", type=Path, default=ROOT / "_build" / "exercises")
    b.add_argument("--timeout", type=float, default=60.0, help="seconds per code cell and per question's calls")
    r = sub.add_parser("run", help="grade /autograder/submission (what run_autograder calls)")
    r.add_argument("--root", type=Path, default=Path(os.environ.get("AUTOGRADER_ROOT", "/autograder")))
    args = parser.parse_args(argv)
    if args.command == "build":
        path = build(args.chapter, args.out, args.exercises, limit=args.timeout)
        print(f"Gradescope autograder -> {path} (upload it as the assignment's autograder; keep it private)")
        return 0
    results = run(args.root)
    print(f"results.json: {results['score']:g} points, {len(results['tests'])} tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
