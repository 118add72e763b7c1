"""Small helpers shared by several test files (not a test file)."""

from __future__ import annotations

import importlib.util
import threading
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def load_script(relative_path: str, name: str):
    """Import a script of the repository (e.g. ``bench/vit.py``) as a module called ``name``."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / relative_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
