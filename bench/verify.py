"""One scheduled verification of a database, next to SQLite's ``PRAGMA integrity_check``.

    .venv/bin/python bench/verify.py [--spec large|tall|small] [--repeat N]
        [--commit-every-ms MS] [--delay-only]

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

Then the delay a verification adds to Hermes' commits while it runs: a real Hermes
``SessionDB`` writer in a subprocess (its own interpreter, as in real life) appends a
message every ``--commit-every-ms`` to the same file and times each ``append_message``
(one commit, with its fsync). In each of ``--repeat`` rounds, as long a stretch of each
of these, in an order that turns each round (this machine is shared: what else runs
weighs on every condition alike):

- **none**: nothing but the writer;
- **verification**: one verification, as the daemon makes it (the stretch's length);
- **cp loop**: ``cp`` of the live file to the work folder and its removal, again and
  again, at normal priority (the anchor: a reader of the whole file that syncs nothing);
- **integrity_check**: SQLite's ``PRAGMA integrity_check`` on the live file (read-only,
  at normal priority), again and again (the other anchor).

Per condition: its commits' median, 99th percentile and maximum (ms), the 1-minute
load average over its stretches, and its p99 over the p99 with none. The commits in which
Hermes merges its FTS segments (``optimize``, every 1000th write: its own upkeep, seconds
on the large file, in whichever stretch it falls) are left out of all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
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
# "<start> <seconds> <upkeep>" per commit (start on the monotonic clock, shared by the
# processes of one machine) until its stdin closes.
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
    took = time.monotonic() - t0
    # 1 when this commit ran Hermes' FTS optimize (its own upkeep, every 1000th write)
    upkeep = int(db._write_count % db._OPTIMIZE_EVERY_N_WRITES == 0)
    print(f"{t0} {took} {upkeep}", flush=True)
db.close()
"""


def _stats_ms(values: list[float]) -> str:
    if not values:
        return "no commit"
    return (
        f"{len(values)} commits, median {statistics.median(values) * 1000:.2f} ms,"
        f" p99 {_p99(values) * 1000:.2f} ms, max {max(values) * 1000:.2f} ms"
    )


CONDITIONS = ("none", "verification", "cp loop", "integrity_check")


def _anchor_cp(db: Path, work: Path, until: float) -> None:
    """``cp`` of the live file and its removal, until ``until`` (monotonic)."""
    dest = work / "cp-anchor.db"
    while time.monotonic() < until:
        subprocess.run(["cp", str(db), str(dest)], check=True)
        dest.unlink()


def _anchor_pragma(db: Path, until: float) -> None:
    """``PRAGMA integrity_check`` on the live file (read-only: it may hold a WAL), until
    ``until``."""
    while time.monotonic() < until:
        conn = apsw.Connection(
            f"file:{db}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        )
        try:
            conn.set_busy_timeout(1000)
            conn.execute("PRAGMA integrity_check(1)").fetchall()
        finally:
            conn.close()


def _window(condition: str, db: Path, work: Path, length: float) -> tuple[float, float, str]:
    """One stretch of ``condition``: (start, end, what the verification gave)."""
    t0 = time.monotonic()
    outcome = ""
    if condition == "verification":
        try:
            outcome = f"damage {verification(db, work)[2]}"
        except StatewardenError as exc:
            outcome = f"could not finish: {exc.message}"
    elif condition == "cp loop":
        _anchor_cp(db, work, t0 + length)
    elif condition == "integrity_check":
        _anchor_pragma(db, t0 + length)
    else:
        time.sleep(length)
    return t0, time.monotonic(), outcome


def commit_delay(
    db: Path, work: Path, every_s: float, repeat: int
) -> tuple[dict[str, list[float]], dict[str, list[float]], str]:
    """Commit latencies of a real SessionDB writer on ``db`` under each condition:
    (condition -> latencies in s, condition -> the load averages at its stretches'
    ends, what the verifications gave: their damage and copies, counted)."""
    proc = subprocess.Popen(
        [hermes_python(), "-c", WRITER, str(every_s)],
        env=writer_env(db.parent),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    windows: list[tuple[str, float, float]] = []
    loads: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    outcomes: list[str] = []
    lines: list[str] = []
    # Its lines are read as they come: a pipe left unread fills (about 1,450 commits'
    # lines) and blocks the writer in its next print, so that no stretch after holds a
    # commit (a long run, as at load, where the verification at idle priority waits).
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        reader.start()
        # The writer's first commits settle, and its first checkpoint (Hermes folds
        # its log every 50 writes, a second in) passes: that one alone took 125-146 ms
        # whatever ran beside it, and always fell in the first stretch, a verification.
        time.sleep(3.0)
        length = 0.0
        for r in range(repeat):
            # Turn the order each round; the verification sets the stretch's length.
            order = CONDITIONS[r % 4 :] + CONDITIONS[: r % 4]
            if not length:
                order = ("verification", *(c for c in order if c != "verification"))
            for condition in order:
                t0, t1, said = _window(condition, db, work, length)
                if condition == "verification":
                    length = t1 - t0
                    outcomes.append(said)
                windows.append((condition, t0, t1))
                loads[condition].append(os.getloadavg()[0])
                time.sleep(0.2)  # nothing straddles two stretches
    finally:
        proc.stdin.close()
    proc.wait(timeout=60)
    reader.join(timeout=60)
    out = "".join(lines)
    # Every 1000th write Hermes merges its FTS segments (``optimize``) in the commit: its
    # own upkeep, seconds on a large file, landing in whichever stretch it falls in.
    commits = [
        (float(t), float(d))
        for t, d, upkeep in (line.split() for line in out.splitlines())
        if upkeep == "0"
    ]
    found: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    for condition, t0, t1 in windows:
        found[condition] += [d for t, d in commits if t0 <= t < t1]
    said = ", ".join(f"{n}x {o}" for o, n in collections.Counter(outcomes).items())
    return found, loads, said


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spec", choices=sorted(SPECS), default="large")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--commit-every-ms", type=float, default=20.0)
    parser.add_argument(
        "--delay-only", action="store_true", help="only the delay to Hermes' commits"
    )
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
        print(
            f"fixture: {args.spec} ({size / 1e6:.1f} MB, {built_s:.1f} s to build or find)",
            flush=True,
        )
        if not args.delay_only:
            timings(db, work, args.repeat)
        found, loads, outcome = commit_delay(db, work, args.commit_every_ms / 1000, args.repeat)
    print(
        f"Hermes commits (a SessionDB writer every {args.commit_every_ms:g} ms),"
        f" {args.repeat} rounds; the verifications: {outcome}"
    )
    for condition in CONDITIONS:
        load = statistics.mean(loads[condition]) if loads[condition] else float("nan")
        ratio = ""
        if found[condition] and found["none"]:
            ratio = f", p99 {_p99(found[condition]) / _p99(found['none']):.2f}x none's"
        print(f"  {condition:15s} load {load:.2f}: {_stats_ms(found[condition])}{ratio}")


def timings(db: Path, work: Path, repeat: int) -> None:
    """The verification's wall and CPU time, at idle and normal priority, next to
    ``PRAGMA integrity_check``'s: the medians of ``repeat`` runs, printed."""
    verify_runs = [verification(db, work) for _ in range(repeat)]
    normal_runs = [verification_normal(db, work) for _ in range(repeat)]
    pragma_runs = [integrity_check(db) for _ in range(repeat)]
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
        f"CPU {v_cpu / p_cpu:.2f}x",
        flush=True,
    )


if __name__ == "__main__":
    main()
