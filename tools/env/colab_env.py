"""A Colab-like Python environment: only what Colab preinstalls, plus what a chapter installs.

The chapters' first cell runs ``%pip install -q "xfl @ git+<repository>"`` on Colab. This tool
builds a virtual environment holding Colab's preinstalled packages (the list below), cached
between runs in ``.venv-colab/`` (or ``$XFL_COLAB_ENV``) and rebuilt only when the list changes,
then installs exactly
the requirements of that first cell, with the repository URL replaced by this checkout.

`make test` runs ``prepare``: it records the environment's packages before and after that install
(``_build/test-run/colab-env.json``) and registers the environment as the Jupyter kernel
``xfl-colab-like`` (under ``_build/test-run/jupyter``), on which nbval runs every chapter; the
checks of ``tests/test_colab.py`` read that record and the executed chapters. Standard library
only (and ``xfl.atomic_files``). It runs after the build of ``.venv``, whose torch, torchvision, triton
and CUDA libraries it hard-links instead of installing them a second time (``link_heavy_packages``:
the same files pip would write, about 6 GB it neither downloads nor writes again).

Usage (from the repository root):
    python -m tools.env.colab_env            # create or update .venv-colab, print its python
    python -m tools.env.colab_env prepare    # ... install this checkout's xfl, record, register
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import venv
from pathlib import Path

from xfl.atomic_files import write_text_atomic  # xfl's own modules import torch; this one does not

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ENV = Path(os.environ.get("XFL_COLAB_ENV", ROOT / ".venv-colab"))
DONOR_ENV = ROOT / ".venv"  # built first by `make`: its torch is linked, not installed again
KERNEL = "xfl-colab-like"
RUN_DIR = ROOT / "_build" / "test-run"
RECORD = RUN_DIR / "colab-env.json"  # what `prepare` installed, and where
KERNELS = RUN_DIR / "jupyter"  # a JUPYTER_PATH entry holding kernels/xfl-colab-like

# What Colab preinstalls and the chapters use (checked 2026-11: ../shared/TOOLING.md). torch and
# torchvision are whatever pip picks, as Colab ships recent releases; ipywidgets is Colab's 7.7.1;
# ipykernel runs the notebooks (<7: see requirements-dev.txt).
COLAB_PREINSTALLED = ["torch", "torchvision", "numpy", "pandas", "matplotlib", "seaborn",
                      "ipywidgets==7.7.1", "tqdm", "nltk", "scipy", "ipykernel<7"]
PIP_INSTALL = re.compile(r"^\s*%pip install (.+)$", re.M)
GIT_REQUIREMENT = re.compile(r"git\+\S+?(?=[\"'\s]|$)")


def python_of(env: Path) -> Path:
    return env / "bin" / "python"


def _pip(env: Path, *args: str) -> None:
    subprocess.run([str(python_of(env)), "-m", "pip", "--disable-pip-version-check", *args], check=True)


def ensure_preinstalled(env: Path = DEFAULT_ENV, donor: Path | None = DONOR_ENV) -> Path:
    """Create ``env`` with Colab's preinstalled packages unless it already holds exactly them.
    torch and its CUDA libraries are hard-linked from ``donor`` when it has them (see
    :func:`link_heavy_packages`); pip installs the rest."""
    spec = json.dumps({"python": sys.version_info[:2], "packages": COLAB_PREINSTALLED})
    stamp = env / ".colab-spec"
    if stamp.exists() and stamp.read_text() == spec and python_of(env).exists():
        return python_of(env)
    stamp.unlink(missing_ok=True)  # a half-built environment is never taken for a finished one
    venv.EnvBuilder(clear=True, with_pip=True).create(env)
    if donor is not None and python_of(donor).exists():
        link_heavy_packages(donor, env)
    _pip(env, "install", "-q", *COLAB_PREINSTALLED)
    stamp.write_text(spec)
    return python_of(env)


HEAVY = re.compile(r"^(torch|torchvision|triton|nvidia-.*|cuda-.*)$")  # about 6 GB of ~6.3 GB
SITE_FILES = """
import importlib.metadata as md, json, re, sys, sysconfig
heavy = re.compile(sys.argv[1])
print(json.dumps({"python": list(sys.version_info[:2]), "purelib": sysconfig.get_paths()["purelib"],
                  "files": [str(f) for d in md.distributions() if heavy.match(d.metadata["Name"].lower())
                            for f in (d.files or []) if not str(f).startswith("..")]}))
