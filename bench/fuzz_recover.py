"""The long run of the fuzz lab: ``recover`` against random damage on many seeds.

    .venv/bin/python bench/fuzz_recover.py [--seeds 500] [--first 0] [--page1] [--view-first]
        [--zero-costs]

For each seed ``lab/fuzz.py`` damages a copy of a Hermes-written database (zeroed
sectors and 4 KiB blocks, random bytes, torn and reverted pages) and carves the ground
truth; ``recover`` runs on it and its output and report are held to the promises (no
intact row dropped, no wrong row passed off as good, loss reported exactly when rows
were lost, the source unchanged); ``--page1`` destroys page 1 on every seed too (and
the schema pages on half of them); ``--view-first`` damages a copy whose schema hash
starts with a view, so that SQLite's integrity check says nothing of unused pages;
``--zero-costs`` damages a copy whose usage rows cost 0.0 (a local model's), laid out so
that ``recover`` writes sixteen of their zero bytes across a sector boundary. Every
output is held to ``check`` too: clean, or naming only what the report lists as lost.
In the same run, on the same damaged files, what a
user would do instead, ``sqlite3 .dump | sqlite3`` (Debian's CLI), is judged by the
same truth (it reports nothing, so only dropped and wrong rows count for it).

Prints seeds run, seeds with a violation (and the first few, with their damage), and
the median time per seed of both, one line each, side by side.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.hermes_fixtures import later_db

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lab import fuzz  # noqa: E402


def dump_and_load(db: Path, out: Path) -> bool:
    """``sqlite3 DB .dump | sqlite3 OUT``; False when the CLI is missing."""
    cli = shutil.which("sqlite3")
    if cli is None:
        return False
    dump = subprocess.run([cli, str(db), ".dump"], capture_output=True, check=False)
    subprocess.run([cli, str(out)], input=dump.stdout, capture_output=True, check=False)
    return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--seeds", type=int, default=500)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--page1", action="store_true", help="destroy page 1 on every seed too")
    p.add_argument(
        "--view-first",
        action="store_true",
        help="damage a copy whose schema hash starts with a view (no page accounting)",
    )
    p.add_argument(
        "--zero-costs",
        action="store_true",
        help="damage a copy whose usage rows cost 0.0, zeros on a sector boundary",
    )
    args = p.parse_args()
    later_db()  # built once, outside the timings
    if args.zero_costs:
        fuzz.zero_costs_db()
    ours: list[str] = []
    theirs: list[str] = []
    t_ours: list[float] = []
    t_theirs: list[float] = []
    have_cli = True
    for seed in range(args.first, args.first + args.seeds):
        with tempfile.TemporaryDirectory() as d:
            work = Path(d)
            t0 = time.perf_counter()
            case, found = fuzz.run_seed(
                work / "ours",
                seed,
                page1=args.page1,
                view_first=args.view_first,
                zero_costs=args.zero_costs,
            )
            t_ours.append(time.perf_counter() - t0)
            if found:
                ours.append(f"{case.describe()}: {found[0]}")
            out = work / "dump.db"
            t0 = time.perf_counter()
            have_cli = dump_and_load(case.db, out)
            t_theirs.append(time.perf_counter() - t0)
            if have_cli:
                judged = fuzz.violations(
                    case, {"loss_detected": None}, out if out.exists() else None
                )
                judged = [v for v in judged if not v.startswith("loss_detected")]
                if judged:
                    theirs.append(f"{case.describe()}: {judged[0]}")
        if (seed - args.first + 1) % 50 == 0:
            print(f"... {seed - args.first + 1} seeds", file=sys.stderr, flush=True)
    n = args.seeds
    print(
        f"statewarden recover: {n} seeds, {len(ours)} with a violation,"
        f" median {statistics.median(t_ours) * 1000:.0f} ms per seed"
        + (
            f"  |  sqlite3 .dump | sqlite3: {len(theirs)} with a dropped or wrong row,"
            f" median {statistics.median(t_theirs) * 1000:.0f} ms per seed"
            if have_cli
            else "  |  sqlite3 CLI not installed"
        )
    )
    for line in ours[:10]:
        print(f"  recover: {line}")
    for line in theirs[:3]:
        print(f"  sqlite3 .dump: {line}")


if __name__ == "__main__":
    main()
