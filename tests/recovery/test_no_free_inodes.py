"""A work folder with bytes to spare but no inodes (a real tmpfs mounted with a few
``nr_inodes``): ``check`` and ``recover`` say so in one line naming the folder before
any work, the source unchanged, nothing left in the folder. Before, ``check`` blamed
the source ("cannot open") and ``recover`` ended in "unexpected CantOpenError"."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.hermes_fixtures import SMALL, built_db
from statewarden.errors import EXIT_NOT_CHECKED
from statewarden.recovery.bundle import OUTPUT_FILES, WORK_COPY_FILES
from tests.support.cli import run_ctl


@pytest.fixture
def starved(tmp_path: Path) -> Iterator[Path]:
    """Folders on tmpfs file systems of 80 MB, each with ``n`` inodes (the root folder
    takes one): ``starved / str(n)``."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = []
    for n in (WORK_COPY_FILES, WORK_COPY_FILES + OUTPUT_FILES + 1):
        mnt = tmp_path / str(n)
        mnt.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size=80m,nr_inodes={n}", "tmpfs", str(mnt)],
            check=True,
        )
        mounted.append(mnt)
    try:
        yield tmp_path
    finally:
        for mnt in mounted:
            subprocess.run(["umount", str(mnt)], check=False)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_check_in_a_folder_with_too_few_inodes_is_one_line(starved: Path) -> None:
    """One inode short of a work folder's files: exit 5 (not checked), one line naming
    the folder and what it lacks, nothing made there."""
    db = built_db(SMALL)
    before = _sha(db)
    folder = starved / str(WORK_COPY_FILES)
    r = run_ctl("check", "--db", str(db), "--work-dir", str(folder))
    assert r.exit_code == EXIT_NOT_CHECKED, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert f"{folder}: not enough free inodes" in line
    assert "Traceback" not in r.stderr
    assert list(folder.iterdir()) == []
    assert _sha(db) == before


def test_recover_in_a_folder_with_too_few_inodes_is_one_line(starved: Path) -> None:
    """The copy's files fit, the output's do not: one line naming the folder, exit 1,
    no output and nothing else left there."""
    db = built_db(SMALL)
    before = _sha(db)
    folder = starved / str(WORK_COPY_FILES + OUTPUT_FILES + 1)
    r = run_ctl("check", "--db", str(db), "--work-dir", str(folder))
    assert r.exit_code == 0, r.stdout + r.stderr  # the check's files fit there
    out = folder / "out.db"
    r = run_ctl("recover", "--source", str(db), "--output", str(out))
    assert r.exit_code == 0, r.stdout + r.stderr  # and so do recover's
    out.unlink()
    (folder / "taken").write_text("one inode fewer")
    r = run_ctl("recover", "--source", str(db), "--output", str(out))
    assert r.exit_code == 1, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert f"{folder}: not enough free inodes" in line
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["taken"]
    assert _sha(db) == before
