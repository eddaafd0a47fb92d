"""A holder scan that is incomplete for a moment does not end a maintenance run; one that
stays incomplete still does (it fails closed).

Real processes: root holds an open file description lock on a database that the second
uid scans. ``/proc/locks`` shows such a lock with pid -1, and the second uid cannot read
root's descriptors to find its carrier, so while the lock is held the scan is incomplete
("a lock ... names no owner"). Released, the next scan is whole.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from statewarden.maintenance.quiesce import INCOMPLETE_SCANS
from tests.support.privileges import SETPRIV
from tests.support.repo import REPO

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (setpriv), as CI runs")
# Takes an OFD lock on argv[1], says ready, and lets go of it (exits) argv[3] seconds
# after the file argv[2] appears.
HOLDER = (
    "import fcntl, os, struct, sys, time\n"
    "f = open(sys.argv[1], 'rb')\n"
    "fcntl.fcntl(f, fcntl.F_OFD_SETLK, struct.pack('hhqqi4x', fcntl.F_RDLCK, 0, 0, 0, 0))\n"
    "print('ready', flush=True)\n"
    "while not os.path.exists(sys.argv[2]):\n"
    "    time.sleep(0.02)\n"
    "time.sleep(float(sys.argv[3]))\n"
)
# As the second uid: one plain full scan, then (after creating the flag file) the
# maintenance run's scan, which takes an incomplete scan again before it gives up.
SCANNER = (
    "import json, sys, time\n"
    "from pathlib import Path\n"
    "from statewarden.holders.scan import HolderScanner\n"
    "from statewarden.maintenance.quiesce import complete_scan\n"
    "db, flag, gap = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])\n"
    "scanner = HolderScanner([db], watch_opens=False)\n"
    "first = scanner.scan(full=True)[0]\n"
    "flag.touch()\n"
    "t0 = time.monotonic()\n"
    "last = complete_scan(scanner, gap_s=gap)\n"
    "print(json.dumps({'first': first.problems, 'last': last.problems,\n"
    "                  'complete': last.complete, 'seconds': time.monotonic() - t0}))\n"
)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder both uids can use, with a database file in it."""
    d = Path(tempfile.mkdtemp(prefix="statewarden-scan-"))
    try:
        d.chmod(0o777)
        (d / "state.db").write_bytes(b"")
        (d / "state.db").chmod(0o644)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _scan_while_held(shared: Path, hold_after_flag_s: float, gap_s: float) -> dict[str, object]:
    db, flag = shared / "state.db", shared / "flag"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), str(flag), str(hold_after_flag_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        out = subprocess.run(
            [*SETPRIV, sys.executable, "-c", SCANNER, str(db), str(flag), str(gap_s)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        result: dict[str, object] = json.loads(out.stdout)
        return result
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_lock_let_go_of_during_the_scan_leaves_it_complete(shared: Path) -> None:
    """The lock is held at the first scan and let go of one second later: the run's scan
    takes the scan again and ends complete, after at least one gap."""
    got = _scan_while_held(shared, hold_after_flag_s=1.0, gap_s=0.5)
    first = got["first"]
    assert isinstance(first, list)
    assert any("names no owner" in p for p in first), first
    assert got["complete"] is True, got["last"]
    seconds = got["seconds"]
    assert isinstance(seconds, float)
    assert seconds >= 0.5


def test_a_lock_held_throughout_leaves_it_incomplete(shared: Path) -> None:
    """Held for longer than every retry: the last scan is still incomplete, and says why."""
    got = _scan_while_held(shared, hold_after_flag_s=60.0, gap_s=0.05)
    assert got["complete"] is False
    last = got["last"]
    assert isinstance(last, list)
    assert any("names no owner" in p for p in last), last
    seconds = got["seconds"]
    assert isinstance(seconds, float)
    assert seconds >= 0.05 * (INCOMPLETE_SCANS - 1)
