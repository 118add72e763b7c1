"""The grader's wire and the library block: plain data only, and blocked functions raise."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.grading import worker  # noqa: E402
from tools.grading.wire import NotPlain, from_plain, to_plain  # noqa: E402


def roundtrip(value):
    return from_plain(json.loads(json.dumps(to_plain(value))))


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.float32, torch.bfloat16, torch.float64,
                                   torch.complex64, torch.uint8])
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 0, 4), (3, 5)])
def test_tensors_travel_exactly(dtype, shape):
    t = (torch.randn(shape, dtype=torch.float64) * 3).to(dtype)
    back = roundtrip(t)
    assert type(back) is torch.Tensor and back.dtype == dtype and back.shape == t.shape
    assert torch.equal(back, t)


def test_a_non_contiguous_view_travels_as_its_values():
    t = torch.arange(12.0).reshape(3, 4).T
    assert torch.equal(roundtrip(t), t)


def test_nested_values_keep_their_types():
    value = {"a": [1, 2.5, None, True], ("x", 1): (torch.tensor([1, 2]), "s"), 3: {"n": np.arange(3)},
             "special": [math.inf, -math.inf], "size": torch.Size([2, 3])}
    back = roundtrip(value)
    assert back.keys() == value.keys() and back["a"] == [1, 2.5, None, True]
    assert type(back[("x", 1)]) is tuple and torch.equal(back[("x", 1)][0], torch.tensor([1, 2]))
    assert np.array_equal(back[3]["n"], np.arange(3)) and back["special"] == [math.inf, -math.inf]
    assert back["size"] == (2, 3) and math.isnan(roundtrip(math.nan))


def test_a_tensor_subclass_arrives_as_a_plain_tensor():
    class AlwaysEqual(torch.Tensor):
        def __eq__(self, other):
            return True

    back = roundtrip(torch.zeros(3).as_subclass(AlwaysEqual))
    assert type(back) is torch.Tensor and not torch.equal(back, torch.ones(3))


@pytest.mark.parametrize("value", [object(), torch.nn.Linear(2, 2), lambda x: x, {1, 2}, b"bytes",
                                   torch.zeros(2, dtype=torch.float8_e4m3fn)])
def test_other_objects_do_not_travel(value):
    with pytest.raises(NotPlain):
        to_plain(value)


@pytest.mark.parametrize("data", [{"pickle": "gASV"}, {"tensor": ["float32", [2], "AAAA"]},
                                  {"tensor": ["object", [1], ""]}, {"t": [1], "d": []}, {"float": "1e999"},
                                  {"tensor": ["float32", [-1], ""]}])
def test_malformed_data_is_refused(data):
    with pytest.raises(NotPlain):
        from_plain(data)


def test_a_blocked_function_raises_even_through_an_earlier_reference():
    from xfl.attention import causal_mask
    held = causal_mask
    worker.CALLED.clear()
    with worker.blocked(["xfl.attention.causal_mask", "torch.nn.functional.scaled_dot_product_attention"]):
        with pytest.raises(worker.LibraryAnswer, match="xfl.attention.causal_mask"):
            held(3)
        with pytest.raises(worker.LibraryAnswer):
            torch.nn.functional.scaled_dot_product_attention(*torch.zeros(3, 1, 2, 4))
    assert worker.CALLED == ["xfl.attention.causal_mask", "torch.nn.functional.scaled_dot_product_attention"]
    assert torch.equal(held(2), torch.tensor([[True, False], [True, True]]))  # restored afterwards
    out = torch.nn.functional.scaled_dot_product_attention(*torch.zeros(3, 1, 2, 4))
    assert out.shape == (1, 2, 4)


def test_answer_reports_a_caught_library_call():
    def sneaky(n):
        try:
            from xfl.attention import causal_mask
            return causal_mask(n)
        except Exception:
            return torch.ones(n, n, dtype=torch.bool).tril()

    request = {"id": 1, "question": "q1", "function": "sneaky", "seconds": 5.0,
               "args": to_plain([3]), "kwargs": to_plain({})}
    reply = worker.answer(request, {"sneaky": sneaky}, {"q1": ["xfl.attention.causal_mask"]})
    assert reply["library"] == ["xfl.attention.causal_mask"] and reply["id"] == 1
    reply = worker.answer(request, {"sneaky": sneaky}, {})
    assert reply["library"] == [] and torch.equal(from_plain(reply["value"]), torch.ones(3, 3, dtype=torch.bool).tril())


def test_calls_through_earlier_references_are_recorded():
    """Builtins and functions with closures cannot get a new __code__: a reference taken before
    the block still works, but the call is recorded (and the grader fails the test for it)."""
    from torch.nn.functional import scaled_dot_product_attention as held_sdpa  # a builtin
    held_init = torch.nn.MultiheadAttention.__init__  # its super() makes a closure
    worker.CALLED.clear()
    with worker.blocked(["torch.nn.functional.scaled_dot_product_attention", "torch.nn.MultiheadAttention.__init__"]):
        held_sdpa(*torch.zeros(3, 1, 2, 4))
        held_init(torch.nn.MultiheadAttention.__new__(torch.nn.MultiheadAttention), 4, 1)
    assert worker.CALLED == ["torch.nn.functional.scaled_dot_product_attention", "torch.nn.MultiheadAttention.__init__"]
    worker.CALLED.clear()
    held_sdpa(*torch.zeros(3, 1, 2, 4))  # outside the block: nothing recorded
    assert worker.CALLED == [] and torch.nn.MultiheadAttention.__init__ is held_init


# ------------------------------------------------------------ the events channel
def channel(data: bytes):
    """A ``StudentProcess`` reading ``data`` from its events pipe (no process behind it)."""
    import os
    import subprocess

    import tempfile

    from tools.grading.student import StudentProcess

    proc = StudentProcess.__new__(StudentProcess)
    with tempfile.TemporaryFile() as f:  # a file, not a pipe: a long line would fill a pipe
        f.write(data)
        f.seek(0)
        read = os.dup(f.fileno())
    proc.events, proc.buffer, proc.scanned, proc.uid, proc.cgroup = read, bytearray(), 0, None, None
    proc.deadline = float("inf")
    proc.proc = subprocess.Popen(["true"])
    return proc


@pytest.mark.parametrize("line", [b"\x80\x81\xfe\n", b"[" * 100_000 + b"\n", b"1" * 5000 + b"\n",
                                  b'{"event": 5}\n', b"[1, 2]\n", b"not json\n"],
                         ids=["bad utf-8", "deep nesting", "huge int", "event not a string", "a list", "not json"])
def test_a_malformed_event_loses_that_process_not_the_grader(line):
    from tools.grading.student import ProcessLost
    with pytest.raises(ProcessLost, match="not an event"):
        channel(line).receive(5.0)


def test_an_oversized_message_is_refused(monkeypatch):
    from tools.grading import student
    monkeypatch.setattr(student, "MAX_MESSAGE", 1000)
    with pytest.raises(student.ProcessLost, match="over"):
        channel(b'{"event": "reply", "value": "' + b"x" * 5000).receive(5.0)


def test_a_well_formed_event_arrives():
    assert channel(b'{"event": "ready", "functions": []}\n').receive(5.0) == {"event": "ready", "functions": []}


@pytest.mark.parametrize("data", [{"tensor": ["float32", [0] * 40, ""]}, {"tensor": ["float32", [1], "!!!!"]},
                                  {"tensor": [["float32"], [1], ""]}, {"ndarray": ["float32", [10**30], ""]}],
                         ids=["too many dims", "bad base64", "dtype not a string", "bytes short of the shape"])
def test_malformed_arrays_are_refused(data):
    with pytest.raises(NotPlain):
        from_plain(data)


def test_without_bwrap_the_grader_refuses_and_says_why(monkeypatch, tmp_path, capsys):
    from tools.grading import grader, sandbox
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(sandbox.SandboxUnavailable, match="bwrap is not installed"):
        sandbox.check_bwrap()
    assert grader.main([str(tmp_path / "none.zip"), str(tmp_path), "-o", str(tmp_path / "g.csv")]) == 2
    err = capsys.readouterr().err
    assert "refusing to grade: bwrap is not installed" in err and "--unsandboxed" in err
    assert not (tmp_path / "g.csv").exists()


def test_the_sandbox_shows_the_student_nothing_of_the_grader(tmp_path):
    """The real sandbox: its own /proc, an empty /tmp, no repository, no network, its own uid."""
    import subprocess
    from tools.grading import sandbox
    sandbox.check_bwrap()
    probe = ("import os, socket, pathlib; print(sorted(p for p in os.listdir('/proc') if p.isdigit()), "
             "os.listdir('/tmp'), pathlib.Path(%r).exists(), os.getuid() != 0, os.environ.get('HOME'), end=' ')\n"
             "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\nexcept OSError:\n    print('offline')")
    job = tmp_path / "job.json"
    job.write_text("{}")
    job.chmod(0o644)
    cmd = sandbox.bwrap_command([sys.executable, "-c", probe % str(sandbox.ROOT / "tools" / "grading" / "grader.py")],
                                job, sandbox.Limits(), sandbox.sandbox_uid(0))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={}).stdout
    # /tmp is empty but for the read-only Python install, where it lives under /tmp (a clone there)
    under_tmp = sorted({d.relative_to("/tmp").parts[0] for d in sandbox.python_dirs()
                        if d.is_relative_to("/tmp")})
    assert out.strip() == f"['1', '2'] {under_tmp} False True /tmp offline", out


def run_sandboxed(tmp_path, code: str, limits=None, cgroup=None, uid=-1) -> str:
    """What ``code`` prints, run by Python in a real sandbox (with the seccomp filter, the
    cgroups ``cgroup`` and the uid the grader would give it)."""
    import subprocess
    from tools.grading import sandbox
    job = tmp_path / "job.json"
    job.write_text("{}")
    job.chmod(0o644)
    seccomp = sandbox.seccomp_fd()
    cmd = sandbox.bwrap_command([sys.executable, "-c", code], job, limits or sandbox.Limits(),
                                sandbox.sandbox_uid() if uid == -1 else uid, seccomp)
    try:
        proc = subprocess.run(cgroup.wrap(cmd) if cgroup else cmd, capture_output=True, text=True, timeout=120,
                              env={}, pass_fds=() if seccomp is None else (seccomp,))
    finally:
        if seccomp is not None:
            os.close(seccomp)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


KEYS_AND_NAMESPACES = '''
import ctypes, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
def result(r):
    return "ok" if r >= 0 else os.strerror(ctypes.get_errno())
add_key = {"x86_64": 248, "aarch64": 217}[os.uname().machine]
print("add_key:", result(libc.syscall(add_key, b"user", b"answer", b"def attention", 13, -4)))
print("unshare user:", result(libc.unshare(0x10000000)))
t = threading.Thread(target=print, args=("a thread runs",)); t.start(); t.join()
print("a child runs:", subprocess.run(["/usr/bin/true"]).returncode)
'''


def test_no_keys_and_no_user_namespaces_inside_the_sandbox(tmp_path):
    """The seccomp filter: the kernel keyring (a channel between students of one uid, X27) and
    new user namespaces (a tmpfs past /tmp's cap, more kernel surface, X26) are refused, while
    threads and child processes run (``clone3`` falls back to ``clone``)."""
    out = run_sandboxed(tmp_path, KEYS_AND_NAMESPACES)
    assert out.splitlines() == ["add_key: Operation not permitted", "unshare user: Operation not permitted",
                                "a thread runs", "a child runs: 0"], out


def test_every_sandbox_gets_its_own_uid():
    from tools.grading import sandbox
    if os.geteuid() != 0:
        pytest.fail("not root: every sandbox runs as the grader's uid (tools/grading/README.md)")
    uids = {sandbox.sandbox_uid() for _ in range(10)}
    assert len(uids) == 10 and min(uids) >= sandbox.FIRST_UID and max(uids) < 2**32 - 2


SPINNERS = '''
import os, time
end = time.monotonic() + {seconds}
pids = []
for _ in range({n}):
    pid = os.fork()
    if pid == 0:
        while time.monotonic() < end:
            pass
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
t = os.times()
print(t.children_user + t.children_system)
'''


def test_a_sandbox_gets_at_most_its_cpu_share(tmp_path):
    """Spinning processes of one sandbox get ``Limits.cpus`` CPUs' time together (a cpu cgroup),
    not the machine (N15: 30 spinners made a classmate's grading 6.5x slower)."""
    from tools.grading import sandbox
    limits, seconds = sandbox.Limits(cpus=0.05), 2.0  # a share a loaded machine still gives (autogroups)
    cgroup = sandbox.SandboxCgroup.create(f"xfl-grade-test-{os.getpid()}", 512, limits.cpus)
    if cgroup is None or "cpu" not in cgroup.controllers:
        pytest.fail("no cpu cgroup can be made here (run as root with a cpu controller)")
    try:
        used = float(run_sandboxed(tmp_path, SPINNERS.format(n=3, seconds=seconds), limits, cgroup))
        stat = next(p for p in cgroup.paths if (p / "cpu.stat").exists()) / "cpu.stat"
        throttled = dict(line.split() for line in stat.read_text().splitlines())
    finally:
        cgroup.remove()
    # the quota, not a busy machine, held it back: the kernel throttled the sandbox
    assert int(throttled.get("nr_throttled", throttled.get("throttled_usec", 0))) > 0, throttled
    assert used < 1.2 * limits.cpus * seconds + 0.1, f"{used:.2f} CPU seconds in {seconds} s"


@pytest.mark.parametrize("nice, weights", [(0, (1024, 100)), (19, (15, 1)), (10, (110, 11)), (-20, (88818, 8674))])
def test_cpu_weights_follow_the_kernels_nice_table(nice, weights):
    """The kernel gives nice 0, 10 and 19 the weights 1024, 110 and 15 (sched_prio_to_weight)."""
    from tools.grading import sandbox
    assert sandbox.cpu_weights(nice) == weights
    with pytest.raises(ValueError, match="nice 20"):
        sandbox.cpu_weights(20)


def test_a_niced_graders_sandboxes_get_a_niced_weight(monkeypatch):
    """``nice make grade`` reaches the notebooks: a sandbox's cpu cgroup made by a grader at nice
    19 has the weight of nice 19, not the new cgroup's default of nice 0 (1024 shares). Found
    grading a class niced beside timed runs: every sandbox competed at full weight."""
    from tools.grading import sandbox
    monkeypatch.setattr(sandbox.os, "getpriority", lambda which, who: 19)
    cgroup = sandbox.SandboxCgroup.create(f"xfl-grade-test-nice-{os.getpid()}", 512, 1.0)
    if cgroup is None or "cpu" not in cgroup.controllers:
        pytest.fail("no cpu cgroup can be made here (run as root with a cpu controller)")
    try:
        weights = {p.name: (p / f).read_text().strip() for p in cgroup.paths
                   for f in ("cpu.shares", "cpu.weight") if (p / f).exists()}
    finally:
        cgroup.remove()
    assert set(weights.values()) in ({"15"}, {"1"}), weights


def test_keys_a_uid_left_behind_are_cleared(tmp_path):
    """Without the seccomp filter (a machine it does not know) a sandbox's keys would stay with
    its uid: ``clear_keys`` empties them once the sandbox ended."""
    from tools.grading import sandbox
    uid = sandbox.sandbox_uid()
    if uid is None:
        pytest.fail("not root: every sandbox runs as the grader's uid")
    add = f"import ctypes; print(ctypes.CDLL(None).syscall({sandbox._ARCHES[os.uname().machine][1]['add_key']}, " \
          "b'user', b'answer', b'def attention', 13, -4) > 0)"
    import subprocess
    assert subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c", add],
                          capture_output=True, text=True).stdout == "True\n"
    assert keys_of(uid) >= 3  # the key, its user keyring and user-session keyring
    assert sandbox.clear_keys(uid)
    # the key is unlinked at once; the kernel's key collector frees it a moment later
    deadline = time.monotonic() + 10
    while keys_of(uid) > 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert keys_of(uid) <= 2  # the two empty keyrings stay, as the kernel keeps them


def keys_of(uid: int) -> int:
    """The number of keys ``uid`` owns (``/proc/key-users``: ``uid: usage nkeys/nikeys ...``)."""
    for line in Path("/proc/key-users").read_text().splitlines():
        if line.split(":")[0].strip() == str(uid):
            return int(line.split(":")[1].split()[1].split("/")[0])
    return 0
