"""Holder scan cost on a busy host: statewarden against fuser and lsof, as root and as a user.

    .venv/bin/python bench/holders.py [--extra 2000] [--files 4] [--runs 5] [--uid 65534]
                                      [--baseline OTHER/.venv/bin/python]

Run as root. Starts ``--extra`` processes (forked sleepers, each with ``--files`` open
files of its own) and two real Hermes writers on one tiny state.db: one of ``--uid``
(the user statewarden runs as), one of root. Then times, in one run, best of ``--runs``
(and the median):

- in-process: a full ``/proc`` scan and an incremental re-scan (as root), and a full
  scan as the user (in a process of that uid, timed inside it);
- whole processes, each started as a command would be (interpreter start-up and
  imports included), A/B alternated: ``statewardenctl holders --db DB --no-systemd``
  (the installed entry point, which reads plain options without click), ``statewardenctl
  holders --db DB`` as typed (it looks for the systemd user manager: with this
  environment's ``$XDG_RUNTIME_DIR`` and ``$DBUS_SESSION_BUS_ADDRESS``, which as the
  user name none of its own), the first through the click group (``python -m
  statewarden.cli.ctl``), ``fuser DB`` and ``lsof DB``, as root and as the user
  (through ``setpriv``, for all alike); for each, the wall time and the CPU time (user
  + system of the finished child), and the load average before and after;
- with ``--baseline``, the ``statewardenctl`` of another install (another checkout's
  venv), with and without ``--no-systemd``, in the same alternation: two versions in one run;
- the imports of ``statewardenctl --help`` (``python -X importtime``, summed).

statewarden's bytecode is compiled first, as ``pip install`` does.

``--ofd``: the user's writer holds open file description locks as Hermes since 0.20
does; as the user they are attributed through fdinfo, and the scan must still be complete.

Every scan is checked: both writers are found (as the user: its own by descriptors,
root's through /proc/locks) and the user's scan is complete. Goals: whole-process
``holders``, as typed too, no slower than ``fuser``; in-process full scan at most half of fuser;
``--help`` under 60 ms of imports.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.hermes_fixtures import TINY, WRITER, hermes_python, holding, make_home, writer_env
from statewarden.holders.scan import HolderScanner

REPO = Path(__file__).resolve().parent.parent

# A full scan as the user, in a process of that uid: prints its best and median in ms.
USER_SCAN = (
    "import json, sys, time\n"
    "from pathlib import Path\n"
    "from statewarden.holders.scan import HolderScanner\n"
    "s = HolderScanner([Path(sys.argv[1])])\n"
    "times = []\n"
    "for _ in range(int(sys.argv[2])):\n"
    "    t = time.perf_counter(); r = s.scan(full=True)[0]\n"
    "    times.append((time.perf_counter() - t) * 1000)\n"
    "print(json.dumps({'times': times, 'complete': r.complete,"
    " 'holders': [[h.pid, h.via] for h in r.holders], 'coverage': r.coverage}))\n"
)


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


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return times


def command_times(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """One whole run of ``cmd``: its wall time and its CPU time (user + system), in ms."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=False, cwd=REPO, env=env)
    wall = (time.perf_counter() - t) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def import_ms(argv: list[str]) -> float:
    """Milliseconds of imports (``-X importtime``, self times summed) of one command."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    total_us = 0
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            field = line.split(":", 1)[1].split("|")[0].strip()
            if field.isdigit():
                total_us += int(field)
    return total_us / 1000


@contextmanager
def user_writer(home: Path, uid: int, *, ofd: bool = False) -> Iterator[int]:
    proc = subprocess.Popen(
        [
            "setpriv",
            "--reuid",
            str(uid),
            "--regid",
            str(uid),
            "--clear-groups",
            hermes_python(),
            str(WRITER),
            "hold",
            "--home",
            str(home),
            *(["--ofd-guard"] if ofd else []),
        ],
        env=writer_env(home),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready", "the user's writer did not start"
    try:
        yield proc.pid
    finally:
        proc.stdin.close()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--extra", type=int, default=2000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--uid", type=int, default=65534)
    ap.add_argument(
        "--baseline",
        help="the python of another install whose statewardenctl is timed alongside",
    )
    ap.add_argument(
        "--ofd",
        action="store_true",
        help="the user's writer adds the OFD locks of Hermes since 0.20",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/holders.py: run as root (it starts processes of a second uid)")
    as_user = ["setpriv", "--reuid", str(args.uid), "--regid", str(args.uid), "--clear-groups"]
    ctl = [str(Path(sys.executable).with_name("statewardenctl"))]
    if not Path(ctl[0]).exists():
        ctl = [sys.executable, "-c", "from statewarden.cli.quick import main; main()"]
    # The same command through the click group, as before the quick entry point.
    click_ctl = [sys.executable, "-m", "statewarden.cli.ctl"]
    # As installed (pip compiles the bytecode): no run pays for compiling statewarden,
    # also where PYTHONDONTWRITEBYTECODE is set.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(REPO / "statewarden")], check=True
    )
    rows: list[tuple[str, list[float]]] = []
    cpu_times: dict[str, list[float]] = {}  # whole processes: CPU ms of each run
    base: list[str] = []
    if args.baseline:
        base = [str(Path(args.baseline).with_name("statewardenctl"))]
    folder = Path(tempfile.mkdtemp(prefix="statewarden-bench-"))
    try:
        folder.chmod(0o755)
        home = make_home(folder / "hermes", TINY)
        for p in [home, *home.rglob("*")]:
            os.chown(p, args.uid, args.uid)
        db = home / "state.db"
        # No config file for either user: every default (holders.other_users: locks).
        env = {**os.environ, "HOME": str(folder), "XDG_CONFIG_HOME": str(folder / "config")}
        env.pop("STATEWARDEN_CONFIG", None)
        (folder / "files").mkdir()
        pids = spawn_sleepers(args.extra, args.files, folder / "files")
        try:
            with (
                user_writer(home, args.uid, ofd=args.ofd) as mine,
                holding(home, write_every_s=0.2) as root,
            ):
                n_proc = sum(1 for p in os.listdir("/proc") if p.isdigit())
                scanner = HolderScanner([db])
                first = scanner.scan()[0]
                assert {mine, root.pid} <= {h.pid for h in first.holders}, "writers not found"
                rows.append(
                    (
                        "in-process full scan, root",
                        timed(lambda: scanner.scan(full=True), args.runs),
                    )
                )
                scanner.scan(full=True)
                rows.append(
                    (
                        "in-process incremental, root",
                        timed(lambda: scanner.scan(full=False), max(args.runs, 21)),
                    )
                )
                last = scanner.scan(full=False)[0]
                assert {mine, root.pid} <= {h.pid for h in last.holders}, "writers lost"
                out = subprocess.run(
                    [*as_user, sys.executable, "-c", USER_SCAN, str(db), str(args.runs)],
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=REPO,
                )
                user = json.loads(out.stdout)
                assert user["complete"], "the user's scan is not complete"
                assert [mine, "descriptors"] in user["holders"], user["holders"]
                assert [root.pid, "locks"] in user["holders"], user["holders"]
                rows.append(("in-process full scan, user", user["times"]))
                check = subprocess.run(
                    [*as_user, *ctl, "holders", "--db", str(db), "--no-systemd", "--json"],
                    capture_output=True,
                    text=True,
                    check=False,
                    cwd=REPO,
                    env=env,
                )
                assert check.returncode == 0, check.stdout + check.stderr
                load_before = os.getloadavg()
                for who, prefix in (("root", []), ("user", as_user)):
                    cmds = [
                        (
                            "statewardenctl holders",
                            [*ctl, "holders", "--db", str(db), "--no-systemd"],
                        ),
                        ("holders as typed", [*ctl, "holders", "--db", str(db)]),
                        *(
                            [
                                (
                                    "baseline holders",
                                    [*base, "holders", "--db", str(db), "--no-systemd"],
                                ),
                                ("baseline as typed", [*base, "holders", "--db", str(db)]),
                            ]
                            if base
                            else []
                        ),
                        (
                            "holders through click",
                            [*click_ctl, "holders", "--db", str(db), "--no-systemd"],
                        ),
                        ("fuser", ["fuser", str(db)]),
                        ("lsof", ["lsof", str(db)]),
                    ]
                    # A/B alternated: each run times every command once, in turn.
                    by_command: dict[str, list[float]] = {name: [] for name, _ in cmds}
                    for _ in range(args.runs):
                        for name, cmd in cmds:
                            wall, cpu = command_times([*prefix, *cmd], env)
                            by_command[name].append(wall)
                            cpu_times.setdefault(f"{name}, {who}", []).append(cpu)
                    rows += [(f"{name}, {who}", by_command[name]) for name, _ in cmds]
                load_after = os.getloadavg()
                run_imports = {
                    name: min(
                        import_ms(
                            [
                                *(c[1:] if len(c) > 1 else c),
                                "holders",
                                "--db",
                                str(db),
                                "--no-systemd",
                            ]
                        )
                        for _ in range(args.runs)
                    )
                    for name, c in (("statewardenctl", ctl), ("through click", click_ctl))
                }
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGTERM)
            for pid in pids:
                os.waitpid(pid, 0)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    help_imports = min(
        import_ms([*ctl[1:], "--help"] if len(ctl) > 1 else [ctl[0], "--help"])
        for _ in range(args.runs)
    )
    holders_imports = min(
        import_ms(
            [*ctl[1:], "holders", "--help"] if len(ctl) > 1 else [ctl[0], "holders", "--help"]
        )
        for _ in range(args.runs)
    )
    print(
        f"holders bench: {n_proc} processes ({args.extra} extra, {args.files} open files each),"
        f" 2 Hermes writers (uid {args.uid} and root), best and median of {args.runs} runs;"
        f" load average {load_before[0]:.2f} before the whole processes,"
        f" {load_after[0]:.2f} after (1 min)"
    )
    best = {}
    for name, times in rows:
        best[name] = min(times)
        spent_ms = cpu_times.get(name)
        spent = f", CPU median {statistics.median(spent_ms):.1f} ms" if spent_ms else ""
        print(f"  {name:<36}{min(times):8.1f} ms  (median {statistics.median(times):.1f}{spent})")
    print(f"  user's scan coverage: {user['coverage']}")
    print(
        f"  imports of statewardenctl --help: {help_imports:.1f} ms; of holders --help: {holders_imports:.1f} ms"
    )
    print(
        f"  imports of a whole holders --db run: {run_imports['statewardenctl']:.1f} ms"
        f" (through click: {run_imports['through click']:.1f} ms)"
    )
    for who in ("root", "user"):
        fuser = best[f"fuser, {who}"]
        ratio = best[f"statewardenctl holders, {who}"] / fuser
        typed = best[f"holders as typed, {who}"] / fuser
        slow = best[f"holders through click, {who}"] / fuser
        print(
            f"  whole-process holders / fuser, wall best, {who}: as typed {typed:.2f},"
            f" --no-systemd {ratio:.2f} (through click: {slow:.2f})"
        )
    for who in ("root", "user"):
        ratio = best[f"in-process full scan, {who}"] / best[f"fuser, {who}"]
        print(f"  in-process full scan / fuser, {who}: {ratio:.2f}")
    for who in ("root", "user"):
        fuser_cpu = statistics.median(cpu_times[f"fuser, {who}"])
        for name in (
            "holders as typed",
            "statewardenctl holders",
            "baseline as typed",
            "baseline holders",
        ):
            if f"{name}, {who}" in cpu_times:
                cpu = statistics.median(cpu_times[f"{name}, {who}"])
                print(f"  CPU median, {name} / fuser, {who}: {cpu / fuser_cpu:.2f}")


if __name__ == "__main__":
    main()
