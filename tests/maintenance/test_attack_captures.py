"""``statewardenctl captures`` given a --db that is no file: a folder, a FIFO, a
symlink to /dev/zero. Real captures beside it: Hermes' own main image and WAL of a
database Hermes wrote (``tests/recovery/test_captures.py`` makes them)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, built_db
from tests.support.captures import capture_of, image_and_wal
from tests.support.cli import run_installed


def _folder(db: Path) -> None:
    db.mkdir()


def _fifo(db: Path) -> None:
    os.mkfifo(db)


def _device(db: Path) -> None:
    db.symlink_to("/dev/zero")


NOT_A_FILE: list[tuple[Callable[[Path], None], str]] = [
    (_folder, "is a directory, not a database"),
    (_fifo, "is a FIFO, not a database"),
    (_device, "is a character device, not a database"),
]


@pytest.mark.parametrize(("make", "says"), NOT_A_FILE, ids=lambda v: getattr(v, "__name__", ""))
@pytest.mark.parametrize("beside", [True, False], ids=["a-capture-beside", "nothing-beside"])
def test_a_db_that_is_no_file_is_one_line_whatever_lies_beside_it(
    tmp_path: Path, *, make: Callable[[Path], None], says: str, beside: bool
) -> None:
    """Invariant: bad input is one line with a documented exit code. A --db that is a
    folder, a FIFO or a device is exit 4 (the live file cannot be read), named, never
    read from (no hang), whether or not a capture lies beside it: it was "no retired WAL
    capture beside it", exit 0, when none did."""
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    if beside:
        image, wal = image_and_wal(built_db(TINY), tmp_path, new_messages=2)
        capture_of(home, image, wal)
    make(db)
    proc = run_installed("captures", "--db", str(db), env=dict(os.environ), timeout_s=120)
    assert proc.exit_code == 4, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [f"statewardenctl: error: {db}: {says}"]
    assert proc.stdout == ""
