"""``check`` diagnosing its private copy in a forked child that reads it through mmap.

``statewardenctl check`` read the copy through ``pread`` on every connection (b-trees,
each FTS table, the scans), each copying the same pages again. It now diagnoses in a
child whose connections map the file (``check_database(mapped=True)``). Invariants: the
diagnosis is the one plain reads give, on every kind of damage; a child that dies (a
SIGBUS: a mapped page that could not be read) leaves the diagnosis to this process,
reading as usual; what the child raised is raised here; its progress is reported here;
a process with other threads (the daemon, whose verification runs in one) never forks.
Here because the daemon's checks are the ones that must stay in-process.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from lab import corruption
from lab.corruption import Case
from statewarden.errors import DatabaseUnreadable
from statewarden.progress import ProgressFn
from statewarden.recovery.check import check_database, diagnosed_mapped
from statewarden.recovery.diagnose import diagnose
from statewarden.recovery.diagnosis import Diagnosis

CASES: dict[str, Callable[[Path], Case]] = {
    "healthy": corruption.fresh_copy,
    "phantom row": corruption.phantom_row,
    "zeroed leaf": corruption.zeroed_leaf,
    "zeroed interior": corruption.zeroed_interior,
    "broken overflow": corruption.broken_overflow,
    "truncated": lambda d: corruption.truncated(d, keep_pages=400),
    "WAL commits": corruption.wal_commits,
    "invalid UTF-8": corruption.invalid_utf8,
    "stale index entries": corruption.stale_index_entries,
}


def one_thread() -> None:
    """The tests below need a process of one thread: else nothing is forked."""
    assert threading.active_count() == 1, threading.enumerate()


@pytest.mark.parametrize("name", sorted(CASES))
def test_mapped_check_diagnoses_as_plain_reads(tmp_path: Path, name: str) -> None:
    """Healthy and eight kinds of damage: the mapped child's diagnosis (class, findings,
    error lines, every field of the JSON) is the one plain reads give."""
    case = CASES[name](tmp_path / "case")
    one_thread()
    (tmp_path / "w").mkdir()
    mapped = check_database(case.db, tmp_path / "w", mapped=True).to_json()
    plain = check_database(case.db, tmp_path / "w").to_json()
    assert mapped == plain
    assert list((tmp_path / "w").iterdir()) == []  # both copies removed


def mmap_size_seen(db: Path) -> Callable[[ProgressFn | None], Diagnosis]:
    """A diagnosis of ``db`` with, as its last note, the ``mmap_size`` a new connection
    has in the process that made it."""

    def run(progress: ProgressFn | None) -> Diagnosis:
        result = diagnose(db, progress=progress)
        conn = apsw.Connection(str(db))
        try:
            result.notes.append(str(conn.execute("PRAGMA mmap_size").get))
        finally:
            conn.close()
        return result

    return run


def test_child_maps_the_file_and_reports_its_progress_here(tmp_path: Path) -> None:
    """The child's connections read through mmap (this process's do not), and each
    progress step it makes reaches this process's progress function."""
    db = corruption.fresh_copy(tmp_path / "case").db
    steps: list[tuple[str, int, int]] = []
    one_thread()
    result = diagnosed_mapped(mmap_size_seen(db), lambda *step: steps.append(step))
    assert result is not None
    assert int(result.notes[-1]) > 0
    here = apsw.Connection(str(db))
    try:
        assert here.execute("PRAGMA mmap_size").get == 0
    finally:
        here.close()
    assert ("integrity check", 0, 0) in steps
    assert {phase for phase, _d, _t in steps} >= {"integrity check", "scan tables"}


def test_child_killed_by_sigbus_leaves_the_diagnosis_to_plain_reads(tmp_path: Path) -> None:
    """A child that dies of SIGBUS gives no diagnosis (None: the caller reads as usual),
    and nothing of it is left running."""
    parent = os.getpid()
    children: list[int] = []

    def run(_progress: ProgressFn | None) -> Diagnosis:
        if os.getpid() != parent:
            faulthandler.disable()  # pytest's: the child dies of the signal, untold
            os.kill(os.getpid(), signal.SIGBUS)
        children.append(os.getpid())
        raise AssertionError("run here, not in a child")

    one_thread()
    assert diagnosed_mapped(run, None) is None
    assert children == []  # never run in this process by diagnosed_mapped itself


def test_what_the_child_raises_is_raised_here(tmp_path: Path) -> None:
    """An unreadable database found in the child is the same error here: its type and
    its one line."""

    def run(_progress: ProgressFn | None) -> Diagnosis:
        raise DatabaseUnreadable(f"{tmp_path}/state.db: the schema cannot be read")

    one_thread()
    with pytest.raises(DatabaseUnreadable, match="the schema cannot be read"):
        diagnosed_mapped(run, None)


def test_no_fork_with_another_thread_running(tmp_path: Path) -> None:
    """With a second thread alive (as in the daemon) nothing is forked and ``run`` is
    not called: the caller diagnoses in-process."""
    called: list[ProgressFn | None] = []

    def run(progress: ProgressFn | None) -> Diagnosis:
        called.append(progress)
        raise AssertionError("not to be run")

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert diagnosed_mapped(run, None) is None
    finally:
        stop.set()
        other.join()
    assert called == []
