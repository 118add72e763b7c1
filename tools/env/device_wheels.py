"""Download the wheels the lent GPU machine lacks, for carrying there (it has no internet).

The GPU machine (see DEVELOPERS.md) runs Python 3.12 on x86-64 Linux with torch, torchvision,
matplotlib, seaborn, sacrebleu, tqdm, pytest and many more preinstalled, but not what running the
chapters as notebooks needs. This tool asks pip for those packages, at the versions this
checkout's environment uses, plus everything they depend on, as Python 3.12 manylinux wheels; it
then drops the wheels of projects the machine already has (and playwright: LEFT_OUT), prints
what is left and its size, and fails when the folder is over the 64 MiB that one call may carry.

Usage (from the repository root; `make device-wheels` runs it):
    python -m tools.env.device_wheels            # -> build/wheels/
On the GPU machine, install them with
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site build/wheels/*.whl
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "build" / "wheels"
CARRY_LIMIT_MIB = 64  # what one call may carry, the working tree included
PYTHON_VERSION = "3.12"  # python3 on the GPU machine (KINDS.md of the device tool: 3.12.3)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64")
# Running chapters (nbclient, ipykernel, the chapters' imports), checking them (nbval), reading
# MyST sources (jupytext) and grading (otter-grader); xfl's own needs that the machine lacks.
WANTED = ("nbval", "jupytext", "nbformat", "nbclient", "ipykernel", "ipywidgets", "nltk",
          "otter-grader", "pooch")
# Projects preinstalled on the GPU machine that the wanted ones depend on: their wheels stay here.
# (Read from the machine's package list; a project missing there would fail at import, by name.)
PREINSTALLED = frozenset("""
attrs certifi charset-normalizer click cloudpickle colorama coverage filelock fsspec idna
iniconfig jinja2 joblib markdown markdown-it-py markupsafe mdurl numpy packaging pandas pathspec
pillow pip pluggy protobuf psutil pygments pyparsing python-dateutil pytest pyyaml regex requests
rich setuptools six tqdm typing-extensions urllib3 wheel wrapt matplotlib seaborn scipy torch
torchvision
""".split())
# otter-grader needs playwright (51 MiB) only to export PDFs, which nothing run there does.
LEFT_OUT = frozenset({"playwright"})


def project(wheel: Path) -> str:
    """The normalized project name of a wheel file (``Jinja2-3.1.4-py3-none-any.whl`` -> jinja2)."""
    return re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()


def pinned(names: tuple[str, ...]) -> list[str]:
    """``name==version`` for each name, at the version installed here (unpinned if absent)."""
    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pins.append(name)
    return pins


def download(requirements: list[str], out: Path) -> None:
    """pip download ``requirements`` and their dependencies as Python 3.12 x86-64 wheels."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
           "--python-version", PYTHON_VERSION, "--implementation", "cp", "-d", str(out)]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + requirements, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=OUT)
    args = parser.parse_args(argv)
    shutil.rmtree(args.output, ignore_errors=True)  # one version of each project, no leftovers
    args.output.mkdir(parents=True)
    download(pinned(WANTED), args.output)
    for wheel in args.output.glob("*.whl"):
        if project(wheel) in PREINSTALLED | LEFT_OUT:
            wheel.unlink()
    wheels = sorted(args.output.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels) / 2**20
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
    print(f"{len(wheels)} wheels, {total:.1f} MiB in {args.output}")
    if total > CARRY_LIMIT_MIB:
        print(f"error: {total:.1f} MiB is over the {CARRY_LIMIT_MIB} MiB one call may carry; "
              f"drop a project from WANTED or carry them in two calls", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
