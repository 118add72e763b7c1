"""A Colab-like Python environment: Colab's preinstalled packages at Colab's versions, plus what
a chapter installs.

The chapters' first cell runs ``%pip install -q "xfl @ git+<repository>"`` on Colab. This tool
builds a virtual environment holding the packages of Colab's GPU runtime list
(``tools/env/colab-runtime.txt``: name==version, with its source and date) at Colab's versions,
each where it installs on the Python at hand, else the nearest release that does; it prints the
deviations (Python itself, the local ``+cu128`` build tags PyPI does not serve, any stand-in) and
refuses an environment that differs from the list beyond them. The environment is cached in
``.venv-colab/`` (or ``$XFL_COLAB_ENV``) and rebuilt only when the list or the Python changes.
Then it installs exactly the requirements of that first cell, with the repository URL replaced by
this checkout.

`make test` runs ``prepare``: it records the environment's packages before and after that install
and the deviations (``_build/test-run/colab-env.json``) and registers the environment as the
Jupyter kernel ``xfl-colab-like`` (under ``_build/test-run/jupyter``), on which nbval runs every
chapter; the checks of ``tests/test_colab.py`` read that record and the executed chapters.
Standard library only (and ``xfl.atomic_files``), so ``make test`` builds this environment beside
``.venv``, on the system Python: Colab's torch is an older release than ``.venv``'s, so pip
downloads it and the CUDA libraries it needs either way. (Hard-linking the libraries the two
share, 1.2 GB, meant building it after ``.venv``; side by side the two builds took 135 s in all,
one after the other 306 s.)

Usage (from the repository root):
    python -m tools.env.colab_env            # create or update .venv-colab, print its deviations
    python -m tools.env.colab_env prepare    # ... install this checkout's xfl, record, register
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

from xfl.atomic_files import write_text_atomic  # xfl's own modules import torch; this one does not

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ENV = Path(os.environ.get("XFL_COLAB_ENV", ROOT / ".venv-colab"))
KERNEL = "xfl-colab-like"
RUN_DIR = ROOT / "_build" / "test-run"
RECORD = RUN_DIR / "colab-env.json"  # what `prepare` installed, and where
KERNELS = RUN_DIR / "jupyter"  # a JUPYTER_PATH entry holding kernels/xfl-colab-like

RUNTIME_LIST = Path(__file__).with_name("colab-runtime.txt")  # Colab's versions, with source and date
PIP_INSTALL = re.compile(r"^\s*%pip install (.+)$", re.M)
MYST_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.M | re.S)
GIT_REQUIREMENT = re.compile(r"git\+\S+?(?=[\"'\s]|$)")


def python_of(env: Path) -> Path:
    return env / "bin" / "python"


def _pip(env: Path, *args: str) -> None:
    subprocess.run([str(python_of(env)), "-m", "pip", "--disable-pip-version-check", *args], check=True)


def normalized(name: str) -> str:
    """A package name as pip compares it (PEP 503): ``Jinja2`` -> ``jinja2``, ``a_b`` -> ``a-b``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def colab_list(path: Path = RUNTIME_LIST) -> tuple[str, dict[str, str]]:
    """Colab's Python version and ``{package: version}`` from the runtime list ``path``."""
    text = path.read_text(encoding="utf-8")
    python = re.search(r"^# python (\d+\.\d+\.\d+)$", text, re.M)
    pins = dict(line.split("==") for line in text.splitlines() if line and not line.startswith("#"))
    if python is None or not pins:
        raise ValueError(f"{path} must hold a '# python X.Y.Z' line and name==version lines")
    return python.group(1), {normalized(name): version for name, version in pins.items()}


def _dry_run_ok(env: Path, requirements: list[str]) -> bool:
    """Whether pip could install ``requirements`` together into ``env`` (nothing is installed)."""
    args = [str(python_of(env)), "-m", "pip", "--disable-pip-version-check", "install", "-q",
            "--dry-run", "--ignore-installed", *requirements]
    return subprocess.run(args, capture_output=True).returncode == 0


def _available_versions(env: Path, name: str) -> list[str]:
    out = subprocess.run([str(python_of(env)), "-m", "pip", "index", "versions", name],
                         capture_output=True, text=True)
    found = re.search(r"Available versions: (.+)", out.stdout)
    return found.group(1).split(", ") if found else []


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def nearest_version(wanted: str, available: list[str]) -> str:
    """The version of ``available`` closest to ``wanted`` (major, then minor, then patch);
    ValueError if there is none."""
    if not available:
        raise ValueError(f"no installable version to stand in for {wanted}")
    target = _release(wanted)
    return min(available, key=lambda v: [abs(a - b) for a, b in zip(_release(v), target)])


