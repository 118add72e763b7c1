"""The roster, the LMS's file names, deadlines and the gradebook imports (``tools.grading.roster``),
without grading a notebook: the file names are the formats Canvas's and Moodle's bulk downloads
write (``tools/grading/roster.py`` cites the sources), the grades are made up."""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tools.grading import grader, written
from tools.grading.collect import find_submissions
from tools.grading.results import Grade
from tools.grading.roster import (Match, Student, lateness, lms_file, make_policy, match_submissions, parse_time,
                                  read_roster, read_times, write_imports)

ROSTER = """id,name,email,extension
1001,Alice Liddell,alice@example.edu,
1002,Bob Marley,bob@example.edu,2
1003,Carol Danvers,carol@example.edu,2026-12-03T12:00+00:00
1004,Dave Bowman,dave@example.edu,
"""
DUE = "2026-12-01T23:59+00:00"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def touch(path: Path, when: str | None = None, text: str = "{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if when:
        stamp = utc(when).timestamp()
        os.utime(path, (stamp, stamp))
    return path


@pytest.fixture
def roster(tmp_path) -> list[Student]:
    (tmp_path / "roster.csv").write_text(ROSTER)
    return read_roster(tmp_path / "roster.csv")


@pytest.mark.parametrize("name, lms, key, late, order", [
    ("liddellalice_1001_55501_ch01_qkv_exercises.ipynb", "canvas", "1001", False, 55501),
    ("marleybob_LATE_1002_55502_ch01_qkv_exercises-1.ipynb", "canvas", "1002", True, 55502),
    ("o_brienpat_1005_55503_my_notebook.ipynb", "canvas", "1005", False, 55503),  # a name keeping an underscore
    ("LATE_anon_x7Kp2_55504_ch01_qkv_exercises.ipynb", "canvas", "anon_x7Kp2", True, 55504),
    ("Carol Danvers_4242_assignsubmission_file_", "moodle", "Carol Danvers", False, 0),
    ("Carol Danvers_4242_assignsubmission_file_ch01_qkv_exercises.ipynb", "moodle", "Carol Danvers", False, 0),
    ("alice.ipynb", "plain", "alice", False, 0),
])
def test_lms_file_names_are_read_as_the_lms_writes_them(name, lms, key, late, order):
    got = lms_file(name)
    assert (got.lms, got.key, got.late_marker, got.order) == (lms, key, late, order)
    assert got.anonymous == key.startswith("anon_")


def test_blind_marked_moodle_files_are_anonymous():
    assert lms_file("Participant_4242_assignsubmission_file_").anonymous


def test_matching_a_mixed_download(tmp_path, roster):
    folder = tmp_path / "sub"
    touch(folder / "liddellalice_1001_501_ch01_qkv_exercises.ipynb")  # Canvas, no time: the file id orders
    touch(folder / "liddellalice_1001_507_ch01_qkv_exercises-1.ipynb")
    touch(folder / "Bob Marley_77_assignsubmission_file_" / "first.ipynb", "2026-12-01T10:00:00")
    touch(folder / "Bob Marley_77_assignsubmission_file_" / "second.ipynb", "2026-12-02T10:00:00")
    touch(folder / "carol@example.edu.ipynb", "2026-12-03T11:00:00")
    touch(folder / "strangerdanger_9999_503_x.ipynb")
    touch(folder / "Participant_12_assignsubmission_file_" / "x.ipynb")
    matches, unmatched = match_submissions(find_submissions(folder), roster)
    by_id = {m.student.id: m for m in matches}
    assert [m.student.id for m in matches] == ["1001", "1002", "1003", "1004"]
    assert by_id["1001"].sub.parts == ("liddellalice_1001_507_ch01_qkv_exercises-1.ipynb",)
    assert "2 notebooks of this student" in by_id["1001"].notes[0] and "501" in by_id["1001"].notes[0]
    assert "upload order" in by_id["1001"].notes[0]
    bob = by_id["1002"]
    assert bob.sub.parts == ("Bob Marley_77_assignsubmission_file_", "second.ipynb")
    assert any("graded 'second.ipynb', the latest" in r for r in bob.sub.remarks), bob.sub.remarks
    assert bob.submitted == utc("2026-12-02T10:00:00")
    assert by_id["1003"].sub.parts == ("carol@example.edu.ipynb",)
    assert by_id["1004"].sub is None and by_id["1004"].notes == ["no submission"]
    assert sorted(n for n, _ in unmatched) == ["Participant_12_assignsubmission_file_",
                                               "strangerdanger_9999_503_x.ipynb"]
    assert "Canvas user id 9999 is not a roster id" in dict(unmatched)["strangerdanger_9999_503_x.ipynb"]


def test_times_from_the_lms_win_over_file_times(tmp_path, roster):
    folder = tmp_path / "sub"
    touch(folder / "liddellalice_1001_501_a.ipynb")
    touch(folder / "liddellalice_1001_507_b.ipynb")
    (tmp_path / "times.csv").write_text("file,submitted\nliddellalice_1001_501_a.ipynb,2026-12-02T09:00Z\n"
                                        "liddellalice_1001_507_b.ipynb,2026-12-01T09:00Z\n")
    matches, _ = match_submissions(find_submissions(folder), roster, read_times(tmp_path / "times.csv"))
    alice = matches[0]
    assert alice.sub.parts == ("liddellalice_1001_501_a.ipynb",)  # the later time, though the smaller file id
    assert alice.submitted == utc("2026-12-02T09:00:00") and "the LMS's time" in alice.notes[0]


def test_moodle_names_shared_by_two_roster_rows_are_not_matched(tmp_path):
    (tmp_path / "roster.csv").write_text("id,name,email\n1,Ann Lee,a@x.org\n2,Ann  lee,b@x.org\n")
    touch(tmp_path / "sub" / "Ann Lee_5_assignsubmission_file_" / "n.ipynb")
    matches, unmatched = match_submissions(find_submissions(tmp_path / "sub"), read_roster(tmp_path / "roster.csv"))
    assert all(m.sub is None for m in matches)
    assert "shared by several roster rows" in unmatched[0][1]


def late_of(student: Student, when: str | None, policy, lms: str = "plain", marker: bool = False):
    info = lms_file("x_LATE_1_2_f.ipynb" if marker else "x_1_2_f.ipynb") if lms == "canvas" else lms_file("x.ipynb")
    return lateness(Match(student, sub=object(), lms=info, submitted=utc(when) if when else None), policy)


def test_late_policy_per_day_with_extensions_and_a_cutoff(roster):
    alice, bob, carol, _ = roster
    policy = make_policy(DUE, penalty_pct=10, cutoff_days=3)
    on_time = late_of(alice, "2026-12-01T23:59:00", policy)
    assert (on_time.late_days, on_time.penalty_pct, on_time.note) == ("0", 0.0, None)
    one = late_of(alice, "2026-12-02T00:00:30", policy)  # a started day counts
    assert (one.late_days, one.penalty_pct) == ("1", 10.0) and "1 day late: 10% off" in one.note
    assert late_of(alice, "2026-12-04T12:00:00", policy).penalty_pct == 30.0
    cut = late_of(alice, "2026-12-05T00:00:00", policy)
    assert cut.penalty_pct == 100.0 and "cut-off" in cut.note
    assert late_of(bob, "2026-12-03T20:00:00", policy).penalty_pct == 0.0  # within his 2 days
    past = late_of(bob, "2026-12-04T01:00:00", policy)
    assert past.penalty_pct == 10.0 and "due date with the extension: 2026-12-03T23:59" in past.note
    assert late_of(carol, "2026-12-03T11:59:00", policy).penalty_pct == 0.0  # her own due date
    assert late_of(carol, "2026-12-03T12:01:00", policy).late_days == "1"


def test_a_canvas_file_late_by_its_time_but_not_marked_late_is_noted(roster):
    policy = make_policy(DUE, penalty_pct=10)
    late = late_of(roster[0], "2026-12-02T08:00:00", policy, "canvas")
    assert late.penalty_pct == 10.0 and "Canvas did not mark it LATE" in late.note
    assert "Canvas did not" not in late_of(roster[0], "2026-12-02T08:00:00", policy, "canvas", marker=True).note


def test_canvas_files_without_times_use_the_late_marker(roster):
    policy = make_policy(DUE, penalty_pct=15)
    on_time = late_of(roster[0], None, policy, "canvas")
    assert (on_time.late_days, on_time.penalty_pct, on_time.submitted) == ("0", 0.0, "on time (Canvas)")
    late = late_of(roster[0], None, policy, "canvas", marker=True)
    assert (late.late_days, late.penalty_pct, late.submitted) == ("?", 15.0, "LATE (Canvas)")
    assert "no submission time" in late.note and "--times" in late.note


@pytest.mark.parametrize("text, message", [
    ("id,name\n1,A\n", "expected the columns id, name, email"),
    ("id,name,email\n,A,a@x.org\n", "row 2: the id is empty"),
    ("id,name,email\n1,A,a@x.org\n1,B,b@x.org\n", "row 3: id '1' appears twice"),
    ("id,name,email\n1,A,not-an-address\n", "email 'not-an-address' is not an email address"),
    ("id,name,email,extension\n1,A,a@x.org,-1\n", "extension: '-1' must be a number of days >= 0"),
    ("id,name,email,extension\n1,A,a@x.org,next monday\n", "'next monday' is not a date-time"),
    ("id,name,email,extension\n1,A,a@x.org,2026-12-03T12:00\n", "'2026-12-03T12:00' has no UTC offset"),
    ("id,name,email\n", "has no students"),
])
def test_bad_roster_is_refused_naming_the_value(tmp_path, text, message):
    (tmp_path / "roster.csv").write_text(text)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_roster(tmp_path / "roster.csv")


@pytest.mark.parametrize("args, message", [
    (("2026-12-01",), "'2026-12-01' has no UTC offset; expected an ISO 8601 date-time"),
    (("tomorrow",), "--due: 'tomorrow' is not a date-time"),
    ((DUE, 120), "--late-penalty 120: expected a percentage"),
    ((DUE, 10, -1), "--cutoff-days -1: expected a number of days >= 0"),
])
def test_bad_policy_is_refused(args, message):
    with pytest.raises(ValueError, match=message):
        make_policy(*args)


def test_times_parse_zulu_and_offsets():
    assert parse_time("2026-12-01T22:59Z", "x") == parse_time("2026-12-01T23:59+01:00", "x")


def test_bad_course_input_stops_the_grader_before_it_writes_anything(tmp_path, capsys):
    (tmp_path / "roster.csv").write_text("id,name,email\n1,A,a@x.org\n")
    (tmp_path / "sub").mkdir()
    out = tmp_path / "grades" / "g.csv"
    common = [str(tmp_path / "missing.zip"), str(tmp_path / "sub"), "-o", str(out)]
    for extra, message in [(["--roster", str(tmp_path / "roster.csv"), "--due", "Dec 1"], "--due: 'Dec 1'"),
                           (["--due", DUE], "--due needs --roster"),
                           (["--roster", str(tmp_path / "roster.csv"), "--late-penalty", "5"], "need --due"),
                           (["--roster", str(tmp_path / "nope.csv")], "nope.csv' cannot be read")]:
        assert grader.main(common + extra) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "grades").exists()


