"""Figures for check and recover on the ~250 MB Hermes database, side by side with SQLite.

    .venv/bin/python bench/recover.py [--spec large|medium|huge|small] [--keep DIR]
        [--only CASE ...] [--skip-others]

For damaged copies of the LARGE fixture (FTS shadow pages zeroed; the phantom row; an
interior page of messages zeroed; one bit flipped in a child pointer; a WAL frame with
one bit flipped; a broken overflow chain; index entries left behind by a delete)
it times, in one run and on the same files:

- SQLite's own uncapped ``PRAGMA integrity_check`` and statewarden's ``check``
  (goal: check <= 1.5x integrity_check);
- ``VACUUM INTO`` of the healthy file (the floor for any full rewrite) and
  statewarden's ``recover`` (goal: recover <= 3x VACUUM INTO for damage outside FTS),
  with the report's phase timings; FTS5's own ``'rebuild'`` of both FTS tables of the
  healthy file (goal: recover's FTS phase on FTS damage no slower);
- what a user would run instead, each judged: ``VACUUM INTO`` of the damaged file,
  ``sqlite3 .dump | sqlite3`` and ``.recover`` (Debian's CLI, if installed; its
  ``.recover`` needs ``sqlite_dbpage``, which Debian's build lacks) and Hermes 0.19.0's
  own ``repair_state_db_schema`` (in a subprocess, on a copy). Correct means:
  integrity_check ok, planner count = full-scan count = the undamaged count for
  sessions and messages (the case's ground truth), and both FTS tables pass their
  integrity-check.

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

from bench._common import WholeRun, run_whole  # noqa: E402
from lab import corruption  # noqa: E402
from lab.hermes_fixtures import HUGE, LARGE, MEDIUM, SMALL, built_db, hermes_python  # noqa: E402
from statewarden.recovery.check import check_database  # noqa: E402
from statewarden.recovery.recover import recover  # noqa: E402
from statewarden.sidecars import WAL_SUFFIX  # noqa: E402

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


def fts_own_check(path: Path, fts: str) -> None:
    """FTS5's own check of one FTS table (``PRAGMA integrity_check(<table>)``)."""
    conn = ro(path)
    try:
        conn.execute(f'PRAGMA integrity_check("{fts}")').fetchall()
    finally:
        conn.close()


def vacuum_into(src: Path, dest: Path) -> None:
    conn = ro(src)
    try:
        conn.execute("VACUUM INTO ?", (str(dest),))
    finally:
        conn.close()


def vacuum_into_as_read(src: Path, dest: Path) -> None:
    """``VACUUM INTO`` as a user would run it: on the file with its ``-wal`` (a copy of
    both, opened normally, so SQLite replays the WAL as it would)."""
    tmp = dest.parent / f"{dest.name}.src"
    tmp.mkdir()
    try:
        for suffix in ("", WAL_SUFFIX):
            if Path(f"{src}{suffix}").exists():
                shutil.copyfile(f"{src}{suffix}", tmp / f"state.db{suffix}")
        conn = apsw.Connection(str(tmp / "state.db"))
        try:
            conn.execute("VACUUM INTO ?", (str(dest),))
        finally:
            conn.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
            planner = conn.execute(f"SELECT count(*) FROM {table}").get
            scan = conn.execute(f"SELECT count(*) FROM {table} NOT INDEXED").get
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


def sqlite_recover(src: Path, dest: Path) -> str | None:
    """The CLI's ``.recover`` piped into a new file; None if it ran, else why not."""
    probe = subprocess.run(
        ["sqlite3", ":memory:", "SELECT count(*) FROM sqlite_dbpage"],
        capture_output=True,
        check=False,
    )
    if b"no such table" in probe.stderr:
        return "this build has no sqlite_dbpage, which .recover reads"
    proc = subprocess.run(["sqlite3", str(src), ".recover"], capture_output=True, check=False)
    if proc.returncode:
        return proc.stderr.decode(errors="replace").strip().splitlines()[-1]
    subprocess.run(["sqlite3", str(dest)], input=proc.stdout, capture_output=True, check=False)
    return None


