"""A recovery's memory does not grow like a Python set with the row count.

A file of 300,000 Hermes messages with one zeroed leaf, recovered in a fresh process:
its peak RSS stays under 128 MiB (the keys of every row held five times over as
Python sets, and each index's entries sorted in one piece, took 236 MiB here, and
over 700 MiB at a million messages), and the output is verified with exactly the
rows the zeroed page held reported lost.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lab.corruption import zero_middle_leaf
from lab.many_rows import many_messages

PEAK_RSS_MIB = 128

_RECOVER = """
import json, sys
from pathlib import Path
from statewarden.recovery.recover import recover
r = recover(Path(sys.argv[1]), Path(sys.argv[2]))
# VmHWM: this process's own peak (ru_maxrss counts the parent's memory at the fork)
hwm = [ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("VmHWM:")]
print(json.dumps({
    "verified": r.verified,
    "lost": {k: v.lost_keys for k, v in r.tables.items() if v.lost},
    "peak_rss_mib": int(hwm[0].split()[1]) / 1024,
}))
"""


def test_a_zeroed_leaf_of_300k_messages_in_bounded_memory(tmp_path: Path) -> None:
    """Its own peak RSS stays under PEAK_RSS_MIB, verified, exactly the page's rows lost."""
    db = many_messages(tmp_path / "src" / "state.db", 300_000)
    gone = zero_middle_leaf(db)
    (tmp_path / "out").mkdir()
    run = subprocess.run(
        [sys.executable, "-c", _RECOVER, str(db), str(tmp_path / "out" / "new.db")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert got["verified"] is True
    assert got["lost"] == {"messages": gone}
    assert got["peak_rss_mib"] < PEAK_RSS_MIB, got["peak_rss_mib"]
