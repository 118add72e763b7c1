"""A Colab-like Python environment: Colab's preinstalled packages at Colab's versions, plus what
a chapter installs.

The chapters' first cell, as the book publishes it (``tools/book/publish.py``), runs on Colab
``%pip install -q --no-deps "xfl @ git+<repository>@<commit>"`` and then installs the one
dependency Colab lacks (sacreBLEU). This tool builds a virtual environment holding the packages
of Colab's GPU runtime list (``tools/env/colab-runtime.txt``: name==version, with its source and
date) at Colab's versions, each where it installs on the Python at hand, else the nearest
release that does, with Colab's whole ``pip freeze`` (``tools/env/colab-freezes/``) as pip
constraints: every dependency pip brings that Colab has gets Colab's version, unless it conflicts
with a release PyPI serves (torch's CUDA 13 libraries where Colab has CUDA 12.8) or does not
install on this Python. pip and setuptools are Colab's too. It prints every deviation (Python,
the local ``+cu128`` build tags PyPI does not serve, each stand-in, each constraint dropped and
why, and each package the environment holds at another version than Colab's or that Colab does
not have) and refuses an environment that differs from the list beyond them. The environment is cached in
``.venv-colab/`` (or ``$XFL_COLAB_ENV``) and rebuilt only when the list or the Python changes.
Then it installs exactly what that first cell installs, with the repository URL replaced by this
checkout, under the same constraints: an install that needed another version of anything Colab
has fails here.

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
    python -m tools.env.colab_env               # create or update .venv-colab, print its deviations
    python -m tools.env.colab_env prepare       # ... install this checkout's xfl, record, register
    python -m tools.env.colab_env old-runtimes  # pip's dry run of the install cells on each Colab
                                                # runtime's freeze -> bench/results/colab_old_runtimes.json
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
from urllib.parse import unquote

from xfl.atomic_files import write_text_atomic  # xfl's own modules import torch; this one does not

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ENV = Path(os.environ.get("XFL_COLAB_ENV", ROOT / ".venv-colab"))
KERNEL = "xfl-colab-like"
RUN_DIR = ROOT / "_build" / "test-run"
RECORD = RUN_DIR / "colab-env.json"  # what `prepare` installed, and where
KERNELS = RUN_DIR / "jupyter"  # a JUPYTER_PATH entry holding kernels/xfl-colab-like

RUNTIME_LIST = Path(__file__).with_name("colab-runtime.txt")  # Colab's versions, with source and date
FREEZES = Path(__file__).with_name("colab-freezes")  # Colab's whole `pip freeze`, per runtime
FREEZE = FREEZES / "2026.08-gpu.txt"  # the runtime colab-runtime.txt is taken from
OLDER_FREEZES = (FREEZES / "2026.07-gpu.txt", FREEZES / "2026.04-gpu.txt", FREEZES / "2025.07.txt")
BOOTSTRAP = ("pip", "setuptools")  # installed first, at Colab's versions: pip runs the install cells
WHEEL_URL = re.compile(r"/[A-Za-z0-9_.]+-(\d[^-/]*)-[^/]*\.whl$")
CONSTRAINT_CONFLICT = re.compile(r"The user requested \(constraint\) ([A-Za-z0-9_.-]+)==(\S+)")
NOT_FOUND = re.compile(r"(?:Could not find a version that satisfies the requirement|"
                       r"No matching distribution found for) ([A-Za-z0-9_.-]+)==([^\s;]+)")
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


def read_freeze(path: Path = FREEZE) -> tuple[str, dict[str, str]]:
    """Colab's Python and ``{package: version}`` from a vendored ``pip freeze`` (``name==version``
    lines, and ``name @ <wheel URL>`` lines whose version is read from the wheel's file name;
    ``name @`` a source tree or git URL names no release and is left out)."""
    text = path.read_text(encoding="utf-8")
    python = re.search(r"^# python (\d+\.\d+\.\d+)$", text, re.M)
    pins = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if "==" in line:
            name, version = line.split("==", 1)
        else:
            name, _, url = line.partition(" @ ")
            found = WHEEL_URL.search(unquote(url.strip()))
            if not found:
                continue
            version = found.group(1)
        pins[normalized(name.strip())] = version.strip()
    if python is None or not pins:
        raise ValueError(f"{path} must hold a '# python X.Y.Z' line and a pip freeze")
    return python.group(1), pins


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


def _install_pinned(env: Path, chosen: dict[str, str], constraints: dict[str, str]) -> None:
    """``pip install name==version ...`` into ``env`` under ``constraints`` (``{name: version}``),
    without bytecode: the first import writes it (the Makefile says why)."""
    _pip_constrained(env, [f"{n}=={v}" for n, v in chosen.items()], constraints, "--no-compile")


def _pip_constrained(env: Path, args: list[str], constraints: dict[str, str], *flags: str) -> None:
    """``pip install -q -c <constraints> args`` into ``env``; CalledProcessError carries pip's
    output (``.output``)."""
    with tempfile.TemporaryDirectory() as tmp:
        pinned = Path(tmp) / "constraints.txt"
        pinned.write_text("".join(f"{n}=={v}\n" for n, v in sorted(constraints.items())), encoding="utf-8")
        cmd = [str(python_of(env)), "-m", "pip", "--disable-pip-version-check", "install",  # not -q:
               *flags, "-c", str(pinned), *args]  # pip says which pins conflict only without it
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, output=proc.stdout + proc.stderr)


def refused_constraints(pip_output: str, constraints: dict[str, str]) -> dict[str, str]:
    """``{package: pip's reason}`` for each constraint pip's failed resolution names: one that
    conflicts with a requirement (``The user requested (constraint) x==1``, with the ``depends on``
    lines as reason) or a release pip cannot find for this Python."""
    reasons = " / ".join(line.strip() for line in pip_output.splitlines() if " depends on " in line)
    found = {normalized(n): f"pip: {reasons or 'conflicting dependencies'}"
             for n, _ in CONSTRAINT_CONFLICT.findall(pip_output)}
    found.update({normalized(n): f"pip found no {n}=={v} for Python {sys.version.split()[0]}"
                  for n, v in NOT_FOUND.findall(pip_output)})
    return {n: why for n, why in found.items() if n in constraints}


# Colab's pins that pip refused beside PyPI's torch 2.11.0 (CUDA 13) when this environment was
# built on 2026-11-28, with pip's reasons: dropped before the first try, since each refusal found
# costs a resolution of minutes. Any other refusal is still found and dropped by the loop.
KNOWN_REFUSED = {
    "cuda-toolkit": 'pip: torch 2.11.0 depends on cuda-toolkit==13.0.2; platform_system == "Linux"',
    "cuda-bindings": 'pip: torch 2.11.0 depends on cuda-bindings<14 and >=13.0.3; platform_system == "Linux"',
    "nvidia-nccl-cu13": 'pip: torch 2.11.0 depends on nvidia-nccl-cu13==2.28.9; platform_system == "Linux"',
}


def install_under_freeze(env: Path, chosen: dict[str, str], freeze: dict[str, str],
                         attempts: int = 12) -> tuple[dict[str, str], list[dict]]:
    """Install ``chosen`` with Colab's ``freeze`` (local build tags dropped) as constraints,
    less :data:`KNOWN_REFUSED`; each constraint pip refuses is dropped and the install tried
    again. Returns the constraints kept and a deviation for each dropped one."""
    constraints = public_releases(freeze)[0]
    dropped = [{"package": n, "colab": freeze[n], "here": None,
                "why": f"Colab's pin dropped from the constraints: {why} (found on 2026-11-28)"}
               for n, why in KNOWN_REFUSED.items() if n in constraints]
    for d in dropped:
        del constraints[d["package"]]
    for _ in range(attempts):
        try:
            _install_pinned(env, chosen, constraints)
            return constraints, dropped
        except subprocess.CalledProcessError as error:
            refused = refused_constraints(error.output, constraints)
            if not refused:
                raise RuntimeError(f"pip failed, naming no constraint of Colab's freeze:\n{error.output[-3000:]}")
            for name, why in refused.items():
                print(f"colab-like: pip refuses Colab's {name}=={constraints[name]} ({why}); trying without it")
                dropped.append({"package": name, "colab": freeze[name], "here": None,
                                "why": f"Colab's pin dropped from the constraints: {why}"})
                del constraints[name]
    raise RuntimeError(f"pip still refuses Colab's freeze after {attempts} attempts; dropped {dropped}")


REQUIRED_BY = """import json, re
from importlib import metadata
found = {}
for dist in metadata.distributions():
    for req in dist.requires or []:
        name = re.split(r"[ ;<>=!~\\[(]", req, maxsplit=1)[0]
        via = " (an extra)" if "extra ==" in req else ""
        found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), []).append(dist.metadata["Name"] + via)
