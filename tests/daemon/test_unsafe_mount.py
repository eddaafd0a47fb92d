"""A WAL database on a FUSE filesystem, for real: the daemon opens unsafe_mount.

bindfs mirrors a Hermes home through FUSE inside a private mount namespace (so nothing
is left mounted); the daemon runs in that namespace and must see that WAL is unsafe there
(docs/stories.md story 8: no coherent locks, silent corruption while integrity_check passes).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, make_home
from tests.support.daemon import DaemonProc
from tests.support.waiting import wait_for

# Mount bindfs, wait for it, run the daemon ("$@"), pass SIGTERM on, then unmount.
SCRIPT = """
bindfs -f "$SRC" "$MNT" & b=$!
i=0
until grep -q " $MNT " /proc/self/mountinfo; do
  i=$((i+1)); [ "$i" -gt 200 ] && { kill $b; exit 97; }; sleep 0.05
done
"$@" & p=$!
trap 'kill -TERM $p 2>/dev/null' TERM INT
wait $p; rc=$?
if [ "$rc" -gt 128 ]; then wait $p; rc=$?; fi
kill $b 2>/dev/null; wait $b 2>/dev/null
exit $rc
"""


def fuse_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root for a private mount namespace and FUSE; run the suite as root"
    if shutil.which("bindfs") is None or shutil.which("unshare") is None:
        return "bindfs is not installed (packaging/setup-dev.sh installs it as root)"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing on this machine"
    return None


def test_wal_database_on_fuse_is_unsafe_mount(tmp_path: Path) -> None:
    """state.db in WAL mode reached through FUSE -> one unsafe_mount incident naming the fs."""
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    src = make_home(tmp_path / "src", TINY)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = dict(
        os.environ,
        SRC=str(src),
        MNT=str(mnt),
        HERMES_HOME=str(mnt),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_RUNTIME_DIR=str(tmp_path / "run"),
        XDG_CONFIG_HOME=str(tmp_path / "cfg"),
    )
    d = DaemonProc(
        env, prefix=("unshare", "-m", "--propagation", "private", "sh", "-c", SCRIPT, "sh")
    )
    try:
        d.wait_for_line("statewarden ready")
        (inc,) = wait_for(
            lambda: [i for i in d.ctl("incidents")["incidents"] if i["kind"] == "unsafe_mount"],
            what="unsafe_mount incident",
        )
        assert inc["db"] == str(mnt / "state.db")
        assert inc["summary"].startswith(f"state.db is in WAL mode on fuse ({mnt})")
        assert inc["severity"] == "error"
    finally:
        assert d.stop() == 0
    assert not any(
        str(mnt) in line for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )
