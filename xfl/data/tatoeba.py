"""Tatoeba English–Spanish sentence pairs, read straight from ``spa-eng.zip``.

Public API
----------
``load_pairs(path=None) -> list[tuple[str, str]]``   (English, Spanish), file order.
``read_pairs_from_zip(path)``                         the same, from a given zip file.
``ATTRIBUTION``                                       the credit line every page must carry.

The archive is the one the TensorFlow tutorials use (see ``download.SPA_ENG_ZIP``); it holds
``spa-eng/spa.txt`` with one ``English<TAB>Spanish`` pair per line. Sentence pairs from
www.manythings.org/anki and tatoeba.org, licence CC-BY 2.0 FR. Described in the book's page
"The datasets" (chapters/ch00_data/datasets.md).
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

from xfl.data.download import SPA_ENG_ZIP, fetch

MEMBER = "spa-eng/spa.txt"
ATTRIBUTION = ("Sentence pairs from www.manythings.org/anki and tatoeba.org "
               "(CC-BY 2.0 FR)")


def load_pairs(path: str | Path | None = None) -> list[tuple[str, str]]:
    """All (English, Spanish) pairs; ``path`` defaults to the fetched ``spa-eng.zip``."""
    return read_pairs_from_zip(fetch(SPA_ENG_ZIP) if path is None else path)


def read_pairs_from_zip(path: str | Path) -> list[tuple[str, str]]:
    """Pairs from the zip's ``spa-eng/spa.txt``; a broken zip raises ValueError.

    Lines with fewer than two tab-separated fields or an empty side are skipped; extra
    fields (newer files add an attribution column) are ignored.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            raw = archive.read(MEMBER)
    except (zipfile.BadZipFile, zlib.error, EOFError, KeyError) as err:
        raise ValueError(f"{path} is not a readable spa-eng.zip holding {MEMBER} "
                         f"({type(err).__name__}: {err}); delete it and fetch it again") from err
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{MEMBER} in {path} is not UTF-8: {err}") from err
    return _parse_lines(text.splitlines())


def _parse_lines(lines: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for line in lines:
        fields = line.split("\t")
        if len(fields) >= 2 and fields[0].strip() and fields[1].strip():
            pairs.append((fields[0].strip(), fields[1].strip()))
    return pairs
