"""Invariant: an action that carries the live file's rows over (every action but check,
repair and restore) first proves that the live file reads as a database. A file that
does not (random bytes, a header alone, a file cut short after its first pages) is one
line naming it, exit 4 (unreadable), before anything is planned, stopped or written:
``--apply-captures`` once said "nothing to apply" (exit 0) of such a file, and
``--merge-from`` ended with "unexpected NotADBError" (exit 1)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from lab.hermes_fixtures import SMALL, built_db
from statewarden.errors import EXIT_UNREADABLE
from tests.support.maintenance import maintenance_config, run_maintenance

pytestmark = pytest.mark.process

ACTIONS = [
    ("--apply-captures",),
    ("--apply-captures", "--dry-run"),
    ("--merge-from", "{old}"),
    ("--action", "checkpoint"),
    ("--action", "vacuum"),
    ("--action", "journal-mode=delete"),
    ("--action", "journal-mode=wal"),
]


def _random(healthy: bytes) -> bytes:
    return os.urandom(len(healthy[:20_000]))


def _header_alone(healthy: bytes) -> bytes:
    return healthy[:100]


def _cut_short(healthy: bytes) -> bytes:
    return healthy[:8192]


@pytest.mark.parametrize("damage", [_random, _header_alone, _cut_short])
@pytest.mark.parametrize("action", ACTIONS, ids=" ".join)
def test_a_live_file_that_does_not_read_is_one_line_and_nothing_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, action: tuple[str, ...], damage: object
) -> None:
    """Each action on each kind of unreadable live file: exit 4, one line on stderr
    that names the file and says to repair it first, no traceback, the file's bytes
    as they were, no run begun (no run folder with a ledger)."""
    maintenance_config(tmp_path, monkeypatch)
    healthy = built_db(SMALL).read_bytes()
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    assert callable(damage)
    db.write_bytes(damage(healthy))
    old = tmp_path / "old.db"
    shutil.copyfile(built_db(SMALL), old)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    args = [a.format(old=old) for a in action]
    proc = run_maintenance("--db", str(db), *args, "--yes")
    assert proc.returncode == EXIT_UNREADABLE, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(db) in line
    assert "repair it first" in line
    assert "Traceback" not in proc.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert not list((tmp_path / "xdg-state").rglob("ledger*"))
    assert sorted(p.name for p in home.iterdir()) == ["state.db"]


def test_a_live_file_that_reads_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule refuses only what does not read: a healthy file's checkpoint runs on
    (exit 0), its rows as they were."""
    maintenance_config(tmp_path, monkeypatch)
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    shutil.copyfile(built_db(SMALL), db)
    proc = run_maintenance("--db", str(db), "--action", "checkpoint", "--yes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "repair it first" not in proc.stderr