def public_releases(pins: dict[str, str]) -> tuple[dict[str, str], list[dict]]:
    """``pins`` without local build tags (``2.11.0+cu128`` -> ``2.11.0``: PyPI serves none), and
    a deviation for each tag dropped."""
    chosen = {name: version.split("+")[0] for name, version in pins.items()}
    return chosen, [{"package": name, "colab": pins[name], "here": chosen[name],
                     "why": "PyPI has no local builds; its wheel of the same release"}
                    for name in pins if chosen[name] != pins[name]]


def stand_ins(env: Path, chosen: dict[str, str]) -> tuple[dict[str, str], list[dict]]:
    """For each release of ``chosen`` that pip cannot install into ``env`` (tried one at a time),
    the nearest one it can; returns the new choice and a deviation for each stand-in."""
    chosen, deviations = dict(chosen), []
    for name, version in list(chosen.items()):
        if not _dry_run_ok(env, [f"{name}=={version}"]):
            chosen[name] = nearest_version(version, _available_versions(env, name))
            deviations.append({"package": name, "colab": version, "here": chosen[name],
                               "why": f"Colab's release does not install on Python {sys.version.split()[0]}"})
    return chosen, deviations


def check_against_list(installed: dict[str, str], chosen: dict[str, str]) -> dict[str, tuple]:
    """``{package: (expected, installed)}`` for every package of ``chosen`` that ``installed``
    (``{name: version}``) does not hold at that version."""
    have = {normalized(n): v for n, v in installed.items()}
    return {n: (v, have.get(n)) for n, v in chosen.items() if have.get(n, "").split("+")[0] != v}


def _install_pinned(env: Path, chosen: dict[str, str]) -> None:
    """``pip install name==version ...`` into ``env``, without bytecode: the first import writes it
    (the Makefile says why)."""
    _pip(env, "install", "-q", "--no-compile", *(f"{n}=={v}" for n, v in chosen.items()))


def ensure_preinstalled(env: Path = DEFAULT_ENV) -> Path:
    """Create ``env`` with Colab's preinstalled packages (:data:`RUNTIME_LIST`) unless it already
    holds exactly them; print the deviations."""
    colab_python, pins = colab_list()
    spec = json.dumps({"python": sys.version_info[:2], "list": pins})
    stamp = env / ".colab-spec"
    if stamp.exists() and stamp.read_text() == spec and python_of(env).exists():
        return python_of(env)
    stamp.unlink(missing_ok=True)  # a half-built environment is never taken for a finished one
    venv.EnvBuilder(clear=True, with_pip=True).create(env)
    chosen, deviations = public_releases(pins)
    try:
        _install_pinned(env, chosen)
    except subprocess.CalledProcessError:  # some release does not install here: find which
        chosen, stood_in = stand_ins(env, chosen)
        deviations += stood_in
        _install_pinned(env, chosen)
    missing = check_against_list(installed_versions(env), chosen)
    if missing:
        raise RuntimeError(f"the Colab-like environment differs from {RUNTIME_LIST.name}: {missing}")
    deviations.insert(0, {"package": "python", "colab": colab_python, "here": sys.version.split()[0],
                          "why": "the Python this environment is built with"})
    write_text_atomic(env / "colab-deviations.json", json.dumps(deviations, indent=1))
    stamp.write_text(spec)
    return python_of(env)


def print_deviations(env: Path = DEFAULT_ENV) -> list[dict]:
    """Print and return how ``env`` differs from Colab's list (written when it was built)."""
    deviations = json.loads((env / "colab-deviations.json").read_text(encoding="utf-8"))
    for d in deviations:
        if d["colab"] != d["here"]:
            print(f"colab-like: {d['package']} {d['here']} where Colab has {d['colab']} ({d['why']})")
    return deviations


def pip_installs(cell: str, checkout: Path = ROOT) -> list[list[str]]:
    """The arguments of each ``%pip install`` line of the code ``cell`` (``-q`` left out), git
    URLs pointing at ``checkout`` (``xfl @ git+https://...`` -> ``xfl @ file:///...``)."""
    return [[GIT_REQUIREMENT.sub(checkout.resolve().as_uri(), a) for a in shlex.split(line) if a != "-q"]
            for line in PIP_INSTALL.findall(cell)]


