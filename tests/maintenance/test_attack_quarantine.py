"""``quarantine restore`` of a folder that no longer holds the original as the swap kept
it: the original swapped for a symlink to another home's database, changed in place,
removed, or given a ``-wal`` it never had. Real files: the fresh state.db Hermes 0.22
wrote after moving the old one aside, quarantined by a real merge; the other home's
state.db written by Hermes 0.22."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from lab.hermes_fixtures import NEWEST_WAL, make_home
from statewarden.maintenance.swap import list_quarantine
from tests.support.cli import run_ctl, run_installed
from tests.support.maintenance import maintenance_config, rows, run_maintenance
from tests.support.merging import Vanished, Writer, sha
from tests.support.waiting import wait_for


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


def _symlink_to_another(kept: Path, other: Path) -> None:
    kept.unlink()
    kept.symlink_to(other)


def _changed_in_place(kept: Path, other: Path) -> None:
    with open(kept, "r+b") as f:
        f.seek(kept.stat().st_size - 100)
        f.write(b"edited since")


def _replaced_by_another(kept: Path, other: Path) -> None:
    shutil.copyfile(other, kept)


def _removed(kept: Path, other: Path) -> None:
    kept.unlink()


def _a_wal_put_beside(kept: Path, other: Path) -> None:
    Path(f"{kept}-wal").write_bytes(b"\0" * 4096)


def _a_fifo_instead(kept: Path, other: Path) -> None:
    kept.unlink()
    os.mkfifo(kept)


TAMPER: list[tuple[Callable[[Path, Path], None], str]] = [
    (_symlink_to_another, "cannot be read as a file of its own"),
    (_changed_in_place, "differs from the SHA-256 its manifest records"),
    (_replaced_by_another, "differs from the SHA-256 its manifest records"),
    (_removed, "is missing"),
    (_a_wal_put_beside, "state.db-wal: is not in its manifest"),
    (_a_fifo_instead, "cannot be read as a file of its own"),
]


@pytest.mark.parametrize(("tamper", "says"), TAMPER, ids=lambda v: getattr(v, "__name__", ""))
def test_only_the_original_as_kept_is_put_back(
    tmp_path: Path,
    config: Path,
    vanished: Vanished,
    other_home: Path,
    *,
    tamper: Callable[[Path, Path], None],
    says: str,
) -> None:
    """Invariant: a copy proves whose it is. Restore puts back only the file the swap
    kept (the SHA-256 its manifest records, with exactly the sidecars it recorded):
    a folder tampered with since is refused (exit 5, one line naming the file), nothing
    is stopped or swapped, state.db is as it was and passes check."""
    db, old = vanished(tmp_path)
    merged = run_maintenance("--db", str(db), "--merge-from", str(old), "--yes")
    assert merged.returncode == 0, merged.stderr
    (entry,) = list_quarantine(tmp_path / "xdg-state" / "statewarden")
    assert entry.not_as_kept() is None  # as the swap kept it
    tamper(entry.path / "state.db", other_home)
    before = (db.stat().st_ino, sha(db))
    proc = run_installed("quarantine", "restore", entry.name, "--yes", env=dict(os.environ))
    assert proc.exit_code == 5, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"quarantine entry {entry.name!r}: refused: {entry.path}/state.db" in line
    assert says in line
    assert "Traceback" not in proc.stderr
    assert (db.stat().st_ino, sha(db)) == before
    assert len(list_quarantine(tmp_path / "xdg-state" / "statewarden")) == 1
    assert run_ctl("check", "--db", str(db)).exit_code == 0


DAMAGED_MANIFESTS = {
    "nul-in-db": '{"db": "/home/a\\u0000b/state.db", "files": {"a\\u0000b": "x"}}',
    "nested-too-deep": "[" * 100_000 + "]" * 100_000,
    "not-an-object": "[1, 2]",
    "not-json": "{",
}


def test_a_damaged_manifest_is_one_line_and_hides_no_other_entry(
    tmp_path: Path, config: Path, vanished: Vanished
) -> None:
    """Invariant: bad input is one line with a documented exit code, never a traceback.
    Manifests damaged or edited (a NUL byte in the database path, JSON nested deeper
    than Python's parser goes, not an object, not JSON) beside a real entry: list shows
    the real entry (exit 0; it was "unexpected RecursionError", exit 1, listing
    nothing), and restoring the one whose path holds a NUL byte is a usage error
    naming it (it was "unexpected ValueError: embedded null byte")."""
    db, old = vanished(tmp_path)
    merged = run_maintenance("--db", str(db), "--merge-from", str(old), "--yes")
    assert merged.returncode == 0, merged.stderr
    state = tmp_path / "xdg-state" / "statewarden"
    (real,) = list_quarantine(state)
    for name, text in DAMAGED_MANIFESTS.items():
        (real.path.parent / name).mkdir()
        (real.path.parent / name / "manifest.json").write_text(text)
    env = dict(os.environ)
    listed = run_installed("quarantine", "list", env=env)
    assert listed.exit_code == 0, listed.stderr
    assert listed.stderr == ""
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert sorted(names) == sorted([real.name, "nul-in-db"])
    proc = run_installed("quarantine", "restore", "nul-in-db", "--yes", env=env)
    assert proc.exit_code == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "statewardenctl: error: quarantine entry 'nul-in-db': its manifest names no database path"
    ]


def test_a_wal_original_whose_shm_a_reader_rewrote_is_restored_whole(
    tmp_path: Path, config: Path
) -> None:
    """The -shm holds no row, only the index of the -wal, and any SQLite reader of the
    original in place rewrites it: restore's check of the folder leaves it out (a
    -shm changed since would refuse the entry for good), and the original comes back
    with every row its -wal holds. Real files: a WAL state.db whose Hermes 0.22 writer
    was killed, quarantined with its -wal and -shm by a real run."""
    home = make_home(tmp_path / "hermes", NEWEST_WAL)
    db = home / "state.db"
    w = Writer(tmp_path, home)
    wait_for(lambda: len(w.committed()) >= 5, "five committed messages")
    w.proc.send_signal(signal.SIGKILL)
    w.stop()
    vacuum = run_maintenance("--db", str(db), "--action", "vacuum", "--yes")
    assert vacuum.returncode == 0, vacuum.stderr
    (entry,) = list_quarantine(tmp_path / "xdg-state" / "statewarden")
    kept = entry.path / "state.db"
    shm = Path(f"{kept}-shm")
    before = sha(shm)
    want = rows(kept, "SELECT * FROM messages ORDER BY id")
    reader = apsw.Connection(str(kept), flags=apsw.SQLITE_OPEN_READONLY)  # one in place
    assert reader.execute("SELECT count(*) FROM messages").fetchall() == [(len(want),)]
    reader.close()
    assert sha(shm) != before
    assert entry.not_as_kept() is None
    proc = run_installed("quarantine", "restore", entry.name, "--yes", env=dict(os.environ))
    assert proc.exit_code == 0, proc.stdout + proc.stderr
    assert rows(db, "SELECT * FROM messages ORDER BY id") == want
    assert set(w.committed()) <= {r[0] for r in rows(db, "SELECT content FROM messages")}
