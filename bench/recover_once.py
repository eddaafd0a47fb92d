"""One ``recover`` of a file into a fresh folder (removed after), for timing whole
processes A/B: the interpreter that runs it decides which statewarden is timed, so the
same script compares two installs in one run.

    /usr/bin/time -v <other venv>/bin/python bench/recover_once.py DB
    /usr/bin/time -v .venv/bin/python bench/recover_once.py DB   # and again, in turn

Prints the strategy, whether the output verified and the report's phase timings.

    .venv/bin/python bench/recover_once.py DB --ab BASE NEW [--pairs 5] [--anchor HEALTHY]

runs it that way itself: one process with ``PYTHONPATH=BASE``, one with ``NEW`` (two
source trees, e.g. a ``git worktree`` of the code before a change and this one), in
turn, ``--pairs`` times, with Debian's ``sqlite3 HEALTHY "VACUUM INTO ..."`` (a whole
process too; HEALTHY is DB unless given: a damaged file may stop it) between pairs as
the anchor. It prints each run, then the medians of wall
and CPU (``wait4``: the process and the children it waited for), the median of the
pairs' ratios, each next to ``VACUUM INTO``, the peak RssAnon (what a process owns:
a file it maps is not counted) of the recover process, of its FTS-check child and of
both together, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench._common import WholeRun

MIB = 2**20


def once(db: Path) -> None:
    """Recover ``db`` into a temporary folder and print what the report says."""
    from statewarden.recovery.recover import recover  # the install timed

    work = Path(tempfile.mkdtemp(prefix="recover-once-"))
    try:
        report = recover(db, work / "out.db")
        print(report.strategy, report.verified, report.timings)
    finally:
        shutil.rmtree(work)


def vacuum_into(db: Path) -> WholeRun:
    """``VACUUM INTO`` of ``db`` by Debian's ``sqlite3`` (or apsw without it), timed whole."""
    from bench._common import run_whole  # see ``main``

    work = Path(tempfile.mkdtemp(prefix="recover-once-vacuum-"))
    try:
        dest = work / "vacuumed.db"
        if shutil.which("sqlite3"):
            argv = ["sqlite3", str(db), f"VACUUM INTO '{dest}'"]
        else:
            code = "import apsw, sys; apsw.Connection(sys.argv[1]).execute('VACUUM INTO ?', (sys.argv[2],))"
            argv = [sys.executable, "-c", code, str(db), str(dest)]
        return run_whole(argv)
    finally:
        shutil.rmtree(work)


def ab(db: Path, trees: dict[str, Path], pairs: int, anchor: Path) -> None:
    """The A/B runs (see the module's docstring)."""
    from bench._common import run_whole  # see ``main``

    print(f"{db} ({db.stat().st_size / 1e6:.0f} MB), load average before {os.getloadavg()}")
    runs: dict[str, list[WholeRun]] = {name: [] for name in trees}
    anchors: list[WholeRun] = []
    for pair in range(pairs):
        anchors.append(vacuum_into(anchor))
        for name, tree in trees.items() if pair % 2 == 0 else reversed(trees.items()):
            env = dict(os.environ, PYTHONPATH=str(tree))
            run = run_whole([sys.executable, __file__, str(db)], env)
            runs[name].append(run)
            print(
                f"  pair {pair + 1} {name}: wall {run.wall_s:.3f} s, CPU {run.cpu_s:.3f} s,"
                f" RssAnon {run.own_peak / MIB:.0f} + {run.child_peak / MIB:.0f} MiB;"
                f" {run.out.strip()[:160]}"
            )
    vac_wall = statistics.median(r.wall_s for r in anchors)
    vac_cpu = statistics.median(r.cpu_s for r in anchors)
    print(f"  VACUUM INTO (sqlite3, whole process): wall {vac_wall:.3f} s, CPU {vac_cpu:.3f} s")
    for name, done in runs.items():
        wall = statistics.median(r.wall_s for r in done)
        cpu = statistics.median(r.cpu_s for r in done)
        print(
            f"  {name}: wall {wall:.3f} s ({wall / vac_wall:.2f}x VACUUM INTO),"
            f" CPU {cpu:.3f} s ({cpu / vac_cpu:.2f}x); peak RssAnon: recover"
            f" {max(r.own_peak for r in done) / MIB:.0f} MiB, its child"
            f" {max(r.child_peak for r in done) / MIB:.0f} MiB, both"
            f" {max(r.sum_peak for r in done) / MIB:.0f} MiB"
        )
    base, new = runs
    for what in ("wall_s", "cpu_s"):
        ratios = [
            getattr(n, what) / getattr(b, what) for b, n in zip(runs[base], runs[new], strict=True)
        ]
        print(
            f"  {new} / {base}, {what[:-2]}: median of {pairs} pairs {statistics.median(ratios):.2f}x"
        )
    print(f"  load average after {os.getloadavg()}")


def main() -> None:
    """One recover of ``DB``, or the A/B runs with ``--ab``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", type=Path)
    ap.add_argument("--ab", nargs=2, type=Path, metavar=("BASE", "NEW"), default=None)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--anchor", type=Path, default=None, help="the file VACUUM INTO copies")
    args = ap.parse_args()
    if args.ab is None:
        once(args.db)
        return
    # The runs' statewarden comes from their PYTHONPATH, this one's helpers from here:
    # a path put first in the runs would hide the tree they time.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    base, new = args.ab
    trees = {"base": base.resolve(), "new": new.resolve()}
    ab(args.db, trees, args.pairs, args.anchor or args.db)


if __name__ == "__main__":
    main()
