"""xfl.atomic_files: a write either replaces the whole file or leaves the old one, with no leftovers."""

import pytest

from xfl import atomic_files
from xfl.atomic_files import atomic_path, write_text_atomic


def test_grades_are_written_atomically(tmp_path, monkeypatch):
    target = tmp_path / "grades.csv"
    write_text_atomic(target, "student,q1\nold,1\n")

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(atomic_files.os, "replace", crash)
    with pytest.raises(OSError):
        write_text_atomic(target, "student,q1\nnew,2\n")
    assert target.read_text() == "student,q1\nold,1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["grades.csv"], "no temporary file left behind"


def test_a_writer_that_fails_halfway_leaves_the_old_file(tmp_path):
    target = tmp_path / "model.pt"
    target.write_bytes(b"old checkpoint")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_path(target) as tmp, open(tmp, "wb") as f:
            f.write(b"half a checkpoint")
            raise RuntimeError("disk full")
    assert target.read_bytes() == b"old checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]


def test_new_folders_and_exact_text(tmp_path):
    target = tmp_path / "a" / "b" / "page.md"
    write_text_atomic(target, "¿qué?\r\nline two\n")
    assert target.read_bytes() == "¿qué?\r\nline two\n".encode("utf-8")  # no newline translation
    assert [p.name for p in target.parent.iterdir()] == ["page.md"]


def test_while_it_is_written_the_new_content_has_no_name(tmp_path):
    """Where the file system can (O_TMPFILE), a killed writer has nothing to leave behind."""
    if not atomic_files._can_name_anonymous_files(tmp_path):
        pytest.skip("this file system cannot name anonymous files (O_TMPFILE + linkat)")
    target = tmp_path / "model.pt"
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        f.write(b"new checkpoint")
        f.flush()
        assert list(tmp_path.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"] and target.read_bytes() == b"new checkpoint"


def test_the_fallback_writes_a_hidden_file_then_renames_it(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic_files, "_can_name_anonymous_files", lambda folder: False)
    target = tmp_path / "model.pt"
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        f.write(b"new")
        f.flush()
        assert tmp.parent == tmp_path and tmp.name.startswith(".model.pt.") and tmp.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"] and target.read_bytes() == b"new"
