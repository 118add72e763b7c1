"""The student's process and its protocol, as the grader sees them.

``StudentProcess`` starts a submitted notebook's worker (``tools.grading.worker``) in a sandbox
(``tools.grading.sandbox``) and talks to it over two pipes, one JSON object a line: the worker
sends ``started``, one ``cell`` event per cell, ``ready`` with its functions, then one ``reply``
per request. What the grader accepts is bounded whatever the student's code writes:

- a line longer than ``MAX_MESSAGE`` or that is not a JSON event ends the process;
- ``cell`` events must come in order, one per cell sent (index 0, 1, ...): a forged, repeated or
  extra one ends the process, so no thread can pile up events;
- the cells together have ``limit + grace`` seconds each from the start (plus start-up), a
  deadline fixed when the process starts: a cell that ends early leaves its time to the next,
  and no event extends it;
- ``ready`` may name at most ``MAX_FUNCTIONS`` functions; a ``reply`` must answer the request
  just sent;
- the whole notebook has a budget (``deadline``), after which the process is killed.

``Proxy`` stands in the grader's tests for one student function: calling it sends the inputs
as plain data (``tools.grading.wire``) and brings the result back the same way.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.grading import wire
from tools.grading.sandbox import (Limits, SandboxCgroup, bwrap_command, clear_keys, sandbox_uid, seccomp_fd,
                                   student_env)

ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 30.0  # extra patience for the student's process to start (Python, IPython)
MAX_FUNCTIONS = 10_000  # names a ready event may list
MAX_NAME = 200  # characters of one function name


class ProcessLost(BaseException):
    """The student's process was killed (no progress within the limit) or ended by itself."""


class QuestionTimeLimit(BaseException):
    """A question's tests ran out of time (a BaseException: it stops the whole question)."""


MAX_MESSAGE = 256 << 20  # bytes: a longer line on the events pipe ends the student's process


@dataclass
class Sandbox:
    """How students run: in bwrap (``uid`` their own when the grader is root) or, if the
    instructor chose so, unsandboxed; with these limits."""
    enabled: bool = True
    limits: Limits = field(default_factory=Limits)
    own_uid: bool = False  # unsandboxed, as root: still a uid of its own (Gradescope without bwrap)

    def rlimits(self, uid: int | None) -> dict[str, int]:
        lim = self.limits
        processes = lim.processes + (0 if uid is not None else tasks_of(os.geteuid()))
        return {"RLIMIT_AS": lim.memory_mb << 20, "RLIMIT_NPROC": processes, "RLIMIT_FSIZE": lim.file_mb << 20,
                "RLIMIT_NOFILE": lim.open_files, "RLIMIT_CPU": lim.cpu_s}


def as_own_uid(cmd: list[str], uid: int, tmp: Path, work: Path, job: Path) -> list[str]:
    """``cmd`` run as ``uid`` (``setpriv``, no capabilities, no new privileges), owning its
    working folder and job file; ``tmp`` only traversable by others (the grader runs as root)."""
    for path in (work, job):
        os.chown(path, uid, uid)
    job.chmod(0o600)
    tmp.chmod(0o711)
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", *cmd]


