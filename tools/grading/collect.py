"""Finding the submissions: only regular files, read without following links.

A submissions folder holds one notebook per student: ``<student>.ipynb`` or
``<student>/<any>.ipynb``. Whatever the way of collecting them kept (git, tar and unzip keep
symbolic links; tar keeps FIFOs and devices), the grader reads only regular files that lie in
that folder or in a student's real sub-folder:

- entries are listed with ``lstat`` (``os.scandir`` without following links): a symbolic link,
  FIFO, socket or device, as a notebook or as a student folder, is refused with a note;
- a notebook is opened with ``O_NOFOLLOW | O_NONBLOCK`` relative to its folder's descriptor
  (a link swapped in after the listing is refused too, and a FIFO cannot block), ``fstat``
  must say it is a regular file, and at most ``MAX_NOTEBOOK_BYTES`` are read;
- ``alice.ipynb`` beside a folder ``alice/`` is a note for alice, not the end of the run;
- a notebook that shares its inode with another file (a hard link: to the solutions, the zip,
  another student's notebook; ``st_nlink > 1``) is refused, naming the submissions it shares
  it with; a hard link is a regular file, so ``S_ISREG`` alone let one through;
- every entry of the folder is accounted for: ``.IPYNB`` (any case) is a notebook; a hidden
  notebook (``.alice.ipynb``) or an archive (``alice.zip``) gets a row with a note saying why
  it was not graded (or a note on alice's row when alice also handed in a notebook); anything
  else is listed in ``skipped`` with its reason.

Nothing here decides a score: a refused entry reaches the results as a zero with its note.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

MAX_NOTEBOOK_BYTES = 32 << 20  # a handed-out notebook is ~20 kB; a long honest one stays far below
NOTEBOOK = ".ipynb"  # compared without case: alice.IPYNB is a notebook too
ARCHIVES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".gz", ".7z", ".rar")


@dataclass
class Submission:
    """One student's entry: the notebook at ``top / *parts``; ``problem`` (a note) is set when
    there is nothing the grader will read."""
    student: str  # the raw name (a file name: may hold any byte, as a surrogate escape)
    top: Path  # the submissions folder
    parts: tuple[str, ...]  # (name,) or (student folder, name); () when there is no notebook
    problem: str | None = None
    remarks: list[str] = field(default_factory=list)  # notes that do not stop the grading

    @property
    def path(self) -> Path:
        return self.top.joinpath(*self.parts)


def _refused(mode: int) -> str | None:
    """None for a regular file, else the note refusing it."""
    return None if stat.S_ISREG(mode) else f"refused: the submission is {_kind(mode)} (only regular files are read)"


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return word
    return "not a regular file"


def is_notebook(name: str) -> bool:
    return name.lower().endswith(NOTEBOOK) and len(name) > len(NOTEBOOK)


def _student_folder(folder: Path, entry: os.DirEntry) -> Submission:
    """The submission in a student's sub-folder: exactly one regular ``*.ipynb`` there."""
    sub = folder / entry.name
    try:
        notebooks = sorted(e.name for e in os.scandir(sub) if is_notebook(e.name) and not e.name.startswith("."))
    except OSError as e:
        return Submission(entry.name, folder, (entry.name,), f"folder cannot be listed ({e.strerror})")
    if len(notebooks) != 1:
        return Submission(entry.name, folder, (entry.name,),
                          f"folder must hold exactly one .ipynb, holds {len(notebooks)}")
    problem = _refused(os.lstat(sub / notebooks[0]).st_mode)
    return Submission(entry.name, folder, (entry.name, notebooks[0]), problem)


def _skipped(name: str, mode: int) -> tuple[str | None, str]:
    """(the student a skipped entry names, or None, and why it is not graded)."""
    lower = name.lower()
    if name.startswith(".") and is_notebook(name):
        return name[:-len(NOTEBOOK)].lstrip("."), (f"skipped {name!a}: a hidden file (its name starts with '.'); "
                                       "rename it to grade it")
    archive = next((a for a in ARCHIVES if lower.endswith(a) and len(name) > len(a)), None)
    if archive and not name.startswith("."):
        return name[:-len(archive)], f"skipped {name!a}: an archive ({archive}); unpack the notebook into the folder"
    if name.startswith("."):
        return None, "a hidden entry (its name starts with '.')"
    return None, "not a notebook (.ipynb) nor a student's folder" if stat.S_ISREG(mode) else \
        f"{_kind(mode)}, not a notebook"


