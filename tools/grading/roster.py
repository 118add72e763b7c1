"""The class around the grades: a roster, the LMS's file names, the due date and late work.

    python -m tools.grading ZIP SUBMISSIONS -o grades/ch01_qkv.csv --roster roster.csv \\
        [--due 2026-12-01T23:59+01:00 [--late-penalty 10] [--cutoff-days 3] [--times times.csv]]

**Roster.** A CSV with the columns ``id``, ``name``, ``email`` and optionally ``extension`` (a
number of days, ``2`` or ``0.5``, or the student's own due date as an ISO 8601 date-time with its
UTC offset). ``id`` is the LMS's student ID: on Canvas the ``ID`` column of the gradebook's CSV
export (the number in its bulk download's file names).

**The LMS's file names, as they are** (each submission is matched to one roster row):

- Canvas, "Download Submissions": a flat zip of ``{name}_{LATE_}{user id}_{file id}_{file name}``,
  as canvas-lms ``lib/content_zipper.rb`` writes it (``get_filename``: the student's sortable name
  lower-cased with every non-word character removed, ``LATE`` when Canvas judged the submission
  late, the user id; then ``add_upload_submission``: ``_{attachment id}_{display name}``; an
  anonymised assignment writes ``anon_{anonymous id}`` instead of name and user id). Matched by
  the user id.
- Moodle, assignment "Download all submissions": a folder per student
  ``{Full Name}_{participant id}_assignsubmission_file_/`` ("download submissions in folders", the
  default since Moodle 3.1), or flat files ``{Full Name}_{participant id}_assignsubmission_file_{file name}``
  (``mod/assign/locallib.php``, ``download_submissions``: ``fullname()`` with ``_`` made a space,
  then ``get_uniqueid_for_user``, then the plugin's subtype and type). The participant id is the
  assignment's own number, not the user's, so a Moodle file is matched by the full name
  (case and spacing aside); a name two roster rows share is not matched. Blind marking writes
  ``Participant`` for the name: not matched.
- Any other name (``<student>.ipynb``, ``<student>/<any>.ipynb``): matched when it is a roster
  id, email or name.

A file that matches no one is listed and not graded; a student with no file gets a row that says
so. Two notebooks of one student: the one the LMS received last is graded and the row says which
was left out (by the submission times below; for Canvas files without times, the larger file id:
Canvas numbers its attachments in the order they were stored).

**Submission times.** ``--times`` (a CSV ``file,submitted``: the file's name in the download and
the ISO 8601 time the LMS recorded, e.g. Canvas's ``submitted_at`` from its Submissions API or
Moodle's "Last modified (submission)" from its grading worksheet) wins when given. Otherwise:

- a Canvas file has no usable time: ``content_zipper.rb`` adds each file with
  ``zipfile.get_output_stream(filename)``, no time given, and rubyzip's ``Zip::Entry`` defaults to
  ``time: ::Zip::DOSTime.now`` (``lib/zip/entry.rb``), so every file of a download carries the
  time the zip was made. Canvas's ``LATE`` marker is used instead: without it the submission is on
  time; with it the lateness is unknown and one day is charged, noted;
- any other file: its modification time as the download left it (``unzip`` restores each
  entry's time). Moodle adds a submitted file by the path of its file store's copy
  (``lib/filestorage/file_system.php``, ``add_storedfile_to_archive``: ``add_file_from_pathname``),
  so the entry has the time that copy was written: the upload, unless the same bytes were stored
  on the site before.

**Late policy.** Days late are counted in started days past the student's due date (``--due``
plus their extension): ``--late-penalty P`` takes P percent of the points per day, and
``--cutoff-days D`` makes a submission more than D days late score zero. The grades CSV shows
``submitted``, ``late_days`` and ``penalty_pct``; ``total`` is the points after the penalty.
Lateness is computed after grading from the file listing, so it costs nothing per notebook.

**Gradebook imports**, written atomically beside the grades CSV (``<stem>-canvas.csv``,
``<stem>-moodle.csv``): Canvas's gradebook import takes ``Student, ID, SIS User ID, SIS Login ID,
Section`` then one column per assignment, matching students by ``ID`` (Canvas guides, "How do I
import grades in the Gradebook?"; a column whose header is not an existing assignment, or
``Name (assignment id)``, creates a new assignment); Moodle's CSV grade import lets the
instructor map a column to the user (docs.moodle.org "Grade import": map "Email address" to
``useremail``; emails compare case-sensitively) and another to a grade item. A student without a
submission has an empty cell in both (an empty cell changes no grade).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import stat
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tools.grading.collect import Submission, is_notebook
from xfl.atomic_files import write_text_atomic

ROSTER_COLUMNS = ("id", "name", "email")  # required; "extension" optional
CANVAS = re.compile(r"^(?P<name>.*?)_(?:(?P<late>LATE)_)?(?P<uid>\d+)_(?P<file_id>\d+)_(?P<file>.+)$", re.S)
CANVAS_ANON = re.compile(r"^(?:LATE_)?anon_(?P<anon>[^_]+)_(?P<file_id>\d+)_(?P<file>.+)$", re.S)
MOODLE = re.compile(r"^(?P<name>.+?)_(?P<pid>\d+)_assignsubmission_file_(?P<file>.*)$", re.S)
DATE_HELP = "an ISO 8601 date-time with its UTC offset, e.g. 2026-12-01T23:59+01:00 or 2026-12-01T22:59Z"


@dataclass(frozen=True)
class Student:
    id: str
    name: str
    email: str
    extension_days: float = 0.0
    due: datetime | None = None  # the student's own due date (an extension given as a date)


@dataclass
class LmsFile:
    """What an LMS's file name says about one submission."""
    lms: str  # "canvas", "moodle" or "plain"
    key: str  # the user id (canvas), full name (moodle) or name (plain)
    late_marker: bool = False  # Canvas's LATE
    order: int = 0  # Canvas's file id: a later upload has a larger one
    anonymous: bool = False