def first_cell_requirements(notebook: Path, checkout: Path = ROOT) -> list[str]:
    """The requirements a chapter's first code cell installs, with its git URL pointing at
    ``checkout``."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    first = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
    installs = pip_installs(first, checkout)
    if not installs:
        raise ValueError(f"the first code cell of {notebook} runs no `%pip install`:\n{first}")
    return [a for a in installs[0] if not a.startswith("-")]


def exercises_installs(root: Path = ROOT) -> list[list[str]]:
    """The ``%pip install`` commands of every exercise notebook's first code cell (read from
    ``chapters/*/exercises.md``); ValueError unless every one installs the same."""
    found = {}
    for source in sorted(root.glob("chapters/*/exercises.md")):
        first = MYST_CODE_CELL.search(source.read_text(encoding="utf-8"))
        found[source.parent.name] = json.dumps(pip_installs(first.group(1) if first else "", root))
    if len(set(found.values())) != 1 or found and json.loads(next(iter(found.values()))) == []:
        raise ValueError(f"the exercises' install cells differ or install nothing: {found}")
    return json.loads(next(iter(found.values())))


def installed_versions(env: Path) -> dict[str, str]:
    """``{name: version}`` of every package in ``env``, names lower-cased."""
    out = subprocess.run([str(python_of(env)), "-m", "pip", "list", "--format=json",
                          "--disable-pip-version-check"], check=True, capture_output=True, text=True)
    return {p["name"].lower(): p["version"] for p in json.loads(out.stdout)}


REQUIREMENTS = ROOT / "requirements.txt"
LOWER_BOUND = re.compile(r"^([A-Za-z0-9_.-]+)>=([0-9.]+)\s*$")


def lower_bounds(path: Path = REQUIREMENTS) -> dict[str, str]:
    """``{package: lowest version}`` that ``path`` (requirements.txt) claims to work with."""
    found = (LOWER_BOUND.match(line) for line in path.read_text(encoding="utf-8").splitlines())
    return {normalized(m.group(1)): m.group(2) for m in found if m}


def oldest_claimed(pins: dict[str, str], path: Path = REQUIREMENTS) -> list[str]:
    """Constraints ``name==lower bound`` for the requirements Colab does not preinstall, so that
    the Colab-like run tests the oldest versions we claim (Colab's own are its list's)."""
    return [f"{name}=={version}" for name, version in lower_bounds(path).items() if name not in pins]


def install(env: Path, args: list[str], constraints: list[str]) -> None:
    """``pip install args`` into ``env`` as a notebook's install cell does, the packages Colab
    lacks held at ``constraints`` (``name==version``)."""
    with tempfile.TemporaryDirectory() as tmp:
        pinned = Path(tmp) / "constraints.txt"
        pinned.write_text("\n".join(constraints) + "\n", encoding="utf-8")
        _pip(env, "install", "-q", "--no-cache-dir", "-c", str(pinned), *args)  # no cache: xfl by path


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
    """Build ``env`` if needed, install the chapters' requirements as their first cell does (what
    Colab lacks at the oldest versions requirements.txt claims), then what the exercise
    notebooks' first cell installs; register the kernel and record the versions before, after
    the chapters' install and after the exercises' (``before``, ``after``, ``after_exercises``)."""
    ensure_preinstalled(env)
    requirements, constraints = chapters_requirements(), oldest_claimed(colab_list()[1])
    before = installed_versions(env)
    _pip(env, "uninstall", "-q", "-y", "xfl")  # this checkout's xfl, fresh each time
    install(env, requirements, constraints)
    after = installed_versions(env)
    exercise_installs = exercises_installs()
    for args in exercise_installs:
        install(env, args, constraints)
    facts = {"env": str(env.resolve()), "requirements": requirements, "constraints": constraints,
             "before": before, "after": after, "exercise_installs": exercise_installs,
             "after_exercises": installed_versions(env), "deviations": print_deviations(env),
             "kernel": KERNEL, "kernelspec": str(register_kernel(env, jupyter_dir))}
    write_text_atomic(record, json.dumps(facts, indent=1))
    return facts


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["prepare"]:
        facts = prepare()
        print(f"colab-like: xfl installed into {facts['env']}; kernel {KERNEL} in {facts['kernelspec']}")
    elif not args:
        print(ensure_preinstalled())
        print_deviations()
    else:
        print(f"usage: python -m tools.env.colab_env [prepare], not {args}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
