"""The grades: one file per student as soon as that student is graded, then the CSV and JSON.

``ResultStore`` writes each student's result atomically into ``<output>-results/`` the moment
it is known, with the sha256 of the notebook, of the autograder zip and of the run's
configuration (time limits, budget, memory and sandbox limits, library block, the grader's and
``xfl``'s sources: ``config_sha256``); the CSV and JSON are then assembled from those files. A
grader that dies on student k keeps students 1..k-1, and a rerun grades only whoever has no
result for the same notebook, zip and configuration. A result cut short by a time limit says so
in its notes and is marked ``limited``; the run counts those it kept.

Each row has a record id (``record_id``: 12 hex digits of the sha256 of the raw file name, the
start of its result file's name), unique in the run, printable, and the key of the JSON record
and of the log; names are shown NFC-normalised, and names that show alike (cut at 80
characters, an undecodable byte beside its escape spelled out, NFC beside NFD) are noted.

Student text is untrusted text: names (file names may hold any byte), notebook metadata and
the messages tests quote are made UTF-8-safe (``safe_text``: undecodable bytes, lone surrogates
and control characters become visible escapes), capped in length, and quoted as such in the
notes (``quoted``); a CSV cell that a spreadsheet would read as a formula (``= + - @``, tab,
carriage return) gets a leading ``'`` (``csv_cell``).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from xfl.atomic_files import write_text_atomic

MAX_NAME = 80  # characters of a student's name kept in the CSV
MAX_QUOTE = 80  # characters of other student text quoted in a note
MAX_MESSAGE = 4000  # characters of a test case's message (they quote the student's values)
MAX_NOTES = 40  # notes per student; the rest are counted
MAX_NOTE = 400  # characters of one note
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@dataclass
class Grade:
    student: str
    scores: dict[str, float] = field(default_factory=dict)
    cases: dict[str, list] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    id: str = ""  # record_id of the raw name
    limited: bool = False  # a time limit or the budget of this run cut its grading
    grade_again: bool = False  # not the notebook's doing (its process never started): a rerun grades it

    def note(self, text: str) -> None:
        """Add a note (capped in length and in number)."""
        if len(self.notes) < MAX_NOTES:
            self.notes.append(safe_text(text, MAX_NOTE))
        elif len(self.notes) == MAX_NOTES:
            self.notes.append("further notes left out")


def safe_text(text, cap: int, keep: str = "") -> str:
    """``text`` as printable UTF-8 text of at most ``cap`` characters (plus ``...``): surrogates
    (a lone one, or an undecodable byte of a file name) and control characters escaped, except
    those in ``keep``."""
    text = str(text)
    if len(text) > 4 * cap:
        text = text[:4 * cap]
    text = text.encode("utf-8", "surrogateescape" if _is_name(text) else "backslashreplace")
    text = "".join(ch if _printable(ch) or ch in keep else ascii(ch)[1:-1]
                   for ch in text.decode("utf-8", "backslashreplace"))
    return text if len(text) <= cap else text[:cap] + "..."


def _printable(ch: str) -> bool:
    category = unicodedata.category(ch)
    return category[0] != "C" and category not in ("Zl", "Zp")


def _is_name(text: str) -> bool:
    """True when every surrogate in ``text`` is an undecodable byte (``os.fsdecode``'s escape)."""
    return all(not 0xD800 <= ord(ch) < 0xDC80 for ch in text if 0xD800 <= ord(ch) <= 0xDFFF)


def quoted(text, cap: int = MAX_QUOTE) -> str:
    """Student text inside a note: safe, capped, and marked as the student's words."""
    return '"' + safe_text(text, cap).replace('"', "'") + '"'


def csv_cell(text: str) -> str:
    """A CSV cell no spreadsheet runs as a formula."""
    return "'" + text if text.startswith(FORMULA_START) else text


def display_name(student: str) -> str:
    """The name shown: NFC-normalised (so NFC and NFD spellings look alike on purpose, and are
    told apart by ``record_id``), printable, at most ``MAX_NAME`` characters."""
    return safe_text(unicodedata.normalize("NFC", student), MAX_NAME)


def raw_name(student: str) -> bytes:
    """The bytes of a file name (undecodable bytes as they were)."""
    return os.fsencode(student) if _is_name(student) else student.encode("utf-8", "backslashreplace")


def record_id(student: str, digits: int = 12) -> str:
    """A printable id of ``student``'s row: the first ``digits`` hex digits of the sha256 of the
    raw name (the start of its result file's name)."""
    return hashlib.sha256(raw_name(student)).hexdigest()[:digits]


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def config_sha(config: dict) -> str:
    """The sha256 of a run's configuration (JSON with sorted keys)."""
    return sha256_bytes(json.dumps(config, sort_keys=True).encode())


class ResultStore:
    """Per-student result files in ``folder``, each written atomically when it is known, for one
    autograder zip and one configuration (``config``: everything else that can change a grade)."""

    def __init__(self, folder: Path, autograder_sha: str, config: dict | None = None):
        self.folder, self.autograder_sha = folder, autograder_sha
        self.config = config or {}
        self.config_sha = config_sha(self.config)
        self.kept: list[Grade] = []  # results taken from an earlier run
        self.changed = 0  # stored results of the same notebook and zip, made under another configuration
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, student: str) -> Path:
        return self.folder / f"{hashlib.sha256(raw_name(student)).hexdigest()[:32]}.json"

    def have(self, student: str, notebook_sha: str | None) -> Grade | None:
        """The stored grade of ``student`` if it is for this notebook, this zip and this
        configuration (and not marked to be graded again)."""
        try:
            data = json.loads(self._path(student).read_text())
        except (OSError, ValueError):
            return None
        if (data.get("notebook_sha256") != notebook_sha or data.get("autograder_sha256") != self.autograder_sha
                or data.get("grade_again")):
            return None
        if data.get("config_sha256") != self.config_sha:
            self.changed += 1
            return None
        grade = Grade(display_name(student), data["scores"], data["cases"], data["notes"],
                      record_id(student), bool(data.get("limited")))
        self.kept.append(grade)
        return grade

    def record(self, student: str, grade: Grade, notebook_sha: str | None, grade_again: bool = False) -> None:
        """Store ``grade``; ``grade_again``: a fault of the grader's, which a rerun tries again."""
        grade.student, grade.id = display_name(student), record_id(student)
        data = {"student": grade.student, "id": grade.id, "notebook_sha256": notebook_sha,
                "grade_again": grade_again, "limited": grade.limited, "autograder_sha256": self.autograder_sha,
                "config_sha256": self.config_sha, "config": self.config, "scores": grade.scores,
                "notes": [safe_text(n, MAX_NOTE) for n in grade.notes], "cases": _safe_cases(grade.cases)}
        write_text_atomic(self._path(student), json.dumps(data, indent=1))


