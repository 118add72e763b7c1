"""Fetching files without the internet: a local HTTP server on 127.0.0.1 and a fake mirror."""

import hashlib
import socket
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from helpers import local_http_server
from xfl.data import download
from xfl.data.download import ChecksumError, DataFile, DataUnavailableError, fetch

CONTENT = b"English\tSpanish\n" * 64  # 1 KiB


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/good.bin":
            self._send(CONTENT, len(CONTENT))
        elif self.path == "/interrupted.bin":  # promise 1 KiB, send 100 bytes, hang up
            self._send(CONTENT[:100], len(CONTENT))
            self.close_connection = True
        else:
            self.send_error(404)

    def _send(self, body: bytes, length: int):
        self.send_response(200)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def log_message(self, *args):  # keep pytest output quiet
        pass


@pytest.fixture
def server(monkeypatch):
    """Base URL of a small HTTP server on 127.0.0.1 (bounded: one tiny file, stopped after)."""
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with local_http_server(_Handler) as url:
        yield url


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder and no mirror."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("XFL_DATA_DIR", str(folder))
    monkeypatch.delenv("XFL_DATA_MIRROR", raising=False)
    return folder


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*")) if folder.exists() else []


def test_cache_dir_follows_env_and_checkout(monkeypatch, tmp_path):
    monkeypatch.setenv("XFL_DATA_DIR", str(tmp_path))
    assert download.cache_dir() == tmp_path
    monkeypatch.delenv("XFL_DATA_DIR")
    repo = Path(download.__file__).resolve().parents[2]
    assert download.cache_dir() == repo / "data" / "cache"  # tests run from a checkout


def test_download_verifies_and_caches(server, cache):
    item = DataFile("good.bin", f"{server}/good.bin", f"sha256:{sha256(CONTENT)}")
    path = fetch(item)
    assert path == cache / "good.bin" and path.read_bytes() == CONTENT
    assert leftovers(cache) == ["good.bin"]  # no temporary file left
    item_offline = DataFile("good.bin", f"{server}/gone.bin", item.known_hash)
    assert fetch(item_offline) == path  # served from the cache, no download


def test_md5_checksums_work_too(server, cache):
    md5 = hashlib.md5(CONTENT).hexdigest()
    assert fetch(DataFile("good.bin", f"{server}/good.bin", f"md5:{md5}")).is_file()


def test_checksum_mismatch_leaves_no_file(server, cache):
    item = DataFile("good.bin", f"{server}/good.bin", f"sha256:{'0' * 64}")
    with pytest.raises(ChecksumError, match="checksum") as err:
        fetch(item)
    assert "removed" in str(err.value) and isinstance(err.value, ValueError)
    assert leftovers(cache) == []


def test_interrupted_download_leaves_no_file(server, cache):
    item = DataFile("cut.bin", f"{server}/interrupted.bin", f"sha256:{sha256(CONTENT)}")
    with pytest.raises(DataUnavailableError, match="IncompleteRead|Connection broken"):
        fetch(item)
    assert leftovers(cache) == []


def test_corrupt_cached_file_is_replaced(server, cache):
    cache.mkdir()
    (cache / "good.bin").write_bytes(b"garbage")
    item = DataFile("good.bin", f"{server}/good.bin", f"sha256:{sha256(CONTENT)}")
    assert fetch(item).read_bytes() == CONTENT


def closed_port() -> int:
    """A local port nobody listens on: connecting to it is refused at once (like offline)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_missing_file_offline_says_where_and_url(cache):
    url = f"http://127.0.0.1:{closed_port()}/spa-eng.zip"
    item = DataFile("spa-eng.zip", url, download.SPA_ENG_ZIP.known_hash,
                    mirror_name="tatoeba-spa-eng/spa-eng.zip")
    with pytest.raises(DataUnavailableError) as err:
        fetch(item)
    message = str(err.value)
    assert str(cache / "spa-eng.zip") in message
    assert url in message
    assert "XFL_DATA_MIRROR" in message and download.SPA_ENG_SHA256 in message
    assert isinstance(err.value, FileNotFoundError)
    assert leftovers(cache) == []


def test_mirror_is_read_in_place_and_verified(cache, tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    (mirror / "set").mkdir(parents=True)
    (mirror / "set" / "file.bin").write_bytes(CONTENT)
    monkeypatch.setenv("XFL_DATA_MIRROR", str(mirror))
    item = DataFile("file.bin", "http://127.0.0.1:9/file.bin", f"sha256:{sha256(CONTENT)}",
                    mirror_name="set/file.bin", mirror_sha256=sha256(CONTENT))
    assert fetch(item) == mirror / "set" / "file.bin"
    assert leftovers(cache) == []  # nothing copied
    wrong = DataFile("file.bin", item.url, item.known_hash, "set/file.bin", "1" * 64)
    with pytest.raises(ChecksumError, match="mirror"):
        fetch(wrong)
    assert (mirror / "set" / "file.bin").is_file()  # the read-only mirror is never touched


def test_mirror_env_must_be_a_folder(cache, monkeypatch, tmp_path):
    monkeypatch.setenv("XFL_DATA_MIRROR", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="XFL_DATA_MIRROR"):
        download.mirror_dir()


def test_bad_known_hash_format():
    with pytest.raises(ValueError, match="sha256"):
        download.hash_matches(__file__, "sha1:abc")