class Q:
    def __init__(self, name, points):
        self.name, self.points = name, points


def graded_with_roster(tmp_path: Path, roster: list[Student]) -> Path:
    """The grader's outputs for made-up grades of three roster students (the fourth has none)."""
    folder = tmp_path / "sub"
    touch(folder / "liddellalice_1001_501_nb.ipynb")
    touch(folder / "Bob Marley_77_assignsubmission_file_" / "nb.ipynb", "2026-12-03T08:00:00")  # in his extension
    touch(folder / "carol@example.edu.ipynb", "2026-12-05T08:00:00")  # 2 days past her own due date
    matches, _ = match_submissions(find_submissions(folder), roster)
    grades, ids = [], grader.record_ids([s.id for s in roster])
    for m, scores in zip(matches, [{"q1": 1, "q2": 3}, {"q1": 1, "q2": 1}, {"q1": 1, "q2": 3}]):
        grades.append(Grade(m.student.id, scores, id=ids[m.student.id]))
    people = grader.roster_columns(matches, grades, ids, make_policy(DUE, penalty_pct=25))
    out = tmp_path / "grades" / "g.csv"
    out.parent.mkdir()
    files = {"roster_files": {"liddellalice_1001_501_nb": "1001", "Bob Marley_77_assignsubmission_file_": "1002",
                              "carol@example.edu": "1003"}, "files_not_graded": ["strangerdanger_9999_503_x"]}
    grader.write_outputs(out, grades, [Q("q1", 1), Q("q2", 3)], {"assignment": "ch01_qkv",
                                                                  "lms_assignment": "Chapter 1 (123)"} | files, people)
    write_imports(out, "Chapter 1 (123)")
    return out


