"""The daemon's verification (``daemon/verify.py``) reads the database as SQLite presents
it: through a symlinked state.db it takes the -wal beside the real file along, and its
backup-API copy (for a writer too busy for a raw copy) is never one of another database
nor leaves a sidecar beside the live file."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import apsw
import pytest

from statewarden.daemon.verify import check_live, snapshot_copy
from statewarden.errors import DatabaseUnreadable
from tests.support.live_bundle import (
    bundle,
    killed_writer,
    live_copy,
    plant_wal_of_another_database,
)
from tests.support.maintenance import rows

pytestmark = pytest.mark.process


def rows_checked(db: Path, work: Path, table: str) -> int | None:
    diagnosis, _copied = check_live(db, work, None, contextlib.nullcontext())
    assert diagnosis.path == str(db)
    return next(t.distinct_keys for t in diagnosis.tables if t.name == table)


def test_a_symlinked_state_db_is_verified_with_the_real_files_wal(tmp_path: Path) -> None:
    """state.db a symlink to the real file, whose -wal holds commits a real Hermes
    writer made before it was killed: the verification counts the sessions and messages
    SQLite presents (it copied the symlink's own sidecars, none, and verified the older
    file alone)."""
    db = live_copy(tmp_path / "home")
    killed_writer(db.parent, tmp_path / "bin")
    real = db.with_name("real.db")
    for sfx in ("", "-wal", "-shm"):
        Path(f"{db}{sfx}").rename(f"{real}{sfx}")
    db.symlink_to(real.name)
    (want,) = rows(real, "SELECT (SELECT count(*) FROM sessions), count(*) FROM messages")
    got = (
        rows_checked(db, tmp_path / "work", "sessions"),
        rows_checked(db, tmp_path / "work", "messages"),
    )
    assert got == want


def test_the_backup_copy_of_a_closed_wal_creates_no_shm(tmp_path: Path) -> None:
    """A killed writer's -wal with its -shm gone: the backup-API copy holds the -wal's
    commits and creates no -shm beside the live file (a read-only reader made one)."""
    db = live_copy(tmp_path / "home")
    killed_writer(db.parent, tmp_path / "bin")
    Path(f"{db}-shm").unlink()
    sql = "SELECT count(*), max(id) FROM messages"
    want = rows(db, sql)
    before = bundle(db.parent)
    copy = snapshot_copy(db, tmp_path / "work")
    assert bundle(db.parent) == before
    conn = apsw.Connection(str(copy))
    try:
        assert conn.execute(sql).fetchall() == want
    finally:
        conn.close()
        shutil.rmtree(copy.parent)


def test_the_backup_copy_is_never_of_another_database(tmp_path: Path) -> None:
    """A -wal another database wrote, beside state.db: the backup-API copy is refused as
    check refuses that -wal (it copied the other database SQLite replays over the file)."""
    db = live_copy(tmp_path / "home")
    plant_wal_of_another_database(db, tmp_path / "other.db")
    before = bundle(db.parent)
    with pytest.raises(DatabaseUnreadable, match="belongs to another database"):
        snapshot_copy(db, tmp_path / "work")
    assert bundle(db.parent) == before
    assert not any((tmp_path / "work").iterdir())