print(json.dumps(found))"""


def required_by(env: Path) -> dict[str, list[str]]:
    """``{package: [packages of env that require it, or name it in an extra]}``."""
    out = subprocess.run([str(python_of(env)), "-c", REQUIRED_BY], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def environment_deviations(installed: dict[str, str], freeze: dict[str, str], explained: list[dict],
                           needs: dict[str, list[str]]) -> list[dict]:
    """Every package of ``installed`` that Colab's ``freeze`` does not hold at that version (local
    build tags aside), with ``explained``'s reason where it has one, else who requires it."""
    reasons = {d["package"]: d["why"] for d in explained}
    found = []
    for name, version in sorted((normalized(n), v) for n, v in installed.items()):
        colab = freeze.get(name)
        if colab is not None and colab.split("+")[0] == version.split("+")[0]:
            continue
        why = reasons.get(name) or (f"required by {', '.join(sorted(set(needs[name])))}" if needs.get(name)
                                    else "pip's choice")
        found.append({"package": name, "colab": colab, "here": version,
                      "why": why if colab is not None else f"not on Colab; {why}"})
    return found


def ensure_preinstalled(env: Path = DEFAULT_ENV) -> Path:
    """Create ``env`` with Colab's preinstalled packages (:data:`RUNTIME_LIST`) under Colab's
    whole freeze (:data:`FREEZE`) unless it already holds exactly them; print the deviations."""
    colab_python, pins = colab_list()
    freeze = read_freeze()[1]
    spec = json.dumps({"python": sys.version_info[:2], "list": pins, "freeze": freeze})
    stamp = env / ".colab-spec"
    if stamp.exists() and stamp.read_text() == spec and (env / "colab-base.json").exists():
        return python_of(env)
    stamp.unlink(missing_ok=True)  # a half-built environment is never taken for a finished one
    venv.EnvBuilder(clear=True, with_pip=True).create(env)
    _pip(env, "install", "-q", "--no-compile", *(f"{n}=={freeze[n]}" for n in BOOTSTRAP))
    chosen, deviations = public_releases(pins)
    try:
        constraints, dropped = install_under_freeze(env, chosen, freeze)
    except RuntimeError as error:  # some release of the list does not install here: find which
        print(f"colab-like: {error}\ncolab-like: looking for the releases of the list that do not install here")
        chosen, stood_in = stand_ins(env, chosen)
        deviations += stood_in
        constraints, dropped = install_under_freeze(env, chosen, {n: v for n, v in freeze.items()
                                                                  if n not in {d["package"] for d in stood_in}})
    missing = check_against_list(installed_versions(env), chosen)
    if missing:
        raise RuntimeError(f"the Colab-like environment differs from {RUNTIME_LIST.name}: {missing}")
    deviations.insert(0, {"package": "python", "colab": colab_python, "here": sys.version.split()[0],
                          "why": "the Python this environment is built with"})
    base = installed_versions(env)
    listed = {d["package"] for d in deviations}
    deviations += [d for d in environment_deviations(base, freeze, deviations + dropped, required_by(env))
                   if d["package"] not in listed]
    deviations += [d for d in dropped if d["package"] not in {e["package"] for e in deviations}]
    write_text_atomic(env / "colab-deviations.json", json.dumps(deviations, indent=1))
    write_text_atomic(env / "colab-base.json", json.dumps(base, indent=1, sort_keys=True))
    write_text_atomic(env / "colab-constraints.json", json.dumps(constraints, indent=1, sort_keys=True))
    stamp.write_text(spec)
    return python_of(env)


