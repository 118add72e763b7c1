"""Small helpers shared by several test files (not a test file)."""

from __future__ import annotations

import importlib
import sys
import threading
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def import_bench(name: str):
    """The benchmark module ``bench.<name>``, imported as ``python -m bench.<name>`` runs it
    (from the repository root, wherever pytest was started)."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    return importlib.import_module(f"bench.{name}")


@contextmanager
def local_http_server(handler):
    """Serve ``handler`` on 127.0.0.1 from a daemon thread; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
