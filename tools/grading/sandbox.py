"""The student's process in a bubblewrap sandbox: what it sees, what bounds it, how it ends.

Inside, the student's code sees a private ``/tmp`` (its working folder, a bounded tmpfs), its own
job (the notebook's cells, read-only), the installed Python (the interpreter's prefixes), ``xfl``
and the two grader modules it talks through (``tools.grading.worker``, ``tools.grading.wire``), read-only, ``/usr``
read-only, a private ``/proc`` with its own processes only, and no network. Nothing else: no
autograder zip or tests, no solutions, no other submission, no grades, no repository checkout,
and no data folder (the exercises' tests build their own small inputs).

Run as root, the grader starts each sandbox under its own unprivileged uid (``setpriv``), so the
limit on processes counts that sandbox alone and it cannot signal the grader or another student.
The limits themselves (memory, processes, file size, open files, CPU time) are set with
``setrlimit`` by ``tools.grading.worker`` before any student code runs; the wall-clock limit is the
grader's, which kills the sandbox's first process: the kernel then ends every process of its PID
namespace, detached ones included.

Memory is bounded per sandbox, not only per process: as root, where the machine lets it create a
memory cgroup (``MemoryCgroup``: cgroup v1's memory controller, or v2 where ``memory`` can be
enabled below the grader's own cgroup), every process of the sandbox is in one cgroup of
``sandbox_memory_mb``, and the kernel's OOM killer ends a process of that sandbox, never the
grader's. Elsewhere the bound is ``processes`` x ``memory_mb`` of address space (64 x 4 GiB at
the defaults): what the per-process limits give together, far more than a machine has.

Without ``bwrap`` (Debian: ``apt-get install bubblewrap``) or where it cannot start, the grader
refuses to grade unless told ``--unsandboxed``; see ``book/instructors.md``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSIDE = Path("/grader")  # where the job and the code the student's process runs are mounted
STUDENT_MODULES = ("tools/__init__.py", "tools/grading/__init__.py", "tools/grading/worker.py", "tools/grading/wire.py")
FIRST_UID = 1_900_000_000  # as root, sandbox k of grader pid p runs as uid FIRST_UID + 64 (p % 10**5) + k


@dataclass(frozen=True)
class Limits:
    """Per-sandbox bounds (sizes in MiB); ``output`` caps the log kept of its printed output;
    ``memory_mb`` is each process's address space, ``sandbox_memory_mb`` the memory all the
    sandbox's processes hold together (where a memory cgroup can be made)."""
    memory_mb: int = 4096
    sandbox_memory_mb: int = 4096
    processes: int = 64
    file_mb: int = 64
    open_files: int = 256
    cpu_s: int = 1800
    tmp_mb: int = 256
    output_mb: int = 4


