"""Wrong answers and no-attempt answers earn nothing: the hidden tests reject them.

Fixture format (one module per chapter, ``tests/wrong_answers/<chapter>.py``)::

    WRONG_ANSWERS: dict[str, dict[str, str]] = {
        "q1": {  # a graded question of chapters/<chapter>/exercises.md
            "softmax over the queries, not the keys": '''
    def attention(q, k, v):
        ...  # the wrong answer: replaces that question's solution cell
    ''',
        },
    }

Each value is the source of a whole answer cell: it is run after the solution notebook's
cells (so ``torch``, ``math`` and earlier answers are there) and must define every function
the question's tests take. Write each one from a mistake a student makes, not a random one.

Checked, in this process and without otter (so it takes seconds): the solution passes every
test case of every question (the harness is sound); every graded question has at least two
fixtures; each fixture fails every *hidden* test case of its question (it may pass a public
sanity check); and generic no-attempt answers (the first argument echoed, zeros shaped like
it, constants, ``None``, zero-size tensors that ``torch.allclose`` would pass, ``raise
NotImplementedError``, and bare empty containers never paired: ``[]``, ``()``, ``{}``, ``''``)
fail every test case of every question; and where the solution returns a tuple, that tuple
less its last item fails every hidden case (a test that zips over the answer without checking
its length passed both: issue 63, chapter 11 q5). The
tests are the ones ``otter assign`` puts into the autograder zip, read from the source the
way it reads them (``tests/test_exercises.py`` checks the two agree), and every call crosses
``tools.grading.wire`` as it does in the grader.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURES = Path(__file__).resolve().parent / "wrong_answers"
MIN_WRONG = 2  # fixtures per graded question


# --------------------------------------------------------------- the exercise source
@dataclass
class Question:
    name: str
    points: float
    solution: list[str] = field(default_factory=list)  # its answer cells' sources
    tests: list[str] = field(default_factory=list)  # its test cells' sources

    def functions(self) -> list[str]:
        """Names of the functions its answer cells define."""
        return [n.name for s in self.solution for n in ast.parse(s).body
                if isinstance(n, ast.FunctionDef)]

    def returns_pair(self, function: str) -> bool:
        """Whether the solution's ``function`` returns a tuple."""
        for node in (n for s in self.solution for n in ast.walk(ast.parse(s))):
            if isinstance(node, ast.FunctionDef) and node.name == function:
                return any(isinstance(r, ast.Return) and isinstance(r.value, ast.Tuple)
                           for r in ast.walk(node))
        return False


def marker(cell) -> str:
    """The first line of a raw cell (``# BEGIN QUESTION``, ...), or '' for other cells."""
    return cell.source.strip().splitlines()[0] if cell.cell_type == "raw" and cell.source.strip() else ""


def parse(source: Path) -> tuple[list[str], list[Question]]:
    """(shared code cells, questions) of an otter-format ``exercises.md``."""
    shared, questions, block = [], [], None
    for cell in jupytext.read(source).cells:
        mark = marker(cell)
        if mark == "# BEGIN QUESTION":
            config = yaml.safe_load(cell.source.split("\n", 1)[1])
            if not config.get("manual"):  # a written question: graded by hand, no tests
                questions.append(Question(config["name"], float(config["points"])))
        elif mark in ("# BEGIN SOLUTION", "# BEGIN TESTS"):
            block = mark.split()[-1]
        elif mark in ("# END SOLUTION", "# END TESTS"):
            block = None
        elif cell.cell_type == "code" and block == "SOLUTION":
            questions[-1].solution.append(cell.source)
        elif cell.cell_type == "code" and block == "TESTS":
            questions[-1].tests.append(cell.source)
        elif cell.cell_type == "code" and not is_plumbing(cell.source):
            shared.append(cell.source)
    return shared, questions


def is_plumbing(source: str) -> bool:
    """The Colab install cell and the otter set-up cell: not part of the answers' namespace."""
    return "google.colab" in source or "otter.Notebook(" in source


def otter_test_file(question: Question) -> str:
    """The otter test file of a question, written as ``otter assign`` writes it."""
    lines = ["from otter.test_files import test_case", "", "OK_FORMAT = False", "",
             f'name = "{question.name}"', f"points = {question.points:g}", ""]
    for source in question.tests:
        tree = ast.parse(source)
        config = yaml.safe_load(tree.body[0].value.value.split("\n", 1)[1]) or {}
        for node in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
            lines += [f"@test_case(points={config.get('points')}, hidden={bool(config.get('hidden'))})",
                      ast.unparse(node), ""]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------- grading
def namespace(shared: list[str], questions: list[Question]) -> dict:
    """What the solution notebook defines: shared cells and every answer, run in order."""
    ns: dict = {}
    for source in shared + [s for q in questions for s in q.solution]:
        exec(compile(source, "<solution cell>", "exec"), ns)
    return ns


