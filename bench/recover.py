"""Figures for check and recover on the ~250 MB Hermes database, side by side with SQLite.

    .venv/bin/python bench/recover.py [--spec large|small] [--keep DIR]

For damaged copies of the LARGE fixture (FTS shadow pages zeroed; the phantom row; an
interior page of messages zeroed, which only page salvage recovers)
it times, in one run and on the same files:

- SQLite's own uncapped ``PRAGMA integrity_check`` and statewarden's ``check``
  (goal: check <= 1.5x integrity_check);
- ``VACUUM INTO`` of the healthy file (the floor for any full rewrite) and
  statewarden's ``recover`` (goal: recover <= 2x VACUUM INTO);
- ``sqlite3 .dump | sqlite3`` (Debian's CLI, if installed) and Hermes 0.19.0's own
  ``repair_state_db_schema`` (in a subprocess, on a copy), and whether each result is
  correct: integrity_check ok, planner count = full-scan count = the pristine count for
  sessions and messages, and both FTS tables pass their integrity-check.

Each figure is printed on its own line next to the SQLite figure it is compared with.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from statewarden.recovery.check import check_database  # noqa: E402
from statewarden.recovery.recover import recover  # noqa: E402
from tests import corruption_lab as lab  # noqa: E402
from tests.hermes_fixtures import LARGE, SMALL, built_db, hermes_python  # noqa: E402

FTS_DAMAGE = {"messages_fts_data": 20, "messages_fts_trigram_data": 60}
# Hermes' repair may drop the FTS tables and leave them to "the next SessionDB() open";
# that open is done here too, so the result is judged as Hermes would leave it.
HERMES_REPAIR = """
import json, sys
from pathlib import Path
import hermes_state
report = hermes_state.repair_state_db_schema(Path(sys.argv[1]), backup=False)
try:
    hermes_state.SessionDB(db_path=Path(sys.argv[1])).close()
except Exception as exc:
    report["reopen_error"] = repr(exc)