def fts_rebuild(healthy: Path, dest: Path) -> float:
    """FTS5's own 'rebuild' of both FTS tables, on a copy of the healthy file."""
    shutil.copyfile(healthy, dest)
    conn = apsw.Connection(str(dest))
    try:
        t = time.perf_counter()
        with conn:
            for fts in ("messages_fts", "messages_fts_trigram"):
                conn.execute(f"INSERT INTO {fts}({fts}) VALUES('rebuild')")
        return time.perf_counter() - t
    finally:
        conn.close()
        dest.unlink()


def counts(path: Path) -> dict[str, int]:
    conn = ro(path)
    try:
        out = {}
        for t in ("sessions", "messages"):
            row = conn.execute(f"SELECT count(*) FROM {t}").fetchone()
            out[t] = int(row[0]) if row else 0
        return out
    finally:
        conn.close()


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
    name: str, case: corruption.Case, work: Path, floors: dict[str, float], *, others: bool = True
) -> None:
    print(f"\n{name}: {case.note}")
    # Rows whose only record was on a destroyed page cannot come back from anywhere: the
    # best any tool can do is every other row, and (statewarden) report those as lost.
    gone = {t: len(rows) for t, rows in case.lost_rowids.items() if rows}
    expect = {t: n - gone.get(t, 0) for t, n in counts(case.pristine).items()}
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
    out.unlink(missing_ok=True)  # a --keep folder used before
    t_rec, report = timed(lambda: recover(case.db, out))
    doc = report.to_json()
    line(
        "statewardenctl recover",
        t_rec,
        f"strategy={doc['strategy']} verified={doc['verified']} loss={doc['loss_detected']}"
        f" lost={doc['lost']}; {t_rec / floors['vacuum']:.2f}x VACUUM INTO",
    )
    phases = ", ".join(f"{k} {v:.2f}" for k, v in doc["timings"].items())
    line("  its phases (s)", 0.0, phases)
    size = case.db.stat().st_size
    peaks = recover_rss(case.db, work)
    line(
        "  its peak RssAnon, alone in a process",
        0.0,
        f"{peaks.own_peak / 2**20:.0f} MiB (its checks' child {peaks.child_peak / 2**20:.0f} MiB,"
        f" both {peaks.sum_peak / 2**20:.0f} MiB) for a {size / 2**20:.0f} MiB file"
        " (goal <= 256 MiB at any size)",
    )
    if name == "fts-damage":
        line(
            "  its FTS phase vs FTS5 'rebuild'",
            doc["timings"].get("fts", 0.0),
            f"{doc['timings'].get('fts', 0.0) / floors['fts_rebuild']:.2f}x (goal <= 1x)",
        )
    verdict = correct(out, expect)
    if gone and doc["lost"] != gone:
        verdict = f"WRONG: reported lost {doc['lost']}, the destroyed page held {gone}"
    elif gone and verdict == "correct":
        verdict += f" (the rows only the destroyed page held, {gone}, reported lost)"
    line("  its output judged alone", 0.0, verdict)
    if not others:
        return
    vacuumed = work / f"{name}-vacuum.db"
    t_vi, failed = timed(lambda: _try(lambda: vacuum_into_as_read(case.db, vacuumed)))
    line(
        "VACUUM INTO of the damaged file",
        t_vi,
        f"WRONG: failed: {failed}" if failed else correct(vacuumed, expect),
    )
    if shutil.which("sqlite3"):
        dumped = work / f"{name}-dump.db"
        t_dump, _ = timed(lambda: dump_restore(case.db, dumped))
        line("sqlite3 .dump | sqlite3 (Debian CLI)", t_dump, correct(dumped, expect))
        recovered = work / f"{name}-dotrecover.db"
        t_r, why = timed(lambda: sqlite_recover(case.db, recovered))
        line(
            "sqlite3 .recover (Debian CLI)",
            t_r,
            f"not available: {why}" if why else correct(recovered, expect),
        )
    else:
        print("  sqlite3 .dump | sqlite3: skipped (the Debian sqlite3 package is not installed)")
    hcopy = work / f"{name}-hermes" / "state.db"
    hcopy.parent.mkdir()
    shutil.copyfile(case.db, hcopy)
    t_h, verdict = timed(lambda: hermes_repair(hcopy, hcopy.parent))
    line("Hermes repair_state_db_schema (in place)", t_h, f"{verdict}; {correct(hcopy, expect)}")


