"""A disk that fills up while ``recover`` works (the output's folder on a real tmpfs,
filled to the last byte by another writer at a chosen stage): one line naming the
folder, nothing left at the output or in the folder but the other writer's file, the
source unchanged. Before, a full disk while the FTS shadow tables were copied ahead of
FTS5's verdicts ended in "unexpected SQLError: no such savepoint" (SQLite had rolled
the whole transaction back), and one during the verification was reported as a file
that failed verification."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab import corruption
from lab.hermes_fixtures import SMALL
from statewarden.errors import StatewardenError
from statewarden.recovery.bundle import fingerprint
from statewarden.recovery.recover import recover
from tests.support.full_disk import fill


@pytest.fixture
def case(tmp_path: Path) -> corruption.Case:
    return corruption.phantom_row(tmp_path / "db", spec=SMALL)


@pytest.fixture
def folder(tmp_path: Path, case: corruption.Case) -> Iterator[Path]:
    """A tmpfs with room for the recovery's space check (five times the source)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "out"
    mnt.mkdir()
    size = case.db.stat().st_size * 5
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize(
    ("stage", "said"),
    [
        ("scan tables", "no room left to write the recovered file there"),
        ("copy tables", "no room left to write the recovered file there"),
        ("copy FTS tables ahead", "no room left to write the recovered file there"),
        ("verify", "writing or reading the recovered file there failed"),
    ],
)
def test_disk_full_at_a_stage_is_one_line_and_leaves_nothing(
    case: corruption.Case, folder: Path, stage: str, said: str
) -> None:
    """Filled at the diagnosis, the rebuild, the FTS shadow tables' copy made while
    FTS5's checks run, or the verification: the error names the folder and says that
    nothing was written."""
    before = fingerprint(case.db)
    filled: list[str] = []

    def progress(phase: str, _done: int, _total: int) -> None:
        if phase == stage and not filled:
            filled.append(phase)
            fill(folder)

    with pytest.raises(StatewardenError) as err:
        recover(case.db, folder / "out.db", progress=progress)
    assert filled == [stage]
    message = str(err.value)
    assert message.startswith(f"{folder}: {said}")
    assert "nothing was written at the output and the source was not changed" in message
    assert "\n" not in message
    assert sorted(os.listdir(folder)) == ["fill"]
    assert fingerprint(case.db) == before


def test_room_enough_recovers(case: corruption.Case, folder: Path) -> None:
    """The same folder, not filled: the recovery is verified (the test above fails for
    the disk, not for the tmpfs)."""
    report = recover(case.db, folder / "out.db")
    assert (report.verified, report.loss_detected) == (True, False)
    assert sorted(os.listdir(folder)) == ["out.db"]
