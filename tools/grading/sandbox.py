"""The student's process in a bubblewrap sandbox: what it sees, what bounds it, how it ends.

Inside, the student's code sees a private ``/tmp`` (its working folder, a bounded tmpfs), its own
job (the notebook's cells, read-only), the installed Python (the interpreter's prefixes), ``xfl``
and the three grader modules it runs (``tools.grading.worker``, ``tools.grading.wire``,
``tools.grading.magics``), read-only, ``/usr``
read-only, a private ``/proc`` with its own processes only, and no network. Nothing else: no
autograder zip or tests, no solutions, no other submission, no grades, no repository checkout,
and no data folder (the exercises' tests build their own small inputs).

Run as root, the grader starts each sandbox under its own unprivileged uid (``setpriv``), a new
one for every notebook attempt (``sandbox_uid``), so the limit on processes counts that sandbox
alone, it cannot signal the grader or another student, and nothing kept per uid (the kernel's
user keyring) reaches the next notebook. A seccomp filter (``seccomp_filter``, bwrap's
``--seccomp``) refuses, inside every sandbox, the kernel keyring calls (``add_key``,
``request_key``, ``keyctl``: so no key is left behind to clear) and new user namespaces
(``unshare``/``clone`` with ``CLONE_NEWUSER``; ``clone3``, whose flags a filter cannot read, gets
``ENOSYS`` and the C library falls back to ``clone``). bwrap's own ``--disable-userns`` needs
``--unshare-user``, which as root maps only uid 0 (``setpriv`` to the sandbox's uid then fails).
The limits themselves (memory, processes, file size, open files, CPU time) are set with
``setrlimit`` by ``tools.grading.worker`` before any student code runs; the wall-clock limit is the
grader's, which kills the sandbox's first process: the kernel then ends every process of its PID
namespace, detached ones included.

Memory and CPU are bounded per sandbox, not only per process: as root, where the machine lets it
create cgroups (``SandboxCgroup``: cgroup v1's memory and cpu controllers, or v2 where
``memory``/``cpu`` are enabled below the grader's own cgroup), every process of the sandbox is in
a cgroup of ``sandbox_memory_mb`` (the kernel's OOM killer ends a process of that sandbox, never
the grader's) and of at most ``cpus`` CPUs' time (``cpu.cfs_quota_us`` / ``cpu.max``), so a
notebook that spins many processes slows only itself; its CPU weight is the grader's niceness's
(``cpu_weights``), so a niced grader's notebooks yield to other work as the grader does. Elsewhere the bound is ``processes`` x ``memory_mb`` of address space (64 x 4 GiB at
the defaults): what the per-process limits give together, far more than a machine has.

Without ``bwrap`` (Debian: ``apt-get install bubblewrap``) or where it cannot start, the grader
refuses to grade unless told ``--unsandboxed``; see ``book/instructors.md``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSIDE = Path("/grader")  # where the job and the code the student's process runs are mounted
STUDENT_MODULES = ("tools/__init__.py", "tools/grading/__init__.py", "tools/grading/worker.py", "tools/grading/wire.py",
                   "tools/grading/magics.py")
FIRST_UID = 1_900_000_000  # as root, attempt k of judge pid p runs as FIRST_UID + UIDS_PER_JUDGE p + k % UIDS_PER_JUDGE
UIDS_PER_JUDGE = 512  # pid_max is at most 2**22: FIRST_UID + 2**31 stays below 2**32 - 2
CPU_PERIOD_US = 100_000
_attempts = itertools.count()  # sandboxes this process started: each gets its own uid


@dataclass(frozen=True)
class Limits:
    """Per-sandbox bounds (sizes in MiB); ``output`` caps the log kept of its printed output;
    ``memory_mb`` is each process's address space, ``sandbox_memory_mb`` the memory and ``cpus``
    the CPU time all the sandbox's processes have together (where cgroups can be made)."""
    memory_mb: int = 4096
    sandbox_memory_mb: int = 4096
    processes: int = 64
    file_mb: int = 64
    open_files: int = 256
    cpu_s: int = 1800
    tmp_mb: int = 256
    output_mb: int = 4
    cpus: float = 1.0  # CPUs' time all of the sandbox's processes get together (a cpu cgroup)


