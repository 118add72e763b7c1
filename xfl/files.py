"""Writing a file so that a reader sees the old file or the new one, never half of one:
training checkpoints (``xfl.train``), benchmark results (``bench/``), the exercise
notebooks, pages and grades (``tools/``). Downloads are verified and renamed by
``xfl.data.download``.

The new content goes to a hidden ``.<name>.<pid>.<random>.tmp`` beside the target. A writer
killed mid-write (SIGKILL) cannot remove it, so the next write of the same target (and
``xfl.checkpoint``'s next read) removes those whose process has ended.
"""

from __future__ import annotations

import glob
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write to. On success the file is flushed to
    disk and renamed over ``path``; on any error it is removed and ``path`` is left as it was.
    Temporary files of earlier writers that were killed are removed first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_orphans(path: str | Path) -> list[Path]:
    """Remove the hidden temporary files of writes to ``path`` whose process has ended (killed
    mid-write); return them. Files of running processes, or without a pid, are kept."""
    path, removed = Path(path), []
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = tmp.name[len(path.name) + 2:].split(".")[0]
        if pid.isdigit() and not _running(int(pid)):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8, line endings as given) to ``path`` through :func:`atomic_path`."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
