"""Write the Jupyter Book configuration for one build of the book.

`_config.yml` is the book's configuration for the fast profile with its scripts served by the
book itself (MathJax, RequireJS and the widget manager, vendored by `make vendor` with npm).
Two things change with the build, and this tool writes the variant:

- the full profile trains for minutes in one cell, so its per-cell timeout is longer;
- without npm the scripts cannot be vendored: the book then loads them from their CDNs
  (Jupyter Book's defaults), which works online only.

The profile is the one the chapters will run (`xfl.runtime.fast_profile`: `XFL_FAST`, else the
device). Usage (from the repository root; `make book` runs it):
    XFL_FAST=1 python -m tools.book_config --assets vendor -o _build/book_config.yml
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import yaml

from xfl.files import write_text_atomic
from xfl.runtime import fast_profile

ROOT = Path(__file__).resolve().parents[1]
FULL_PROFILE_CELL_TIMEOUT_S = 3600  # a full-profile training cell on a T4 takes up to ~30 min
VENDORED_KEYS = ("html_static_path", "mathjax_path", "nb_ipywidgets_js")


def book_config(base: dict, fast: bool, vendored: bool) -> dict:
    """``base`` (the parsed `_config.yml`) adjusted for the profile and the script source."""
    config = copy.deepcopy(base)
    if not fast:
        config["execute"]["timeout"] = FULL_PROFILE_CELL_TIMEOUT_S
    if not vendored:
        sphinx = config["sphinx"]["config"]
        for key in VENDORED_KEYS:
            sphinx.pop(key, None)
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", choices=["vendor", "cdn"], required=True,
                        help="vendor: scripts served by the book (needs npm); cdn: loaded online")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args(argv)
    base = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config = book_config(base, fast=fast_profile(), vendored=args.assets == "vendor")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.output, "# Written by tools/book_config.py from _config.yml: edit that.\n"
                      + yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
