"""The file watcher on a real Hermes home: sidecars, WAL growth, self-repair backups, JSONL divert."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab.hermes_fixtures import holding
from statewarden.incidents.signals import Observation, Signal
from statewarden.targets import target_for_db
from statewarden.watch.files import FileWatcher

pytestmark = pytest.mark.process


def kinds(found: list[Signal | Observation]) -> list[str]:
    return [f.kind if isinstance(f, Signal) else f.what for f in found]


class TestFileWatcher:
    def test_baseline_is_silent(self, hermes_home: Path) -> None:
        """What exists at the first poll (old backups, old JSONL) raises nothing."""
        (hermes_home / "state.db.malformed-backup-20260101_000000").write_bytes(b"x")
        (hermes_home / "sessions").mkdir()
        (hermes_home / "sessions" / "old.jsonl").write_text("{}\n")
        w = FileWatcher(target_for_db(hermes_home / "state.db"))
        assert w.poll(1000.0) == []

    def test_sidecars_of_a_real_writer(self, hermes_home: Path) -> None:
        """A Hermes process opening the database creates -wal and -shm; closing removes them."""
        w = FileWatcher(target_for_db(hermes_home / "state.db"))
        w.poll(1000.0)
        with holding(hermes_home):
            assert kinds(w.poll(1001.0)) == ["sidecar_created", "sidecar_created", "wal_size"]
        found = w.poll(1002.0)
        assert [
            f.text for f in found if isinstance(f, Observation) and f.what == "sidecar_deleted"
        ] == ["state.db-wal deleted", "state.db-shm deleted"]

    def test_replaced_database(self, hermes_home: Path) -> None:
        """state.db swapped for another file shows as a replacement with both inodes."""
        db = hermes_home / "state.db"
        w = FileWatcher(target_for_db(db))
        w.poll(1000.0)
        old_ino = db.stat().st_ino
        new = hermes_home / "new.db"
        new.write_bytes(db.read_bytes())
        os.replace(new, db)
        (obs,) = w.poll(1001.0)
        assert isinstance(obs, Observation)
        assert obs.what == "file_replaced"
        assert obs.fields["old_inode"] == old_ino

    def test_self_repair_backup(self, hermes_home: Path) -> None:
        """A new state.db.malformed-backup-* is a self_repair signal (its sidecars are not)."""
        w = FileWatcher(target_for_db(hermes_home / "state.db"))
        w.poll(1000.0)
        (hermes_home / "state.db.malformed-backup-20260909_191208").write_bytes(b"x")
        (hermes_home / "state.db.malformed-backup-20260909_191208-wal").write_bytes(b"x")
        (sig,) = w.poll(1001.0)
        assert isinstance(sig, Signal)
        assert sig.kind == "self_repair"
        assert sig.fields == {"backup": "state.db.malformed-backup-20260909_191208"}

    def test_jsonl_divert(self, hermes_home: Path) -> None:
        """A new, then growing, sessions/*.jsonl is the JSONL fallback; a quiet one is not."""
        w = FileWatcher(target_for_db(hermes_home / "state.db"))
        w.poll(1000.0)
        (hermes_home / "sessions").mkdir()
        f = hermes_home / "sessions" / "20260907_170401_a1b2c3.jsonl"
        f.write_text('{"role": "user"}\n')
        (s1,) = w.poll(1001.0)
        assert isinstance(s1, Signal)
        assert s1.kind == "jsonl_fallback"
        assert "new sessions/20260907_170401_a1b2c3.jsonl" in s1.summary
        assert w.poll(1002.0) == []
        with open(f, "a") as fh:
            fh.write('{"role": "assistant"}\n')
        (s2,) = w.poll(1003.0)
        assert isinstance(s2, Signal)
        assert "growing" in s2.summary

    def test_wal_growth_and_clear(self, tmp_path: Path) -> None:
        """A WAL over the threshold that keeps growing over the window raises wal_growth once;
        back under the threshold it clears."""
        db = tmp_path / "state.db"
        db.write_bytes(b"")
        wal = tmp_path / "state.db-wal"
        w = FileWatcher(target_for_db(db), wal_warn_bytes=1000, wal_growth_window_s=10.0)
        found: list[Signal | Observation] = []
        for i in range(20):
            wal.write_bytes(b"x" * (1000 + 100 * i))
            found += w.poll(1000.0 + i)
        signals = [f for f in found if isinstance(f, Signal)]
        assert [s.kind for s in signals] == ["wal_growth"]
        wal.write_bytes(b"x" * 10)
        after = w.poll(1030.0)
        assert [s.clears for s in after if isinstance(s, Signal)] == [True]
        assert "checkpoint" in kinds(after)

    def test_big_but_steady_wal_is_not_growth(self, tmp_path: Path) -> None:
        """A large WAL that stopped growing (normal after a burst) raises nothing."""
        db = tmp_path / "state.db"
        db.write_bytes(b"")
        (tmp_path / "state.db-wal").write_bytes(b"x" * 5000)
        w = FileWatcher(target_for_db(db), wal_warn_bytes=1000, wal_growth_window_s=10.0)
        found = [f for i in range(30) for f in w.poll(1000.0 + i)]
        assert [f for f in found if isinstance(f, Signal)] == []
