"""One scheduled verification of a database, next to SQLite's ``PRAGMA integrity_check``.

    .venv/bin/python bench/verify.py [--spec large|tall|small] [--repeat N]

On the same Hermes-written file (a fixture from ``lab/hermes_fixtures.py``; default
``large``: ~640 sessions, ~40,000 messages, ~250 MB), it times:

- what the daemon runs on its schedule (``daemon_verify.in_idle_thread`` around
  ``recovery.check.check_database``: a private copy, the full diagnosis, the copy
  removed), in a thread lowered to nice 19 and the idle I/O class, as the daemon does;
- the same verification at normal priority (what idle priority costs in wall time on a
  busy machine: nothing on an idle one);
- SQLite's uncapped ``PRAGMA integrity_check`` on the same file (read-only, immutable),
  in this process's main thread.

Each line gives the wall time and the CPU time (of the verification's own thread; of
the process for the pragma), the median of ``--repeat`` runs, and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import apsw

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lab.hermes_fixtures import LARGE, SMALL, TALL, Spec, built_db  # noqa: E402
from statewarden.daemon_verify import in_idle_thread  # noqa: E402
from statewarden.recovery.check import check_database  # noqa: E402

SPECS: dict[str, Spec] = {"large": LARGE, "tall": TALL, "small": SMALL}


def verification(db: Path, work: Path) -> tuple[float, float, str, str]:
    """(wall s, CPU s of its thread, damage class, priority) of one verification."""
    t0 = time.perf_counter()
    diagnosis, priority, cpu_s = asyncio.run(in_idle_thread(lambda: check_database(db, work)))
    # The FTS tables' own checks run in threads of their own: their CPU counts too.
    return time.perf_counter() - t0, cpu_s + diagnosis.helper_cpu_s, diagnosis.damage, priority


def verification_normal(db: Path, work: Path) -> tuple[float, float]:
    """(wall s, CPU s) of the same verification in this thread, at normal priority."""
    t0, c0 = time.perf_counter(), time.thread_time()
    diagnosis = check_database(db, work)
    return time.perf_counter() - t0, time.thread_time() - c0 + diagnosis.helper_cpu_s


def integrity_check(db: Path) -> tuple[float, float, str]:
    """(wall s, CPU s, first line) of an uncapped ``PRAGMA integrity_check``."""
    t0, c0 = time.perf_counter(), time.process_time()
    conn = apsw.Connection(
        f"file:{db}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check(1000000)")]
    finally:
        conn.close()
    return time.perf_counter() - t0, time.process_time() - c0, rows[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spec", choices=sorted(SPECS), default="large")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    t0 = time.perf_counter()
    src = built_db(SPECS[args.spec])
    built_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        db = Path(tmp) / "state.db"
        shutil.copyfile(src, db)
        work = Path(tmp) / "work"
        work.mkdir()
        size = db.stat().st_size
        print(f"fixture: {args.spec} ({size / 1e6:.1f} MB, {built_s:.1f} s to build or find)")
        verify_runs = [verification(db, work) for _ in range(args.repeat)]
        normal_runs = [verification_normal(db, work) for _ in range(args.repeat)]
        pragma_runs = [integrity_check(db) for _ in range(args.repeat)]
    v_wall = statistics.median(r[0] for r in verify_runs)
    v_cpu = statistics.median(r[1] for r in verify_runs)
    n_wall = statistics.median(r[0] for r in normal_runs)
    n_cpu = statistics.median(r[1] for r in normal_runs)
    p_wall = statistics.median(r[0] for r in pragma_runs)
    p_cpu = statistics.median(r[1] for r in pragma_runs)
    damage, priority = verify_runs[0][2], verify_runs[0][3]
    print(f"verification ({priority}): wall {v_wall:.3f} s, CPU {v_cpu:.3f} s, damage {damage}")
    print(f"the same at normal priority: wall {n_wall:.3f} s, CPU {n_cpu:.3f} s")
    print(f"PRAGMA integrity_check: wall {p_wall:.3f} s, CPU {p_cpu:.3f} s, "
          f"{pragma_runs[0][2]}")  # fmt: skip
    print(f"ratio (verification / integrity_check): wall {v_wall / p_wall:.2f}x, "
          f"CPU {v_cpu / p_cpu:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