RSS_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from statewarden.recovery.recover import recover
recover(Path(sys.argv[1]), Path(sys.argv[2]))
"""


def recover_rss(db: Path, work: Path) -> WholeRun:
    """Peak RssAnon of a process that only runs ``recover`` on ``db``, of its checks'
    child and of both, sampled from /proc (``run_whole``): what they own, not the pages
    of the file the child maps (VmRSS and VmHWM count those)."""
    out = work / "rss-recovered.db"
    done = run_whole([sys.executable, "-c", RSS_CHILD, str(db), str(out), str(REPO)])
    out.unlink(missing_ok=True)
    return done


def _try(fn: Callable[[], Any]) -> str | None:
    """None if ``fn`` ran, else SQLite's error (the output is then judged as left)."""
    try:
        fn()
    except apsw.Error as exc:
        return str(exc).splitlines()[0]
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", choices=("large", "small", "medium", "huge"), default="large")
    ap.add_argument("--keep", type=Path, default=None, help="keep the files in this directory")
    ap.add_argument("--only", nargs="*", default=None, help="run only these cases")
    ap.add_argument(
        "--skip-others", action="store_true", help="time only SQLite's figures and statewarden's"
    )
    args = ap.parse_args()
    spec = {"large": LARGE, "small": SMALL, "medium": MEDIUM, "huge": HUGE}[args.spec]
    healthy = built_db(spec)
    base = args.keep or Path(tempfile.mkdtemp(prefix="statewarden-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        expect = counts(healthy)
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
        (base / "healthy-recovered.db").unlink(missing_ok=True)  # a --keep folder used before
        t_rec, _ = timed(lambda: recover(healthy, base / "healthy-recovered.db"))
        line("statewardenctl recover", t_rec, f"{t_rec / t_vac:.2f}x VACUUM INTO")
        t_fts = fts_rebuild(healthy, base / "fts-rebuild.db")
        line("FTS5 'rebuild' of both FTS tables", t_fts)
        # recover must run FTS5's own check of each FTS table it keeps (nothing else
        # proves an index intact), one thread each: the longest is its floor.
        for fts in ("messages_fts", "messages_fts_trigram"):
            started = time.perf_counter()
            fts_own_check(healthy, fts)
            t_own = time.perf_counter() - started
            line(f"FTS5 check of {fts} alone", t_own, f"{t_own / t_vac:.2f}x VACUUM INTO")
        floors = {"vacuum": t_vac, "integrity": t_ic, "fts_rebuild": t_fts}
        cases: list[tuple[str, Callable[[Path], corruption.Case]]] = [
            ("fts-damage", lambda d: corruption.scribbled_trees(d, FTS_DAMAGE, spec=spec)),
            ("phantom-row", lambda d: corruption.phantom_row(d, spec=spec)),
            ("zeroed-leaf", lambda d: corruption.zeroed_leaf(d, spec=spec)),
            ("zeroed-interior", lambda d: corruption.zeroed_interior(d, spec=spec)),
            ("flipped-pointer", lambda d: corruption.flipped_child_pointer(d, spec=spec)),
            ("wal-bad-frame", lambda d: corruption.wal_bad_frame(d, spec=spec)),
            ("broken-overflow", lambda d: corruption.broken_overflow(d, spec=spec)),
            ("stale-index", lambda d: corruption.stale_index_entries(d, spec=spec)),
        ]
        for name, make in cases:
            if args.only and name not in args.only:
                continue
            run_case(name, make(base / f"{name}-case"), base, floors, others=not args.skip_others)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
