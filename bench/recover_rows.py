"""recover's memory and time as the row count grows, next to ``VACUUM INTO`` in the same run.

    .venv/bin/python bench/recover_rows.py [--messages 300000 1000000] [--keep DIR]

For each count, a Hermes database of that many messages (``lab.many_rows``: the rows
Hermes' own writer wrote, copied by SQL; built once and cached beside the other
fixtures) and a copy of it with one ``messages`` leaf zeroed. Each is recovered in a
process of its own, whose own peak RSS (``VmHWM``) and wall time are printed next to
the same figures of a process that runs ``VACUUM INTO`` of the healthy file through the
same SQLite (the floor of any full rewrite). The zeroed leaf's output must be verified
with exactly the rows that page held reported lost, else the bench says so and exits 1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lab.corruption import zero_middle_leaf  # noqa: E402
from lab.hermes_fixtures import cache_dir  # noqa: E402
from lab.many_rows import many_messages  # noqa: E402

CHILD = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[4])
t0 = time.perf_counter()
if sys.argv[1] == "recover":
    from statewarden.recovery.recover import recover
    r = recover(Path(sys.argv[2]), Path(sys.argv[3]))
    got = {"verified": r.verified, "lost": {k: v.lost_keys for k, v in r.tables.items() if v.lost}}
else:
    import apsw
    apsw.Connection(sys.argv[2]).execute("VACUUM INTO ?", (sys.argv[3],))
    got = {}
got["seconds"] = time.perf_counter() - t0
hwm = next(ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
got["peak_mib"] = int(hwm) / 1024
print(json.dumps(got))
"""


def run_child(what: str, db: Path, out: Path) -> dict[str, object]:
    """One process that runs ``what`` (recover, or vacuum) on ``db``; its own figures."""
    out.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, what, str(db), str(out), str(REPO)],
        check=True,
        capture_output=True,
        text=True,
    )
    out.unlink(missing_ok=True)
    figures: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, nargs="*", default=[300_000, 1_000_000])
    ap.add_argument("--keep", type=Path, default=None, help="work in this folder, kept")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="recover-rows-"))
    work.mkdir(parents=True, exist_ok=True)
    failed = False
    try:
        for n in args.messages:
            healthy = cache_dir() / f"many-messages-{n}" / "state.db"
            if not healthy.exists():
                t0 = time.perf_counter()
                building = healthy.with_name("building.db")
                many_messages(building, n)
                building.rename(healthy)
                print(f"built {healthy} in {time.perf_counter() - t0:.1f} s", flush=True)
            size = healthy.stat().st_size / 1e6
            damaged = work / f"leaf-{n}" / "state.db"
            damaged.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(healthy, damaged)
            gone = zero_middle_leaf(damaged)
            vac = run_child("vacuum", healthy, work / "vacuumed.db")
            for case, db in (("healthy", healthy), ("zeroed leaf", damaged)):
                got = run_child("recover", db, work / "recovered.db")
                line = (
                    f"{n:,} messages ({size:.0f} MB), {case}: recover {got['seconds']:.2f} s,"
                    f" peak RSS {got['peak_mib']:.0f} MiB, verified {got['verified']}"
                    f"  |  VACUUM INTO (healthy file, same SQLite): {vac['seconds']:.2f} s,"
                    f" peak RSS {vac['peak_mib']:.0f} MiB"
                    f"  (time {float(got['seconds']) / float(vac['seconds']):.2f}x)"  # type: ignore[arg-type]
                )
                print(line, flush=True)
                want = {"messages": gone} if case == "zeroed leaf" else {}
                if got["verified"] is not True or got["lost"] != want:
                    print(f"  WRONG: lost {got['lost']!r:.200}, expected {want!r:.200}")
                    failed = True
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
