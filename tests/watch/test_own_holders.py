"""The holder watch and statewarden's own processes, and the stale_holder incidents Hermes'
log lines raise: real processes holding a real Hermes database, real log records through
the rules, a real incident book."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lab.hermes_fixtures import holding
from statewarden.config import DEFAULT_EXPECTED_KINDS, Config
from statewarden.daemon.holders import HolderScans
from statewarden.incidents.book import IncidentBook
from statewarden.incidents.signals import Found, Observation, Signal
from statewarden.targets import target_for_db
from statewarden.watch.holders import LOG_STALE_KEYS, HolderWatcher
from statewarden.watch.records import parse_record
from statewarden.watch.rules import signals_from_record

pytestmark = pytest.mark.process

# A read-only SQLite connection held until stdin closes (what a verification holds).
HOLD = (
    "import sqlite3, sys; c = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True);"
    " c.execute('select count(*) from sessions').fetchall(); print('ready', flush=True);"
    " sys.stdin.read()"
)
# The daemon's stand-in: a connection of its own, and a checker child it starts the way
# recovery/decoding/integrity.py does (``python -I -c``), holding the database too.
DAEMON = (
    "import sqlite3, subprocess, sys; db = sys.argv[1]; hold = sys.argv[2];"
    " c = sqlite3.connect('file:' + db + '?mode=ro', uri=True);"
    " c.execute('select count(*) from sessions').fetchall();"
    " child = subprocess.Popen([sys.executable, '-I', '-c', hold, db], stdout=subprocess.PIPE,"
    " text=True); assert child.stdout.readline().strip() == 'ready';"
    " print(child.pid, flush=True); sys.stdin.read(); child.kill(); child.wait()"
)


@contextmanager
def named_statewarden(tmp_path: Path, code: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``code`` run by an interpreter named ``statewarden`` (its comm and argv[0])."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "statewarden"
    if not exe.exists():
        exe.symlink_to(os.path.realpath(sys.executable))
    proc = subprocess.Popen(
        [str(exe), "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                f.close()


def held_pids(found: list[Found], kind: str) -> set[str]:
    return {f.key for f in found if isinstance(f, Signal) and f.kind == kind and not f.clears}


def arrived(found: list[Found]) -> set[int]:
    return {
        int(f.fields["pid"])
        for f in found
        if isinstance(f, Observation) and f.what == "holder_arrived"
    }


def test_own_processes_are_no_holders_a_namesake_is(tmp_path: Path, hermes_home: Path) -> None:
    """The watching process (known by pid) and the checker child it started hold the
    database and are none of: an arrival, a holder in the scan kept, unexpected_holder,
    multi_writer. A process named statewarden that it did not start is a holder like any
    (unknown kind: unexpected_holder). A watcher with no own pid sees all three."""
    db = hermes_home / "state.db"
    with named_statewarden(tmp_path, DAEMON, str(db), HOLD) as daemon:
        assert daemon.stdout is not None
        child = int(daemon.stdout.readline())
        w = HolderWatcher(
            [db], max_writers=0, expected_kinds=DEFAULT_EXPECTED_KINDS, own_pid=daemon.pid
        )
        blind = HolderWatcher([db], max_writers=0, expected_kinds=DEFAULT_EXPECTED_KINDS)
        w.diff(w.scan(), now=1.0)
        blind.diff(blind.scan(), now=1.0)
        with named_statewarden(tmp_path, HOLD, str(db)) as other:
            assert other.stdout is not None
            assert other.stdout.readline().strip() == "ready"
            seen = blind.diff(blind.scan(), now=2.0)
            assert held_pids(seen, "unexpected_holder") == {
                str(daemon.pid),
                str(child),
                str(other.pid),
            }
            assert {h.pid for h in blind.last[str(db)].holders} == {daemon.pid, child, other.pid}
            found = w.diff(w.scan(), now=2.0)
            assert arrived(found) == {other.pid}
            assert held_pids(found, "unexpected_holder") == {str(other.pid)}
            assert held_pids(found, "multi_writer") == {""}
            (summary,) = (f.summary for f in found if isinstance(f, Signal) and not f.key)
            assert summary.startswith("1 processes hold state.db")
            assert {h.pid for h in w.last[str(db)].holders} == {other.pid}
        # Every signal about it clears once the namesake is gone; the daemon stays unseen.
        gone = w.diff(w.scan(), now=3.0)
        assert held_pids(gone, "unexpected_holder") == set()
        assert {h.pid for h in w.last[str(db)].holders} == set()


def test_the_daemons_holder_watch_knows_its_own_pid() -> None:
    """The daemon's holder scans exempt the daemon's own pid (and so its children)."""
    scans = HolderScans(Config(), lambda _f: None)
    assert scans.watcher.own_pid == os.getpid()


DELETED_WAL = (
    "2026-09-07 17:05:28,701 ERROR hermes_state_dbfile: FATAL: session storage stopped "
    "writing because another Hermes process still holds a deleted state.db-wal or "
    "state.db-shm inode (an old copy of the write-ahead log)."
)
REPLACED = (
    "2026-09-07 17:05:29,014 CRITICAL gateway.session: FATAL: state.db was replaced "
    "underneath the gateway (inode 12 -> 13); stopping writes"
)


def log_incidents(book: IncidentBook, db: Path, w: HolderWatcher) -> list[int]:
    """Hermes' two stale-holder lines through the rules into ``book`` (and named to the
    watcher ``w``, as the daemon does); their incident ids."""
    ids = []
    for line in (DELETED_WAL, REPLACED):
        (sig,) = signals_from_record(parse_record(line, "errors.log"), target_for_db(db), now=5.0)
        assert isinstance(sig, Signal)
        assert (sig.kind, sig.key in LOG_STALE_KEYS) == ("stale_holder", True)
        update = book.record(sig)
        assert update is not None
        w.awaiting_proof(sig.db, sig.key)
        ids.append(update.incident.id)
    return ids


def record_all(book: IncidentBook, found: list[Found]) -> None:
    for f in found:
        if isinstance(f, Signal):
            book.record(f)


def test_log_raised_stale_holder_resolves_when_a_scan_proves_it_gone(
    tmp_path: Path, hermes_home: Path
) -> None:
    """Hermes' deleted-WAL and replaced-file lines open stale_holder incidents no watcher
    flags by pid. While a real writer holds a deleted -wal inode they stay open; once it is
    gone, the next complete scan resolves both; a fresh watcher (a daemon restart) on a
    book still holding them open resolves them at its first scan."""
    db = hermes_home / "state.db"
    book = IncidentBook(tmp_path / "incidents.json")
    w = HolderWatcher([db], max_writers=8, expected_kinds=DEFAULT_EXPECTED_KINDS)
    ids = log_incidents(book, db, w)
    with holding(hermes_home) as h:
        wal = Path(f"{db}-wal")
        assert wal.exists()
        wal.unlink()  # the writer keeps the old -wal inode: a stale holder
        found = w.diff(w.scan(), now=10.0)
        assert held_pids(found, "stale_holder") == {str(h.pid)}
        record_all(book, found)
        assert [book.get(i).state for i in ids] == ["open", "open"]
    found = w.diff(w.scan(), now=11.0)
    record_all(book, found)
    assert [book.get(i).state for i in ids] == ["resolved", "resolved"]
    assert "no process holds an old or deleted" in book.get(ids[0]).resolution
    # Hermes logs it again while no one holds a deleted inode: the next scan resolves it.
    ids = log_incidents(book, db, w)
    assert [book.get(i).state for i in ids] == ["open", "open"]
    record_all(book, w.diff(w.scan(), now=12.0))
    assert [book.get(i).state for i in ids] == ["resolved", "resolved"]


def test_log_raised_stale_holder_open_at_a_daemon_start_resolves_at_its_first_scan(
    tmp_path: Path, hermes_home: Path
) -> None:
    """A daemon restart: the book holds the log-raised incidents open; the daemon's holder
    scans, told the open incidents at start, resolve them at the first scan."""
    db = hermes_home / "state.db"
    book = IncidentBook(tmp_path / "incidents.json")
    ids = log_incidents(book, db, HolderWatcher([db], max_writers=8, expected_kinds=()))
    book.save()
    again = IncidentBook(tmp_path / "incidents.json")
    scans = HolderScans(Config(), lambda f: record_all(again, [f]))
    scans.set_dbs([db])
    scans.open_at_start(again.open_incidents())
    asyncio.run(scans.scan())
    assert [again.get(i).state for i in ids] == ["resolved", "resolved"]


def test_a_holder_seen_only_by_its_locks_proves_nothing(hermes_home: Path) -> None:
    """A scan where a holder was seen only through /proc/locks (another user's process)
    cannot prove no deleted inode is held: no clear is given for the log-raised incidents;
    an incomplete scan gives none either."""
    db = hermes_home / "state.db"
    w = HolderWatcher([db], max_writers=8, expected_kinds=DEFAULT_EXPECTED_KINDS)
    for key in LOG_STALE_KEYS:
        w.awaiting_proof(str(db), key)
    with holding(hermes_home):
        (scan,) = w.scan()
        assert scan.complete
        assert scan.holders
        scan.holders[0].via = "locks"
        assert not [f for f in w.diff([scan], now=1.0) if isinstance(f, Signal) and f.clears]
        (scan,) = w.scan()
        scan.problems.append("a process could not be read")
        assert not [f for f in w.diff([scan], now=2.0) if isinstance(f, Signal) and f.clears]
        (scan,) = w.scan()
        clears = [f.key for f in w.diff([scan], now=3.0) if isinstance(f, Signal) and f.clears]
        assert sorted(clears) == sorted(LOG_STALE_KEYS)
