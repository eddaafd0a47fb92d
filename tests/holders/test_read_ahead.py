"""``locks.ReadAhead``: /proc/locks read in a thread alongside a one-shot scan.

What it saves is wall time (the kernel's wait for the first reader of /proc/locks), which
``bench/holders.py`` measures; here: the thread runs, reads, and ends when told to or
when there is nothing to read, and a scan with it finds what one without it finds.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from lab.hermes_fixtures import TINY, holding, make_home
from statewarden.holders.locks import ReadAhead
from statewarden.holders.scan import HolderScanner


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def settle(expected: int, seconds: float = 5.0) -> int:
    """The thread count once it is ``expected`` (or the last one seen after ``seconds``,
    less than the 10 s a ReadAhead never stopped would read for)."""
    deadline = time.monotonic() + seconds
    while (n := threads()) != expected and time.monotonic() < deadline:
        time.sleep(0.005)
    return n


def test_reads_until_stopped_then_ends() -> None:
    """The thread is there while it reads /proc/locks and gone soon after stop()."""
    before = threads()
    ahead = ReadAhead()
    try:
        assert settle(before + 1) == before + 1
        time.sleep(0.05)  # several periods: still reading, still there
        assert threads() == before + 1
    finally:
        ahead.stop()
    assert settle(before) == before


def test_nothing_to_read_ends_by_itself(tmp_path: Path) -> None:
    """A /proc without a locks file (the scan's own read says why): the thread ends."""
    before = threads()
    ahead = ReadAhead(str(tmp_path))
    assert settle(before) == before
    ahead.stop()


def test_a_scan_reading_ahead_finds_the_same(tmp_path: Path) -> None:
    """A Hermes writer is found by a scan that reads /proc/locks ahead, with the same
    locks as a scan that does not; no thread is left behind."""
    home = make_home(tmp_path / "hermes", TINY)
    before = threads()
    with holding(home) as writer:
        plain = HolderScanner([home / "state.db"], watch_opens=False).scan()[0]
        ahead = HolderScanner([home / "state.db"], watch_opens=False, read_locks_ahead=True)
        seen = ahead.scan()[0]
    assert settle(before) == before
    mine = [h for h in seen.holders if h.pid == writer.pid]
    assert len(mine) == 1
    assert [h.lock_state for h in plain.holders if h.pid == writer.pid] == [mine[0].lock_state]
    assert mine[0].lock_state == "held"
