"""``recover``'s integrity check in its child process (``IntegrityCheck(apart=True,
background=True)``): the b-trees and FTS5's own checks both run there, and read the
work copy through ``mmap``: each of its connections maps the file instead of copying
every page again through ``pread``. Invariants: the lines, the abort note and the
verdicts are the ones the checks give in this process with plain reads, on healthy and
damaged Hermes files; this process opens no connection of its own for them; a child
that dies of SIGBUS (a mapped page that could not be read) costs no verdict: the FTS
checks run again in a child reading as usual, the b-trees here if it had not finished
them, and ``wait`` still says each FTS table was checked apart (else ``recover``
diagnoses the whole file again); the dead child leaves no core.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from lab import corruption
from lab.hermes_fixtures import SMALL
from statewarden.recovery.decoding.checks_child import EarlyChecker
from statewarden.recovery.decoding.integrity import IntegrityCheck

TABLES = ["sessions", "messages"]
CASES: dict[str, Callable[[Path], corruption.Case]] = {
    "healthy": lambda d: corruption.fresh_copy(d, SMALL),
    "phantom row": lambda d: corruption.phantom_row(d, spec=SMALL),
    "zeroed messages leaf": lambda d: corruption.zeroed_leaf(d, spec=SMALL),
    "stale index entries": lambda d: corruption.stale_index_entries(d, spec=SMALL),
    "zeroed interior page": lambda d: corruption.zeroed_interior(d, spec=SMALL),
    "flipped child pointer": lambda d: corruption.flipped_child_pointer(d, spec=SMALL),
    "broken overflow": lambda d: corruption.broken_overflow(d, spec=SMALL),
    "truncated": lambda d: corruption.truncated(d, keep_pages=400, spec=SMALL),
    "invalid UTF-8": lambda d: corruption.invalid_utf8(d, spec=SMALL),
    "WAL commits (read through the WAL)": lambda d: corruption.wal_commits(d, spec=SMALL),
    "FTS shadow pages zeroed": lambda d: corruption.scribbled_trees(
        d, {"messages_fts_data": 3, "messages_fts_trigram_data": 2}, spec=SMALL
    ),
}
# No b-tree or FTS damage: what the check must find there is nothing.
CLEAN = {"healthy", "invalid UTF-8", "WAL commits (read through the WAL)"}
Outcome = tuple[list[str], bool, str | None, dict[str, str] | None]


def _plain(db: Path) -> Outcome:
    """The checks in this process, each FTS table on a connection of its own in a thread,
    reading as usual."""
    conn = apsw.Connection(str(db))
    try:
        check = IntegrityCheck(conn, None, TABLES)
        return (*check.result(), check.own_verdicts())
    finally:
        conn.close()


def _apart(db: Path, *, early: bool) -> tuple[Outcome, bool]:
    """The checks as ``recover`` runs them (FTS checks in the mapped child, b-trees in a
    thread), and whether ``wait`` took every verdict from the child."""
    conn = apsw.Connection(str(db))
    try:
        with EarlyChecker() as ahead:
            check = IntegrityCheck(
                conn, None, TABLES, apart=True, background=True, early=ahead if early else None
            )
            whole = check.wait()
            return (*check.result(), check.own_verdicts()), whole
    finally:
        conn.close()


@pytest.mark.parametrize("early", [True, False], ids=["started ahead", "started at once"])
@pytest.mark.parametrize("name", list(CASES))
def test_mapped_child_gives_what_plain_reads_give(tmp_path: Path, name: str, early: bool) -> None:
    """Lines, whether the check finished, its abort note and each FTS table's own
    verdict: the same from the mapped child as from plain reads in this process; each
    case with damage in its b-trees carries lines or an abort, the FTS damage failing
    verdicts, the others none (not two empty comparisons)."""
    case = CASES[name](tmp_path)
    outcome, whole = _apart(case.db, early=early)
    assert whole
    assert outcome == _plain(case.db)
    verdicts = outcome[3]
    if name in CLEAN:
        assert outcome[:3] == ([], True, None)
        assert verdicts == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
    elif name == "FTS shadow pages zeroed":
        assert verdicts is not None
        assert verdicts["messages_fts"] != "ok"
        assert verdicts["messages_fts_trigram"] != "ok"
    else:
        assert outcome[0] or not outcome[1]  # the damage is in the lines, or stopped them


def _descriptors_of(db: Path) -> int:
    """How many of this process's descriptors are open on ``db``."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == str(db.resolve()))


