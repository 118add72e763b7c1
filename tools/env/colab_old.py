"""Run a chapter on an older Colab runtime's versions, where that costs no second torch (issue 64).

`make colab-old-check` first has pip resolve the published install cells against each older
runtime's freeze (``tools.env.colab_env old-runtimes``: they change nothing there). This module
goes further for each older runtime whose torch and torchvision are today's (2026.07): a virtual
environment layered over the Colab-like one (``.venv-colab``, its site-packages after the
layer's own) gets, without dependencies, the older releases of every package of Colab's list that
differs (numpy 2.0.2, pandas 2.2.2, ...), then the published chapters' install cell under that
runtime's freeze; there it imports xfl, prints the run banner and executes one chapter in the fast
profile (nbclient, as ``tests/test_colab.py`` does). A runtime with another torch is skipped with
that reason (its CUDA build is a second download of gigabytes). The Python stays this machine's.

Usage (after ``python -m tools.env.colab_env``): ``python -m tools.env.colab_old`` ->
``bench/results/colab_old_run.json``.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

from tools.env import colab_env
from xfl.atomic_files import write_text_atomic

ROOT = colab_env.ROOT
LAYERS = ROOT / "_build" / "colab-old"
RESULT = ROOT / "bench" / "results" / "colab_old_run.json"
CHAPTER = ROOT / "chapters" / "ch01_qkv" / "qkv_attention.ipynb"
CHECK = """import json, numpy, pandas, torch, xfl
from xfl.runtime import run_banner
print(json.dumps({"numpy": numpy.__version__, "pandas": pandas.__version__, "torch": torch.__version__,
                  "xfl": xfl.__file__, "banner": run_banner(fast_minutes=0.5, t4_minutes=1)}))"""


def older_releases(freeze: Path) -> dict[str, str]:
    """``{package: version}`` of Colab's list at ``freeze``'s version where it differs from today's."""
    today, old = colab_env.read_freeze()[1], colab_env.read_freeze(freeze)[1]
    return {n: old[n] for n in colab_env.colab_list()[1]
            if n in old and old[n].split("+")[0] != today[n].split("+")[0]}


def layer_over(base: Path, layer: Path) -> Path:
    """A fresh virtual environment ``layer`` that imports ``base``'s packages after its own."""
    venv.EnvBuilder(clear=True, with_pip=True).create(layer)
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = [subprocess.run([str(colab_env.python_of(env)), "-c", code], check=True, capture_output=True,
                           text=True).stdout.strip() for env in (layer, base)]
    (Path(site[0]) / "zz_colab_base.pth").write_text(site[1] + "\n", encoding="utf-8")
    return layer


def run_on(freeze: Path, base: Path = colab_env.DEFAULT_ENV) -> dict:
    """Build the layer for ``freeze``, install the published cell, run the checks (see module)."""
    from tools.book.executed import RUN_META
    from tools.book.nbrecord import execute_now

    older = older_releases(freeze)
    result = {"runtime": freeze.name, "source": colab_env.header(freeze), "older_releases": older}
    if {"torch", "torchvision"} & set(older):
        return {**result, "ran": False, "why": f"its torch/torchvision ({older.get('torch')}, "
                f"{older.get('torchvision')}) would be a second download of a CUDA build: not run"}
    layer = layer_over(base, LAYERS / freeze.stem)
    colab_env._pip(layer, "install", "-q", "--no-deps", *(f"{n}=={v}" for n, v in older.items()))
    constraints = colab_env.oldest_claimed(colab_env.colab_list()[1]) + [
        f"{n}=={v}" for n, v in colab_env.public_releases(colab_env.read_freeze(freeze)[1])[0].items()]
    for args in colab_env.chapters_installs():
        colab_env.install(layer, args, constraints)
    env = {**os.environ, "XFL_FAST": "", "XFL_PROFILE": ""}
    check = json.loads(subprocess.run([str(colab_env.python_of(layer)), "-c", CHECK], check=True, env=env,
                                      capture_output=True, text=True, cwd=CHAPTER.parent).stdout)
    kernels = LAYERS / f"{freeze.stem}-jupyter"
    kernel = colab_env.register_kernel(layer, kernels).name
    os.environ["JUPYTER_PATH"], os.environ["XFL_FAST"] = str(kernels), "1"
    nb = execute_now(CHAPTER, kernel, 600)  # raises on a cell's error
    run = nb.metadata[RUN_META]
    banner = next(o["text"] for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("name") == "stdout")
    return {**result, "ran": True, "python": sys.version.split()[0], "imports": check,
            "chapter": str(CHAPTER.relative_to(ROOT)), "chapter_banner": banner.splitlines()[0],
            "chapter_seconds": round(run["seconds"], 1), "kernel_probe": run["probe"]}


def main() -> int:
    results = [run_on(freeze) for freeze in colab_env.OLDER_FREEZES]
    for r in results:
        print(f"colab-old-run: {r['runtime']}: " + (f"ran {r['chapter']} in {r['chapter_seconds']} s; "
              f"numpy {r['imports']['numpy']}, pandas {r['imports']['pandas']}" if r["ran"] else r["why"]))
    record = {"what": "one chapter (fast profile), xfl's import and banner on an older Colab runtime's "
                      "versions, layered over the Colab-like environment (this machine's Python)",
              "date": datetime.date.today().isoformat(), "results": results}
    write_text_atomic(RESULT, json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
