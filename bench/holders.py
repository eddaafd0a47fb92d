"""Holder scan cost on a busy host: statewarden full scan, incremental re-scan, fuser, lsof.

    .venv/bin/python bench/holders.py [--extra 2000] [--files 4] [--runs 7]

Starts ``--extra`` processes (forked sleepers, each with ``--files`` open files of its
own) plus two real Hermes writers holding a tiny state.db, then times, side by side
in one run: a full ``/proc`` scan, an incremental re-scan, ``fuser <db>`` and
``lsof <db>``. Each figure is the median of ``--runs`` runs (wall clock; the two
commands include their own process start). Goal from issue 4: full scan no slower
than fuser, incremental re-scan under 10 ms.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.hermes_fixtures import TINY, holding, make_home
from statewarden.holders.scan import HolderScanner


def spawn_sleepers(n: int, files: int, folder: Path) -> list[int]:
    """``n`` forked processes, each holding ``files`` files of its own open, paused."""
    pids = []
    for i in range(n):
        pid = os.fork()
        if pid == 0:
            try:
                held = [open(folder / f"p{i}-{k}", "w") for k in range(files)]  # noqa: SIM115
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                while held:
                    signal.pause()
            finally:
                os._exit(0)
        pids.append(pid)
    return pids


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--extra", type=int, default=2000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="statewarden-bench-") as tmp:
        folder = Path(tmp)
        home = make_home(folder / "hermes", TINY)
        db = home / "state.db"
        (folder / "files").mkdir()
        pids = spawn_sleepers(args.extra, args.files, folder / "files")
        try:
            with holding(home, write_every_s=0.2) as a, holding(home) as b:
                n_proc = sum(1 for p in os.listdir("/proc") if p.isdigit())
                scanner = HolderScanner([db])
                first = scanner.scan()[0]
                assert {a.pid, b.pid} <= {h.pid for h in first.holders}, "writers not found"
                full = median_ms(lambda: scanner.scan(full=True), args.runs)
                scanner.scan(full=True)
                incr = median_ms(lambda: scanner.scan(full=False), max(args.runs, 21))
                last = scanner.scan(full=False)[0]
                assert {a.pid, b.pid} <= {h.pid for h in last.holders}, "writers lost"

                def fuser() -> None:
                    subprocess.run(["fuser", str(db)], capture_output=True, check=False)

                def lsof() -> None:
                    subprocess.run(["lsof", str(db)], capture_output=True, check=False)

                fu = median_ms(fuser, args.runs)
                ls = median_ms(lsof, args.runs)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGTERM)
            for pid in pids:
                os.waitpid(pid, 0)
    print(f"holders bench: {n_proc} processes ({args.extra} extra, {args.files} open files each),"
          f" 2 Hermes writers, median of {args.runs} runs")  # fmt: skip
    print(f"  {'statewarden full scan':<28}{full:8.1f} ms")
    print(f"  {'statewarden incremental':<28}{incr:8.1f} ms")
    print(f"  {'fuser <db>':<28}{fu:8.1f} ms")
    print(f"  {'lsof <db>':<28}{ls:8.1f} ms")
    print(f"  full scan / fuser = {full / fu:.2f}; incremental under 10 ms: {incr < 10}")


if __name__ == "__main__":
    main()
