"""Feedback a student can read: one Markdown and one HTML file per student, from the grades JSON.

    python -m tools.grading.feedback grades/ch01_qkv.json [--written grades/ch01_qkv-written.csv]
                                     [--reveal-hidden] [-o grades/ch01_qkv-feedback]

The grades JSON holds every test case's message, and a hidden test's message can quote the
hidden inputs, so it is not for students. Each feedback file holds, for one student: the points
of each question (and of each written question, once its sheet is filled in), the public tests'
messages, the hidden tests as passed or failed only (their names and points, never their
messages), and the grader's notes on the notebook (cells that raised, shell lines skipped, time
limits). ``--reveal-hidden`` (after the deadline) adds the hidden tests' messages. The grader
(``python -m tools.grading``) writes the default feedback after each run; this command writes
it again, e.g. revealed, without grading anything.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from pathlib import Path

from xfl.atomic_files import write_text_atomic

HIDDEN_NOTE = "its inputs and message are not shown"


def feedback_folder(grades_json: Path) -> Path:
    """Where the feedback of ``grades/<ch>.json`` goes: ``grades/<ch>-feedback/``."""
    return grades_json.with_name(f"{grades_json.stem}-feedback")


def file_stem(student: str) -> str:
    """A file name for a student's feedback: the name the CSV shows, without path separators."""
    stem = re.sub(r"[/\\\x00]", "_", student)
    return "_" + stem if stem.startswith(".") or not stem else stem


def student_report(name: str, record: dict, questions: dict[str, float], written: dict | None,
                   reveal_hidden: bool) -> dict:
    """What one student's feedback says, as plain data (``markdown`` and ``html`` render it)."""
    rows, total, possible = [], 0.0, 0.0
    for q, points in questions.items():
        score = float(record["scores"].get(q, 0.0))
        total, possible = total + score, possible + points
        cases = []
        for case in record["cases"].get(q, []):
            shown = (not case.get("hidden")) or reveal_hidden
            message = (case.get("message") or "").strip() if shown and not case.get("passed") else ""
            cases.append({"name": case.get("name", ""), "hidden": bool(case.get("hidden")),
                          "passed": bool(case.get("passed")), "points": case.get("points"), "message": message})
        rows.append({"question": q, "score": score, "points": points, "cases": cases})
    for q, (score, points) in (written or {}).items():
        total, possible = total + score, possible + points
        rows.append({"question": q, "score": score, "points": points, "cases": [], "written": True})
    penalty = float((record.get("roster") or {}).get("penalty_pct") or 0)  # late work (tools.grading.roster)
    return {"student": name, "rows": rows, "total": total * (1 - penalty / 100), "possible": possible,
            "notes": list(record.get("notes", [])), "revealed": reveal_hidden}


def _num(x: float) -> str:
    return f"{x:g}"