def print_deviations(env: Path = DEFAULT_ENV) -> list[dict]:
    """Print and return how ``env`` differs from Colab's list and freeze (written when it was
    built): every package at another version than Colab's, not on Colab, or pinned by Colab and
    left out here."""
    deviations = json.loads((env / "colab-deviations.json").read_text(encoding="utf-8"))
    for d in deviations:
        here = d["here"] or "not installed"
        colab = f"Colab has {d['colab']}" if d["colab"] else "Colab has none"
        if d["colab"] != d["here"]:
            print(f"colab-like: {d['package']} {here} where {colab} ({d['why']})")
    return deviations


def pip_installs(cell: str, checkout: Path = ROOT) -> list[list[str]]:
    """The arguments of each ``%pip install`` line of the code ``cell`` (``-q`` left out), git
    URLs pointing at ``checkout`` (``xfl @ git+https://...`` -> ``xfl @ file:///...``)."""
    return [[GIT_REQUIREMENT.sub(checkout.resolve().as_uri(), a) for a in shlex.split(line) if a != "-q"]
            for line in PIP_INSTALL.findall(cell)]


def published_installs(cell: str, checkout: Path = ROOT) -> list[list[str]]:
    """The ``%pip install`` commands of the install ``cell`` as the book publishes it
    (``tools.book.publish.install_cell``: xfl without dependencies, then what Colab lacks), git URLs
    pointing at ``checkout``."""
    from tools.book.publish import install_cell, missing_on_colab  # standard library only

    return pip_installs(install_cell(cell, None, "any", missing_on_colab(checkout)), checkout)