"""


def _site(env: Path, pattern: str = HEAVY.pattern) -> dict:
    """``env``'s Python version, site-packages folder and the files of its distributions
    whose names match ``pattern`` (relative to site-packages, scripts outside it left out)."""
    out = subprocess.run([str(python_of(env)), "-c", SITE_FILES, pattern], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def link_heavy_packages(donor: Path, env: Path) -> int:
    """Hard-link torch, torchvision, triton and the CUDA libraries (files and metadata) from
    ``donor``'s site-packages into ``env``'s: pip then finds them installed, as on Colab, and the
    set-up neither downloads nor writes those 6 GB twice. Nothing is linked across Python
    versions or file systems. Returns the number of files linked."""
    source, target = _site(donor), _site(env)
    src_root, dst_root = Path(source["purelib"]), Path(target["purelib"])
    if source["python"] != target["python"] or src_root.stat().st_dev != dst_root.stat().st_dev:
        return 0
    linked = 0
    for name in source["files"]:
        src, dst = src_root / name, dst_root / name
        if src.is_file() and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.link(src, dst)
            linked += 1
    return linked


def first_cell_requirements(notebook: Path, checkout: Path = ROOT) -> list[str]:
    """The requirements a chapter's first code cell installs, with its git URL pointing at
    ``checkout`` (``xfl @ git+https://...`` -> ``xfl @ file:///...``)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    first = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
    match = PIP_INSTALL.search(first)
    if match is None:
        raise ValueError(f"the first code cell of {notebook} runs no `%pip install`:\n{first}")
    args = [a for a in shlex.split(match.group(1)) if not a.startswith("-")]
    return [GIT_REQUIREMENT.sub(checkout.resolve().as_uri(), a) for a in args]


def installed_versions(env: Path) -> dict[str, str]:
    """``{name: version}`` of every package in ``env``, names lower-cased."""
    out = subprocess.run([str(python_of(env)), "-m", "pip", "list", "--format=json",
                          "--disable-pip-version-check"], check=True, capture_output=True, text=True)
    return {p["name"].lower(): p["version"] for p in json.loads(out.stdout)}


def install_chapter_requirements(env: Path, requirements: list[str]) -> None:
    """Install what the first cell installs, as on Colab (this checkout's xfl, fresh each time)."""
    _pip(env, "uninstall", "-q", "-y", "xfl")
    _pip(env, "install", "-q", "--no-cache-dir", *requirements)  # pip caches the wheel by path


def chapter_notebooks(root: Path = ROOT) -> list[Path]:
    """Every chapter notebook (``chapters/<folder>/<name>.ipynb``)."""
    return sorted(root.glob("chapters/*/*.ipynb"))


def chapters_requirements(root: Path = ROOT) -> list[str]:
    """What the chapters' first cells install; ValueError unless every chapter installs the same."""
    found = {json.dumps(first_cell_requirements(nb, root)) for nb in chapter_notebooks(root)}
    if len(found) != 1:
        raise ValueError(f"the chapters' install cells differ: {sorted(found)}")
    return json.loads(found.pop())


def register_kernel(env: Path, jupyter_dir: Path) -> Path:
    """Write the kernelspec `KERNEL` (``env``'s ipykernel) under ``jupyter_dir/kernels``."""
    folder = jupyter_dir / "kernels" / KERNEL
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [str(python_of(env)), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Colab-like", "language": "python"}
    write_text_atomic(folder / "kernel.json", json.dumps(spec, indent=1))
    return folder


def prepare(env: Path = DEFAULT_ENV, jupyter_dir: Path = KERNELS, record: Path = RECORD) -> dict:
    """Build ``env`` if needed, install the chapters' requirements as their first cell does,
    register the kernel and record ``{env, requirements, before, after, kernel}``."""
    ensure_preinstalled(env)
    requirements = chapters_requirements()
    before = installed_versions(env)
    install_chapter_requirements(env, requirements)
    facts = {"env": str(env.resolve()), "requirements": requirements, "before": before,
             "after": installed_versions(env), "kernel": KERNEL,
             "kernelspec": str(register_kernel(env, jupyter_dir))}
    write_text_atomic(record, json.dumps(facts, indent=1))
    return facts


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["prepare"]:
        facts = prepare()
        print(f"colab-like: xfl installed into {facts['env']}; kernel {KERNEL} in {facts['kernelspec']}")
    elif not args:
        print(ensure_preinstalled())
    else:
        print(f"usage: python -m tools.env.colab_env [prepare], not {args}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