@dataclass
class Match:
    """One roster student's submission (or none), and the notes of the matching."""
    student: Student
    sub: Submission | None = None
    lms: LmsFile | None = None
    submitted: datetime | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Policy:
    due: datetime
    penalty_pct: float = 0.0  # per started day late
    cutoff_days: float | None = None  # more days late than this: zero


def parse_time(text: str, what: str) -> datetime:
    """An aware datetime from ISO 8601 text with a UTC offset; ``ValueError`` naming ``what``."""
    value = text.strip()
    try:
        when = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a date-time; expected {DATE_HELP}") from None
    if when.tzinfo is None:
        raise ValueError(f"{what}: {text!r} has no UTC offset; expected {DATE_HELP}")
    return when


def _extension(text: str, where: str) -> tuple[float, datetime | None]:
    value = (text or "").strip()
    if not value:
        return 0.0, None
    try:
        days = float(value)
    except ValueError:
        return 0.0, parse_time(value, f"{where}, extension")
    if not math.isfinite(days) or days < 0:
        raise ValueError(f"{where}, extension: {text!r} must be a number of days >= 0 or {DATE_HELP}")
    return days, None


def read_roster(path: Path) -> list[Student]:
    """The roster's students; ``ValueError`` naming the row and value for a missing column, an
    empty or repeated id, an email without ``@`` or a bad extension."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeError) as e:
        raise ValueError(f"roster {str(path)!r} cannot be read as UTF-8 text ({e})") from None
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip().lower() for h in reader.fieldnames or []]
    missing = [c for c in ROSTER_COLUMNS if c not in header]
    if missing:
        raise ValueError(f"roster {str(path)!r}: expected the columns id, name, email (and optionally extension), "
                         f"got {reader.fieldnames}")
    students, seen = [], set()
    for number, raw in enumerate(reader, start=2):
        row = {k.strip().lower(): (v or "").strip() for k, v in raw.items() if k is not None}
        where = f"roster {str(path)!r}, row {number}"
        if not row["id"]:
            raise ValueError(f"{where}: the id is empty; expected the LMS's student ID")
        if row["id"] in seen:
            raise ValueError(f"{where}: id {row['id']!r} appears twice; expected one row per student")
        if "@" not in row["email"]:
            raise ValueError(f"{where}: email {row['email']!r} is not an email address (expected name@host)")
        days, due = _extension(row.get("extension", ""), where)
        seen.add(row["id"])
        students.append(Student(row["id"], row["name"], row["email"], days, due))
    if not students:
        raise ValueError(f"roster {str(path)!r} has no students")
    return students


def read_times(path: Path) -> dict[str, datetime]:
    """``{file name: submitted}`` from a CSV with the columns ``file`` and ``submitted``."""
    try:
        reader = csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8-sig")))
    except (OSError, UnicodeError) as e:
        raise ValueError(f"times {str(path)!r} cannot be read as UTF-8 text ({e})") from None
    if not {"file", "submitted"} <= set(reader.fieldnames or []):
        raise ValueError(f"times {str(path)!r}: expected the columns file, submitted; got {reader.fieldnames}")
    return {row["file"]: parse_time(row["submitted"] or "", f"times {str(path)!r}, row {n} ({row['file']!r})")
            for n, row in enumerate(reader, start=2)}


def make_policy(due: str, penalty_pct: float = 0.0, cutoff_days: float | None = None) -> Policy:
    """The late policy, checked: a due date with its offset, a penalty in [0, 100], a cut-off >= 0."""
    if not (math.isfinite(penalty_pct) and 0 <= penalty_pct <= 100):
        raise ValueError(f"--late-penalty {penalty_pct!r}: expected a percentage of the points per day in [0, 100]")
    if cutoff_days is not None and not (math.isfinite(cutoff_days) and cutoff_days >= 0):
        raise ValueError(f"--cutoff-days {cutoff_days!r}: expected a number of days >= 0")
    return Policy(parse_time(due, "--due"), penalty_pct, cutoff_days)


def lms_file(name: str) -> LmsFile:
    """What the file (or folder) name ``name`` says: Canvas, Moodle or a plain name."""
    if m := CANVAS_ANON.match(name):
        return LmsFile("canvas", "anon_" + m["anon"], name.startswith("LATE_"), int(m["file_id"]), anonymous=True)
    if m := CANVAS.match(name):
        return LmsFile("canvas", m["uid"], bool(m["late"]), int(m["file_id"]))
    if m := MOODLE.match(name):
        return LmsFile("moodle", m["name"], anonymous=m["name"] == "Participant")
    stem = name[:-len(".ipynb")] if is_notebook(name) else name
    return LmsFile("plain", stem)


def _norm(name: str) -> str:
    return " ".join(unicodedata.normalize("NFC", name).casefold().replace("_", " ").split())


def _submission_name(sub: Submission) -> str:
    """The name the LMS gave: the file's (flat), else the student folder's."""
    return sub.parts[0] if sub.parts else sub.student + ".ipynb"


def _latest_in_folder(sub: Submission) -> Submission:
    """A student folder holding several notebooks: the one modified last (the others noted)."""
    folder = sub.top / sub.parts[0]
    found = []
    for e in os.scandir(folder):
        info = e.stat(follow_symlinks=False)
        if is_notebook(e.name) and not e.name.startswith(".") and stat.S_ISREG(info.st_mode):
            found.append((info.st_mtime, e.name))
    if len(found) < 2:
        return sub
    found.sort()
    chosen = Submission(sub.student, sub.top, (sub.parts[0], found[-1][1]), remarks=list(sub.remarks))
    chosen.remarks.append(f"{len(found)} notebooks in {sub.parts[0]!a}: graded {found[-1][1]!a}, the latest by its "
                          f"file time; not {', '.join(ascii(n) for _, n in found[:-1])}")
    return chosen


def file_time(sub: Submission, info: LmsFile, times: dict[str, datetime]) -> datetime | None:
    """The submission time the LMS recorded (``times`` by the file's name or folder), else the
    file's modification time; None for a Canvas file (its zip's time is the download's)."""
    for name in (sub.parts[-1] if sub.parts else None, sub.parts[0] if sub.parts else None):
        if name in times:
            return times[name]
    if info.lms == "canvas" or not sub.parts:
        return None
    try:
        return datetime.fromtimestamp(os.lstat(sub.path).st_mtime, timezone.utc)
    except OSError:
        return None


def match_submissions(subs: dict[str, Submission], roster: list[Student], times: dict[str, datetime] | None = None
                      ) -> tuple[list[Match], list[tuple[str, str]]]:
    """Each roster student's submission (the latest when several): ``(matches in roster order,
    [(name, why) of files that match no one]``."""
    times = times or {}
    by_id = {s.id: s for s in roster}
    by_name: dict[str, list[Student]] = {}
    for s in roster:
        by_name.setdefault(_norm(s.name), []).append(s)
    by_email = {s.email.casefold(): s for s in roster}
    candidates: dict[str, list[tuple]] = {}
    unmatched = []
    for raw, sub in subs.items():
        if sub.problem and sub.problem.startswith("folder must hold exactly one") and sub.parts:
            sub = _latest_in_folder(sub) if "holds 0" not in sub.problem else sub
        name = _submission_name(sub)
        info = lms_file(name)
        student, why = _who(info, by_id, by_name, by_email)
        if student is None:
            unmatched.append((name, why))
            continue
        when = file_time(sub, info, times)
        rank = (sub.problem is None, when or datetime.min.replace(tzinfo=timezone.utc), info.order, name)
        candidates.setdefault(student.id, []).append((rank, sub, info, when, name))
    matches = []
    for s in roster:
        found = sorted(candidates.get(s.id, []), key=lambda c: c[0])
        if not found:
            matches.append(Match(s, notes=["no submission"]))
            continue
        _, sub, info, when, name = found[-1]
        sub = Submission(sub.student, sub.top, sub.parts, sub.problem, list(sub.remarks))
        match = Match(s, sub, info, when)
        if len(found) > 1:
            basis = "the LMS's time" if when is not None else "Canvas's file id (its upload order)"
            match.notes.append(f"{len(found)} notebooks of this student: graded {name!a}, the latest by {basis}; "
                               f"not {', '.join(ascii(c[4]) for c in found[:-1])}")
        matches.append(match)
    return matches, unmatched


def _who(info: LmsFile, by_id, by_name, by_email) -> tuple[Student | None, str]:
    if info.anonymous:
        return None, f"an anonymised {info.lms.capitalize()} file ({info.key}): no roster entry can be told"
    if info.lms == "canvas":
        return by_id.get(info.key), f"Canvas user id {info.key} is not a roster id"
    named = by_name.get(_norm(info.key), [])
    if info.lms == "moodle":
        if len(named) == 1:
            return named[0], ""
        return None, (f"Moodle full name {info.key!r} is " + ("shared by several roster rows" if named else
                                                            "not a roster name"))
    found = by_id.get(info.key) or by_email.get(info.key.casefold()) or (named[0] if len(named) == 1 else None)
    return found, f"{info.key!r} is no roster id, email or name"


@dataclass
class Lateness:
    submitted: str  # ISO time, or what is known
    late_days: str  # "0", "2", or "?" (unknown)
    penalty_pct: float
    note: str | None = None


def lateness(match: Match, policy: Policy | None) -> Lateness:
    """How late ``match``'s submission is past the student's due date, and the penalty."""
    when = match.submitted
    shown = when.isoformat(timespec="seconds") if when else ("LATE (Canvas)" if match.lms and match.lms.late_marker
                                                            else "")
    if policy is None or match.sub is None:
        return Lateness(shown, "", 0.0)
    student = match.student
    due = student.due or policy.due + timedelta(days=student.extension_days)
    if when is None:
        if match.lms is not None and match.lms.lms == "canvas" and not match.lms.late_marker:
            return Lateness(shown or "on time (Canvas)", "0", 0.0)
        return Lateness(shown or "unknown", "?", min(100.0, policy.penalty_pct),
                        "Canvas marked it LATE but its download holds no submission time: one day's penalty "
                        "charged; give --times for the exact one")
    seconds = (when - due).total_seconds()
    days = max(0, math.ceil(seconds / 86400)) if seconds > 0 else 0
    if policy.cutoff_days is not None and seconds > policy.cutoff_days * 86400:
        return Lateness(shown, str(days), 100.0, f"submitted {days} days late, past the {policy.cutoff_days:g}-day "
                                                   "cut-off: scores zero")
    pct = min(100.0, days * policy.penalty_pct)
    note = f"submitted {days} day{'s' * (days != 1)} late: {pct:g}% off" if days else None
    if days and match.lms is not None and match.lms.lms == "canvas" and not match.lms.late_marker:
        note += " (Canvas did not mark it LATE: is --due Canvas's due date?)"
    if days and (student.extension_days or student.due):
        note += f" (due date with the extension: {due.isoformat(timespec='minutes')})"
    return Lateness(shown, str(days), pct, note)


def import_files(rows: list[dict], assignment: str) -> tuple[str, str]:
    """(Canvas's gradebook import CSV, Moodle's grade import CSV) of the grades CSV's ``rows``
    (roster mode: ``student`` is the id; ``name``, ``email``, ``total``, ``notes``)."""
    canvas, moodle = io.StringIO(), io.StringIO()
    cw, mw = csv.writer(canvas, lineterminator="\n"), csv.writer(moodle, lineterminator="\n")
    cw.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", assignment])
    mw.writerow(["Full name", "Email address", assignment])
    for row in rows:
        score = "" if row.get("notes", "").startswith("no submission") else row["total"]
        cw.writerow([row["name"], row["student"], "", "", "", score])  # the grades CSV's cells: made safe there
        mw.writerow([row["name"], row["email"], score])
    return canvas.getvalue(), moodle.getvalue()


def write_imports(output: Path, assignment: str) -> tuple[Path, Path]:
    """Canvas's and Moodle's gradebook-import CSVs of the grades CSV ``output``, written
    atomically beside it (``<stem>-canvas.csv``, ``<stem>-moodle.csv``)."""
    with open(output, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    canvas, moodle = import_files(rows, assignment)
    paths = output.with_name(f"{output.stem}-canvas.csv"), output.with_name(f"{output.stem}-moodle.csv")
    write_text_atomic(paths[0], canvas)
    write_text_atomic(paths[1], moodle)
    return paths