def read_csv(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def test_grades_csv_has_roster_columns_lateness_and_gradebook_imports(tmp_path, roster):
    out = graded_with_roster(tmp_path, roster)
    rows = {r["student"]: r for r in read_csv(out)}
    assert list(next(iter(rows.values()))) == ["student", "id", "name", "email", "q1", "q2", "total", "possible",
                                               "submitted", "late_days", "penalty_pct", "notes"]
    assert (rows["1001"]["submitted"], rows["1001"]["late_days"], rows["1001"]["total"]) == \
        ("on time (Canvas)", "0", "4")
    assert (rows["1002"]["late_days"], rows["1002"]["penalty_pct"], rows["1002"]["total"]) == ("0", "0", "2")
    assert rows["1003"]["submitted"] == "2026-12-05T08:00:00+00:00"
    assert (rows["1003"]["late_days"], rows["1003"]["penalty_pct"], rows["1003"]["total"]) == ("2", "50", "2")
    assert "2 days late: 50% off" in rows["1003"]["notes"]
    assert rows["1004"]["notes"] == "no submission" and rows["1004"]["email"] == "dave@example.edu"
    canvas = read_csv(out.with_name("g-canvas.csv"))
    assert list(canvas[0]) == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Chapter 1 (123)"]
    assert [(r["ID"], r["Chapter 1 (123)"]) for r in canvas] == [("1001", "4"), ("1002", "2"), ("1003", "2"),
                                                                ("1004", "")]
    moodle = read_csv(out.with_name("g-moodle.csv"))
    assert [(r["Email address"], r["Chapter 1 (123)"]) for r in moodle][2:] == [("carol@example.edu", "2"),
                                                                               ("dave@example.edu", "")]
    record = next(r for r in json.loads(out.with_suffix(".json").read_text())["students"].values()
                  if r["student"] == "1003")
    assert record["roster"]["penalty_pct"] == "50"


def test_written_points_merge_keeps_the_late_penalty_and_updates_the_imports(tmp_path, roster):
    out = graded_with_roster(tmp_path, roster)
    sheet = tmp_path / "grades" / "g-written.csv"
    sheet.write_text("question,max_points,student,answer,points\n" + "".join(  # as the export names them: files
        f"w1,2,{s},text,2\n" for s in ("liddellalice_1001_501_nb", "Bob Marley_77_assignsubmission_file_",
                                        "carol@example.edu", "strangerdanger_9999_503_x")))
    written.merge(sheet, out)
    rows = {r["student"]: r for r in read_csv(out)}
    assert [(rows[s]["w1"], rows[s]["total"]) for s in ("1001", "1002", "1003", "1004")] == \
        [("2", "6"), ("2", "4"), ("2", "3"), ("0", "0")]  # carol: (4 + 2) x 50%; the unmatched file left out
    canvas = {r["ID"]: r["Chapter 1 (123)"] for r in read_csv(out.with_name("g-canvas.csv"))}
    assert canvas["1003"] == "3"
