"""``check_database``: the copy guard is held around the copy and nothing else."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lab import corruption
from statewarden.errors import DatabaseUnreadable
from statewarden.recovery.bundle import fingerprint
from statewarden.recovery.check import check_database


class _Recorded:
    """A lock that remembers whether it is held; the work dirs present when released."""

    def __init__(self, work: Path) -> None:
        self.lock = threading.Lock()
        self.work = work
        self.entered = 0
        self.left_behind: list[str] = []

    def __enter__(self) -> None:
        self.lock.acquire()
        self.entered += 1

    def __exit__(self, *_exc: object) -> None:
        self.left_behind = sorted(p.name for p in self.work.iterdir())
        self.lock.release()


def test_guard_is_held_while_copying_only(tmp_path: Path) -> None:
    """Copy progress happens inside the guard, the diagnosis outside it; the copy is
    made inside, then removed, and the source is unchanged."""
    case = corruption.fresh_copy(tmp_path / "db")
    before = fingerprint(case.db)
    work = tmp_path / "w"
    guard = _Recorded(work)
    phases: list[tuple[str, bool]] = []
    d = check_database(
        case.db,
        work,
        progress=lambda phase, _done, _total: phases.append((phase, guard.lock.locked())),
        copy_guard=guard,
    )
    assert d.damage == "none"
    assert d.path == str(case.db)
    assert guard.entered == 1
    assert len(guard.left_behind) == 1
    assert guard.left_behind[0].startswith(".statewarden-work-")
    assert list(work.iterdir()) == []
    held = {phase for phase, locked in phases if locked}
    free = {phase for phase, locked in phases if not locked}
    assert held == {"copy"}
    assert "copy" not in free
    assert "integrity check" in free
    assert fingerprint(case.db) == before


def test_guard_is_released_when_the_copy_fails(tmp_path: Path) -> None:
    """Not a database: the error reaches the caller and the guard is free again."""
    bogus = tmp_path / "state.db"
    bogus.write_bytes(b"not sqlite" * 100)
    guard = _Recorded(tmp_path / "w")
    (tmp_path / "w").mkdir()
    with pytest.raises(DatabaseUnreadable):
        check_database(bogus, tmp_path / "w", copy_guard=guard)
    assert guard.entered == 1
    assert not guard.lock.locked()


def test_the_fts_checks_cpu_is_counted(tmp_path: Path) -> None:
    """The FTS tables' own checks run in threads of their own: their CPU time is in the
    diagnosis (the daemon adds it to a verification's CPU), and not in its JSON."""
    case = corruption.fresh_copy(tmp_path / "db")
    work = tmp_path / "work"
    work.mkdir()
    diag = check_database(case.db, work)
    assert diag.damage == "none"
    assert diag.helper_cpu_s > 0
    assert "helper_cpu_s" not in diag.to_json()