class SandboxCgroup:
    """The cgroups of one sandbox (a memory and a cpu one in cgroup v1, one of both in v2):
    ``wrap`` a command so that it enters them before it runs; ``remove`` once its processes are
    gone. ``create`` returns None where none can be made (not root, no such controller, a
    read-only ``/sys/fs/cgroup``); ``controllers`` says which bounds hold."""

    def __init__(self, paths: list[Path], controllers: list[str]):
        self.paths, self.controllers = paths, controllers

    @classmethod
    def create(cls, name: str, memory_mb: int, cpus: float | None = None) -> SandboxCgroup | None:
        if os.geteuid() != 0:
            return None
        paths, controllers = [], []
        for base, settings in _cgroup_bases(memory_mb, cpus):
            path = base / name
            try:
                path.mkdir(exist_ok=True)
                for file, value in settings.items():
                    (path / file).write_text(value)
            except OSError:
                _rmdir(path)
                continue
            paths.append(path)
            controllers += [f.split(".")[0] for f in settings]
        return cls(paths, list(dict.fromkeys(controllers))) if paths else None

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into the cgroups (then ``exec``)."""
        script = 'for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 97; shift; done; shift; exec "$@"'
        return ["/bin/sh", "-c", script, "sh", *(str(p / "cgroup.procs") for p in self.paths), "--", *argv]

    def remove(self) -> None:
        for path in self.paths:
            _rmdir(path)

    @staticmethod
    def remove_all(prefix: str) -> None:
        """Remove the cgroups named ``prefix*`` (those of a judge that was killed)."""
        for base, _ in _cgroup_bases(1, 1.0):
            for path in base.glob(f"{prefix}*"):
                _rmdir(path)


MemoryCgroup = SandboxCgroup  # its name before the cpu controller joined it


def _cgroup_bases(memory_mb: int, cpus: float | None) -> list[tuple[Path, dict[str, str]]]:
    """(folder a child cgroup can be made in, {file: value} bounding it): v1's memory and cpu
    hierarchies, or v2 where the grader's cgroup lets children have ``memory`` and ``cpu``."""
    memory = str(memory_mb << 20)
    quota = None if cpus is None else str(max(1000, int(cpus * CPU_PERIOD_US)))
    shares, weight = cpu_weights(os.getpriority(os.PRIO_PROCESS, 0))
    found = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, names, path = line.split(":", 2)
        controllers = names.split(",")
        if "memory" in controllers:
            base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            if (base / "memory.limit_in_bytes").exists():
                found.append((base, {"memory.limit_in_bytes": memory}))
        if "cpu" in controllers and quota:
            mount = next((m for m in (Path("/sys/fs/cgroup") / names, Path("/sys/fs/cgroup/cpu")) if m.is_dir()), None)
            base = mount / path.lstrip("/") if mount else None
            if base and (base / "cpu.cfs_quota_us").exists():
                found.append((base, {"cpu.cfs_period_us": str(CPU_PERIOD_US), "cpu.cfs_quota_us": quota,
                                     "cpu.shares": str(shares)}))
        if names == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            v2 = Path("/sys/fs/cgroup") / path.lstrip("/")
            enabled = _read(v2 / "cgroup.subtree_control").split()
            settings = ({"memory.max": memory} if "memory" in enabled else {}) | \
                       ({"cpu.max": f"{quota} {CPU_PERIOD_US}", "cpu.weight": str(weight)}
                        if "cpu" in enabled and quota else {})
            if settings:
                found.append((v2, settings))
    return found


def cpu_weights(nice: int) -> tuple[int, int]:
    """The grader's niceness as a sandbox cgroup's CPU weight: (v1 ``cpu.shares``, v2
    ``cpu.weight``). A new cgroup gets the weight of nice 0 whatever its creator's niceness (and
    bwrap's ``--new-session`` a new autogroup), so ``nice make grade`` would not reach the
    notebooks; this is the kernel's weight for ``nice`` (about 1.25x less per step: 1024 and
    100 at 0, 15 and 1 at 19)."""
    if not -20 <= nice <= 19:
        raise ValueError(f"nice {nice!r}: expected an integer from -20 to 19")
    factor = 1.25 ** -nice
    return max(2, round(1024 * factor)), min(10_000, max(1, round(100 * factor)))


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


def bwrap_command(argv: list[str], job: Path, limits: Limits, uid: int | None,
                  seccomp: int | None = None) -> list[str]:
    """The command running ``argv`` (the student's Python) in a fresh sandbox; ``job`` is
    mounted at ``/grader/job.json``; ``seccomp``: a descriptor of ``seccomp_filter()``'s program
    (to pass to the child)."""
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
    if seccomp is not None:
        args += ["--seccomp", str(seccomp)]
    if uid is not None:  # root: become an unprivileged uid of this sandbox's own
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "setpriv", f"--reuid={uid}",
                 f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    return args + argv


