"""One execution of a notebook serves every check: nbval's run, recorded as an executed notebook.

A pytest plugin: ``pytest -p tools.book.nbrecord --xfl-record DIR --nbval-lax chapters``. While nbval
runs a notebook cell by cell in its kernel, every message nbval reads from that kernel is also
handed to an nbclient front end (``NotebookClient.process_message``), which builds the cells'
outputs and the widget state as an nbclient execution (the book build's) would. After the last
cell the kernel is asked which Python, xfl and ipywidgets it ran (the Colab-like checks of
``tests/test_colab.py``); the notebook, outputs included, is then written atomically to
``DIR/<its path under the rootdir>``. Its metadata ``xfl_run`` holds the run's seconds, the
sha256 of the chapter's MyST source, that probe, and ``problems``: a failed, skipped or missing
cell, which the book build and the Colab-like checks refuse.

The other tests read these notebooks (`recorded`, `wait_for`): the book renders them instead of
executing the chapters again. While recording, `tools.book.run_order` orders the run (chapters first).
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from queue import Empty

import nbformat
import pytest

from tools.book.executed import RUN_META, source_sha256
from xfl.atomic_files import write_text_atomic

OPTION = "xfl_record"
PROBE = ("import json as _j, sys as _s, xfl as _x, ipywidgets as _w, torch as _t\n"
         "print(_j.dumps({'python': _s.executable, 'xfl': _x.__file__, "
         "'ipywidgets': _w.__version__, 'torch': _t.__version__}))")
REPLY_TIMEOUT_S = 60  # kernel_info and the probe answer within seconds
WAIT_POLL_S = 2.0


class RecordError(RuntimeError):
    """A recorded notebook that is missing, late or records a failed run."""


# ------------------------------------------------------------------ the front end
class Recorder:
    """Builds the executed notebook from the messages nbval reads from ``kernel``."""

    def __init__(self, nb: nbformat.NotebookNode, kernel):
        from nbclient import NotebookClient

        self.nb = copy.deepcopy(nb)  # nbval's own cells must stay as read (it checks them)
        self.code = [i for i, c in enumerate(self.nb.cells) if c.cell_type == "code"]
        self.client = NotebookClient(self.nb, record_timing=False)
        self.client.kc = kernel.kc  # the Output widget mimic talks back to the kernel
        self.kernel, self.current, self.ran = kernel, None, []
        self.start = time.monotonic()
        self.nb.metadata["language_info"] = self._language_info()
        self._tee()

    def _tee(self) -> None:
        """Wrap the kernel's reads and executions (instance attributes shadow its methods)."""
        get_message, execute = self.kernel.get_message, self.kernel.execute_cell_input

        def read(stream, timeout=None):
            msg = get_message(stream, timeout=timeout)
            if stream == "iopub":
                self._see(msg)
            return msg

        def run(source, allow_stdin=None):
            self.msg_id = execute(source, allow_stdin=allow_stdin)
            return self.msg_id

        self.kernel.get_message, self.kernel.execute_cell_input = read, run
        self._get_message, self._execute = get_message, execute

    def _language_info(self) -> dict:
        msg_id = self.kernel.kc.kernel_info()
        return self._shell_reply(msg_id)["content"].get("language_info", {})

    def _shell_reply(self, msg_id: str) -> dict:
        while True:
            msg = self.kernel.kc.get_shell_msg(timeout=REPLY_TIMEOUT_S)
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def begin(self, cell_num: int) -> None:
        """nbval is about to run code cell ``cell_num``."""
        index = self.code[cell_num]
        self.current, self.msg_id = (self.nb.cells[index], index), None
        self.nb.cells[index].outputs = []
        self.client.clear_before_next_output = False
        self.ran.append(cell_num)

    def _see(self, msg: dict) -> None:
        from nbclient.exceptions import CellExecutionComplete

        if self.current is None or msg["parent_header"].get("msg_id") != self.msg_id:
            return
        try:
            self.client.process_message(msg, *self.current)
        except CellExecutionComplete:
            pass

    def probe(self) -> dict:
        """Ask the kernel which Python, xfl, ipywidgets and torch it ran (after the last cell)."""
        self.current = None
        msg_id, text = self._execute(PROBE, allow_stdin=False), ""
        while True:
            msg = self._get_message("iopub", timeout=REPLY_TIMEOUT_S)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                text += msg["content"]["text"]
            elif msg["msg_type"] == "error":
                return {"error": f"{msg['content']['ename']}: {msg['content']['evalue']}"}
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return json.loads(text)

    def notebook(self) -> nbformat.NotebookNode:
        """The executed notebook, widget state included."""
        self.client.set_widgets_metadata()
        return self.nb


# ------------------------------------------------------------------ the pytest hooks
def pytest_addoption(parser) -> None:
    parser.getgroup("xfl").addoption(
        "--xfl-record", type=Path, default=None, metavar="DIR",
        help="write every notebook nbval runs, outputs included, under DIR (tools/book/nbrecord.py)")