def first_code_cell(notebook: Path) -> str:
    """The source of ``notebook``'s first code cell (a chapter's install cell)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "code")["source"])


def same_installs(found: dict[str, list[list[str]]], what: str) -> list[list[str]]:
    """The one list of install commands every entry of ``found`` (``{name: commands}``) runs;
    ValueError unless all agree and install something."""
    distinct = {json.dumps(commands) for commands in found.values()}
    if len(distinct) != 1 or json.loads(next(iter(distinct))) == []:
        raise ValueError(f"the {what}' install cells differ or install nothing: {found}")
    return json.loads(distinct.pop())


def exercises_installs(root: Path = ROOT) -> list[list[str]]:
    """The ``%pip install`` commands of every published exercise notebook's first code cell (from
    ``chapters/*/exercises.md``); ValueError unless every one installs the same."""
    found = {}
    for source in sorted(root.glob("chapters/*/exercises.md")):
        first = MYST_CODE_CELL.search(source.read_text(encoding="utf-8"))
        found[source.parent.name] = published_installs(first.group(1) if first else "", root)
    return same_installs(found, "exercises")


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
    """``pip install args`` into ``env`` as a notebook's install cell does, under ``constraints``
    (``name==version``: Colab's freeze, the oldest claimed versions of what Colab lacks)."""
    with tempfile.TemporaryDirectory() as tmp:
        pinned = Path(tmp) / "constraints.txt"
        pinned.write_text("\n".join(constraints) + "\n", encoding="utf-8")
        _pip(env, "install", "-q", "--no-cache-dir", "-c", str(pinned), *args)  # no cache: xfl by path


def chapter_notebooks(root: Path = ROOT) -> list[Path]:
    """Every chapter notebook (``chapters/<folder>/<name>.ipynb``)."""
    return sorted(root.glob("chapters/*/*.ipynb"))


def chapters_installs(root: Path = ROOT) -> list[list[str]]:
    """The ``%pip install`` commands of every published chapter's first cell; ValueError unless
    every chapter installs the same."""
    return same_installs({nb.parent.name: published_installs(first_code_cell(nb), root)
                          for nb in chapter_notebooks(root)}, "chapters")


def freeze_constraints(env: Path) -> list[str]:
    """``name==version`` for each pin of Colab's freeze that ``env`` was built under."""
    kept = json.loads((env / "colab-constraints.json").read_text(encoding="utf-8"))
    return [f"{name}=={version}" for name, version in sorted(kept.items())]


def register_kernel(env: Path, jupyter_dir: Path) -> Path:
    """Write the kernelspec `KERNEL` (``env``'s ipykernel) under ``jupyter_dir/kernels``."""
    folder = jupyter_dir / "kernels" / KERNEL
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [str(python_of(env)), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Colab-like", "language": "python"}
    write_text_atomic(folder / "kernel.json", json.dumps(spec, indent=1))
    return folder


def prepare(env: Path = DEFAULT_ENV, jupyter_dir: Path = KERNELS, record: Path = RECORD) -> dict:
    """Build ``env`` if needed, run the published chapters' install commands (what Colab lacks at
    the oldest versions requirements.txt claims, all of Colab's freeze held as constraints), then
    the exercise notebooks'; register the kernel and record the versions before, after the
    chapters' install and after the exercises' (``before``, ``after``, ``after_exercises``)."""
    ensure_preinstalled(env)
    chapter_installs = chapters_installs()
    constraints = oldest_claimed(colab_list()[1]) + freeze_constraints(env)
    base = json.loads((env / "colab-base.json").read_text(encoding="utf-8"))
    added = sorted(set(installed_versions(env)) - set(base))  # by the last `prepare`: xfl, sacrebleu, ...
    if added:
        _pip(env, "uninstall", "-q", "-y", *added)  # each run starts from Colab's packages alone
    before = installed_versions(env)
    for args in chapter_installs:
        install(env, args, constraints)
    after = installed_versions(env)
    exercise_installs = exercises_installs()
    for args in exercise_installs:
        install(env, args, constraints)
    facts = {"env": str(env.resolve()), "chapter_installs": chapter_installs, "constraints": constraints,
             "before": before, "after": after, "exercise_installs": exercise_installs,
             "after_exercises": installed_versions(env), "deviations": print_deviations(env),
             "kernel": KERNEL, "kernelspec": str(register_kernel(env, jupyter_dir))}
    write_text_atomic(record, json.dumps(facts, indent=1))
    return facts


OLD_RUNTIMES_RESULT = ROOT / "bench" / "results" / "colab_old_runtimes.json"


def header(freeze: Path) -> str:
    """A vendored freeze's first line: its source, commit and date."""
    return freeze.read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()


def would_install(args: list[str], python: str, constraints: dict[str, str]) -> dict[str, str]:
    """``{package: version}`` that ``pip install args`` would install from nothing on ``python``
    (``3.12``) under ``constraints``, by pip's resolver (``--dry-run --report``, wheels only);
    RuntimeError with pip's output when it cannot resolve."""
    with tempfile.TemporaryDirectory() as tmp:
        pinned, report = Path(tmp) / "constraints.txt", Path(tmp) / "report.json"
        pinned.write_text("".join(f"{n}=={v}\n" for n, v in sorted(constraints.items())), encoding="utf-8")
        cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "-q", "--dry-run",
               "--ignore-installed", "--only-binary=:all:", "--python-version", python,
               "-c", str(pinned), "--report", str(report), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"pip cannot resolve {args} for Python {python}:\n{(proc.stdout + proc.stderr)[-2000:]}")
        found = json.loads(report.read_text(encoding="utf-8"))["install"]
    return {normalized(p["metadata"]["name"]): p["metadata"]["version"] for p in found}


