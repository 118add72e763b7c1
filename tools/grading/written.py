"""Written answers: one sheet to grade them by hand, and the merge of its points into the grades.

    python -m tools.grading.written export CHAPTER SUBMISSIONS_DIR -o grades/CHAPTER-written.csv
    python -m tools.grading.written merge grades/CHAPTER-written.csv grades/CHAPTER.csv

A written question is an otter *manual* question of ``chapters/<chapter>/exercises.md``
(``manual: true`` in its ``# BEGIN QUESTION`` cell): a prompt headed ``## Written question N:
... (k points)`` and a text cell for the answer. No test grades it.

``export`` reads every submission (``tools.grading.collect``: regular files only, as the grader
reads them) and writes one CSV row per question and student, question by question:
``question, max_points, student, answer, points``. The answer is the text of the cells between
the question's prompt and the next question (Colab keeps cell contents, not always tags);
``points`` is left for the instructor, and a second export keeps the points already entered for
an unchanged answer. ``merge`` adds one column per written question to the grades CSV and
makes ``total`` and ``possible`` count them, so ``total`` is the whole grade; merging again
replaces the columns (it never adds twice).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.grading.exercises import WRITTEN_PLACEHOLDER as PLACEHOLDER
from xfl.atomic_files import write_text_atomic

ROOT = Path(__file__).resolve().parents[2]
END_MARK, BEGIN_MARK = "<!-- END QUESTION -->", "<!-- BEGIN QUESTION -->"
MAX_ANSWER = 4000  # characters of an answer kept in the sheet
SHEET_COLUMNS = ["question", "max_points", "student", "answer", "points"]


@dataclass
class Written:
    name: str  # w1, ...
    points: float
    heading: str  # "## Written question 1:" (the prompt's first line up to its colon)


def written_questions(source: Path) -> list[Written]:
    """The manual questions of an exercise source (``chapters/<ch>/exercises.md``), in order."""
    import jupytext
    import yaml

    cells, found = jupytext.read(source).cells, []
    for i, cell in enumerate(cells):
        if cell.cell_type != "raw" or not cell.source.lstrip().startswith("# BEGIN QUESTION"):
            continue
        config = yaml.safe_load(cell.source) or {}
        if not config.get("manual"):
            continue
        prompt = next((c for c in cells[i + 1:] if c.cell_type == "markdown"), None)
        first = prompt.source.strip().splitlines()[0] if prompt is not None and prompt.source.strip() else ""
        if not re.match(r"## Written question \d+:", first):
            raise ValueError(f"{source}: manual question {config.get('name')!r} must start its prompt with "
                             f"'## Written question N: ... (k points)', got {first[:60]!r}")
        found.append(Written(str(config["name"]), float(config.get("points", 1)), first.split(":")[0] + ":"))
    return found


def answer_text(nb, question: Written) -> str | None:
    """The student's answer to ``question`` in notebook ``nb``: the cells after its prompt, up to
    the next question; None when the prompt is not in the notebook (deleted or renamed)."""
    cells = list(nb.cells)
    start = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"
                  and any(line.startswith(question.heading) for line in _text(c).splitlines())), None)
    if start is None:
        return None
    parts = []
    for cell in cells[start + 1:]:
        text = _text(cell)
        if END_MARK in text or BEGIN_MARK in text or re.match(r"\s*## ", text):
            break
        text = text.replace(PLACEHOLDER, "").strip()
        if text and not text.startswith("grader.check("):
            parts.append(text)
    return "\n\n".join(parts)


def _text(cell) -> str:
    source = cell.get("source", "")
    return source if isinstance(source, str) else "".join(map(str, source))


def export(chapter: str, submissions: Path, sheet: Path, root: Path = ROOT) -> list[dict]:
    """Write the sheet of written answers (keeping points already entered for unchanged answers)."""
    import nbformat

    from tools.grading.collect import find_submissions, read_submission
    from tools.grading.results import csv_cell, display_name, safe_text

    questions = written_questions(root / "chapters" / chapter / "exercises.md")
    if not questions:
        raise ValueError(f"chapters/{chapter}/exercises.md has no written (manual) question")
    kept = {(r["question"], r["student"], r["answer"]): r["points"] for r in read_sheet(sheet)} if sheet.exists() else {}
    notebooks = {}
    for student, sub in find_submissions(submissions).items():
        try:
            notebooks[display_name(student)] = nbformat.reads(read_submission(sub).decode("utf-8"), as_version=4)
        except Exception as e:  # refused, unreadable: a row that says so
            notebooks[display_name(student)] = f"(not read: {safe_text(e, 200)})"
    rows = []
    for q in questions:
        for student, nb in sorted(notebooks.items()):
            text = nb if isinstance(nb, str) else answer_text(nb, q)
            text = "(the question is not in the notebook)" if text is None else text or "(no answer)"
            answer = csv_cell(safe_text(text, MAX_ANSWER, keep="\n"))
            rows.append({"question": q.name, "max_points": f"{q.points:g}", "student": csv_cell(student),
                         "answer": answer, "points": kept.get((q.name, csv_cell(student), answer), "")})
    out = io.StringIO()
    writer = csv.DictWriter(out, SHEET_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    sheet.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(sheet, out.getvalue())
    return rows


def read_sheet(sheet: Path) -> list[dict]:
    with open(sheet, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if rows and set(SHEET_COLUMNS) - set(rows[0]):
        raise ValueError(f"{sheet}: expected the columns {SHEET_COLUMNS}, got {list(rows[0])}")
    return rows


def sheet_points(sheet: Path) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """({question: max points}, {student: {question: points}}) of a filled-in sheet; a blank,
    non-numeric or out-of-range points cell is a ``ValueError`` naming its row."""
    maxima, points = {}, {}
    for number, row in enumerate(read_sheet(sheet), start=2):  # row 1 is the header
        q, top = row["question"], float(row["max_points"])
        maxima[q] = top
        try:
            value = float(row["points"])
        except ValueError:
            raise ValueError(f"{sheet}, row {number} ({q}, {row['student']}): points must be a number in "
                             f"[0, {top:g}], got {row['points']!r}") from None
        if not 0 <= value <= top:
            raise ValueError(f"{sheet}, row {number} ({q}, {row['student']}): points must lie in [0, {top:g}], "
                             f"got {value:g}")
        points.setdefault(row["student"], {})[q] = value
    return maxima, points


def roster_keys(by_student: dict, details: dict) -> dict:
    """``by_student`` keyed by the grades CSV's students: with a roster, the sheet's file names
    become roster ids (``roster_files`` of the grades JSON) and files not graded are left out."""
    if "roster_files" not in details:
        return by_student
    ignored, mapping = set(details.get("files_not_graded", [])), details["roster_files"]
    return {mapping.get(s, s): v for s, v in by_student.items() if s not in ignored}


def merge(sheet: Path, grades_csv: Path) -> list[dict]:
    """Add the sheet's points to ``grades_csv`` (in place, atomically): one column per written
    question before ``total``; ``total`` and ``possible`` count them. Idempotent."""
    maxima, points = sheet_points(sheet)
    with open(grades_csv, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header, rows = list(reader.fieldnames or []), list(reader)
    if header[:1] != ["student"] or not {"total", "possible", "notes"} <= set(header):
        raise ValueError(f"{grades_csv}: expected the grader's CSV (student, questions, total, possible, notes), "
                         f"got the columns {header}")
    header = [h for h in header if h not in maxima]  # merged before: replaced, never added twice
    json_path = grades_csv.with_suffix(".json")
    details = json.loads(json_path.read_text()) if json_path.exists() else {}
    auto = details.get("questions")
    points = roster_keys(points, details)
    tested = [h for h in header if h in auto] if auto else [h for h in header[1:header.index("total")]
                                                               if h not in ("id", "name", "email")]
    auto_possible = sum(auto.values()) if auto else None
    unknown = set(points) - {r["student"] for r in rows}
    if unknown:
        raise ValueError(f"{sheet}: students {sorted(unknown)[:5]} are not in {grades_csv}")
    for row in rows:
        mine = points.get(row["student"], {})
        for q in maxima:
            row[q] = f"{mine.get(q, 0.0):g}"
        earned = sum(float(row[q]) for q in tested) + sum(float(row[q]) for q in maxima)
        row["total"] = f"{earned * (1 - float(row.get('penalty_pct') or 0) / 100):g}"  # a roster's late penalty
        possible = auto_possible if auto_possible is not None else float(row["possible"])
        row["possible"] = f"{possible + sum(maxima.values()):g}"
    out = io.StringIO()
    at = header.index("total")
    writer = csv.DictWriter(out, [*header[:at], *maxima, *header[at:]], lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(grades_csv, out.getvalue())
    if lms := details.get("lms_assignment"):  # graded with a roster: its gradebook imports follow the new totals
        from tools.grading.roster import write_imports
        write_imports(grades_csv, lms)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.grading.written", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="every student's written answers, question by question, to one CSV sheet")
    ex.add_argument("chapter")
    ex.add_argument("submissions", type=Path)
    ex.add_argument("-o", "--output", type=Path, required=True)
    mg = sub.add_parser("merge", help="add the sheet's points to the grades CSV (its total is then the whole grade)")
    mg.add_argument("sheet", type=Path)
    mg.add_argument("grades", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "export":
            rows = export(args.chapter, args.submissions, args.output)
            print(f"{len(rows)} answers -> {args.output}: fill in its points column, then merge")
        else:
            rows = merge(args.sheet, args.grades)
            print(f"written points of {len(rows)} students added to {args.grades}")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
