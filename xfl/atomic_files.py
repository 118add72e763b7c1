"""Writing a file so that a reader sees the old file or the new one, never half of one (for
every file something else may read while it is written: checkpoints, results, pages, grades).
Downloads are verified and renamed by ``xfl.data.download``.

On Linux the new content goes to an anonymous file in the target's folder (``O_TMPFILE``): it has
no name until it is complete, so a writer killed mid-write (SIGKILL) leaves nothing behind; the
kernel frees it. The complete file is then given a hidden name and renamed over the target (two
system calls). Where the kernel or file system cannot (no ``O_TMPFILE``, or linking an open file
needs a privilege), the content goes to a hidden ``.<name>.<pid>.<random>.tmp`` instead, which a
killed writer cannot remove; the next write of the same target (and ``xfl.checkpoint``'s next
read) removes those whose process has ended.
"""

from __future__ import annotations

import ctypes
import glob
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a path to write the new content of ``path`` to (in this process). On success the file
    is flushed to disk and renamed over ``path``; on any error, or when killed, ``path`` is left as
    it was, with no file left beside it (see the module's docstring for the fallback)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(path)
    fd = _anonymous_file(path.parent)
    if fd is None:
        with _named_temporary(path) as tmp:
            yield tmp
        return
    try:
        yield Path(f"/proc/self/fd/{fd}")  # reopening this path reaches the anonymous file
        os.fsync(fd)
        _name_and_replace(fd, path)
    finally:
        os.close(fd)


def _anonymous_file(folder: Path) -> int | None:
    """A writable file without a name in ``folder`` that can be named later, or None."""
    if not _can_name_anonymous_files(folder):
        return None
    return os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o644)


_answers: dict[int, bool] = {}  # st_dev of a folder's file system -> it can (once per process)


def _can_name_anonymous_files(folder: Path) -> bool:
    """Whether this file system gives anonymous files (O_TMPFILE) and we may name one (linkat)."""
    if getattr(os, "O_TMPFILE", None) is None or _linkat is None:
        return False
    device = os.stat(folder).st_dev
    if device not in _answers:
        try:
            fd = os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o644)
        except OSError:
            _answers[device] = False
        else:
            probe = folder / f".probe.{os.getpid()}.tmp"
            try:
                probe.unlink(missing_ok=True)  # left by a killed process of the same pid
                _answers[device] = _link(fd, probe) == 0
                probe.unlink(missing_ok=True)
            finally:
                os.close(fd)
    return _answers[device]


def _name_and_replace(fd: int, path: Path) -> None:
    """Give the complete anonymous file a hidden name beside ``path``, then rename it over it."""
    hidden = path.parent / f".{path.name}.{os.getpid()}.{fd}.tmp"
    hidden.unlink(missing_ok=True)
    error = _link(fd, hidden)
    if error:
        raise OSError(error, f"cannot name the new content of {path}: {os.strerror(error)}", str(hidden))
    try:
        os.replace(hidden, path)
    except BaseException:
        hidden.unlink(missing_ok=True)
        raise


def _load_linkat():
    try:
        linkat = ctypes.CDLL(None, use_errno=True).linkat
    except (OSError, AttributeError):
        return None
    linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    return linkat


_linkat = _load_linkat()
_AT_FDCWD, _AT_EMPTY_PATH = -100, 0x1000


def _link(fd: int, name: Path) -> int:
    """linkat(fd, "", AT_FDCWD, name, AT_EMPTY_PATH): give an open file a name; 0 or the errno."""
    if _linkat(fd, b"", _AT_FDCWD, os.fsencode(name), _AT_EMPTY_PATH) == 0:
        return 0
    return ctypes.get_errno()


@contextmanager
def _named_temporary(path: Path) -> Iterator[Path]:
    """The fallback: a hidden temporary file beside ``path``, renamed over it on success."""
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
