"""Hermes' moved-aside files are found by name, and what a file holds is counted
read-only, never writing it: real files written and moved aside by Hermes 0.22."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from lab.hermes_fixtures import NEWEST, NEWEST_WAL, make_home
from statewarden.moved_aside import count_held, is_moved_aside, moved_aside_in
from tests.support.vanishing import DAMAGES, damage, hermes_starts_fresh

pytestmark = pytest.mark.process


@pytest.mark.parametrize(
    ("name", "moved"),
    [
        ("state.db.zeroed-20261206-154916-30680.bak", True),
        ("state.db.notadb-20261206-154916-30680.bak", True),
        ("state.db.notadb-20261206-154916-30680-2.bak", True),  # the name was taken
        ("state.db.zeroed-unknown-30680.bak", True),  # Hermes had no clock
        ("state.db.zeroed-20261206-154916-30680.bak-wal", False),  # its sidecars
        ("state.db.zeroed-20261206-154916-30680.bak-shm", False),
        ("state.db.malformed-backup-20261206", False),  # Hermes' repair backup
        ("state.db.pre-update-emergency-1.bak", False),
        ("state.db", False),
        ("other.db.zeroed-20261206-154916-30680.bak", False),
        ("state.db.zeroed-20261206-154916-30680", False),  # not Hermes' name
    ],
)
def test_moved_aside_files_are_known_by_hermes_names(name: str, *, moved: bool) -> None:
    """Only the names Hermes gives a file it moved aside count, never their sidecars or
    Hermes' other backups."""
    assert is_moved_aside(name) is moved


@pytest.mark.parametrize("how", DAMAGES)
def test_what_a_moved_aside_file_holds_is_read_without_writing_it(tmp_path: Path, how: str) -> None:
    """Hermes 0.22 moves each damaged file aside (found by name); counting it changes no
    byte and creates no sidecar: an empty file holds nothing, a damaged one cannot be
    read as it is (the reason is named), the fresh file holds what Hermes wrote."""
    home = make_home(tmp_path / "hermes", NEWEST)
    damage(home / "state.db", how)
    moved = hermes_starts_fresh(home, sessions=5, messages=20, seed=2)
    assert moved_aside_in(home) == [moved.name]
    before = hashlib.sha256(moved.read_bytes()).hexdigest(), sorted(os.listdir(home))
    held = count_held(moved)
    assert (hashlib.sha256(moved.read_bytes()).hexdigest(), sorted(os.listdir(home))) == before
    assert held.size == moved.stat().st_size
    if how == "empty":
        assert (held.empty, held.sessions, held.messages) == (True, 0, 0)
    else:
        assert (held.empty, held.sessions, held.messages) == (False, None, None)
        assert "not a database" in held.why
    fresh = count_held(home / "state.db", live=True)
    assert (fresh.sessions, fresh.messages) == (5, 20)


def test_a_readable_file_is_counted_by_full_scans(tmp_path: Path) -> None:
    """A Hermes 0.22 file is counted as it is (12 sessions, 60 messages), immutable: no
    -wal or -shm appears next to it."""
    db = make_home(tmp_path / "hermes", NEWEST) / "state.db"
    held = count_held(db)
    assert (held.size, held.sessions, held.messages, held.why) == (db.stat().st_size, 12, 60, "")
    assert sorted(os.listdir(db.parent)) == ["logs", "state.db"]
    missing = count_held(tmp_path / "nothing.db")
    assert (missing.sessions, missing.why) == (None, "No such file or directory")


def test_a_closed_wal_database_is_counted_without_leaving_sidecars(tmp_path: Path) -> None:
    """A WAL database nobody has open, counted as the live file (the daemon's count): no
    -wal or -shm is left next to it (a plain read-only open would leave both)."""
    db = make_home(tmp_path / "hermes", NEWEST_WAL) / "state.db"
    assert db.read_bytes()[18:20] == b"\x02\x02"  # WAL
    held = count_held(db, live=True)
    assert (held.sessions, held.messages) == (12, 60)
    assert sorted(os.listdir(db.parent)) == ["logs", "state.db"]
