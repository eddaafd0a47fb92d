"""``check``: one database diagnosed on a private copy; the source is only read.

The one function both ``statewardenctl check`` and the daemon's ``check`` request
call. The copy is the only step that reads the source; ``copy_guard`` (a lock, for a
caller that also holds SQLite connections to the source, see docs/safety.md rule 2)
is held around that step alone, and the copy is diagnosed and removed
outside it.

``mapped``: the copy is diagnosed in a forked child whose SQLite connections read it
through ``mmap`` (``PRAGMA mmap_size``) instead of ``pread``: every connection of the
check (the b-trees', each FTS table's, the scans') reads the same pages, and each
``pread`` copies them again (most of the kernel's part of a check's CPU). A mapped
page that cannot be read (an I/O error) is a SIGBUS, which kills the process that
touched it: here the child, and the copy is then diagnosed again in this process
with plain reads, as without ``mapped``. Only from a process with one thread (a fork
copies no other thread, and whatever lock another holds stays held in the child), so
never in the daemon; the mapped file's pages count in the child's RSS (page cache,
shared, not its own memory).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any, NoReturn

import apsw

from statewarden.progress import ProgressFn
from statewarden.recovery.bundle import WorkCopy, make_work_copy
from statewarden.recovery.diagnose import diagnose
from statewarden.recovery.diagnosis import Diagnosis

# As much of the file as SQLite maps (its SQLITE_MAX_MMAP_SIZE caps it: 2 GiB by
# default); past that, pages are read as usual.
MAPPED_BYTES = 1 << 40
Diagnose = Callable[[ProgressFn | None], Diagnosis]


def check_database(
    source: Path,
    work_parent: Path,
    *,
    progress: ProgressFn | None = None,
    copy_guard: AbstractContextManager[Any] | None = None,
    mapped: bool = False,
) -> Diagnosis:
    """Copy ``source``'s bundle into a private work dir under ``work_parent`` (holding
    ``copy_guard`` while copying), diagnose the copy, remove it. The diagnosis names
    ``source``, not the copy. ``mapped``: diagnosed in a child reading the copy
    through ``mmap`` where it can be (see the module's docstring)."""
    with copy_guard if copy_guard is not None else contextlib.nullcontext():
        work = make_work_copy(source, work_parent, progress=progress)
    try:

        def run(report: ProgressFn | None) -> Diagnosis:
            return diagnose(work, progress=report)

        result = diagnosed_mapped(run, progress) if mapped else None
        if result is None:
            result = run(progress)
        header_count_wrong(work, result)
    finally:
        work.cleanup()
    result.path = str(source)
    return result


def header_count_wrong(work: WorkCopy, result: Diagnosis) -> str | None:
    """A header whose (valid) page count is larger than the file, the file a whole
    number of pages, and a complete integrity check of the copy, read as far as the
    file goes, that finds nothing wrong: every page the database references is in the
    file, so the header's count is wrong, not the file short. The diagnosis' note says
    so instead of "truncated", and the class is ``unreadable`` (SQLite refuses the file
    as it is; nothing is lost). Returns that note (``None``: not this case). Call
    before the work copy is removed."""
    header = work.source_header
    size = os.stat(work.db).st_size
    present = size // header.page_size
    if not (
        work.truncated_note
        and work.truncated_note in result.notes
        and result.integrity_ok
        and header.page_count_valid
        and size % header.page_size == 0
        and present < header.page_count
    ):
        return None
    note = (
        f"the header says {header.page_count} pages, the file holds {present} ({size} bytes)"
        " and every page the database references: the header's page count is wrong, not"
        " the file short; SQLite refuses the file as it is"
    )
    result.notes[result.notes.index(work.truncated_note)] = note
    result.damage = "unreadable"
    return note


def diagnosed_mapped(run: Diagnose, progress: ProgressFn | None) -> Diagnosis | None:
    """``run`` in a forked child whose SQLite connections map the file; its progress
    reported here, its diagnosis (or what it raised) handed back through a pipe. None
    when it cannot be done that way: more than one thread here, no ``fork``, or a child
    that died (a SIGBUS: a mapped page that could not be read) or said nothing
    usable; the caller then runs ``run`` itself, reading as usual."""
    if threading.active_count() != 1 or not hasattr(os, "fork"):
        return None
    reader_fd, writer_fd = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()  # nothing buffered here is written twice by the child
    try:
        pid = os.fork()
    except OSError:
        os.close(reader_fd)
        os.close(writer_fd)
        return None
    if pid == 0:
        os.close(reader_fd)
        _child(run, writer_fd, forward=progress is not None)
    os.close(writer_fd)
    try:
        with os.fdopen(reader_fd, "rb") as reader:
            outcome = _follow(reader, progress)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # an interrupted check leaves no child reading
        raise
    finally:
        os.waitpid(pid, 0)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _follow(reader: IO[bytes], progress: ProgressFn | None) -> Diagnosis | Exception | None:
    """The child's messages to their end: its progress passed to ``progress``, then its
    diagnosis or the exception it raised; None if it ended without either."""
    while True:
        try:
            message = pickle.load(reader)  # noqa: S301 - our own child, through our own pipe
        except Exception:  # noqa: BLE001 - the pipe's end, or a message cut short
            return None
        match message:
            case ("progress", str(phase), int(done), int(total)):
                if progress is not None:
                    progress(phase, done, total)
            case ("diagnosis", Diagnosis() as diagnosis):
                return diagnosis
            case ("raised", Exception() as exc):
                return exc
            case _:
                return None


def _map_pages(conn: apsw.Connection) -> None:
    """Each new connection of the child reads the file through ``mmap``; one that
    cannot be set reads as usual (the diagnosis, not this, says what is wrong)."""
    with contextlib.suppress(apsw.Error):
        conn.execute(f"PRAGMA mmap_size = {MAPPED_BYTES}")


def _child(run: Diagnose, writer_fd: int, *, forward: bool) -> NoReturn:
    """The forked child: ``run`` with mapped reads, each message pickled to the pipe.
    It ends with ``os._exit``: the parent's cleanup and exit handlers are the parent's."""
    code = 1
    try:
        with os.fdopen(writer_fd, "wb") as out:

            def send(*message: object) -> None:
                out.write(pickle.dumps(message))
                out.flush()

            def report(phase: str, done: int, total: int) -> None:
                send("progress", phase, done, total)

            apsw.connection_hooks.append(_map_pages)
            try:
                diagnosis = run(report if forward else None)
            except Exception as exc:  # noqa: BLE001 - raised again in the parent
                send("raised", exc)
            else:
                send("diagnosis", diagnosis)
        code = 0
    finally:
        os._exit(code)
