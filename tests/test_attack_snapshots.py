"""``statewardenctl snapshots take`` against hostile live files: the snapshot is a verified
copy of the database as SQLite presents it, or nothing, with one line and a documented
exit code; and the live file and its sidecars are never written, nor a sidecar created
beside a file nobody had open."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from statewarden.maintenance.snapshots import (
    list_snapshots,
    newest_of,
    prune_snapshots,
    snapshots_dir,
    take_snapshot,
)
from tests.support.cli import ctl_process
from tests.support.live_bundle import (
    bundle,
    killed_writer,
    live_copy,
    plant_sidecar,
    plant_wal_of_another_database,
)
from tests.support.maintenance import rows

pytestmark = pytest.mark.process


def take(db: Path) -> subprocess.CompletedProcess[str]:
    """``statewardenctl snapshots take --db DB`` as a process (a FIFO would hang it)."""
    return ctl_process("snapshots", "take", "--db", str(db))


def kept() -> list[str]:
    folder = snapshots_dir(Path(os.environ["XDG_STATE_HOME"]) / "statewarden")
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.name != ".lock")


def assert_refused(db: Path, code: int, says: str) -> None:
    before = bundle(db.parent)
    done = take(db)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert (done.returncode, len(lines)) == (code, 1), done.stderr
    assert says in lines[0], lines[0]
    assert kept() == [], "nothing is kept"
    assert bundle(db.parent) == before, "the live bundle was written, or a sidecar created"


def a_fifo(db: Path) -> None:
    os.mkfifo(db)


def a_folder(db: Path) -> None:
    db.mkdir()


def empty(db: Path) -> None:
    db.write_bytes(b"")


def one_byte(db: Path) -> None:
    db.write_bytes(b"S")


def a_device(db: Path) -> None:
    db.symlink_to("/dev/zero")


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (a_fifo, "is a FIFO"),
        (a_folder, "is a directory"),
        (empty, "empty (0 bytes)"),
        (one_byte, "truncated inside the 100-byte header"),
        (a_device, "is a character device"),
    ],
)
def test_a_live_file_that_is_no_database_is_refused_as_check_refuses_it(
    tmp_path: Path, make: Callable[[Path], None], says: str
) -> None:
    """A state.db that is a FIFO (which hung the take for ever), a folder, an empty or
    1-byte file or a device: exit 4 (unreadable) with check's own words, nothing kept
    (before, an empty copy was kept checking "unreadable" and blamed, exit 1)."""
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    make(db)
    assert_refused(db, 4, says)


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("plant", ["symlink", "fifo", "folder"])
def test_a_planted_sidecar_is_never_read_through_nor_created_beside(
    tmp_path: Path, suffix: str, plant: str
) -> None:
    """A sidecar that is a symlink (to another file), a FIFO or a folder: refused in one
    line before any SQLite connection opens (a FIFO -journal hung the take; a planted
    -shm or -wal made SQLite create the other one beside the live file), nothing kept,
    the live bundle and the symlink's target unchanged."""
    db = live_copy(tmp_path / "home")
    victim = tmp_path / "victim"
    plant_sidecar(db, suffix, plant, victim)
    before = victim.read_bytes()
    if plant == "symlink":
        assert_refused(db, 1, "is a symlink")
    else:
        assert_refused(db, 4, "is not a regular file")
    assert victim.read_bytes() == before


def test_a_wal_with_no_shm_is_copied_whole_and_no_shm_is_created(tmp_path: Path) -> None:
    """A closed WAL database whose -wal holds commits and whose -shm is gone (a copied
    bundle, a cleaned folder): the snapshot holds those commits, and no -shm appears
    beside the live file (a read-only SQLite reader creates one)."""
    db = live_copy(tmp_path / "home")
    killed_writer(db.parent, tmp_path / "bin")
    Path(f"{db}-shm").unlink()
    sql = "SELECT count(*), max(id) FROM messages"
    expected = rows(db, sql)
    before = bundle(db.parent)
    done = take(db)
    assert done.returncode == 0, done.stderr
    assert bundle(db.parent) == before, "a -shm was created beside the live file"
    (snap,) = [n for n in kept() if n.endswith(".db")]
    conn = apsw.Connection(
        str(snapshots_dir(Path(os.environ["XDG_STATE_HOME"]) / "statewarden") / snap)
    )
    try:
        assert conn.execute(sql).fetchall() == expected
    finally:
        conn.close()


def test_a_wal_of_another_database_gives_no_snapshot(tmp_path: Path) -> None:
    """A -wal that another database wrote, beside state.db: SQLite would present that
    other database; the take refuses it as check does (exit 4), keeps nothing and
    creates no -shm (it kept a "verified" copy of the other database, with no sessions)."""
    db = live_copy(tmp_path / "home")
    plant_wal_of_another_database(db, tmp_path / "other.db")
    assert_refused(db, 4, "belongs to another database")