def find_submissions(folder: Path, skipped: list[tuple[str, str]] | None = None) -> dict[str, Submission]:
    """``{student: Submission}`` of ``folder`` (listed without following any link). Entries that
    are no submission are appended to ``skipped`` as (name, why); a hidden notebook or an
    archive also reaches its student's row as a note (a row of its own if there is none)."""
    found: dict[str, Submission] = {}
    later: list[tuple[str, str]] = []  # (student, note) of skipped notebooks and archives
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode) and not entry.name.startswith("."):
            sub = _student_folder(folder, entry)
        elif is_notebook(entry.name) and not entry.name.startswith("."):
            sub = Submission(entry.name[:-len(NOTEBOOK)], folder, (entry.name,), _refused(mode))
        elif stat.S_ISLNK(mode) and not entry.name.startswith("."):  # a linked student folder: refused
            sub = Submission(entry.name, folder, (entry.name,), _refused(mode))
        else:
            student, why = _skipped(entry.name, mode)
            if student is not None:
                later.append((student, why))
            elif skipped is not None:
                skipped.append((entry.name, why))
            continue
        if sub.student in found:
            other = found[sub.student]
            found[sub.student] = Submission(sub.student, folder, (), "two submissions "
                                            f"({'/'.join(other.parts)!a} and {'/'.join(sub.parts)!a}): keep one")
            continue
        found[sub.student] = sub
    for student, why in later:
        if student in found:
            found[student].remarks.append(why)
        else:
            found[student] = Submission(student, folder, (), why)
    _refuse_shared_inodes(folder, found)
    return dict(sorted(found.items()))


def _refuse_shared_inodes(folder: Path, found: dict[str, Submission]) -> None:
    """Submissions whose notebooks are one file (hard links) are refused, each naming the others."""
    by_inode: dict[tuple[int, int], list[str]] = {}
    for student, sub in found.items():
        if sub.parts and not sub.problem:
            try:
                info = os.lstat(sub.path)
            except OSError:
                continue
            by_inode.setdefault((info.st_dev, info.st_ino), []).append(student)
    for students in (s for s in by_inode.values() if len(s) > 1):
        for student in students:
            others = ", ".join(f"{'/'.join(found[o].parts)!a}" for o in students if o != student)
            found[student].problem = f"refused: a hard link: the notebook is the same file as {others}"


def read_submission(sub: Submission, cap: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The notebook's bytes, read without following links or blocking; ``ValueError`` (the
    note) for anything but a regular file of at most ``cap`` bytes."""
    if sub.problem or not sub.parts:
        raise ValueError(sub.problem or "no notebook")
    fd = os.open(sub.top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the instructor's folder
    try:
        for i, part in enumerate(sub.parts):  # then nothing that is a link, not even a folder
            last = i == len(sub.parts) - 1
            flags = os.O_NONBLOCK if last else os.O_DIRECTORY
            parent, fd = fd, os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | flags, dir_fd=fd)
            os.close(parent)
    except OSError as e:  # ELOOP: a link swapped in after the listing (fd: the last folder opened)
        os.close(fd)
        raise ValueError(f"refused: cannot open it without following links ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if _refused(info.st_mode):
            raise ValueError(_refused(info.st_mode))
        if info.st_nlink > 1:
            raise ValueError(f"refused: a hard link: the notebook has {info.st_nlink} names (it is the same file as "
                             "another: the solutions, the zip or another notebook); hand in a copy")
        if info.st_size > cap:
            raise ValueError(f"refused: {info.st_size} bytes, over the {cap >> 20} MiB a notebook may have")
        data = f.read(cap + 1)
    if len(data) > cap:
        raise ValueError(f"refused: over the {cap >> 20} MiB a notebook may have")
    return data
