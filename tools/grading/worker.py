"""The student's process: run a submitted notebook's cells, then answer the grader's calls.

    python -c "import sys; from tools.grading.worker import main; main(sys.argv[1:])" JOB_JSON REQUESTS_FD EVENTS_FD

(started by ``tools.grading``, normally inside a ``tools.grading.sandbox``; started with ``-c`` rather
than ``-m`` so that the module exists once, not also as ``__main__``). Before anything else it
lowers its own resource limits (``setrlimit``: memory, processes, file size, open files, CPU
time) to the job's, which no code it runs afterwards can raise again.

It never sees a test and never reports a verdict. It reads requests ("call function f of
question q with these arguments", as plain data) from one pipe and writes events (a cell ran,
the functions are ready, a call's result as plain data) to another, one JSON object a line. The
notebook's own output goes to stdout, which the grader keeps as a log and never parses.

Each cell and each call has a time limit (SIGALRM raises ``TimeLimit``). While a call of question
q runs, the library functions that would answer q (``tools.grading.library_answers``) are blocked: their
code is swapped for one that raises, so a reference taken earlier is blocked too, and a blocked
call is reported with the result even if the student's code catches the exception.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import types
from contextlib import contextmanager, nullcontext
from pathlib import Path

from tools.grading import magics
from tools.grading.wire import from_plain, to_plain

CALLED: list[str] = []  # the blocked library functions called during the current call


class TimeLimit(BaseException):
    """Raised inside student code when a step runs out of time (a BaseException, so a plain
    ``except Exception`` in the student's code does not swallow it)."""


class LibraryAnswer(Exception):
    """A student's function called the library's answer to the question it was asked to write."""


def _on_alarm(signum, frame):
    raise TimeLimit("time limit")


def call_with_limit(fn, seconds: float):
    """``(fn(), False)``, or ``(None, True)`` when it ran longer than ``seconds``."""
    try:
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
        try:
            return fn(), False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except TimeLimit:
        return None, True


# ------------------------------------------------------------------ blocking the library
def library_called(name: str):
    """What a blocked library function does instead of its work."""
    CALLED.append(name)
    raise LibraryAnswer(f"{name} is the library's answer to this question: write it yourself")


def resolve(dotted: str) -> tuple[object, str, object]:
    """``'pkg.module.Class.attr'`` -> (owner, attribute name, value), importing the module."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:-1]:
            owner = getattr(owner, name)
        return owner, parts[-1], getattr(owner, parts[-1])
    raise ValueError(f"cannot import {dotted!r}: expected 'package.module.function'")


def _blocker_code(fn: types.FunctionType, dotted: str) -> types.CodeType:
    source = (f"def {fn.__name__}(*args, **kwargs):\n"
              f"    return __import__('tools.grading.worker', fromlist=['x']).library_called({dotted!r})\n")
    namespace: dict = {}
    exec(compile(source, f"<blocked {dotted}>", "exec"), namespace)
    return namespace[fn.__name__].__code__


NO_AUTOGRAD = "autograd"  # in a question's list: no autograd at all while its calls run


@contextmanager
def autograd_refused():
    """Within the block, a torch operation given a tensor that requires grad, a forward-mode
    dual operation, a derivative formula (an ATen ``*_backward`` op, as ``y.grad_fn(...)``
    or ``torch.ops.aten`` runs one) or a complex tensor (the complex-step derivative) calls
    ``library_called``: seen by a ``TorchDispatchMode``, so no name the answer uses can hide
    it. For questions that ask for a gradient "without autograd" (their list in
    ``tools.grading.library_answers`` holds ``NO_AUTOGRAD``)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Refuse(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            op = str(func)  # 'aten.native_layer_norm_backward.default', ...
            tensors = [t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
            if "backward" in op or "dual" in op or any(t.requires_grad for t in tensors):
                library_called(f"autograd ({op})")
            if any(t.is_complex() for t in tensors):
                library_called(f"a complex-step derivative ({op} on a complex tensor)")
            return func(*args, **(kwargs or {}))

    with Refuse():
        yield


@contextmanager
def blocked(names: list[str]):
    """Within the block, each named library function raises ``LibraryAnswer`` when called.
    Python functions get a new ``__code__`` (which also blocks references taken earlier);
    others (builtins, functions with closures) are replaced on their module or class, and a
    call through a reference taken earlier is still recorded (by a profiler) as a library call.
    ``NO_AUTOGRAD`` among the names refuses autograd as a whole (``autograd_refused``)."""
    undo, watched = [], {}
    for dotted in (n for n in names if n != NO_AUTOGRAD):
        owner, attr, value = resolve(dotted)
        if isinstance(value, types.FunctionType) and not value.__code__.co_freevars:
            undo.append((value, "__code__", value.__code__))
            value.__code__ = _blocker_code(value, dotted)
            continue
        def stand_in(*args, _name=dotted, **kwargs):
            return library_called(_name)
        undo.append((owner, attr, value))
        setattr(owner, attr, stand_in)
        watched[id(getattr(value, "__code__", value))] = dotted
    previous = sys.getprofile()
    if watched:
        sys.setprofile(_recorder(watched))
    try:
        with autograd_refused() if NO_AUTOGRAD in names else nullcontext():
            yield
    finally:
        sys.setprofile(previous)
        for target, attr, value in reversed(undo):
            setattr(target, attr, value)


def _recorder(watched: dict[int, str]):
    """A profile function recording calls of the watched builtins and code objects (by id)."""
    def record(frame, event, arg):
        key = id(arg) if event == "c_call" else id(frame.f_code) if event == "call" else None
        if key in watched:
            CALLED.append(watched[key])
    return record


# ------------------------------------------------------------------ measuring a call
PRODUCTS = frozenset({"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "baddbmm", "addmm", "addbmm",
                      "einsum", "tensordot", "mv", "inner", "outer", "ger", "linear",
                      "exp", "exp_", "softmax", "log_softmax", "_softmax"})  # what makes or weighs scores


@contextmanager
def largest_tensor():
    """Within the block, ``spy["numel"]`` is the most numbers any tensor that a torch function,
    method or operator returned held: a test asks for it (``Proxy.largest_tensor``) to check that
    an answer never builds a tensor as large as the one its question forbids.
    ``spy["product_dims"]`` is the sorted sizes of every dimension of what a matrix product, an
    ``exp`` or a softmax returned (``PRODUCTS``; ``Proxy.product_dims``): a tiled answer never
    gives one a dimension as long as all the keys. ``spy["held"]`` is the most numbers one
    tensor (or NumPy array) held on the ``grad_fn`` of a tensor the call touched, among its
    saved tensors and its attributes (a custom ``autograd.Function``'s ``ctx``; ``Proxy.held``).
    A ``TorchFunctionMode``: a ``TorchDispatchMode`` would cost its first use 15 s of imports."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    spy = {"numel": 0, "product_dims": set(), "held": 0}
    seen_nodes: set[int] = set()

    def size(x) -> int:
        if isinstance(x, torch.Tensor):
            return x.numel()
        return int(getattr(x, "size", 0)) if type(x).__module__ == "numpy" else 0

    def look_at(node) -> None:  # a grad_fn: what it holds
        if node is None or id(node) in seen_nodes:
            return
        seen_nodes.add(id(node))
        held = list(getattr(node, "__dict__", {}).values())
        try:
            held += list(getattr(node, "saved_tensors", ()) or ())
        except RuntimeError:  # freed by a backward already
            pass
        for leaf in tree_leaves(held):
            spy["held"] = max(spy["held"], size(leaf))

    class Largest(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            for t in tree_leaves((args, kwargs or {})):
                if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                    look_at(t.grad_fn)
            out = func(*args, **(kwargs or {}))
            product = getattr(func, "__name__", "") in PRODUCTS
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    spy["numel"] = max(spy["numel"], t.numel())
                    if product:
                        spy["product_dims"].update(t.shape)
                    if t.grad_fn is not None:
                        look_at(t.grad_fn)
            return out

    with Largest():
        yield spy
    spy["product_dims"] = sorted(spy["product_dims"])


# --------------------------------------------------------------------------- serving
def answer(request: dict, namespace: dict, library: dict[str, list[str]]) -> dict:
    """Run one requested call; the reply carries the result as plain data, or what went wrong."""
    reply = {"id": request["id"], "timed_out": False, "library": [], "error": None, "error_type": None,
             "value": None}
    fn = namespace.get(request["function"])
    if not callable(fn):
        reply["error"] = f"{request['function']!r} is not defined as a function"
        return reply
    CALLED.clear()
    try:
        args, kwargs = from_plain(request["args"]), from_plain(request["kwargs"])
        with blocked(library.get(request["question"], [])):
            if request.get("measure"):
                with largest_tensor() as spy:
                    result, reply["timed_out"] = call_with_limit(lambda: fn(*args, **kwargs), request["seconds"])
                reply["largest"], reply["product_dims"], reply["held"] = (
                    spy["numel"], spy["product_dims"], spy["held"])
            else:
                result, reply["timed_out"] = call_with_limit(lambda: fn(*args, **kwargs), request["seconds"])
        if not reply["timed_out"]:
            reply["value"] = to_plain(result)
    except Exception as e:
        reply["error"], reply["error_type"] = f"{type(e).__name__}: {e}", type(e).__name__
    reply["library"] = sorted(set(CALLED))
    return reply


def run_cells(shell, cells: list[str], limit: float, send) -> None:
    for index, source in enumerate(cells):
        result, timed_out = call_with_limit(lambda: shell.run_cell(source, store_history=False), limit)
        timed_out = timed_out or isinstance(getattr(result, "error_in_exec", None), TimeLimit)
        error = None if timed_out or result is None or result.success else _error_text(
            result.error_in_exec or result.error_before_exec)
        send(event="cell", index=index, timed_out=timed_out, error=error, skipped=magics.take_skipped())


def _error_text(error: BaseException | None) -> str:
    """``TypeName: message`` of a cell's exception, capped (the grader notes it)."""
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= 300 else text[:300] + "..."


def set_limits(limits: dict[str, int]) -> None:
    """Lower soft and hard limits, e.g. ``{"RLIMIT_AS": bytes}``, for this process and its children."""
    import resource

    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


def serve(job_path: Path, requests_fd: int, events_fd: int) -> None:
    job = json.loads(job_path.read_text())
    set_limits(job.get("rlimits", {}))
    requests, events = os.fdopen(requests_fd, "r"), os.fdopen(events_fd, "w")

    def send(**event):
        events.write(json.dumps(event) + "\n")
        events.flush()

    signal.signal(signal.SIGALRM, _on_alarm)
    shell = magics.grading_shell()  # magics as in a kernel; shell lines and installs skipped
    send(event="started")
    run_cells(shell, job["cells"], job["limit"], send)
    namespace = dict(shell.user_ns)  # a snapshot: later calls cannot rename the answers
    send(event="ready", functions=sorted(k for k, v in namespace.items()
                                         if callable(v) and not k.startswith("_")))
    for line in requests:
        send(event="reply", **answer(json.loads(line), namespace, job["library"]))


def main(argv: list[str]) -> None:
    serve(Path(argv[0]), int(argv[1]), int(argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