def _fence(text: str) -> str:
    """A Markdown code block that no backtick run in ``text`` can close."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _case_line(case: dict, hidden_shown: bool) -> str:
    kind = "hidden" if case["hidden"] else "public"
    verdict = "passed" if case["passed"] else "failed"
    p = case.get("points")
    points = f" ({_num(p)} point{'' if p == 1 else 's'})" if isinstance(p, (int, float)) else ""
    hidden = f"; {HIDDEN_NOTE}" if case["hidden"] and not hidden_shown and not case["passed"] else ""
    return f"{kind} test {case['name']}{points}: {verdict}{hidden}"


def markdown(report: dict, assignment: str) -> str:
    lines = [f"# {assignment}: feedback for {report['student']}", "",
             f"**Total: {_num(report['total'])} / {_num(report['possible'])} points**", "",
             "| question | points |", "| --- | --- |"]
    lines += [f"| {r['question']}{' (written)' if r.get('written') else ''} | {_num(r['score'])} / {_num(r['points'])} |"
              for r in report["rows"]]
    for r in report["rows"]:
        if r.get("written"):
            continue
        lines += ["", f"## {r['question']}: {_num(r['score'])} / {_num(r['points'])}", ""]
        for case in r["cases"]:
            lines.append(f"- {_case_line(case, report['revealed'])}")
            if case["message"]:
                lines += ["", _fence(case["message"]), ""]
        if not r["cases"]:
            lines.append("- no test result: see the notes below")
    lines += ["", "## Notes on your notebook", ""]
    lines += [f"- {n}" for n in report["notes"]] or ["- none: every cell ran"]
    if not report["revealed"]:
        lines += ["", "Hidden tests are shown as passed or failed only; their inputs stay private."]
    return "\n".join(lines) + "\n"


def to_html(report: dict, assignment: str) -> str:
    e = html.escape
    parts = [f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{e(assignment)}: {e(report['student'])}"
             "</title></head><body>", f"<h1>{e(assignment)}: feedback for {e(report['student'])}</h1>",
             f"<p><strong>Total: {_num(report['total'])} / {_num(report['possible'])} points</strong></p>",
             "<table><tr><th>question</th><th>points</th></tr>"]
    parts += [f"<tr><td>{e(r['question'])}{' (written)' if r.get('written') else ''}</td>"
              f"<td>{_num(r['score'])} / {_num(r['points'])}</td></tr>" for r in report["rows"]]
    parts.append("</table>")
    for r in report["rows"]:
        if r.get("written"):
            continue
        parts.append(f"<h2>{e(r['question'])}: {_num(r['score'])} / {_num(r['points'])}</h2><ul>")
        for case in r["cases"]:
            message = f"<pre>{e(case['message'])}</pre>" if case["message"] else ""
            parts.append(f"<li>{e(_case_line(case, report['revealed']))}{message}</li>")
        if not r["cases"]:
            parts.append("<li>no test result: see the notes below</li>")
        parts.append("</ul>")
    parts.append("<h2>Notes on your notebook</h2><ul>")
    parts += [f"<li>{e(n)}</li>" for n in report["notes"]] or ["<li>none: every cell ran</li>"]
    parts.append("</ul>")
    if not report["revealed"]:
        parts.append("<p>Hidden tests are shown as passed or failed only; their inputs stay private.</p>")
    return "\n".join(parts) + "\n</body></html>\n"


def written_points(sheet: Path | None) -> dict[str, dict[str, tuple[float, float]]]:
    """{student: {question: (points, max)}} from a filled-in written sheet (none: {})."""
    if sheet is None:
        return {}
    from tools.grading.written import sheet_points

    maxima, points = sheet_points(sheet)
    return {s: {q: (p.get(q, 0.0), top) for q, top in maxima.items()} for s, p in points.items()}


def write_feedback(grades_json: Path, out: Path | None = None, reveal_hidden: bool = False,
                   written: Path | None = None) -> list[Path]:
    """One ``<student>.md`` and ``<student>.html`` per student of ``grades_json`` into ``out``
    (default ``grades/<ch>-feedback/``); returns the files written."""
    details = json.loads(Path(grades_json).read_text(encoding="utf-8"))
    out = out or feedback_folder(Path(grades_json))
    out.mkdir(parents=True, exist_ok=True)
    assignment = details.get("assignment") or Path(grades_json).stem
    from tools.grading.written import roster_keys

    extra = roster_keys(written_points(written), details)  # a roster's grades: the sheet's names made ids
    from tools.grading.results import csv_cell

    written_files = []
    records = details["students"]  # keyed by the row's id (or, before ids, by the name)
    names = {key: record.get("student", key) for key, record in records.items()}
    clashes = {n for n in names.values() if list(names.values()).count(n) > 1}
    for key, record in records.items():
        name = names[key]
        report = student_report(name, record, details["questions"], extra.get(csv_cell(name)), reveal_hidden)
        stem = file_stem(name) + (f".{key}" if name in clashes else "")  # names that show alike: the id
        for suffix, text in ((".md", markdown(report, assignment)), (".html", to_html(report, assignment))):
            path = out / f"{stem}{suffix}"
            write_text_atomic(path, text)
            written_files.append(path)
    return written_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.grading.feedback", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("grades", type=Path, help="the grader's JSON (grades/<chapter>.json)")
    parser.add_argument("-o", "--output", type=Path, default=None, help="folder (default grades/<chapter>-feedback)")
    parser.add_argument("--written", type=Path, default=None, help="the filled-in written-answers sheet")
    parser.add_argument("--reveal-hidden", action="store_true",
                        help="show the hidden tests' messages (they can quote hidden inputs: after the deadline)")
    args = parser.parse_args(argv)
    try:
        files = write_feedback(args.grades, args.output, args.reveal_hidden, args.written)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    shown = "with the hidden tests' messages" if args.reveal_hidden else "hidden tests as passed/failed only"
    print(f"feedback for {len(files) // 2} students ({shown}) -> {args.output or feedback_folder(args.grades)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