def test_no_connection_here_for_the_checks(tmp_path: Path) -> None:
    """While the child checks, this process holds no descriptor of the file but its
    caller's connection's (the b-trees were checked on a connection of a thread here);
    the b-tree lines come from the child, the same as plain reads give."""
    db = corruption.zeroed_leaf(tmp_path, spec=SMALL).db
    conn = apsw.Connection(str(db))
    try:
        conn.execute("SELECT count(*) FROM sessions").get  # noqa: B018 - opens the file
        caller = _descriptors_of(db)
        check = IntegrityCheck(conn, None, TABLES, apart=True, background=True)
        during = _descriptors_of(db)
        btrees = check.btree_result()
        check.result()
    finally:
        conn.close()
    assert caller >= 1
    assert during == caller
    plain = apsw.Connection(str(db))
    try:
        here = IntegrityCheck(plain, None, TABLES, background=True)
        assert btrees == here.btree_result()
        assert btrees[0]  # the zeroed leaf is in the lines
        here.result()
    finally:
        plain.close()


def _children() -> set[int]:
    """The pids of this process's children, whichever of its threads started them."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        pids.update(int(p) for p in (task / "children").read_text().split())
    return pids


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _stopped_once_mapped(pid: int, db: Path) -> bool:
    """Stop ``pid`` (SIGSTOP) as soon as it maps ``db``; False when it ended first."""
    needle = str(db.resolve())
    while True:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return False
        if needle in maps:
            os.kill(pid, signal.SIGSTOP)
            break
        if _state(pid) == "Z":
            return False
    while (state := _state(pid)) not in ("T", "t", "Z"):
        time.sleep(0.001)
    return state != "Z"


def _killed_by_sigbus(db: Path, pristine: bytes) -> tuple[Outcome, bool] | None:
    """Start the checks as ``recover`` does; once the child maps the file, stop it, cut
    the file to one page under its mapping and let it go on: its next page read is a
    SIGBUS. The file is put back whole before this process takes any result (it reads
    the file only then). None when the child ended before it could be stopped (it was
    too quick) or read nothing more."""
    conn = apsw.Connection(str(db))
    try:
        before = _children()
        with EarlyChecker() as ahead:
            (pid,) = _children() - before
            check = IntegrityCheck(conn, None, TABLES, apart=True, background=True, early=ahead)
            if not _stopped_once_mapped(pid, db):
                check.result()
                return None
            os.truncate(db, 4096)
            os.kill(pid, signal.SIGCONT)
            died = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            assert died is not None
            db.write_bytes(pristine)
            if (died.si_code, died.si_status) != (os.CLD_KILLED, signal.SIGBUS):
                check.result()
                return None  # it had read its last page already
            whole = check.wait()
            return (*check.result(), check.own_verdicts()), whole
    finally:
        conn.close()


def test_child_killed_by_sigbus_is_run_again_reading_as_usual(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real child dies of SIGBUS reading a mapped page cut from under it, and dumps
    no core even where this process's limit allows one (CLD_KILLED, no file in its
    folder); the FTS checks run again unmapped give every verdict (``wait`` is True: no
    diagnosis made again), and those and the b-tree lines are the ones plain reads give
    on the same file."""
    case = corruption.scribbled_trees(tmp_path / "case", {"messages_fts_data": 3}, spec=SMALL)
    pristine = case.db.read_bytes()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    try:
        got = _sigbus_in_20(case.db, pristine)
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    outcome, whole = got
    assert whole
    assert outcome == _plain(case.db)
    assert outcome[3] is not None
    assert outcome[3]["messages_fts"] != "ok"
    assert list(cwd.iterdir()) == []


def _sigbus_in_20(db: Path, pristine: bytes) -> tuple[Outcome, bool]:
    """``_killed_by_sigbus`` until a child was killed (20 tries)."""
    for _attempt in range(20):
        got = _killed_by_sigbus(db, pristine)
        if got is not None:
            return got
    pytest.fail("no child was killed by SIGBUS in 20 attempts")