def pytest_configure(config) -> None:
    folder = config.getoption(OPTION)
    if folder is None:
        return
    from tools.book import run_order

    config.pluginmanager.register(run_order, "xfl-run-order")
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        shutil.rmtree(folder, ignore_errors=True)  # a notebook of an earlier run is never read
        folder.mkdir(parents=True)


def _recording(item) -> bool:
    from nbval.plugin import IPyNbCell

    return isinstance(item, IPyNbCell) and item.config.getoption(OPTION) is not None


def _problems(item) -> list[str]:
    if not hasattr(item.parent, "xfl_problems"):
        item.parent.xfl_problems = []
    return item.parent.xfl_problems


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield
    nbfile = item.parent
    if _recording(item) and getattr(nbfile, "kernel", None) and not hasattr(nbfile, "xfl_recorder"):
        nbfile.xfl_recorder = Recorder(nbfile.nb, nbfile.kernel)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    recorder = getattr(item.parent, "xfl_recorder", None) if _recording(item) else None
    if recorder:
        recorder.begin(item.cell_num)
    yield
    if recorder:
        recorder.current = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if _recording(item) and (report.failed or report.skipped):
        _problems(item).append(f"{item.name}: {report.when} {report.outcome}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    if _recording(item) and (nextitem is None or nextitem.parent is not item.parent):
        _finish(item)  # the last cell: the kernel still runs (nbval stops it in this teardown)
    yield


def _finish(item) -> None:
    nbfile, config = item.parent, item.config
    recorder = getattr(nbfile, "xfl_recorder", None)
    problems = list(_problems(item))
    nb = recorder.notebook() if recorder else copy.deepcopy(nbfile.nb)
    ran = recorder.ran if recorder else []
    code_cells = sum(c.cell_type == "code" for c in nb.cells)
    if len(ran) != code_cells:
        problems.append(f"{len(ran)} of its {code_cells} code cells ran")
    probe = {}
    if recorder and nbfile.kernel is not None and nbfile.kernel.is_alive():
        try:
            probe = recorder.probe()
        except (Empty, ValueError) as error:
            probe = {"error": repr(error)}
    if "error" in probe:
        problems.append(f"the probe after the last cell failed: {probe['error']}")
    path = Path(nbfile.path)
    kernel = config.getoption("nbval_kernel_name") or nb.metadata.get("kernelspec", {}).get("name")
    seconds = time.monotonic() - recorder.start if recorder else None
    nb.metadata[RUN_META] = run_meta(path, seconds, kernel, probe, problems)
    write_text_atomic(record_path(config.getoption(OPTION), path, config.rootpath),
                      nbformat.writes(nb) + "\n")


def run_meta(notebook: Path, seconds: float | None, kernel: str, probe: dict, problems: list) -> dict:
    """The ``xfl_run`` metadata of an executed notebook: the run, and the source it ran from."""
    source = Path(notebook).with_suffix(".md")
    return {"seconds": None if seconds is None else round(seconds, 1),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "kernel": kernel,
            "source_sha256": source_sha256(source.read_text(encoding="utf-8")) if source.exists() else None,
            "probe": probe, "problems": problems}


# ------------------------------------------------------------------ reading the records
def record_path(folder: Path, notebook: Path, root: Path) -> Path:
    """Where the run of ``notebook`` is recorded: ``folder/<its path under root>``."""
    return Path(folder) / Path(notebook).resolve().relative_to(Path(root).resolve())


def recorded(config, items) -> dict[str, Path]:
    """``{notebook path under the rootdir, without suffix: record path}`` for every notebook this
    session runs under nbval while recording ({} when it does not record)."""
    folder = config.getoption(OPTION, None)
    if folder is None:
        return {}
    from nbval.plugin import IPyNbFile

    notebooks = {Path(item.parent.path) for item in items if isinstance(item.parent, IPyNbFile)}
    root = config.rootpath.resolve()
    return {str(nb.resolve().relative_to(root).with_suffix("")): record_path(folder, nb, root)
            for nb in notebooks}


def wait_for(path: Path, timeout_s: float) -> nbformat.NotebookNode:
    """The recorded notebook at ``path`` once it is written; RecordError if it records problems
    or is not written within ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise RecordError(f"{path} was not written within {timeout_s:.0f} s: did its nbval run stop?")
        time.sleep(WAIT_POLL_S)
    nb = nbformat.read(path, as_version=4)
    problems = nb.metadata.get(RUN_META, {}).get("problems")
    if problems is None or problems:
        raise RecordError(f"{path}: its nbval run did not pass, so it is not used: {problems}")
    return nb


def execute_now(notebook: Path, kernel: str, timeout_s: int) -> nbformat.NotebookNode:
    """``notebook`` executed by nbclient on ``kernel`` in its folder, with the record's metadata
    (for a test run on its own, which runs no chapter under nbval). Raises on a cell's error."""
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    start = time.monotonic()
    NotebookClient(nb, kernel_name=kernel, timeout=timeout_s,
                   resources={"metadata": {"path": str(Path(notebook).parent)}}).execute()
    probe = json.loads("".join(o["text"] for o in nb.cells.pop().outputs if o.get("name") == "stdout"))
    nb.metadata[RUN_META] = run_meta(Path(notebook), time.monotonic() - start, kernel, probe, [])
    return nb