def results(question: Question, ns: dict, answer: str | None = None,
            chapter: str | None = None) -> list[tuple[bool, bool]]:
    """(hidden, passed) per test case of ``question`` against ``ns``, with ``answer`` (an
    answer cell's source) run in a copy of it first; as the grader passes them, only callables.
    With ``chapter``, each call runs as the grader's student process runs it: the library's
    answers to the question blocked (``tools.grading.library_answers``)."""
    from otter.test_files import ExceptionTestFile

    from tools.grading.library_answers import blocked_names

    ns = dict(ns)
    if answer is not None:
        exec(compile(answer, f"<answer to {question.name}>", "exec"), ns)
    library = blocked_names(chapter).get(question.name, []) if chapter else []
    env = {k: over_the_wire(v, library) for k, v in ns.items() if callable(v) and not k.startswith("_")}
    tests = ExceptionTestFile.from_string(otter_test_file(question), path=f"{question.name}.py")
    tests.run(env)
    return [(r.test_case.hidden, r.passed) for r in tests.test_case_results]


def over_the_wire(fn, library: list[str] = ()):
    """``fn`` as the grader calls it: arguments and result cross as plain data
    (``tools.grading.wire``), so a test that passes what the grader cannot send fails here too;
    the ``library`` names are blocked during the call, and a call of one fails it even if the
    answer caught the error, as in the grader (``tools.grading.worker.blocked``)."""
    from tools.grading import worker
    from tools.grading.wire import from_plain, to_plain

    def call(*args, **kwargs):
        args, kwargs = from_plain(to_plain(list(args))), from_plain(to_plain(kwargs))
        worker.CALLED.clear()
        with worker.blocked(list(library)):
            result = fn(*args, **kwargs)
        if worker.CALLED:
            raise worker.LibraryAnswer(f"called {sorted(set(worker.CALLED))}, the library's answer")
        return from_plain(to_plain(result))

    def measured(key):  # as the grader's Proxy.largest_tensor, .product_dims, .held: around the call only
        def run(*args, **kwargs):
            from tools.grading.worker import largest_tensor as spy_on

            args, kwargs = from_plain(to_plain(list(args))), from_plain(to_plain(kwargs))
            with spy_on() as spy:
                value = fn(*args, **kwargs)
            return from_plain(to_plain(value)), spy[key]
        return run

    call.__name__ = getattr(fn, "__name__", "answer")
    call.largest_tensor, call.product_dims, call.held = measured("numel"), measured("product_dims"), measured("held")
    return call


NO_ATTEMPT_HELPERS = '''
def _like(x, value):
    """``value`` in the shape and kind of ``x``."""
    import torch
    if isinstance(x, torch.Tensor):
        return torch.full_like(x, value)
    if isinstance(x, (list, tuple)):
        return type(x)(_like(e, value) for e in x)
    if isinstance(x, str):
        return str(value)
    return type(value)(value) if isinstance(x, (int, float)) else value

def _first(args, kwargs):
    return args[0] if args else next(iter(kwargs.values()), None)
'''
NO_ATTEMPT_BODIES = {  # a no-attempt answer: the body every answer function gets
    "echoes its first argument": "return _first(args, kwargs)",
    "zeros shaped like its first argument": "return _like(_first(args, kwargs), 0.0)",
    "ones shaped like its first argument": "return _like(_first(args, kwargs), 1.0)",
    "the constant 0": "return 0",
    "the constant 1.0": "return 1.0",
    "an empty list": "return []",
    "raises NotImplementedError": "raise NotImplementedError",
    "None, as an unfilled answer cell's ``...`` body returns": "return None",
    "zero-size tensors, which broadcast into an empty comparison":
        "return __import__('torch').zeros(0, 1, 1, 1, 1, 1, 1, 1)",
}


BARE_BODIES = {  # returned as they are, never paired: a test that zips over the answer passes these
    "a bare empty list": "return []",
    "a bare empty tuple": "return ()",
    "a bare empty dict": "return {}",
    "a bare empty string": "return ''",
}


