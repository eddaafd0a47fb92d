"""Reads of the live file while a writer may open it (``sqlite.read_live``).

A WAL file nobody has open is read ``immutable``, and an immutable reader takes no lock.
A maintenance run's post-check read the file it had just swapped in that way, while a
restarted ``hermes serve --isolated`` opened it, wrote and checkpointed: the check saw
pages of two moments and called a healthy file damaged ("integrity FAILED"; the demo
failed about once in 50 runs under load). Invariant: a read of a file a writer may open
counts only if the writer provably did not come in during it; else it is read again,
through SQLite's locks once the writer is there. The same holds for a snapshot copied
from a file alone (``snapshots._backup``).

The writer here is a real process with the stdlib ``sqlite3``, as Hermes writes; it is
started from inside the read, so the race happens on every run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from statewarden.maintenance import snapshots
from statewarden.sidecars import SIDECAR_SUFFIXES
from statewarden.sqlite import closed_wal, read_live

pytestmark = pytest.mark.process  # a real writer process

ROWS = 100
WRITER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("BEGIN IMMEDIATE")
conn.executemany("INSERT INTO t (x) VALUES (?)", [(i,) for i in range(int(sys.argv[2]))])
conn.execute("COMMIT")
conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
if sys.argv[3] == "stay":
    print("ready", flush=True)
    sys.stdin.read()
conn.close()
"""


def closed_file(tmp_path: Path) -> Path:
    """A WAL file with ROWS rows that nobody has open: no sidecar beside it."""
    db = tmp_path / "state.db"
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    with conn:
        conn.executemany("INSERT INTO t (x) VALUES (?)", [(i,) for i in range(ROWS)])
    conn.close()
    assert closed_wal(db)
    return db


def write(db: Path, rows: int) -> None:
    """A writer opens the file, commits ``rows`` rows, checkpoints them into the main
    file and closes it (the last connection: its -wal and -shm are deleted again)."""
    subprocess.run([sys.executable, "-c", WRITER, str(db), str(rows), "go"], check=True)


def count(conn: apsw.Connection) -> int:
    row = conn.execute("SELECT count(*) FROM t").fetchone()
    assert row is not None
    return int(row[0])


def sidecars(db: Path) -> list[str]:
    return [s for s in SIDECAR_SUFFIXES if os.path.lexists(f"{db}{s}")]


def test_a_writer_that_came_and_went_during_the_read_voids_it(tmp_path: Path) -> None:
    """The writer opens, writes, checkpoints and closes during the first (immutable)
    read: that read is thrown away and the file read again, which sees the rows it
    wrote; nothing is left beside the file."""
    db = closed_file(tmp_path)
    seen: list[int] = []

    def read(conn: apsw.Connection) -> int:
        if not seen:
            n = count(conn)
            write(db, 50)
            seen.append(n)
            return n
        seen.append(count(conn))
        return seen[-1]

    assert read_live(db, read) == ROWS + 50
    assert seen == [ROWS, ROWS + 50]
    assert sidecars(db) == []


def test_a_writer_that_stays_is_read_through_its_wal(tmp_path: Path) -> None:
    """The writer opens during the read and stays: the read again goes through SQLite's
    locks and the writer's -wal, and sees what the writer committed."""
    db = closed_file(tmp_path)
    writer: list[subprocess.Popen[str]] = []

    def read(conn: apsw.Connection) -> int:
        if not writer:
            proc = subprocess.Popen(
                [sys.executable, "-c", WRITER, str(db), "30", "stay"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            writer.append(proc)
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
        return count(conn)

    try:
        assert read_live(db, read) == ROWS + 30
    finally:
        proc = writer[0]
        proc.communicate("", timeout=30)
    assert proc.returncode == 0


def test_a_file_nobody_opens_is_read_once_and_left_as_it_was(tmp_path: Path) -> None:
    """No writer: one immutable read, and no -wal or -shm is left beside the file."""
    db = closed_file(tmp_path)
    calls: list[int] = []

    def read(conn: apsw.Connection) -> int:
        calls.append(count(conn))
        return calls[-1]

    assert read_live(db, read) == ROWS
    assert calls == [ROWS]
    assert sidecars(db) == []


def test_an_error_of_a_read_a_writer_came_into_is_not_the_answer(tmp_path: Path) -> None:
    """The immutable read fails (as a read of half-checkpointed pages can) while a writer
    came in: the failure is thrown away with the read, and the file read again."""
    db = closed_file(tmp_path)
    calls: list[int] = []

    def read(conn: apsw.Connection) -> int:
        calls.append(0)
        if len(calls) == 1:
            write(db, 10)
            raise apsw.CorruptError("database disk image is malformed")
        return count(conn)

    assert read_live(db, read) == ROWS + 10
    assert len(calls) == 2


def test_an_error_of_a_read_nobody_disturbed_is_raised(tmp_path: Path) -> None:
    """The same failure with no writer is the file's own: raised, not read again."""
    db = closed_file(tmp_path)
    calls: list[int] = []

    def read(conn: apsw.Connection) -> int:
        calls.append(0)
        raise apsw.CorruptError("database disk image is malformed")

    with pytest.raises(apsw.CorruptError):
        read_live(db, read)
    assert len(calls) == 1


def test_a_snapshot_copied_while_a_writer_came_in_is_copied_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``snapshots._backup`` of a file alone reads it immutable: a writer that comes in
    during the copy voids the copy, which is taken again and holds the writer's rows.
    (The writer is run right after the first copy is read, by wrapping the copy step:
    the only way to place a real writer inside the backup API's one step.)"""
    db = closed_file(tmp_path)
    real_backup_from = snapshots._backup_from
    copies: list[bool] = []

    def backup_from(src: Path, dest: Path, of: Path, *, immutable: bool, synced: bool) -> int:
        cookie = real_backup_from(src, dest, of, immutable=immutable, synced=synced)
        if not copies:
            write(db, 20)
        copies.append(immutable)
        return cookie

    monkeypatch.setattr(snapshots, "_backup_from", backup_from)
    copy = snapshots.backup_copy(db, tmp_path / "copies")
    conn = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert count(conn) == ROWS + 20
    finally:
        conn.close()
    assert copies == [True, True]
    assert sidecars(db) == []


@pytest.mark.parametrize("error", [apsw.BusyError, apsw.SchemaChangeError])
def test_a_busy_or_changing_writer_makes_the_read_wait_not_fail(
    tmp_path: Path, error: type[apsw.Error]
) -> None:
    """A writer's lock held past the timeout, or its VACUUM under the read, says nothing
    of the file: the read is taken again (a post-check once failed a healthy file so)."""
    db = closed_file(tmp_path)
    Path(f"{db}-wal").write_bytes(b"")  # a writer is there: the locked read is taken
    calls: list[int] = []

    def read(conn: apsw.Connection) -> int:
        calls.append(0)
        if len(calls) == 1:
            raise error("database is locked")
        return count(conn)

    assert read_live(db, read) == ROWS
    assert len(calls) == 2