def tasks_of(uid: int) -> int:
    """How many processes and threads ``uid`` runs now (what RLIMIT_NPROC counts)."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:  # the real uid, as RLIMIT_NPROC counts
            count += int(fields.get("Threads", "1"))
    return count


@dataclass
class Cell:
    number: int  # 1-based position in the notebook, as a reader counts cells
    source: str
    question: str | None  # the question an answer cell belongs to; None for shared cells


class StudentProcess:
    """A submitted notebook running in its own process (``tools.grading.worker``), in a sandbox: its
    cells run once, then ``call`` sends a function's inputs there and brings its result back as
    plain data. ``deadline`` (monotonic seconds) ends it, whatever it is doing."""

    def __init__(self, cells: list[Cell], limit: float, grace: float, log_path: Path,
                 library: dict[str, list[str]], sandbox: Sandbox, slot: int = 0, budget: float = 3600.0):
        self.limit, self.grace, self.buffer, self.scanned, self.next_id = limit, grace, bytearray(), 0, 0
        self.deadline = time.monotonic() + budget
        self.cells_deadline = time.monotonic() + STARTUP_S + len(cells) * (limit + grace)
        self.n_cells = len(cells)
        self.uid = sandbox_uid() if sandbox.enabled or sandbox.own_uid else None  # a new one per attempt
        self.cgroup = SandboxCgroup.create(f"xfl-grade-{os.getpid()}-{slot}", sandbox.limits.sandbox_memory_mb,
                                           sandbox.limits.cpus)
        self.tmp = tempfile.TemporaryDirectory(prefix=f"xfl-grade-{os.getpid()}-")  # a killed judge's: removed by pid
        job = Path(self.tmp.name) / "job.json"
        job.write_text(json.dumps({"cells": [c.source for c in cells], "limit": limit, "library": library,
                                   "rlimits": sandbox.rlimits(self.uid)}))
        job.chmod(0o644)
        req_read, self.requests = os.pipe()
        os.set_blocking(self.requests, False)  # the grader's writes have a deadline (``_send``)
        self.events, evt_write = os.pipe()
        entry = "import sys; from tools.grading.worker import main; main(sys.argv[1:])"
        seccomp = seccomp_fd() if sandbox.enabled else None
        if sandbox.enabled:
            cmd, cwd, env = bwrap_command([str(interpreter()), "-c", entry, "/grader/job.json", str(req_read),
                                           str(evt_write)], job, sandbox.limits, self.uid, seccomp), None, {}
            cmd = self.cgroup.wrap(cmd) if self.cgroup else cmd
        else:
            work = Path(self.tmp.name) / "work"
            work.mkdir()
            cmd, cwd = [sys.executable, "-c", entry, str(job), str(req_read), str(evt_write)], work
            env = student_env(ROOT) | {"HOME": str(work), "TMPDIR": str(work), "MPLCONFIGDIR": str(work)}
            if self.uid is not None:  # no sandbox, but a uid of its own: it reads what any user may read
                cmd = as_own_uid(cmd, self.uid, Path(self.tmp.name), work, job)
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL,
                                     pass_fds=(req_read, evt_write, *(() if seccomp is None else (seccomp,))),
                                     start_new_session=True)
        for fd in (req_read, evt_write, *(() if seccomp is None else (seccomp,))):
            os.close(fd)
        self.log = threading.Thread(target=keep_output, daemon=True,
                                    args=(self.proc.stdout, log_path, sandbox.limits.output_mb << 20))
        self.log.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        for fd in (self.requests, self.events):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.join(timeout=10)
        self.tmp.cleanup()
        if self.cgroup:
            self.cgroup.remove()

    def kill(self) -> None:
        """End the student's process and everything it started: in the sandbox, killing bwrap
        kills its PID namespace's first process, and with it every process of that namespace."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        if self.uid is not None:
            wait_until_gone(self.uid)
            clear_keys(self.uid)  # what the uid left in the kernel's keyrings (none where seccomp holds)

    def receive(self, patience: float, until: float = float("inf")) -> dict:
        """The next event; ``ProcessLost`` if none comes within ``patience`` s (or before ``until``
        or the notebook's deadline), if the process ends, or if it sends something that is not an
        event. Each byte is scanned for the end of line once (long lines cost linear time)."""
        deadline = min(time.monotonic() + patience, until, self.deadline)
        while (end := self.buffer.find(b"\n", self.scanned)) < 0:
            self.scanned = len(self.buffer)
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.events], [], [], left)[0]:
                self.kill()
                raise ProcessLost(self._why_late(deadline, patience, until))
            chunk = os.read(self.events, 1 << 20)
            if not chunk:
                raise ProcessLost("ended the grader")
            self.buffer += chunk
            if len(self.buffer) > MAX_MESSAGE:
                self.kill()
                raise ProcessLost(f"sent a message over {MAX_MESSAGE >> 20} MiB")
        line = bytes(self.buffer[:end])
        del self.buffer[:end + 1]
        self.scanned = 0
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):  # bad UTF-8 or JSON, a huge int, deep nesting
            event = None
        if type(event) is not dict or type(event.get("event")) is not str:
            self.kill()
            raise ProcessLost(f"sent something that is not an event: {line[:80]!r}")
        return event

    def _why_late(self, deadline: float, patience: float, until: float) -> str:
        if deadline == self.deadline:
            return "killed: the notebook's time budget ran out"
        if deadline == until:
            return f"killed: the cells' time ran out ({self.limit + self.grace:g} s per cell)"
        return f"killed after {patience:g} s without progress"

    def run_cells(self) -> tuple[list[dict], str | None, list[str]]:
        """(cell events, why the process stopped early or None, the functions it defines). The
        cells share a deadline fixed at the start; events must come one per cell, in order."""
        cells, step = [], self.limit + self.grace
        self.started = False  # any event came: the worker started (it sends ``started`` before any cell)
        try:
            event = self.receive(step + STARTUP_S, self.cells_deadline)
            self.started = True
            if event["event"] == "started":
                event = self.receive(step, self.cells_deadline)
            while event["event"] == "cell":
                if not (type(event.get("index")) is int and event["index"] == len(cells) < self.n_cells
                        and type(event.get("timed_out")) is bool):
                    self.kill()
                    return cells, f"sent cell event {str(event.get('index'))[:20]} out of order", []
                cells.append(event)
                event = self.receive(step, self.cells_deadline)
        except ProcessLost as e:
            return cells, str(e), []
        if len(cells) < self.n_cells:  # ``ready`` (or anything) before every cell reported
            self.kill()
            return cells, f"sent {event['event'][:40]!r} after {len(cells)} of {self.n_cells} cell events", []
        return cells, *self._functions(event)

    def _send(self, data: bytes, patience: float) -> None:
        """Write ``data`` to the requests pipe (non-blocking) within ``patience`` s and the
        notebook's deadline; ``ProcessLost`` if the student's side stops reading or has ended."""
        deadline, view = min(time.monotonic() + patience, self.deadline), memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [self.requests], [], left)[1]:
                self.kill()
                raise ProcessLost(f"killed: it stopped reading the grader's requests ({patience:.1f} s)"
                                  if deadline < self.deadline else "killed: the notebook's time budget ran out")
            try:
                view = view[os.write(self.requests, view):]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                raise ProcessLost("ended the grader") from None

    def _functions(self, event: dict) -> tuple[str | None, list[str]]:
        """(None, the functions) of a well-formed ``ready`` event, else (why, [])."""
        names = event.get("functions")
        if event["event"] != "ready" or type(names) is not list or len(names) > MAX_FUNCTIONS:
            self.kill()
            if event["event"] == "ready" and type(names) is list:
                return f"sent {len(names)} functions, over the {MAX_FUNCTIONS} the grader accepts", []
            return f"sent {event['event'][:40]!r} instead of its functions", []
        return None, [f for f in names if type(f) is str and len(f) <= MAX_NAME]

    def call(self, question: str, function: str, args: tuple, kwargs: dict, seconds: float,
             measure: str | None = None):
        """``function(*args, **kwargs)`` in the student's process, within ``seconds``; with
        ``measure`` (``"largest"``, ``"product_dims"`` or ``"held"``: ``tools.grading.worker.largest_tensor``),
        ``(result, that measure of the call)``."""
        if measure not in (None, "largest", "product_dims", "held"):
            raise ValueError(f"measure {measure!r}: expected None, 'largest', 'product_dims' or 'held'")
        self.next_id += 1
        request = {"id": self.next_id, "question": question, "function": function, "seconds": seconds,
                   "args": wire.to_plain(list(args)), "kwargs": wire.to_plain(kwargs), "measure": measure is not None}
        self._send((json.dumps(request) + "\n").encode(), seconds + self.grace)
        reply = self.receive(seconds + self.grace)
        if reply.get("event") != "reply" or reply.get("id") != self.next_id:
            self.kill()
            raise ProcessLost(f"answered request {self.next_id} with {str(reply)[:80]!r}")
        if reply.get("timed_out") is True:
            raise QuestionTimeLimit(f"{function} ran past the time limit")
        if reply.get("library"):
            raise LibraryUsed(f"{function} called {', '.join(map(str, reply['library']))[:500]}, the library's "
                              "answer to this question: write it yourself")
        if reply.get("error") is not None:
            raise student_exception(reply.get("error_type"), f"{function} raised {str(reply['error'])[:2000]}")
        value = wire.from_plain(reply.get("value"))  # NotPlain (a failed test) if malformed
        if measure is None:
            return value
        size = reply.get(measure)
        ints = size if measure == "product_dims" and type(size) is list else [size]
        if not all(type(n) is int for n in ints):
            raise ProcessLost(f"answered a measured call of {function} without its {measure}: {str(size)[:80]!r}")
        return value, size