def check_runtime(freeze: Path, commands: list[list[str]]) -> dict:
    """What the published install ``commands`` would do on the Colab runtime of ``freeze``: each
    command's additions and changes (a package the runtime has, at another version), resolved by
    pip against that runtime's Python with its freeze as constraints (``--no-deps`` commands
    install exactly their arguments); and xfl's lower bounds the runtime's versions are below
    (xfl runs there untested)."""
    colab_python, pins = read_freeze(freeze)
    python = ".".join(colab_python.split(".")[:2])
    added, changed, resolved = {}, {}, []
    for args in commands:
        if "--no-deps" in args:
            named = [a for a in args if not a.startswith("-")]
            got = {normalized(a.split("==")[0]): a.split("==")[1] for a in named if "==" in a}
            got.update({normalized(a.split(" @ ")[0]): "(this checkout)" for a in named if " @ " in a})
        else:
            got = would_install(args, python, public_releases(pins)[0])
            resolved.append(args)
        added.update({n: v for n, v in got.items() if n not in pins})
        changed.update({n: (pins[n], v) for n, v in got.items()
                        if n in pins and pins[n].split("+")[0] != v.split("+")[0]})
    below = {n: (pins.get(n), v) for n, v in lower_bounds().items()
             if n in pins and _release(pins[n]) < _release(v)}
    return {"runtime": freeze.name, "source": header(freeze), "python": colab_python,
            "resolved_by_pip": resolved, "adds": added, "changes": changed,
            "below_xfl_lower_bounds": below}


def check_old_runtimes(out: Path = OLD_RUNTIMES_RESULT) -> list[dict]:
    """``check_runtime`` for today's runtime and each older one, for the chapters' and the
    exercises' published install cells; written to ``out`` and printed."""
    import datetime

    results = []
    for freeze in (FREEZE, *OLDER_FREEZES):
        for cell, commands in (("chapters", chapters_installs()), ("exercises", exercises_installs())):
            result = {"cell": cell, **check_runtime(freeze, commands)}
            results.append(result)
            print(f"colab-old-check: {freeze.name} (Python {result['python']}), {cell}' cell: "
                  f"changes {result['changes'] or 'nothing'}; adds {sorted(result['adds'])}; "
                  f"below xfl's lower bounds (untested there): {result['below_xfl_lower_bounds'] or 'none'}")
    record = {"what": "pip's resolution of the published install cells on each Colab runtime "
                      "(dry run against its freeze and Python; nothing installed or executed there)",
              "date": datetime.date.today().isoformat(), "pip": subprocess.run(
                  [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True).stdout.split(" from")[0],
              "results": results}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, json.dumps(record, indent=1) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["prepare"]:
        facts = prepare()
        print(f"colab-like: xfl installed into {facts['env']}; kernel {KERNEL} in {facts['kernelspec']}")
    elif args == ["old-runtimes"]:
        results = check_old_runtimes()
        return 1 if any(r["changes"] for r in results) else 0
    elif not args:
        print(ensure_preinstalled())
        print_deviations()
    else:
        print(f"usage: python -m tools.env.colab_env [prepare | old-runtimes], not {args}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
