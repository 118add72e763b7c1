"""Notebook magics and shell lines in the grader: what a kernel does with them, or a skip with a note.

Students' notebooks hold what Jupyter and Colab accept and a bare Python shell does not:
``%matplotlib inline``, ``%%time``, ``%load_ext autoreload``, ``%pip install``, ``!nvidia-smi``,
``from google.colab import drive``, ``display(...)``. The student's process
(``tools.grading.worker``) runs cells in ``GradingShell``, an IPython shell in which

- ``%matplotlib`` does nothing: figures are drawn off-screen (``MPLBACKEND=Agg``), as a kernel's
  inline backend would draw them, with nothing to show (a bare shell raises
  ``NotImplementedError`` there, which lost the rest of the cell and every answer in it);
- shell lines (``!cmd``, ``x = !cmd``, ``%sx``, ``%system``), package installs (``%pip``,
  ``%conda``, ``%mamba``, ``%uv``) and shell cell magics (``%%bash``, ``%%sh``, ``%%script``, ...)
  are skipped: grading installs nothing and runs no program of the student's choosing; the rest
  of the cell runs, and the skip is reported to the grader, which notes it on the student's row;
- ``import google.colab`` (and ``from google.colab import drive, files``) gives a stand-in whose
  functions do nothing but note the skip (``drive.mount``), so the cell goes on as on Colab;
- everything else (``%%time``, ``%timeit``, ``%load_ext``, ``%autoreload``, ``%config``,
  ``display``) is IPython's own, as in a kernel; tracebacks are printed without colour codes.

``SKIPPED`` collects what was skipped during the current cell (reset by ``take_skipped``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

SKIPPED: list[str] = []  # what the current cell skipped, as short descriptions
MAX_SKIPPED = 20  # per cell; further skips are counted, not listed
MAX_TEXT = 120  # characters of a skipped command kept
SKIPPED_LINE_MAGICS = {"pip", "conda", "mamba", "micromamba", "uv", "sx", "system"}
SKIPPED_CELL_MAGICS = {"bash", "sh", "script", "system", "!", "perl", "ruby", "python2", "python3", "pypy"}
DO_NOTHING_LINE_MAGICS = {"matplotlib"}
COLAB = "google.colab"


def skip(what: str) -> None:
    """Record that ``what`` (a command or call) was skipped in the current cell."""
    if len(SKIPPED) < MAX_SKIPPED:
        text = " ".join(str(what).split())
        SKIPPED.append(text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "...")
    elif len(SKIPPED) == MAX_SKIPPED:
        SKIPPED.append("further skips not listed")


def take_skipped() -> list[str]:
    """What the cell that just ran skipped; clears the list."""
    taken = list(SKIPPED)
    SKIPPED.clear()
    return taken


def grading_shell():
    """The IPython shell the worker runs cells in (an instance of ``GradingShell``)."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.text import SList

    class GradingShell(InteractiveShell):
        """An IPython shell for grading: magics as in a kernel, shell and installs skipped."""

        def enable_gui(self, gui=None):  # %matplotlib inline/widget/...: drawn off-screen (Agg)
            return None

        def enable_matplotlib(self, gui=None):
            return None, None

        def system(self, cmd):
            skip(f"!{cmd}")

        def getoutput(self, cmd, split=True, depth=0):
            skip(f"!{cmd}")
            return SList() if split else ""

        def run_line_magic(self, magic_name, line, _stack_depth=1):
            if magic_name in SKIPPED_LINE_MAGICS:
                return skip(f"%{magic_name} {line}")
            if magic_name in DO_NOTHING_LINE_MAGICS:
                return None
            return super().run_line_magic(magic_name, line, _stack_depth=_stack_depth + 1)

        def run_cell_magic(self, magic_name, line, cell):
            if magic_name in SKIPPED_CELL_MAGICS:
                return skip(f"%%{magic_name} {line}".rstrip())
            return super().run_cell_magic(magic_name, line, cell)

    shell = GradingShell.instance()
    _no_colour(shell)
    install_colab_stand_in()
    return shell


def _no_colour(shell) -> None:
    """Plain-text tracebacks (IPython 8: ``colors = 'NoColor'``; IPython 9: theme ``nocolor``)."""
    for value in ("NoColor", "nocolor"):
        try:
            shell.colors = value
            shell.InteractiveTB.set_colors(value)
            shell.SyntaxTB.set_colors(value)
            return
        except Exception:  # the other IPython's name
            continue


class _ColabFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Provides ``google.colab`` (and ``google`` where no real package has that name) as
    stand-ins, last on ``sys.meta_path``: only where no installed module answers."""

    def find_spec(self, name, path=None, target=None):
        if name == "google" or name == COLAB or name.startswith(COLAB + "."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandIn(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


class _StandIn(types.ModuleType):
    """A Colab module: every function it is asked for does nothing but note the call."""

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        name = f"{self.__name__}.{attr}"
        if attr[:1].islower() and attr in {"drive", "files", "output", "auth", "userdata", "data_table", "widgets"}:
            return sys.modules.setdefault(name, _submodule(name))
        def stand_in(*args, **kwargs):
            skip(f"{name}(...)")
        stand_in.__name__ = attr
        return stand_in


def _submodule(name: str) -> _StandIn:
    module = _StandIn(name)
    module.__path__ = []
    return module


def install_colab_stand_in() -> None:
    """Put the ``google.colab`` stand-in last on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _ColabFinder) for f in sys.meta_path):
        sys.meta_path.append(_ColabFinder())


# ------------------------------------------------------------------ the grader's side
def cell_notes(event: dict, number: int) -> list[str]:
    """The notes a cell event earns (the grader's side; the event is the student's process's
    word, so its text is checked, capped and quoted): the cell raised, or it skipped commands."""
    from tools.grading.results import quoted

    notes = []
    error = event.get("error")
    if type(error) is str:
        notes.append(f"cell {number} raised {quoted(error, 200)}")
    skipped = event.get("skipped")
    if type(skipped) is list and skipped:
        listed = ", ".join(quoted(s, MAX_TEXT) for s in skipped[:MAX_SKIPPED + 1] if type(s) is str)
        notes.append(f"cell {number}: skipped {listed} (the grader runs no shell commands or installs; "
                     "the rest of the cell ran)")
    return notes