class MemoryCgroup:
    """A memory cgroup of one sandbox: ``wrap`` a command so that it enters the cgroup before it
    runs; ``remove`` once its processes are gone. ``create`` returns None where none can be made
    (not root, no memory controller, a read-only ``/sys/fs/cgroup``)."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, name: str, limit_mb: int) -> MemoryCgroup | None:
        if os.geteuid() != 0:
            return None
        for base, limit_file in _memory_cgroup_bases():
            path = base / name
            try:
                path.mkdir(exist_ok=True)
                (path / limit_file).write_text(str(limit_mb << 20))
            except OSError:
                _rmdir(path)
                continue
            return cls(path)
        return None

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into the cgroup (then ``exec``)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def remove(self) -> None:
        _rmdir(self.path)

    @staticmethod
    def remove_all(prefix: str) -> None:
        """Remove the cgroups named ``prefix*`` (those of a judge that was killed)."""
        for base, _ in _memory_cgroup_bases():
            for path in base.glob(f"{prefix}*"):
                _rmdir(path)


def _memory_cgroup_bases() -> list[tuple[Path, str]]:
    """(folder a child cgroup can be made in, its memory limit file): v1's memory hierarchy, or
    v2 where the grader's cgroup lets children have the memory controller."""
    found = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            found.append((Path("/sys/fs/cgroup/memory") / path.lstrip("/"), "memory.limit_in_bytes"))
        elif controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            v2 = Path("/sys/fs/cgroup") / path.lstrip("/")
            if "memory" in _read(v2 / "cgroup.subtree_control").split():
                found.append((v2, "memory.max"))
    return [(base, f) for base, f in found if (base / f).exists() or f == "memory.max"]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _rmdir(path: Path, seconds: float = 5.0) -> None:
    """Remove a cgroup folder, waiting while its last processes are being reaped."""
    import time
    end = time.monotonic() + seconds
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > end:
                return
            time.sleep(0.05)


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot start a sandbox here."""


def _ancestors(path: Path) -> list[Path]:
    return [p for p in reversed(path.parents) if p != Path("/")]


def python_dirs() -> list[Path]:
    """The folders the interpreter and its installed packages live in."""
    dirs = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
            Path(sys.executable).resolve().parent.parent}
    return sorted(d for d in dirs if not str(d).startswith("/usr"))


def _read_only(src: Path, dest: Path, made: set[Path]) -> list[str]:
    """bwrap arguments binding ``src`` read-only at ``dest``, its parents made readable (0755)."""
    args = []
    for parent in _ancestors(dest):
        if parent not in made:
            made.add(parent)
            args += ["--perms", "0755", "--dir", str(parent)]
    return args + ["--ro-bind", str(src), str(dest)]


def bwrap_command(argv: list[str], job: Path, limits: Limits, uid: int | None) -> list[str]:
    """The command running ``argv`` (the student's Python) in a fresh sandbox; ``job`` is
    mounted at ``/grader/job.json``."""
    made: set[Path] = set()
    args = ["bwrap", "--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64", "sbin"):
        if Path(f"/{link}").is_symlink():
            args += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        elif Path(f"/{link}").is_dir():
            args += ["--ro-bind", f"/{link}", f"/{link}"]
    # The private /tmp comes before the binds: a clone or venv that lives under /tmp stays visible.
    args += ["--perms", "1777", "--size", str(limits.tmp_mb << 20), "--tmpfs", "/tmp"]
    made.add(Path("/tmp"))
    for d in python_dirs():
        args += _read_only(d, d, made)
    args += _read_only(ROOT / "xfl", INSIDE / "lib" / "xfl", made)
    for module in STUDENT_MODULES:
        args += _read_only(ROOT / module, INSIDE / "lib" / module, made)
    args += _read_only(job, INSIDE / "job.json", made)
    args += ["--proc", "/proc", "--dev", "/dev", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
             "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--chdir", "/tmp", "--clearenv",
             *(a for k, v in student_env(INSIDE / "lib").items() for a in ("--setenv", k, v)), "--cap-drop", "ALL"]
    if uid is not None:  # root: become an unprivileged uid of this sandbox's own
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "setpriv", f"--reuid={uid}",
                 f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    return args + argv


def student_env(lib: Path) -> dict[str, str]:
    """The student's whole environment: none of the grader's variables travel."""
    return {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "PYTHONPATH": str(lib),
            "XFL_FAST": "1", "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/.matplotlib",
            "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}


def sandbox_uid(slot: int) -> int | None:
    """The uid sandbox ``slot`` runs as: its own when the grader is root, else the grader's."""
    return FIRST_UID + 64 * (os.getpid() % 10**5) + slot % 64 if os.geteuid() == 0 else None


def check_bwrap() -> None:
    """Raise ``SandboxUnavailable`` saying why, unless a sandbox starts here."""
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable("bwrap is not installed (Debian: apt-get install bubblewrap)")
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        raise SandboxUnavailable("setpriv (util-linux) is not installed: as root, it gives each sandbox its own uid")
    job = ROOT / "tools" / "grading" / "worker.py"  # any readable file: the probe only lists it
    cmd = bwrap_command(["/usr/bin/test", "-r", str(INSIDE / "job.json")], job, Limits(), sandbox_uid(0))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise SandboxUnavailable(f"bwrap could not start a sandbox (exit {proc.returncode}): "
                                 f"{proc.stderr.strip()[:300]}")