def interpreter() -> Path:
    """This Python as the sandbox sees it: its folder with links resolved (a virtual environment
    reached through a link is bound at its real place), its own name kept (a venv's ``python``
    is a link whose name makes it the venv's)."""
    return Path(sys.executable).parent.resolve() / Path(sys.executable).name


def keep_output(stream, log_path: Path, cap: int) -> None:
    """Copy what the student's process prints into its log, at most ``cap`` bytes; read (and
    drop) the rest, so that printing never blocks the student."""
    kept, held = 0, b""
    with stream, open(log_path, "ab") as log:
        while chunk := stream.read1(1 << 16):
            if kept < cap:
                text, held = plain_text(held + chunk)
                log.write(text[:cap - kept])
                kept += len(text)
                if kept >= cap:
                    log.write(f"\n[output cut at {cap} bytes]\n".encode())
        log.write(held[:max(0, cap - kept)])


ANSI = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
ANSI_START = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*)?$")  # an escape cut by a chunk's end


def plain_text(data: bytes) -> tuple[bytes, bytes]:
    """(``data`` without terminal escape codes (colours, cursor moves), an escape sequence begun
    at its end and held back for the next chunk)."""
    cut = ANSI_START.search(data, max(0, len(data) - 256))
    held = data[cut.start():] if cut else b""
    return ANSI.sub(b"", data[:len(data) - len(held)]), held


