"""``statewardenctl holders`` reading Hermes' ``gateway_heartbeats`` for a holder of
unknown kind: past a planted sidecar it opens no SQLite connection (a FIFO -journal hung
it for ever), and beside a closed WAL bundle it creates no -shm."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.cli import ctl_process
from tests.support.live_bundle import bundle, killed_writer, live_copy

pytestmark = pytest.mark.process

# A process that holds the file open and says nothing of what it is (kind "unknown").
HOLD = "import sys; f = open(sys.argv[1], 'rb'); print('ready', flush=True); sys.stdin.read()"


@contextmanager
def unknown_holder(db: Path) -> Iterator[None]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield
    finally:
        proc.stdin.close()
        proc.wait()
        proc.stdout.close()


def holders(db: Path) -> subprocess.CompletedProcess[str]:
    return ctl_process("holders", "--db", str(db))


def assert_harmless(db: Path) -> None:
    before = bundle(db.parent)
    with unknown_holder(db):
        done = holders(db)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), done.stderr  # 1: other users' processes unread
    assert "unknown" in done.stdout, done.stdout
    assert bundle(db.parent) == before, "the bundle was written, or a sidecar created"


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_fifo_sidecar_does_not_hang_holders(tmp_path: Path, suffix: str) -> None:
    """A FIFO sidecar beside a file an unknown process holds: holders ends, shows the
    holder, and lets SQLite near none of the bundle (the -journal FIFO hung it; a FIFO
    -wal or -shm made SQLite create the other one beside the file)."""
    db = live_copy(tmp_path / "home")
    os.mkfifo(f"{db}{suffix}")
    assert_harmless(db)


def test_a_wal_with_no_shm_gets_no_shm_from_holders(tmp_path: Path) -> None:
    """A real Hermes writer killed in WAL mode, its -shm gone, the file held by an
    unknown process: holders creates no -shm beside it."""
    db = live_copy(tmp_path / "home")
    killed_writer(db.parent, tmp_path / "bin")
    Path(f"{db}-shm").unlink()
    assert_harmless(db)
