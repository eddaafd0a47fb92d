"""One scheduled verification of a database, next to SQLite's ``PRAGMA integrity_check``.

    .venv/bin/python bench/verify.py [--spec large|tall|small] [--repeat N]

On the same Hermes-written file (a fixture from ``lab/hermes_fixtures.py``; default
``large``: ~640 sessions, ~40,000 messages, ~250 MB), it times:

- what the daemon runs on its schedule (``daemon.verify.in_idle_thread`` around
  ``daemon.verify.check_live``: ``check`` on a private copy, raw or, under a writer too
  busy for one, through the backup API; the copy removed), in a thread lowered to nice 19 and the idle I/O class, as the daemon does;
- the same verification at normal priority (what idle priority costs in wall time on a
  busy machine: nothing on an idle one);
- SQLite's uncapped ``PRAGMA integrity_check`` on the same file (read-only, immutable),
  in this process's main thread.

Each line gives the wall time and the CPU time (of the verification's own thread; of
the process for the pragma), the median of ``--repeat`` runs, and the ratio.

Then the delay one verification adds to Hermes' commits while it runs: a real Hermes
``SessionDB`` writer in a subprocess (its own interpreter, as in real life) appends a
message every ``--commit-every-ms`` to the same file and times each
``append_message`` (one commit); the commits made while a verification runs are set
next to those made in as long a stretch just before it, with no verification (the
anchor): median, 99th percentile and maximum, in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import apsw

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lab.hermes_fixtures import (  # noqa: E402
    LARGE,
    SMALL,
    TALL,
    Spec,
    built_db,
    hermes_python,
    writer_env,
)
from statewarden.daemon.verify import check_live, in_idle_thread  # noqa: E402
from statewarden.errors import StatewardenError  # noqa: E402
from statewarden.recovery.check import check_database  # noqa: E402

SPECS: dict[str, Spec] = {"large": LARGE, "tall": TALL, "small": SMALL}


def verification(db: Path, work: Path) -> tuple[float, float, str, str]:
    """(wall s, CPU s of its thread, damage class and copy, priority) of one
    verification, as the daemon makes it (``daemon.verify.check_live``)."""
    t0 = time.perf_counter()
    (diagnosis, copied), priority, cpu_s = asyncio.run(
        in_idle_thread(lambda: check_live(db, work, None, contextlib.nullcontext()))
    )
    # The FTS tables' own checks run in threads of their own: their CPU counts too.
    return (
        time.perf_counter() - t0,
        cpu_s + diagnosis.helper_cpu_s,
        f"{diagnosis.damage} ({copied} copy)",
        priority,
    )


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


# The writer: Hermes' own SessionDB, one message per tick, each commit timed; prints
# "<start> <seconds>" per commit (start on the monotonic clock, shared by the processes
# of one machine) until its stdin closes.
WRITER = """
import sys, threading, time
from hermes_state import SessionDB
every = float(sys.argv[1])
db = SessionDB()
sid = "bench_commit_latency"
db.create_session(sid, "cli")
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("ready", flush=True)
n = 0
while not stop.wait(every):
    n += 1
    t0 = time.monotonic()
    db.append_message(sid, "assistant", f"tick {n}")
    print(f"{t0} {time.monotonic() - t0}", flush=True)
db.close()
"""


def _stats_ms(values: list[float]) -> str:
    if not values:
        return "no commit"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"{len(values)} commits, median {statistics.median(ordered) * 1000:.2f} ms,"
        f" p99 {p99 * 1000:.2f} ms, max {ordered[-1] * 1000:.2f} ms"
    )


def commit_delay(
    db: Path, work: Path, every_s: float, anchor_s: float, repeat: int
) -> tuple[list[float], list[float], str]:
    """Commit latencies of a real SessionDB writer on ``db``: (in ``anchor_s`` or as
    long as the verifications took, just before them; while ``repeat`` verifications
    run back to back; what the last gave: its damage class, or why it could not
    finish)."""
    env = writer_env(db.parent)
    proc = subprocess.Popen(
        [hermes_python(), "-c", WRITER, str(every_s)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)  # the writer's first commits (schema, session) settle
        anchor_from = time.monotonic()
        time.sleep(anchor_s)
        v0 = time.monotonic()
        for _ in range(repeat):
            try:
                outcome = f"damage {verification(db, work)[2]}"
            except StatewardenError as exc:
                outcome = f"could not finish: {exc.message}"
        v1 = time.monotonic()
        time.sleep(0.2)
    finally:
        proc.stdin.close()
    out = proc.stdout.read()
    proc.wait(timeout=60)
    commits = [tuple(map(float, line.split())) for line in out.splitlines()]
    during = [d for t, d in commits if v0 <= t < v1]
    # The anchor: the same length of time just before, with no verification running.
    before = [d for t, d in commits if max(anchor_from, v0 - (v1 - v0)) <= t < v0]
    return before, during, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spec", choices=sorted(SPECS), default="large")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--commit-every-ms", type=float, default=100.0)
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
        anchor_s = sum(r[0] for r in verify_runs)
        before, during, outcome = commit_delay(
            db, work, args.commit_every_ms / 1000, anchor_s, args.repeat
        )
    v_wall = statistics.median(r[0] for r in verify_runs)
    v_cpu = statistics.median(r[1] for r in verify_runs)
    n_wall = statistics.median(r[0] for r in normal_runs)
    n_cpu = statistics.median(r[1] for r in normal_runs)
    p_wall = statistics.median(r[0] for r in pragma_runs)
    p_cpu = statistics.median(r[1] for r in pragma_runs)
    damage, priority = verify_runs[0][2], verify_runs[0][3]
    print(f"verification ({priority}): wall {v_wall:.3f} s, CPU {v_cpu:.3f} s, damage {damage}")
    print(f"the same at normal priority: wall {n_wall:.3f} s, CPU {n_cpu:.3f} s")
    print(f"PRAGMA integrity_check: wall {p_wall:.3f} s, CPU {p_cpu:.3f} s, {pragma_runs[0][2]}")
    print(
        f"ratio (verification / integrity_check): wall {v_wall / p_wall:.2f}x, "
        f"CPU {v_cpu / p_cpu:.2f}x"
    )
    print(f"Hermes commits, no verification running: {_stats_ms(before)}")
    print(
        f"Hermes commits, while a verification runs: {_stats_ms(during)}"
        f" (the verification: {outcome})"
    )
    if before and during:
        ratio = statistics.median(during) / statistics.median(before)
        print(f"ratio (during / without, median commit): {ratio:.2f}x")


if __name__ == "__main__":
    main()