def wait_until_gone(uid: int, seconds: float = 10.0) -> None:
    """Wait until no process runs as ``uid`` (a killed sandbox's processes are being reaped)."""
    end = time.monotonic() + seconds
    while tasks_of(uid) and time.monotonic() < end:
        time.sleep(0.05)


class StudentError(Exception):
    """The student's function raised, or its result could not travel as plain data."""


def student_exception(type_name, message: str) -> Exception:
    """The grader's own exception for one the student's code raised: the built-in class of that
    name (so a test can expect a ``ValueError``), else ``StudentError``."""
    cls = getattr(builtins, type_name, None) if type(type_name) is str else None
    if isinstance(cls, type) and issubclass(cls, Exception) and cls is not AssertionError:
        return cls(message)
    return StudentError(message)


class LibraryUsed(Exception):
    """The student's function called the library's answer to its question."""


class Proxy:
    """Stands in the grader's process for a student's function; calling it runs the real one
    in the student's process. Only plain data crosses, in both directions. The question's time
    budget (shared by its proxies) counts only the time spent waiting for the student's process."""

    def __init__(self, student: StudentProcess, question: str, name: str, budget: list[float]):
        self.student, self.question, self.__name__, self.budget = student, question, name, budget

    def __call__(self, *args, **kwargs):
        return self._call(args, kwargs, measure=None)

    def largest_tensor(self, *args, **kwargs):
        """``(result, n)``: the call, and the most numbers any tensor it created held (measured
        in the student's process by a ``TorchFunctionMode``: ``tools.grading.worker.largest_tensor``)."""
        return self._call(args, kwargs, measure="largest")

    def product_dims(self, *args, **kwargs):
        """``(result, sizes)``: the call, and the sorted sizes of every dimension of what its matrix
        products, ``exp`` and softmaxes returned (``tools.grading.worker.largest_tensor``)."""
        return self._call(args, kwargs, measure="product_dims")

    def held(self, *args, **kwargs):
        """``(result, n)``: the call, and the most numbers one tensor held on a ``grad_fn`` it touched
        held (saved tensors and a custom Function's ``ctx`` attributes: ``tools.grading.worker.largest_tensor``)."""
        return self._call(args, kwargs, measure="held")

    def _call(self, args, kwargs, measure: str | None):
        if self.budget[0] <= 0:
            raise QuestionTimeLimit(f"no time left for {self.__name__}")
        start = time.monotonic()
        try:
            return self.student.call(self.question, self.__name__, args, kwargs, self.budget[0], measure)
        finally:
            self.budget[0] -= time.monotonic() - start

    def __repr__(self):
        return f"<the student's {self.__name__}>"