def planted_meta(folder: Path, name: str, **changes: object) -> Path:
    """A snapshot's ``.json`` (and its ``.db``) as a take writes them, with ``changes``."""
    db = folder / f"{name}.db"
    db.write_bytes(b"")
    meta: dict[str, object] = {
        "path": str(db),
        "source": "/home/u/.hermes/state.db",
        "profile": "default",
        "taken_at": 1_700_000_000.0,
        "bytes": 0,
        "sha256": "",
        "integrity": "ok",
        "sessions": 1,
        "seconds": 0.1,
        "check": "none",
    }
    meta.update(changes)
    (folder / f"{name}.json").write_text(json.dumps(meta))
    return db


@pytest.mark.parametrize(
    "bad",
    [
        {"taken_at": "yesterday"},
        {"taken_at": float("nan")},
        {"taken_at": float("inf")},
        {"taken_at": 1e300},
        {"taken_at": True},
        {"sessions": "many"},
        {"path": 7},
    ],
)
def test_a_damaged_json_is_skipped_not_fatal(tmp_path: Path, bad: dict[str, object]) -> None:
    """A snapshot's .json with a field of the wrong type or a time that is no time: that
    one is not listed, the others are (it made the listing, and each take's pruning,
    fail with "unexpected TypeError", or printed "NaN" as a date)."""
    state = tmp_path / "state"
    folder = snapshots_dir(state)
    folder.mkdir(parents=True)
    good = planted_meta(folder, "default-1")
    planted_meta(folder, "default-2", **bad)
    assert [s.path for s in list_snapshots(state)] == [str(good)]


def test_a_json_nested_too_deep_is_skipped_not_fatal(tmp_path: Path) -> None:
    """A snapshot's .json nested deeper than the parser's stack (``[[[[...]]]]``): that
    one is not listed, the others are (it was "unexpected RecursionError")."""
    state = tmp_path / "state"
    folder = snapshots_dir(state)
    folder.mkdir(parents=True)
    good = planted_meta(folder, "default-1")
    (folder / "default-2.db").write_bytes(b"")
    (folder / "default-2.json").write_text("[" * 100_000 + "]" * 100_000)
    assert [s.path for s in list_snapshots(state)] == [str(good)]


def test_a_json_naming_another_file_is_never_pruned(tmp_path: Path) -> None:
    """A .json in the snapshots folder whose ``path`` names a file elsewhere: never
    listed, so pruning never removes that file (it removed whatever the .json named)."""
    state = tmp_path / "state"
    folder = snapshots_dir(state)
    folder.mkdir(parents=True)
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    planted_meta(folder, "default-1", taken_at=1_700_000_100.0)
    planted_meta(folder, "default-0", path=str(victim))
    prune_snapshots(state, "default", keep=1)
    assert victim.read_text() == "keep me"
    assert [Path(s.path).name for s in list_snapshots(state)] == ["default-1.db"]


def test_a_snapshot_taken_through_relative_paths_is_found_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A take given a relative state.db and a relative state folder (``--db state.db``,
    ``paths.state_dir: rel``) records absolute paths: listed, and found as the newest
    of that database, from another working folder (the .json held the relative ones,
    so from anywhere else it was neither)."""
    live_copy(tmp_path / "home")
    monkeypatch.chdir(tmp_path)
    take_snapshot(Path("home/state.db"), Path("state"), "default", keep=3)
    monkeypatch.chdir("/")
    (snap,) = list_snapshots(tmp_path / "state")
    assert Path(snap.path).is_absolute()
    assert newest_of(tmp_path / "state", tmp_path / "home" / "state.db") == snap


def test_one_database_not_kept_leaves_the_others_their_snapshot(tmp_path: Path) -> None:
    """Two profiles, the default's state.db empty (unreadable): the other profile's
    snapshot is still taken and kept, each failure is one line, and the exit code is
    the gravest (4) (the first failure ended the take, the other profile got none)."""
    home = tmp_path / "hermes"
    home.mkdir()
    (home / "state.db").write_bytes(b"")
    live_copy(home / "profiles" / "work")
    done = ctl_process("snapshots", "take", env={**os.environ, "HERMES_HOME": str(home)})
    assert done.returncode == 4, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "empty (0 bytes)" in done.stderr
    (kept_line,) = done.stdout.strip().splitlines()
    assert kept_line.startswith("kept ")
    assert [n for n in kept() if n.endswith(".db")] == [Path(kept_line.split()[1][:-1]).name]


def test_a_closed_wal_copied_raw_takes_its_journal_along(tmp_path: Path) -> None:
    """A -wal with no -shm (copied raw into a folder of ours) and a hot -journal beside
    it: SQLite meets the journal in the copy as it would beside the live file, and the
    take is refused naming it (the raw copy left the journal behind and kept a copy of
    a file SQLite presents to nobody without rolling that journal back)."""
    db = live_copy(tmp_path / "home")
    killed_writer(db.parent, tmp_path / "bin")
    Path(f"{db}-shm").unlink()
    Path(f"{db}-journal").write_bytes(b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + os.urandom(4088))
    assert_refused(db, 1, "a hot -journal beside it")
