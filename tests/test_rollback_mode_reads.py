"""Reads of a live file in rollback (DELETE) mode, the mode Hermes 0.22 writes on
Debian 12's SQLite.

A file with no ``-wal`` and no ``-shm`` was read ``immutable`` (no lock taken): right for
a closed WAL file, wrong for a rollback-mode one, whose writer changes the main file in
place and, killed in the middle of a transaction, leaves a hot ``-journal``. A snapshot
of such a file copied the half-written pages and called the live file damaged. Invariant:
only a closed WAL file (its header says WAL, no ``-wal``, ``-shm`` or ``-journal``) is
read immutable; any other read takes SQLite's lock, and a hot journal, which no
read-only reader may roll back, is said as such in one line, the files untouched.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import apsw
import pytest

from lab.hermes_fixtures import NEWEST, NEWEST_HERMES, make_home
from lab.hot_journal import kill_mid_transaction
from statewarden.daemon.verify import snapshot_copy
from statewarden.errors import DatabaseError
from statewarden.maintenance.snapshots import take_snapshot
from statewarden.sqlite import closed_wal, is_hot_journal_error, open_readonly

pytestmark = pytest.mark.process  # Hermes' own writer, killed mid-transaction


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def hot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hermes 0.22 home whose writer was killed mid-transaction: a hot -journal."""
    home = make_home(tmp_path_factory.mktemp("hot") / "hermes", NEWEST)
    kill_mid_transaction(home / "state.db", NEWEST_HERMES, committed=2, uncommitted=400, words=4)
    return home / "state.db"


def test_only_a_closed_wal_file_is_read_immutable(tmp_path: Path) -> None:
    """closed_wal: WAL in the header and no sidecar at all; a rollback-mode file, or a
    WAL file with any of -wal, -shm or -journal beside it, is read with a lock."""
    db = tmp_path / "state.db"
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1)")
    conn.close()
    assert closed_wal(db)
    for suffix in ("-wal", "-shm", "-journal"):
        side = tmp_path / f"state.db{suffix}"
        side.write_bytes(b"")
        assert not closed_wal(db), suffix
        side.unlink()
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    assert not closed_wal(db)
    assert not closed_wal(tmp_path / "missing.db")


def test_a_hot_journal_is_named_and_nothing_is_written(hot: Path, tmp_path: Path) -> None:
    """A snapshot (and the daemon's backup-API copy) of a file beside a hot journal: one
    line naming the hot journal, not "the live file is damaged"; the file and its
    journal unchanged, no snapshot kept."""
    journal = hot.with_name(hot.name + "-journal")
    before = digest(hot), digest(journal)
    assert not closed_wal(hot)
    with pytest.raises(apsw.Error) as raised:
        open_readonly(hot).execute("SELECT count(*) FROM messages").fetchall()
    assert is_hot_journal_error(raised.value)
    state = tmp_path / "state"
    with pytest.raises(DatabaseError, match=r"a hot -journal beside it") as failed:
        take_snapshot(hot, state, "default", keep=3)
    assert "damaged" not in str(failed.value)
    assert "\n" not in str(failed.value)
    with pytest.raises(DatabaseError, match=r"a hot -journal beside it"):
        snapshot_copy(hot, tmp_path / "work")
    assert (digest(hot), digest(journal)) == before
    assert (
        not list((state / "snapshots").glob("**/*.db")) if (state / "snapshots").exists() else True
    )
