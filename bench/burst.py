"""A burst of distinct incidents: what persisting them costs.

3,000 distinct corruption signals (3,000 incidents) are recorded into an incident book
on disk, the daemon's way: every opening appended to the change log as it happens,
one ``flush()`` (fsync, compaction when due) per batch of 100, as one loop iteration
handles a poll's worth. Printed next to the earlier way, measured in the same run:
the whole book rewritten and fsynced (tmp + rename + folder fsync) per new incident.

Run: .venv/bin/python -m bench.burst
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from statewarden.incidents.book import IncidentBook
from statewarden.incidents.signals import Signal

DISTINCT = 3000
BATCH = 100


def _signal(i: int) -> Signal:
    return Signal(
        "corruption",
        "/db",
        f"distinct line {i}",
        key=str(i),
        source="log:agent.log",
        evidence=(f"2026-01-01 00:00:00,000 ERROR x: distinct line {i}",),
    )


def batched(folder: Path) -> tuple[float, int]:
    book = IncidentBook(folder / "incidents.json")
    t0 = time.perf_counter()
    for i in range(DISTINCT):
        book.record(_signal(i))
        if i % BATCH == BATCH - 1:
            book.flush()
    book.flush()
    return time.perf_counter() - t0, book.compactions


def whole_book_each_time(folder: Path) -> float:
    book = IncidentBook(folder / "incidents.json")
    t0 = time.perf_counter()
    for i in range(DISTINCT):
        book.record(_signal(i))
        book.flush(force=True)  # what every opening cost before: the whole book, fsynced
    return time.perf_counter() - t0


def main() -> None:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        new_s, compactions = batched(Path(a))
        old_s = whole_book_each_time(Path(b))
    print(
        f"{DISTINCT} distinct incidents: change log + batched flush {new_s:.2f} s "
        f"({compactions} whole-book writes)  |  whole book rewritten per incident "
        f"{old_s:.2f} s  (ratio {old_s / new_s:.0f}x)"
    )


if __name__ == "__main__":
    main()
