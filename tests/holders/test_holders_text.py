"""What ``statewardenctl holders`` prints: the LOCKS column, and rollback-journal mode
(what Hermes 0.22 creates on Debian 12's SQLite), where an idle holder holds no lock and
that is normal. Real Hermes writers (0.19.0 in WAL mode, 0.22.2.post1 in DELETE mode)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lab.hermes_fixtures import NEWEST, TINY, hermes_python, make_home, writer_env
from statewarden.cli.holders_output import rollback_journal
from tests.support.cli import run_ctl

WRITER = Path(__file__).resolve().parents[2] / "lab" / "hermes_writer.py"


def hold(home: Path, version: str) -> subprocess.Popen[str]:
    """A real Hermes SessionDB of ``version`` holding the home's database, idle."""
    proc = subprocess.Popen(
        [hermes_python(version), str(WRITER), "hold", "--home", str(home)],
        env=writer_env(home),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=60)
    if proc.stdout is not None:
        proc.stdout.close()


def test_a_wal_holder_shows_its_locks(tmp_path: Path) -> None:
    """An idle 0.19.0 writer in WAL mode holds its shared lock on state.db: the LOCKS
    column names it (it was only in --json)."""
    home = make_home(tmp_path / "h", TINY)
    proc = hold(home, TINY.hermes)
    try:
        code, out, err = run_ctl("holders", "--db", str(home / "state.db"), "--no-systemd")
    finally:
        release(proc)
    assert code == 0, err
    header, row = out.splitlines()[1:3]
    assert "LOCKS" in header
    assert str(proc.pid) in row
    assert "posix R db" in row


def test_rollback_journal_holders_are_not_flagged_no_lock(tmp_path: Path) -> None:
    """An idle 0.22 writer in DELETE mode holds no lock between transactions: not flagged
    NO-LOCK, and one note says why; the JSON still gives its lock state."""
    home = make_home(tmp_path / "h", NEWEST)
    db = home / "state.db"
    assert rollback_journal(str(db))
    proc = hold(home, NEWEST.hermes)
    try:
        code, out, err = run_ctl("holders", "--db", str(db), "--no-systemd")
        jcode, jout, _ = run_ctl("holders", "--db", str(db), "--no-systemd", "--json")
    finally:
        release(proc)
    assert code == 0, err
    assert [line for line in out.splitlines() if "NO-LOCK" in line and "note:" not in line] == []
    assert "rollback-journal mode: a connection holds a lock only during a transaction" in out
    assert jcode == 0
    assert '"lock_state": "none"' in jout