print(json.dumps(report, default=str))
"""


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def ro(path: Path) -> apsw.Connection:
    return apsw.Connection(
        f"file:{path}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )


def sqlite_integrity_check(path: Path) -> tuple[int, str | None]:
    conn = ro(path)
    try:
        rows: list[str] = []
        stopped = None
        try:
            for (r,) in conn.execute("PRAGMA integrity_check(2147483647)"):
                rows.append(str(r))
        except apsw.Error as exc:
            stopped = str(exc)
        return (0 if rows == ["ok"] else sum(r.count("\n") + 1 for r in rows)), stopped
    finally:
        conn.close()


def vacuum_into(src: Path, dest: Path) -> None:
    conn = ro(src)
    try:
        conn.execute("VACUUM INTO ?", (str(dest),))
    finally:
        conn.close()


def correct(path: Path, expect: dict[str, int]) -> str:
    """'correct' or what is wrong, judged on the result file alone."""
    if not path.exists():
        return "no output"
    conn = apsw.Connection(str(path))
    problems = []
    try:
        ic = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        if ic != ["ok"]:
            problems.append(f"integrity_check: {len(ic)} errors")
        for table, n in expect.items():
            planner = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            scan = conn.execute(f"SELECT count(*) FROM {table} NOT INDEXED").fetchone()[0]
            if (planner, scan) != (n, n):
                problems.append(f"{table}: planner {planner}, scan {scan}, expected {n}")
        for fts in ("messages_fts", "messages_fts_trigram"):
            try:
                conn.execute(f"INSERT INTO {fts}({fts}) VALUES('integrity-check')")
            except apsw.Error as exc:
                problems.append(f"{fts}: {exc}")
    except apsw.Error as exc:
        problems.append(str(exc))
    finally:
        conn.close()
    return "correct" if not problems else "WRONG: " + "; ".join(problems)


def dump_restore(src: Path, dest: Path) -> None:
    dump = subprocess.Popen(["sqlite3", str(src), ".dump"], stdout=subprocess.PIPE)
    subprocess.run(["sqlite3", str(dest)], stdin=dump.stdout, check=False, capture_output=True)
    assert dump.stdout is not None
    dump.stdout.close()
    dump.wait()


def hermes_repair(path: Path, home: Path) -> str:
    env = {"HERMES_HOME": str(home), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [hermes_python(), "-c", HERMES_REPAIR, str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode:
        return f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    extra = f" reopen_error={report['reopen_error']}" if "reopen_error" in report else ""
    return f"strategy={report.get('strategy')} repaired={report.get('repaired')}{extra}"


def line(label: str, seconds: float, note: str = "") -> None:
    print(f"  {label:<44} {seconds:8.2f} s  {note}")


def warm(path: Path) -> None:
    """Read the file once so every figure is measured with it in the page cache."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def run_case(
    name: str, case: lab.Case, work: Path, floors: dict[str, float], expect: dict[str, int]
) -> None:
    print(f"\n{name}: {case.note}")
    warm(case.db)
    t_ic, (n_errors, stopped) = timed(lambda: sqlite_integrity_check(case.db))
    line(
        "SQLite integrity_check (uncapped)",
        t_ic,
        f"{n_errors} error lines" + (f", stopped early: {stopped}" if stopped else ""),
    )
    t_check, diag = timed(lambda: check_database(case.db, work))
    line(
        "statewardenctl check",
        t_check,
        f"damage={diag.damage}; {t_check / t_ic:.2f}x this integrity_check,"
        f" {t_check / floors['integrity']:.2f}x the healthy file's (goal <= 1.5x)",
    )
    out = work / f"{name}-recovered.db"
    t_rec, report = timed(lambda: recover(case.db, out))
    doc = report.to_json()
    line(
        "statewardenctl recover",
        t_rec,
        f"strategy={doc['strategy']} verified={doc['verified']} loss={doc['loss_detected']}"
        f" lost={doc['lost']}; {t_rec / floors['vacuum']:.2f}x VACUUM INTO (goal <= 2x)",
    )
    line("  its output judged alone", 0.0, correct(out, expect))
    if shutil.which("sqlite3"):
        dumped = work / f"{name}-dump.db"
        t_dump, _ = timed(lambda: dump_restore(case.db, dumped))
        line("sqlite3 .dump | sqlite3 (Debian CLI)", t_dump, correct(dumped, expect))
    else:
        print("  sqlite3 .dump | sqlite3: skipped (the Debian sqlite3 package is not installed)")
    hcopy = work / f"{name}-hermes" / "state.db"
    hcopy.parent.mkdir()
    shutil.copyfile(case.db, hcopy)
    t_h, verdict = timed(lambda: hermes_repair(hcopy, hcopy.parent))
    line("Hermes repair_state_db_schema (in place)", t_h, f"{verdict}; {correct(hcopy, expect)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", choices=("large", "small"), default="large")
    ap.add_argument("--keep", type=Path, default=None, help="keep the files in this directory")
    args = ap.parse_args()
    spec = LARGE if args.spec == "large" else SMALL
    healthy = built_db(spec)
    base = args.keep or Path(tempfile.mkdtemp(prefix="statewarden-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        conn = ro(healthy)
        expect = {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("sessions", "messages")
        }
        conn.close()
        size = healthy.stat().st_size
        print(
            f"fixture: {healthy} ({size / 1e6:.0f} MB, {expect['sessions']} sessions, {expect['messages']} messages)"
        )
        print(
            f"SQLite {apsw.sqlite_lib_version()} (apsw), sqlite3 CLI: {shutil.which('sqlite3') or 'absent'}"
        )
        print("\nhealthy file (the floors):")
        warm(healthy)
        t_ic, _ = timed(lambda: sqlite_integrity_check(healthy))
        line("SQLite integrity_check", t_ic)
        t_vac, _ = timed(lambda: vacuum_into(healthy, base / "vacuum.db"))
        line("SQLite VACUUM INTO", t_vac)
        (base / "vacuum.db").unlink()
        t_check, _ = timed(lambda: check_database(healthy, base))
        line("statewardenctl check", t_check, f"{t_check / t_ic:.2f}x integrity_check")
        t_rec, _ = timed(lambda: recover(healthy, base / "healthy-recovered.db"))
        line("statewardenctl recover", t_rec, f"{t_rec / t_vac:.2f}x VACUUM INTO")
        floors = {"vacuum": t_vac, "integrity": t_ic}
        fts = lab.scribbled_trees(base / "fts-case", FTS_DAMAGE, spec=spec)
        run_case("fts-damage", fts, base, floors, expect)
        phantom = lab.phantom_row(base / "phantom-case", spec=spec)
        expect_phantom = dict(expect)
        run_case("phantom-row", phantom, base, floors, expect_phantom)
        interior = lab.zeroed_interior(base / "interior-case", spec=spec)
        run_case("zeroed-interior", interior, base, floors, expect)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
