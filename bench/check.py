"""``statewardenctl check`` on a healthy file, next to SQLite's own uncapped check.

    .venv/bin/python bench/check.py [--spec small|medium|large ...] [--runs 5]
        [--baseline DIR]

For each lab spec (a healthy database Hermes wrote, ``lab/hermes_fixtures.py``), in one
run and on the same file, A and B alternated (A B A B ...), each a whole process:

- A: ``statewardenctl check --db FILE --json`` as typed (the installed launcher: the
  interpreter, the imports, the private copy, every check and its FTS5 checks);
- B (the anchor): ``python3 -c`` that opens the file read-only with apsw (the same SQLite)
  and runs ``PRAGMA integrity_check(2147483647)``: uncapped, FTS5's own checks included
  (SQLite >= 3.44), the interpreter and apsw's import included.

With ``--baseline DIR`` (another version's source, e.g. ``git archive COMMIT statewarden |
tar -x -C DIR``), that version's ``check`` runs in the same alternation, started the
way the launcher starts it (``statewarden.cli.quick.main``) by the same interpreter.

CPU is user + system of the finished process and of every child it waited for
(``os.wait4``: check's own child processes count); wall is from start to exit. Printed:
median, min and max of each, and the median of the ratios A/B pair by pair (a ratio
holds when the machine's speed drifts). The load average is printed before and after:
on a loaded machine wall time stretches more than CPU time. Goal: check's CPU <= 1.2x
the anchor's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lab.hermes_fixtures import LARGE, MEDIUM, SMALL, built_db  # noqa: E402

SPECS = {"small": SMALL, "medium": MEDIUM, "large": LARGE}
LAUNCHER = Path(sys.executable).with_name("statewardenctl")
ANCHOR = """
import sys, apsw
uri = "file:" + sys.argv[1] + "?mode=ro&immutable=1"
conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
rows = [r for (r,) in conn.execute("PRAGMA integrity_check(2147483647)")]
sys.exit(0 if rows == ["ok"] else 1)
"""


def whole(argv: list[str]) -> tuple[float, float, int]:
    """(CPU s, wall s, exit code) of ``argv`` run to its end, output thrown away."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, wall, proc.returncode


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.3f} s (min {min(values):.3f}, max {max(values):.3f})"


BASELINE = "import sys; sys.path.insert(0, sys.argv.pop(1)); from statewarden.cli.quick import main; sys.exit(main())"


def commands(db: Path, baseline: Path | None) -> dict[str, list[str]]:
    """The commands timed, by label; the anchor last."""
    args = ["check", "--db", str(db), "--json"]
    out = {"statewardenctl check": [str(LAUNCHER), *args]}
    if baseline is not None:
        out["check before (baseline)"] = [sys.executable, "-c", BASELINE, str(baseline), *args]
    out["integrity_check (anchor)"] = [sys.executable, "-c", ANCHOR, str(db)]
    return out


def measure(name: str, runs: int, baseline: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="statewarden-check-bench-") as tmp_name:
        db = Path(tmp_name) / "state.db"
        shutil.copyfile(built_db(SPECS[name]), db)
        argvs = commands(db, baseline)
        for argv in argvs.values():  # warm-up: the file in the page cache, bytecode compiled
            whole(argv)
        rows: dict[str, list[tuple[float, float, int]]] = {label: [] for label in argvs}
        for _ in range(runs):
            for label, argv in argvs.items():
                rows[label].append(whole(argv))
        size_mb = db.stat().st_size / 1e6
    codes = {label: sorted({r[2] for r in got}) for label, got in rows.items()}
    print(f"{name} ({size_mb:.0f} MB), {runs} rounds; exit codes {codes}")
    for label, got in rows.items():
        print(f"  {label:<26} CPU {spread([r[0] for r in got])}")
        print(f"  {'':<26} wall {spread([r[1] for r in got])}")
    anchor = rows["integrity_check (anchor)"]
    for label, got in list(rows.items())[:-1]:
        cpu = statistics.median(x[0] / y[0] for x, y in zip(got, anchor, strict=True))
        wall = statistics.median(x[1] / y[1] for x, y in zip(got, anchor, strict=True))
        print(f"  {label} / anchor: CPU {cpu:.2f}x, wall {wall:.2f}x (median of rounds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spec", choices=sorted(SPECS), action="append")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another version's source tree")
    args = parser.parse_args()
    print(f"load average before: {load()}  ({os.cpu_count()} cores)")
    for name in args.spec or ["small", "large"]:
        measure(name, args.runs, args.baseline)
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
