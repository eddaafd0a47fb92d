"""The mount watcher on real status facts: a real Hermes database, real mountinfo lines."""

from __future__ import annotations

from pathlib import Path

import apsw

from lab.hermes_fixtures import TINY, make_home
from statewarden.mounts import parse_mountinfo
from statewarden.targets import target_for_db
from statewarden.watch.mounts import MountWatcher
from statewarden.watch.status import database_status


def _mounts(fstype: str) -> str:
    return f"22 1 0:21 / / rw,relatime shared:1 - {fstype} src rw\n"


def test_wal_on_virtiofs_raises_then_clears_when_moved(tmp_path: Path) -> None:
    """Raised while the WAL database is on virtiofs (once per check), cleared on ext4."""
    home = make_home(tmp_path / "hermes", TINY)
    t = target_for_db(home / "state.db")
    watcher = MountWatcher()
    unsafe = database_status(t, parse_mountinfo(_mounts("virtiofs")))
    assert unsafe.journal_mode == "wal"
    (sig,) = watcher.check(str(t.db), unsafe)
    assert (sig.kind, sig.db, sig.clears) == ("unsafe_mount", str(t.db), False)
    assert sig.summary.startswith("state.db is in WAL mode on virtiofs (/)")
    assert sig.fields == {"fstype": "virtiofs", "mount_point": "/"}
    assert [s.clears for s in watcher.check(str(t.db), unsafe)] == [False]
    safe = database_status(t, parse_mountinfo(_mounts("ext4")))
    (clear,) = watcher.check(str(t.db), safe)
    assert clear.clears
    assert clear.summary == "no longer on an unsafe filesystem"
    assert watcher.check(str(t.db), safe) == []


def test_rollback_journal_on_virtiofs_is_fine(tmp_path: Path) -> None:
    """journal_mode=DELETE does not need shared memory: nothing to say."""
    home = make_home(tmp_path / "hermes", TINY)
    conn = apsw.Connection(str(home / "state.db"))
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchall() == [("delete",)]
    conn.close()
    t = target_for_db(home / "state.db")
    st = database_status(t, parse_mountinfo(_mounts("virtiofs")))
    assert st.journal_mode == "rollback"  # from the header: not WAL
    assert MountWatcher().check(str(t.db), st) == []
