"""A replaced state.db (a new device/inode: restored, replaced by hand) is verified when
first seen: ``status`` never keeps the old file's verdict. Real daemons, real
Hermes-written files, the damage real bytes (a ``sessions`` row stored twice)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lab.hermes_fixtures import TINY, make_home
from statewarden.daemon.verify import file_identity
from tests.support.cli import run_ctl
from tests.support.daemon import DaemonProc, configured, phantom_home


def test_a_replaced_file_is_verified_when_first_seen(tmp_path: Path) -> None:
    """A damaged file is verified (base damage); a healthy file renamed over it (a new
    inode) is verified at once (reason "new file"): status shows the new file's verdict
    and identity, not the old file's damage."""
    home, _rowid = phantom_home(tmp_path)
    db = home / "state.db"
    env = configured(tmp_path, home, verify_interval="1h")
    d = DaemonProc(env)
    try:
        d.wait_for_line("verification found damage")
        (first,) = d.ctl("status")["databases"]
        assert (first["verified"]["result"], first["verified"]["reason"]) == ("base", "first")
        assert first["verified"]["file"] == file_identity(db)
        healthy = make_home(tmp_path / "other", TINY) / "state.db"
        new = db.with_name("state.db.restored")
        shutil.copyfile(healthy, new)
        os.rename(new, db)
        line = d.wait_for_line('reason="new file"')
        assert "verifying database" in line
        d.wait_for_line("database verified healthy")
        (now,) = d.ctl("status")["databases"]
        assert (now["verified"]["result"], now["verified"]["reason"]) == ("none", "new file")
        assert now["verified"]["file"] == file_identity(db) != first["verified"]["file"]
        assert "healthy (new file)" in run_ctl("status", env=env).stdout
    finally:
        d.stop()
