"""Maintenance as a normal user while current Hermes' writers hold open file description
locks, with other users' processes about (no PID namespace of its own): the holder scan
is complete and names the writer, the run stops it and repairs the phantom row.

Everything is real: the writer is the ``hermes`` stand-in (Hermes' own ``SessionDB``)
with the OFD guard of Hermes since 0.20 (``lab/lockguard.py``), run as uid 65534 through
``setpriv``; root's processes (this test's own among them) are other users' processes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import apsw
import pytest

from tests.support.maintenance import phantom_home_for_nobody
from tests.support.privileges import SETPRIV

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root (setpriv); run the suite as root, as CI does"
)

SCRIPT = """\
set -u
export HERMES_HOME="$BASE/home" XDG_STATE_HOME="$BASE/state" HOME="$BASE"
export FAKE_HERMES_OFD_GUARD="$REPO/lab"
FAKE_HERMES_PIDFILE="$BASE/dashboard.pid" "$BASE/bin/hermes" dashboard > /dev/null 2>&1 &
i=0; while [ ! -s "$BASE/dashboard.pid" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
cd "$REPO"
"$PY" -m statewarden.cli.ctl holders --db "$BASE/home/state.db" --json --no-systemd \\
    > "$BASE/holders.json" 2> "$BASE/holders.err"
echo $? > "$BASE/holders.rc"
"$PY" -m statewarden.cli.ctl maintenance --db "$BASE/home/state.db" --yes --json \\
    > "$BASE/report.json" 2> "$BASE/stderr.txt"
echo $? > "$BASE/rc"
"""


def session_ids(db: Path) -> list[str]:
    conn = apsw.Connection(
        f"file:{db}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        return [r[0] for r in conn.execute("SELECT id FROM sessions NOT INDEXED")]
    finally:
        conn.close()


def test_maintenance_as_the_user_stops_an_ofd_writer_and_repairs() -> None:
    """As a normal user, with root's processes about, holders finds current Hermes' writer by its
    OFD locks (complete, named dashboard), and maintenance stops it, repairs the phantom row without
    loss and starts it again."""
    base = Path(tempfile.mkdtemp(prefix="statewarden-ofd-"))
    idle = subprocess.Popen(  # a root process: one more of another user's
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        case, env = phantom_home_for_nobody(base, stop_grace="5s")
        distinct = sorted(set(session_ids(case.db)))
        proc = subprocess.run(
            [*SETPRIV, "sh", "-c", SCRIPT],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        writer = int((base / "dashboard.pid").read_text())
        holders = json.loads((base / "holders.json").read_text())
        assert (base / "holders.rc").read_text().strip() == "0", holders["problems"]
        assert holders["complete"] is True
        assert holders["coverage"]["locks_only"] > 0  # root's processes, checked by locks
        (me,) = [h for h in holders["holders"] if h["pid"] == writer]
        assert me["kind"] == "dashboard"
        assert me["lock_state"] == "held"
        assert {(lk["file"], lk["kind"]) for lk in me["locks"]} >= {
            ("state.db", "OFDLCK"),
            ("state.db-shm", "OFDLCK"),
        }
        rc = (base / "rc").read_text().strip()
        report = (base / "report.json").read_text()
        assert rc == "0", f"{proc.stderr}\n{(base / 'stderr.txt').read_text()}\n{report}"
        rep = json.loads(report)
        assert rep["outcome"] == "repaired"
        assert [p["pid"] for p in rep["start_again"]] == [writer]
        ids = session_ids(case.db)
        assert len(ids) == len(set(ids))  # the phantom is gone
        assert set(distinct) <= set(ids)
        assert rep["recover"]["loss_detected"] is False
    finally:
        idle.communicate()
        subprocess.run(["pkill", "-u", "65534", "-f", str(base / "bin" / "hermes")], check=False)
        shutil.rmtree(base, ignore_errors=True)
