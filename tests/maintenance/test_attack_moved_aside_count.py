"""Counting what a moved-aside file holds (the daemon's ``count_held``) when a ``-wal``
(and a ``-shm``) lies beside it: a WAL state.db whose Hermes 0.22 writer was killed,
renamed aside with its sidecars as Hermes 0.22 renames them."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import pytest

from lab.hermes_fixtures import NEWEST_WAL, make_home
from statewarden.moved_aside import WAL_BESIDE, count_held
from tests.support.merging import Writer
from tests.support.waiting import wait_for

ASIDE = "state.db.notadb-20261201-120000-77.bak"


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("shm", [True, False], ids=["wal-and-shm", "wal-only"])
def test_a_file_with_a_wal_beside_it_is_counted_without_writing_its_shm(
    tmp_path: Path, *, shm: bool
) -> None:
    """Invariant: a read never writes. A read-only connection on a file with a -wal
    beside it wrote its -shm (created it when it was missing): counting such a file
    changes no byte and creates no file in its folder, and says why it was not read."""
    home = make_home(tmp_path / "hermes", NEWEST_WAL)
    db = home / "state.db"
    w = Writer(tmp_path, home)
    wait_for(lambda: len(w.committed()) >= 3, "three committed messages")
    w.proc.send_signal(signal.SIGKILL)
    w.stop()
    aside = tmp_path / "aside"
    aside.mkdir()
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{db}{suffix}").exists():
            os.rename(f"{db}{suffix}", aside / f"{ASIDE}{suffix}")
    assert (aside / f"{ASIDE}-wal").stat().st_size > 0
    if not shm:
        (aside / f"{ASIDE}-shm").unlink()
    before = digest(aside)
    held = count_held(aside / ASIDE)
    assert digest(aside) == before
    assert (held.sessions, held.messages, held.why) == (None, None, WAL_BESIDE)
    assert held.size == (aside / ASIDE).stat().st_size
