"""A verification's private copy never goes to the disk: nothing of it is synced.

Hermes commits with an fsync (``synchronous=FULL``), and on ext4 an fsync waits for
whatever else the file system is committing: the fsync of a whole private copy (the
fold's checkpoint of the raw copy, the backup API copy's commit) held Hermes' commits up
for as long, and removing a copy that had reached the disk freed its blocks in the
journal too. Unsynced, the copy lives in the page cache, is read there and removed
before the kernel writes it out.

Proved with the kernel's own accounting, in a real process verifying a database a real
Hermes process holds: ``/proc/<pid>/io`` counts the bytes a process dirtied
(``write_bytes``) and, of those, the bytes that were removed before they were written
out (``cancelled_write_bytes``). A copy that was synced is clean when it is removed:
nothing of it is cancelled. No timing is asserted.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.hermes_fixtures import SMALL, hermes_python, holding, make_home, writer_env

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]

# One verification as the daemon makes it (``check_live``), in a process of its own,
# with what the kernel counted for that process meanwhile.
VERIFY = """
import contextlib, json, sys
from pathlib import Path
from statewarden.daemon.verify import check_live

def counted():
    fields = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
    return int(fields["write_bytes"]), int(fields["cancelled_write_bytes"])

db, work, want = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
for _ in range(10):  # a starved writer can leave a raw copy consistent: up to ten
    written0, cancelled0 = counted()
    diagnosis, copied = check_live(db, work, None, contextlib.nullcontext())
    written, cancelled = counted()
    if copied == want:
        break
print(json.dumps({"copy": copied, "damage": diagnosis.damage,
                  "written": written - written0, "cancelled": cancelled - cancelled0}))
"""


# Hermes' SessionDB committing one message after another until its stdin closes, each
# folded into state.db at once (a passive checkpoint): no raw copy of the bundle is
# consistent under it (one that only appends to the -wal leaves the raw copy good).
BUSY_WRITER = """
import sys, threading
from hermes_state import SessionDB
db = SessionDB()
db.create_session("busy", "cli")
db.append_message("busy", "assistant", "first")
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("ready", flush=True)
n = 0
while not stop.is_set():
    n += 1
    db.append_message("busy", "assistant", f"tick {n}")
    db._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
db.close()
"""


@contextlib.contextmanager
def busy_writer(home: Path) -> Iterator[None]:
    proc = subprocess.Popen(
        [hermes_python(), "-c", BUSY_WRITER],
        env=writer_env(home),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        proc.stdout.close()


def verified_in_a_process(db: Path, work: Path, want: str) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-c", VERIFY, str(db), str(work), want],
        cwd=REPO,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


@pytest.mark.parametrize("copy", ["raw", "backup API"])
def test_the_private_copy_is_removed_before_any_of_it_is_written_out(
    tmp_path: Path, copy: str
) -> None:
    """Whichever way the copy is made, the bytes the verification wrote (its copies of
    a 10 MB database: more than the database) were all removed before the kernel wrote
    them out, bar a few pages: none was synced. Before, the fold's checkpoint synced the
    raw copy and the backup API copy was synced on its commit: a whole database's worth
    was written out. Raw: Hermes holds the file with its frames in the -wal (the copy is
    folded); backup API: Hermes commits one message after another, each checkpointed."""
    home = make_home(tmp_path / "hermes", SMALL)
    db = home / "state.db"
    size = db.stat().st_size
    work = tmp_path / "work"
    with holding(home) if copy == "raw" else busy_writer(home):
        assert (home / "state.db-wal").stat().st_size > 0  # Hermes' frames, not folded
        got = verified_in_a_process(db, work, copy)
    assert (got["copy"], got["damage"]) == (copy, "none"), got
    if got["written"] < size:
        pytest.skip(f"{work}'s file system does not count page cache writes (tmpfs?): {got}")
    # What reached the disk: a few pages (this process' own files), never a copy.
    assert got["written"] - got["cancelled"] < size // 4, got