def _safe_cases(cases: dict[str, list]) -> dict[str, list]:
    return {q: [c | {"message": safe_text(c.get("message") or "", MAX_MESSAGE, keep="\n")} for c in results]
            for q, results in cases.items()}


ROSTER_COLUMNS = ("name", "email")  # after ``id`` when a roster is given (``tools.grading.roster``)
LATE_COLUMNS = ("submitted", "late_days", "penalty_pct")  # before ``notes``


def grades_csv(grades: list[Grade], questions, roster: dict[str, dict] | None = None) -> str:
    """The grades CSV; with ``roster`` (``{record id: {name, email, submitted, late_days,
    penalty_pct}}``) its columns too, and ``total`` is the points after the late penalty."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    people, late = (ROSTER_COLUMNS, LATE_COLUMNS) if roster is not None else ((), ())
    writer.writerow(["student", "id", *people, *(q.name for q in questions), "total", "possible", *late, "notes"])
    possible = sum(q.points for q in questions)
    for g in grades:
        scores = [g.scores.get(q.name, 0.0) for q in questions]
        notes = "; ".join(safe_text(n, MAX_NOTE) for n in g.notes)
        info = (roster or {}).get(g.id, {})
        total = sum(scores) * (1 - float(info.get("penalty_pct") or 0) / 100)
        writer.writerow([csv_cell(safe_text(g.student, MAX_NAME)), g.id,
                         *(csv_cell(safe_text(info.get(c, ""), MAX_NAME)) for c in people), *(_num(s) for s in scores),
                         _num(total), _num(possible), *(csv_cell(str(info.get(c, ""))) for c in late), csv_cell(notes)])
    return out.getvalue()


def _num(x: float) -> str:
    return f"{x:g}"


def write_outputs(output: Path, grades: list[Grade], questions, details: dict,
                  roster: dict[str, dict] | None = None) -> None:
    """``output`` (CSV) and its JSON, atomically, from the students' results; the JSON's
    ``students`` are keyed by record id (each record names its student; with ``roster``, its
    roster and lateness columns too)."""
    ids = [g.id for g in grades]
    if len(set(ids)) != len(ids) or "" in ids:
        raise ValueError(f"record ids must be unique and set, got {sorted(ids)}")
    details = details | {"questions": {q.name: q.points for q in questions},
                         "students": {g.id: {"student": g.student, "scores": g.scores, "notes": g.notes,
                                             "limited": g.limited, "cases": _safe_cases(g.cases)}
                                      | ({"roster": roster.get(g.id, {})} if roster is not None else {})
                                      for g in grades}}
    write_text_atomic(output.with_suffix(".json"), json.dumps(details, indent=1))
    write_text_atomic(output, grades_csv(grades, questions, roster))