def no_attempt(question: Question, body: str, pair: bool = True) -> str:
    """An answer cell defining each of the question's functions with ``body`` (returned twice
    where the solution returns a pair, unless ``pair`` is False)."""
    lines = [NO_ATTEMPT_HELPERS]
    for fn in question.functions():
        pair = pair and question.returns_pair(fn) and body.startswith("return ")
        value = body.removeprefix("return ")
        lines += [f"def {fn}(*args, **kwargs):",
                  f"    return ({value}, {value})" if pair else f"    {body}"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- tests
def sources() -> dict[str, Path]:
    return {p.parent.name: p for p in sorted(ROOT.glob("chapters/*/exercises.md"))}


def wrong_answers(chapter: str) -> dict[str, dict[str, str]]:
    spec = importlib.util.spec_from_file_location(f"wrong_answers_{chapter}", FIXTURES / f"{chapter}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WRONG_ANSWERS


CHAPTERS = sorted(set(sources()) & {p.stem for p in FIXTURES.glob("ch*.py")})


@pytest.fixture(scope="module", params=CHAPTERS)
def chapter(request):
    """(name, questions, solution namespace, wrong answers) of a chapter with fixtures."""
    shared, questions = parse(sources()[request.param])
    return request.param, questions, namespace(shared, questions), wrong_answers(request.param)


def test_every_chapter_has_wrong_answers():
    """Every chapter with graded exercises has its fixture module, so none escapes the checks."""
    missing = sorted(set(sources()) - set(CHAPTERS))
    assert not missing, f"no tests/wrong_answers/<chapter>.py for {missing}"


def test_solutions_pass_every_case(chapter):
    name, questions, ns, _ = chapter
    for q in questions:
        assert q.tests and q.functions(), f"{name} {q.name}: no tests or no answer function"
        outcome = results(q, ns, chapter=name)  # the library blocked, as the grader runs it
        assert all(passed for _, passed in outcome), f"{name} {q.name}: the solution fails {outcome}"


def test_every_question_has_wrong_answers(chapter):
    name, questions, _, wrong = chapter
    graded = {q.name for q in questions}
    assert set(wrong) <= graded, f"{name}: fixtures for {sorted(set(wrong) - graded)}, not questions"
    for q in questions:
        assert len(wrong.get(q.name, {})) >= MIN_WRONG, \
            f"{name} {q.name}: {len(wrong.get(q.name, {}))} wrong answers, expected >= {MIN_WRONG}"


def test_wrong_answers_fail_every_hidden_case(chapter):
    name, questions, ns, wrong = chapter
    for q in questions:
        for mistake, answer in wrong.get(q.name, {}).items():
            hidden = [passed for is_hidden, passed in results(q, ns, answer, chapter=name) if is_hidden]
            assert hidden and not any(hidden), \
                f"{name} {q.name}: {mistake!r} passes hidden cases {hidden}, expected none"


def right_answers(chapter: str) -> dict[str, dict[str, str]]:
    """A chapter's ``RIGHT_ANSWERS`` (answers by another method than the solution's), or none."""
    spec = importlib.util.spec_from_file_location(f"right_answers_{chapter}", FIXTURES / f"{chapter}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, "RIGHT_ANSWERS", {})


def test_right_answers_pass_every_case(chapter):
    """A correct answer by another method than the solution's (the one a question describes, say)
    earns every point: the tests check what the question asks, not the solution's way."""
    name, questions, ns, _ = chapter
    right = right_answers(name)
    assert set(right) <= {q.name for q in questions}, f"{name}: right answers for {sorted(right)}, not questions"
    for q in (q for q in questions if q.name in right):
        for method, answer in right[q.name].items():
            outcome = results(q, ns, answer)
            assert outcome and all(passed for _, passed in outcome), f"{name} {q.name}: {method!r} fails {outcome}"


def test_library_answers_pass_every_case(chapter):
    """Each function ``tools.grading.library_answers`` lists really answers its question: an
    answer cell that just calls it passes every case (the real grader blocks such calls:
    ``tests/test_exercises.py`` checks that they earn nothing there)."""
    from test_exercises import library_answer_cells

    name, questions, ns, _ = chapter
    cells = library_answer_cells(name)
    for q in (q for q in questions if q.name in cells):
        outcome = results(q, ns, cells[q.name])
        assert outcome and all(passed for _, passed in outcome), \
            f"{name} {q.name}: the library's answer fails {outcome}"


@pytest.mark.parametrize("attempt", [*NO_ATTEMPT_BODIES, *BARE_BODIES])
def test_no_attempt_earns_nothing(chapter, attempt):
    name, questions, ns, _ = chapter
    body, pair = (NO_ATTEMPT_BODIES[attempt], True) if attempt in NO_ATTEMPT_BODIES else (BARE_BODIES[attempt], False)
    for q in questions:
        outcome = results(q, ns, no_attempt(q, body, pair))
        assert not any(passed for _, passed in outcome), \
            f"{name} {q.name}: an answer that {attempt} passes {outcome}, expected no case"


def short_tuple(fn: str) -> str:
    """An answer cell whose ``fn`` returns the solution's tuple without its last item (the
    answer that never computes its last output: issue 63's X34)."""
    return (f"_solution_{fn} = {fn}\n"
            f"def {fn}(*args, **kwargs):\n"
            f"    return tuple(_solution_{fn}(*args, **kwargs))[:-1]\n")


def test_a_short_tuple_fails_every_hidden_case(chapter):
    """Where the solution returns a tuple, the same tuple less its last item fails every hidden
    case: each test checks the answer's length before it compares (a ``zip`` over a short or
    empty answer compares nothing)."""
    name, questions, ns, _ = chapter
    for q in questions:
        for fn in (f for f in q.functions() if q.returns_pair(f)):
            hidden = [passed for is_hidden, passed in results(q, ns, short_tuple(fn)) if is_hidden]
            assert not any(hidden), f"{name} {q.name}: {fn} without its last output passes hidden cases {hidden}"
