"""The private copy of ``check`` (and ``captures``) goes where ``$TMPDIR`` says, or nowhere.

Python's ``tempfile.gettempdir()`` passes over a folder it cannot write a probe file into
and returns the next candidate (/tmp, then the current folder): a full ``$TMPDIR`` had the
whole copy made in /tmp instead, unasked, and the demo on a full disk then failed at
maintenance, now and then, instead of at check. Invariant: without ``--work-dir`` the
copy goes to the folder ``$TMPDIR`` names (else /tmp), and a folder that cannot hold it
is said in one line naming it, as ``--work-dir`` is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.privileges import needs_root
from tests.support.repo import REPO

CTL = [sys.executable, "-m", "statewarden.cli.ctl"]


@needs_root
def test_a_full_tmpdir_is_no_room_there_not_a_copy_elsewhere(
    tmp_path: Path, hermes_home: Path
) -> None:
    """``$TMPDIR`` on a full tmpfs (in a private mount namespace): one line naming that
    folder and that it has no room, exit 5; nothing is copied anywhere else (no work
    folder appears in /tmp)."""
    full = tmp_path / "full"
    full.mkdir()
    before = {p.name for p in Path("/tmp").glob(".statewarden-work-*")}
    script = (
        f'mount -t tmpfs -o size=64k tmpfs "{full}" && '
        f'(dd if=/dev/zero of="{full}/fill" bs=4k 2>/dev/null; true) && '
        f'TMPDIR="{full}" "$@"'
    )
    r = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            script,
            "sh",
            *CTL,
            "check",
            "--db",
            str(hermes_home / "state.db"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert r.returncode == 5, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert str(full) in lines[0]
    assert "Traceback" not in r.stderr
    assert {p.name for p in Path("/tmp").glob(".statewarden-work-*")} <= before


def test_a_tmpdir_that_is_a_file_is_named(tmp_path: Path, hermes_home: Path) -> None:
    """``$TMPDIR`` naming a regular file: exit 2, one line naming it and ``$TMPDIR``."""
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    r = subprocess.run(
        [*CTL, "check", "--db", str(hermes_home / "state.db")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(not_a_folder)},
        timeout=120,
        check=False,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == f"statewardenctl: error: {not_a_folder}: not a directory ($TMPDIR)"