def student_env(lib: Path) -> dict[str, str]:
    """The student's whole environment: none of the grader's variables travel."""
    return {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "PYTHONPATH": str(lib),
            "XFL_FAST": "1", "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/.matplotlib",
            "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}


def sandbox_uid(attempt: int | None = None) -> int | None:
    """The uid a new sandbox runs as: as root, one of its own for every attempt this process
    starts (``attempt``, by default the next), else None (the grader's). Uids are reused only
    after ``UIDS_PER_JUDGE`` attempts of one judge; the seccomp filter leaves no keys to them."""
    attempt = next(_attempts) if attempt is None else attempt
    return FIRST_UID + UIDS_PER_JUDGE * (os.getpid() % 2**22) + attempt % UIDS_PER_JUDGE if os.geteuid() == 0 else None


def clear_keys(uid: int) -> bool:
    """Empty the kernel keyrings of ``uid`` (its user and user-session keyrings, ``KEYCTL_CLEAR``
    run as that uid) if ``/proc/key-users`` lists it; True if it did. Where the seccomp filter
    holds, a sandbox can add no key and nothing is listed; this is for machines without it."""
    try:
        listed = any(line.split(":")[0].strip() == str(uid) for line in Path("/proc/key-users").read_text().splitlines())
    except OSError:
        return False
    if not listed or shutil.which("setpriv") is None:
        return False
    nr = _ARCHES.get(os.uname().machine, (0, {"keyctl": 250}))[1]["keyctl"]
    code = f"import ctypes; c = ctypes.CDLL(None); c.syscall({nr}, 7, -4); c.syscall({nr}, 7, -5)"  # KEYCTL_CLEAR @u, @us
    subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c", code],
                   capture_output=True, timeout=30)
    return True


# seccomp (linux/seccomp.h, linux/filter.h, linux/audit.h)
_ARCHES = {  # uname machine: (AUDIT_ARCH_*, {syscall: number})
    "x86_64": (0xC000003E, {"add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272, "clone": 56,
                            "clone3": 435}),
    "aarch64": (0xC00000B7, {"add_key": 217, "request_key": 218, "keyctl": 219, "unshare": 97, "clone": 220,
                             "clone3": 435}),
}
CLONE_NEWUSER = 0x10000000
_EPERM, _ENOSYS = 1, 38
_ALLOW, _ERRNO, _KILL = 0x7FFF0000, 0x00050000, 0x80000000
_LD_W_ABS, _JEQ, _JSET, _JGE, _RET = 0x20, 0x15, 0x45, 0x35, 0x06


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """A seccomp BPF program (bwrap's ``--seccomp``): the keyring calls fail with EPERM,
    ``unshare``/``clone`` with ``CLONE_NEWUSER`` fail with EPERM, ``clone3`` with ENOSYS (libc
    then uses ``clone``); another ABI (x32, 32-bit calls) kills the process. None for a machine
    it does not know (the sandbox then runs without it)."""
    arch = _ARCHES.get(machine or os.uname().machine)
    if arch is None:
        return None
    audit, nr = arch
    op = lambda code, k, jt=0, jf=0: struct.pack("<HBBI", code, jt, jf, k)  # noqa: E731
    prog = [op(_LD_W_ABS, 4), op(_JEQ, audit, 1, 0), op(_RET, _KILL), op(_LD_W_ABS, 0)]
    if audit == 0xC000003E:
        prog += [op(_JGE, 0x40000000, 0, 1), op(_RET, _KILL)]  # the x32 ABI: numbers with bit 30
    for name in ("add_key", "request_key", "keyctl"):
        prog += [op(_JEQ, nr[name], 0, 1), op(_RET, _ERRNO | _EPERM)]
    prog += [op(_JEQ, nr["clone3"], 0, 1), op(_RET, _ERRNO | _ENOSYS),
             op(_JEQ, nr["unshare"], 1, 0), op(_JEQ, nr["clone"], 0, 3),
             op(_LD_W_ABS, 16),  # args[0], its low 32 bits: the flags
             op(_JSET, CLONE_NEWUSER, 0, 1), op(_RET, _ERRNO | _EPERM), op(_RET, _ALLOW)]
    return b"".join(prog)


def seccomp_fd() -> int | None:
    """A readable descriptor holding ``seccomp_filter()`` for bwrap (close it once bwrap started)."""
    program = seccomp_filter()
    if program is None:
        return None
    fd = os.memfd_create("xfl-seccomp", os.MFD_CLOEXEC)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def check_bwrap() -> None:
    """Raise ``SandboxUnavailable`` saying why, unless a sandbox starts here."""
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable("bwrap is not installed (Debian: apt-get install bubblewrap)")
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        raise SandboxUnavailable("setpriv (util-linux) is not installed: as root, it gives each sandbox its own uid")
    job = ROOT / "tools" / "grading" / "worker.py"  # any readable file: the probe only lists it
    seccomp = seccomp_fd()
    try:
        cmd = bwrap_command(["/usr/bin/test", "-r", str(INSIDE / "job.json")], job, Limits(), sandbox_uid(0), seccomp)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                              pass_fds=() if seccomp is None else (seccomp,))
    finally:
        if seccomp is not None:
            os.close(seccomp)
    if proc.returncode != 0:
        raise SandboxUnavailable(f"bwrap could not start a sandbox (exit {proc.returncode}): "
                                 f"{proc.stderr.strip()[:300]}")
