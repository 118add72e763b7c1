"""Get a dataset file: the cache, then the offline mirror, then a verified download.

Public API
----------
``DataFile``            what a file is: cache name, canonical URL, checksum, mirror path.
``SPA_ENG_ZIP``, ``CIFAR10_TARBALL``   the two canonical downloads.
``fetch(item)``         path to a verified copy of ``item`` (cache -> mirror -> download).
``cache_dir()``         where downloads go (``XFL_DATA_DIR``; else ``<repo>/data/cache`` in a
                        checkout; else ``~/.cache/xfl``).
``mirror_dir()``        the offline mirror named by ``XFL_DATA_MIRROR`` (or None).
``hash_matches(path, known_hash)``   checksum check, ``known_hash`` like ``"sha256:..."``.
``ChecksumError``, ``DataUnavailableError``   the two ways a fetch fails.

Downloads go through `pooch <https://www.fatiando.org/pooch>`_: it streams to a temporary
file in the cache folder and renames it only when the checksum matches, so an interrupted
or corrupt download leaves no file behind. Described in the book's page "The datasets"
(chapters/ch00_data/datasets.md) and in data/README.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pooch
import requests

DATA_DIR_ENV = "XFL_DATA_DIR"
MIRROR_ENV = "XFL_DATA_MIRROR"
TIMEOUT_S = (15, 120)  # (connect, read) seconds for requests


class ChecksumError(ValueError):
    """A file's checksum differs from the published one (the bad file is gone)."""


class DataUnavailableError(FileNotFoundError):
    """A file is neither cached, nor in the mirror, nor downloadable right now."""


@dataclass(frozen=True)
class DataFile:
    """One canonical file: ``name`` under the cache dir, its ``url`` and ``known_hash``
    (``"sha256:<hex>"`` or ``"md5:<hex>"``); ``mirror_name``/``mirror_sha256`` locate and
    verify its copy in the offline mirror (None: the mirror does not hold this file)."""

    name: str
    url: str
    known_hash: str
    mirror_name: str | None = None
    mirror_sha256: str | None = None


SPA_ENG_SHA256 = "0c4fd7825d3d872488d38c157f784e035edab4f2ff0df25a2a208790ecb5b58f"
SPA_ENG_ZIP = DataFile(
    name="spa-eng.zip",
    url="https://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip",
    known_hash=f"sha256:{SPA_ENG_SHA256}",
    mirror_name="tatoeba-spa-eng/spa-eng.zip",
    mirror_sha256=SPA_ENG_SHA256,
)
CIFAR10_TARBALL = DataFile(
    name="cifar-10-python.tar.gz",
    url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    known_hash="md5:c58f30108f718f92721af3b95e74349a",
)


# ---------------------------------------------------------------------- folders
def _checkout_root() -> Path | None:
    """The repository root when xfl runs from a source checkout, else None."""
    root = Path(__file__).resolve().parents[2]
    is_checkout = (root / "pyproject.toml").is_file() and (root / "data").is_dir()
    return root if is_checkout else None


def cache_dir() -> Path:
    """Download cache: ``$XFL_DATA_DIR``, else ``<repo>/data/cache``, else ``~/.cache/xfl``."""
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    root = _checkout_root()
    return root / "data" / "cache" if root else Path.home() / ".cache" / "xfl"


def mirror_dir() -> Path | None:
    """The offline mirror named by ``$XFL_DATA_MIRROR`` (must be a folder), or None."""
    raw = os.environ.get(MIRROR_ENV, "").strip()
    if not raw:
        return None
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise ValueError(f"{MIRROR_ENV}={raw!r} is not a folder; point it at the offline "
                         f"data mirror (e.g. ../shared/data) or unset it")
    return path


# -------------------------------------------------------------------- checksums
def hash_matches(path: str | Path, known_hash: str) -> bool:
    """True when the file's digest equals ``known_hash`` (``"alg:hex"``, alg sha256 or md5)."""
    algorithm, _, expected = known_hash.partition(":")
    if algorithm not in ("sha256", "md5") or not expected:
        raise ValueError(f"known_hash must look like 'sha256:<hex>' or 'md5:<hex>', "
                         f"got {known_hash!r}")
    return pooch.file_hash(str(path), alg=algorithm) == expected.lower()


# ------------------------------------------------------------------------ fetch
def fetch(item: DataFile) -> Path:
    """Path to a checksum-verified copy of ``item``: cache, then mirror, then download.

    A cached file whose checksum is wrong is deleted and fetched again. Mirror files are
    read in place (the mirror is read-only) and verified by ``item.mirror_sha256``.
    """
    cached = cache_dir() / item.name
    if cached.is_file():
        if hash_matches(cached, item.known_hash):
            return cached
        cached.unlink()  # stale or corrupt copy: fetch it again
    mirrored = from_mirror(item)
    return mirrored if mirrored is not None else download(item, cache_dir())


def from_mirror(item: DataFile) -> Path | None:
    """The verified mirror copy of ``item``, or None when there is no mirror or no copy."""
    root = mirror_dir()
    if root is None or item.mirror_name is None:
        return None
    path = root / item.mirror_name
    if not path.is_file():
        return None
    if not hash_matches(path, f"sha256:{item.mirror_sha256}"):
        raise ChecksumError(f"mirror file {path} does not have the sha256 {item.mirror_sha256} "
                            f"listed for it; the mirror is read-only, so fix the mirror or unset "
                            f"{MIRROR_ENV}")
    return path


def download(item: DataFile, folder: Path) -> Path:
    """Download ``item.url`` into ``folder/item.name``, verified; nothing is left on failure."""
    folder.mkdir(parents=True, exist_ok=True)
    downloader = pooch.HTTPDownloader(progressbar=False, timeout=TIMEOUT_S)
    try:
        path = pooch.retrieve(item.url, known_hash=item.known_hash, fname=item.name,
                              path=folder, downloader=downloader)
    except requests.RequestException as err:
        raise DataUnavailableError(missing_message(item, folder, err)) from err
    except ValueError as err:  # pooch's hash mismatch; it has deleted the temporary file
        raise ChecksumError(f"download of {item.url} failed its checksum ({item.known_hash}); "
                            f"the file was removed. Try again, or put a good copy at "
                            f"{folder / item.name}. Details: {err}") from err
    return Path(path)


def missing_message(item: DataFile, folder: Path, err: Exception | None = None) -> str:
    """What to do when ``item`` cannot be found or downloaded: where to put it, the URL."""
    mirror = (f" or set {MIRROR_ENV} to a mirror folder holding {item.mirror_name}"
              if item.mirror_name else "")
    why = f" ({type(err).__name__}: {err})" if err else ""
    return (f"cannot get {item.name}: it is not in the cache and the download failed{why}. "
            f"Download {item.url} by hand and put it at {folder / item.name}"
            f"{mirror}. Its checksum must be {item.known_hash}.")
