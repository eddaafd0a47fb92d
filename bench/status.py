"""How long `statewardenctl status` takes: in-process, and as whole commands as typed.

    .venv/bin/python -m bench.status [--runs 15] [--skip-large] [--baseline OTHER/bin/python]

In-process: status reads the header and three pragmas, never a table, so its time should
not grow with the database. Printed next to the same facts asked of the sqlite3 shell
(`sqlite3 -readonly db 'PRAGMA page_count; PRAGMA freelist_count; PRAGMA journal_mode'`),
which is what a user would otherwise run, in the same run; on a tiny database and on the
~250 MB one (`LARGE`, built once, ~1 min, cached; `--skip-large` leaves it out).

Whole processes, each as a user types it through the installed launcher, A/B alternated
(each run starts every command once, in turn), best and median wall time and the median
CPU time (user + system of the finished child) of ``--runs``, next to their anchor in
the same run: ``python -c pass`` with the launcher's own interpreter (an interpreter that
starts and does nothing). Also ``python -c "import click"`` and ``statewardenctl
--help``: the floor of every command that goes through click. The commands:
``status`` (no daemon running; the tiny Hermes home as ``$HERMES_HOME``, no config
file), ``status --db DB --json`` and ``recover --help``. The imports of each (``-X
importtime``, self times summed, best of the runs) and the load average before and
after are printed too. Goal: ``status`` and ``recover --help`` at most 5x the anchor.
``--baseline OTHER/bin/python``: another install's ``status`` and ``recover --help`` in
the same alternation (two versions in one run).
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._common import figure, time_it
from lab.hermes_fixtures import LARGE, TINY, Spec, built_db
from statewarden.targets import target_for_db
from statewarden.watch.status import database_status

LAUNCHER = str(Path(sys.executable).parent / "statewardenctl")
ANCHOR = "python -c pass"


def command_times(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """One whole run of ``cmd``: its wall time and its CPU time (user + system), in ms."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=False, env=env)
    wall = (time.perf_counter() - t) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def import_ms(cmd: list[str], env: dict[str, str]) -> float:
    """Milliseconds of imports (``-X importtime``, self times summed) of one run of ``cmd``."""
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        check=False,
        env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    total_us = 0
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            field = line.split(":", 1)[1].split("|")[0].strip()
            if field.isdigit():
                total_us += int(field)
    return total_us / 1000


def in_process(tmp: Path, specs: list[tuple[str, Spec]]) -> dict[str, Path]:
    """The in-process figures, one line per database; returns each database's path."""
    sqlite3_cli = shutil.which("sqlite3")
    dbs = {}
    for label, spec in specs:
        src = built_db(spec)
        home = tmp / label
        home.mkdir()
        db = home / "state.db"
        shutil.copyfile(src, db)
        (home / "logs").mkdir()
        dbs[label] = db
        size_mb = os.path.getsize(db) / 1e6
        ours = time_it(functools.partial(database_status, target_for_db(db)), repeat=30)
        other = None
        if sqlite3_cli:
            cmd = [
                sqlite3_cli,
                "-readonly",
                str(db),
                "PRAGMA page_count; PRAGMA freelist_count; PRAGMA journal_mode;",
            ]
            other = time_it(
                functools.partial(subprocess.run, cmd, check=True, capture_output=True),
                repeat=30,
            )
        print(
            figure(
                f"status on {label} ({size_mb:.0f} MB, in-process)",
                ours,
                versus="sqlite3 shell, same pragmas",
                other_s=other,
            )
        )
    return dbs


def whole_commands(dbs: dict[str, Path], tmp: Path, runs: int, baseline: str | None) -> None:
    """The whole-process figures, alternated, each next to ``python -c pass``."""
    env = {k: v for k, v in os.environ.items() if k not in ("STATEWARDEN_CONFIG", "NOTIFY_SOCKET")}
    # No daemon to answer, no config file: status computes locally, as a first run would.
    env.update(
        HERMES_HOME=str(dbs["tiny"].parent),
        XDG_CONFIG_HOME=str(tmp / "config"),
        XDG_STATE_HOME=str(tmp / "state"),
        XDG_RUNTIME_DIR=str(tmp / "run"),
    )
    big = dbs.get("large", dbs["tiny"])
    cmds = {
        ANCHOR: [sys.executable, "-c", "pass"],
        'python -c "import click"': [sys.executable, "-c", "import click"],
        "statewardenctl --help": [LAUNCHER, "--help"],
        "statewardenctl status": [LAUNCHER, "status"],
        f"statewardenctl status --db ({big.parent.name}) --json": [
            LAUNCHER,
            "status",
            "--db",
            str(big),
            "--json",
        ],
        "statewardenctl recover --help": [LAUNCHER, "recover", "--help"],
    }
    if baseline:
        other = str(Path(baseline).with_name("statewardenctl"))
        cmds["baseline status"] = [other, "status"]
        cmds["baseline recover --help"] = [other, "recover", "--help"]
    for name, cmd in cmds.items():  # each works before it is timed
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"{name}: exit {proc.returncode}: {proc.stderr.strip()}")
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    load_before = os.getloadavg()
    for _ in range(runs):
        for name, cmd in cmds.items():
            wall, cpu = command_times(cmd, env)
            walls[name].append(wall)
            cpus[name].append(cpu)
    load_after = os.getloadavg()
    imports = {name: min(import_ms(cmd, env) for _ in range(5)) for name, cmd in cmds.items()}
    print(
        f"whole commands, best and median of {runs} alternated runs; load average"
        f" {load_before[0]:.2f} before, {load_after[0]:.2f} after (1 min)"
    )
    base_wall = min(walls[ANCHOR])
    base_cpu = statistics.median(cpus[ANCHOR])
    for name in cmds:
        best, median = min(walls[name]), statistics.median(walls[name])
        cpu = statistics.median(cpus[name])
        print(
            f"  {name:<46}wall {best:6.1f} ms (median {median:6.1f}), CPU median {cpu:6.1f} ms,"
            f" imports {imports[name]:5.1f} ms  | {best / base_wall:4.2f}x {ANCHOR} wall,"
            f" {cpu / base_cpu:4.2f}x CPU"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--skip-large", action="store_true", help="only the tiny database")
    ap.add_argument(
        "--baseline",
        help="the python of another install whose status and recover --help run alongside",
    )
    args = ap.parse_args()
    # As installed (pip compiles the bytecode): no run pays for compiling statewarden.
    root = Path(__file__).resolve().parent.parent
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(root / "statewarden")], check=True
    )
    specs: list[tuple[str, Spec]] = [("tiny", TINY)]
    if not args.skip_large:
        specs.append(("large", LARGE))
    with tempfile.TemporaryDirectory() as tmp:
        dbs = in_process(Path(tmp), specs)
        whole_commands(dbs, Path(tmp), args.runs, args.baseline)


if __name__ == "__main__":
    main()
