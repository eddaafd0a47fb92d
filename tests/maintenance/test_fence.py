"""The Fence of a run owns the fence state: mode 000 put up on the original it found,
the original read through a descriptor held since before, taken down only if put up."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from statewarden.errors import FenceError
from statewarden.maintenance.fence import FENCE_MODE, Fence, Original


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_put_up_reads_through_the_held_descriptor_and_takes_down(tmp_path: Path) -> None:
    """Up: mode 000, yet the original's bytes are still read (digest, copy) through the
    descriptor; down: the mode it had comes back."""
    db = tmp_path / "state.db"
    content = b"SQLite format 3\x00" + b"x" * 5000
    db.write_bytes(content)
    db.chmod(0o640)
    fence = Fence.of(db)
    fence.put_up()
    try:
        assert fence.up
        assert mode_of(db) == FENCE_MODE
        out = tmp_path / "copy.db"
        fence.copy_out(out)
        assert fence.sha256() == hashlib.sha256(content).hexdigest()
    finally:
        fence.let_go()
        fence.take_down()
    assert mode_of(db) == 0o640
    assert out.read_bytes() == content
    assert mode_of(out) == 0o600


def test_a_fence_never_put_up_changes_nothing(tmp_path: Path) -> None:
    """Taking down a fence that is not up leaves the file's mode alone, and reading the
    original without the held descriptor is a clear error, not a crash."""
    db = tmp_path / "state.db"
    db.write_bytes(b"data")
    db.chmod(0o600)
    fence = Fence.of(db)
    os.chmod(db, 0o644)  # someone else's change: not ours to undo
    fence.take_down()
    assert mode_of(db) == 0o644
    with pytest.raises(FenceError, match="not held open"):
        fence.sha256()


def test_a_replaced_original_is_not_fenced(tmp_path: Path) -> None:
    """A state.db replaced after the plan is refused: neither the new file's mode nor
    anything else changes."""
    db = tmp_path / "state.db"
    db.write_bytes(b"old")
    fence = Fence.of(db)
    (tmp_path / "new").write_bytes(b"new")
    (tmp_path / "new").chmod(0o600)
    os.replace(tmp_path / "new", db)
    with pytest.raises(FenceError, match="replaced"):
        fence.put_up()
    assert not fence.up
    assert mode_of(db) == 0o600


def test_a_resumed_fence_takes_down_what_the_ledger_says_was_put_up(tmp_path: Path) -> None:
    """A Fence made from the ledger's record of the original (a resume) restores the
    original mode when the ledger says the fence went up."""
    db = tmp_path / "state.db"
    db.write_bytes(b"data")
    st = os.lstat(db)
    orig = Original(st.st_ino, st.st_dev, 0o644, st.st_uid, st.st_gid)
    db.chmod(FENCE_MODE)
    Fence(db, orig, up=True).take_down()
    assert mode_of(db) == 0o644


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_the_fence_keeps_out_a_process_of_the_owners_uid() -> None:
    """A process of the database owner's uid (not root) cannot open the fenced file, and
    can again once the fence is down; root's run knows its own processes ignore it."""
    folder = Path(tempfile.mkdtemp(prefix="statewarden-fence-"))
    try:
        folder.chmod(0o755)
        db = folder / "state.db"
        db.write_bytes(b"data")
        os.chown(db, 65534, 65534)
        db.chmod(0o600)
        probe = [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-c",
            f"open({str(db)!r}, 'rb').read()",
        ]
        fence = Fence.of(db)
        assert not fence.effective  # this process is root
        fence.put_up()
        try:
            kept_out = subprocess.run(probe, capture_output=True, text=True, check=False)
        finally:
            fence.let_go()
            fence.take_down()
        assert kept_out.returncode != 0
        assert "PermissionError" in kept_out.stderr
        assert subprocess.run(probe, check=False).returncode == 0
    finally:
        shutil.rmtree(folder)
