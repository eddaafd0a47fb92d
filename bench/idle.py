"""What the idle daemon costs: its memory and CPU next to a bare sleeping Python.

    .venv/bin/python bench/idle.py [--spec tiny|small] [--settle 20] [--seconds 60]

Builds a real Hermes home (``lab/hermes_fixtures.py`` ``make_home``), starts a real
``statewarden run`` on it (its state, runtime and config folders private to the run),
and, at the same moment, the anchor: ``python3 -c 'import time; time.sleep(N)'`` on the
same interpreter. Once the daemon has said it is ready and ``--settle`` seconds have
passed (its first verification and holder scan done), it reads, for both whole
processes:

- ``VmRSS`` and ``RssAnon`` from ``/proc/PID/status`` (``RssAnon`` is what the process
  itself allocated; the rest of ``VmRSS`` is mapped files, shared with other processes);
- CPU (user + system of every thread, from ``/proc/PID/stat``) over ``--seconds``, as a
  percentage of one core.

Goals for the daemon: ``VmRSS`` <= 50 MiB, CPU <= 0.5 %. The load average is printed
before and after: a loaded machine inflates CPU time, so compare with the anchor.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._common import start_daemon  # noqa: E402
from lab.hermes_fixtures import SMALL, TINY, make_home  # noqa: E402

SPECS = {"tiny": TINY, "small": SMALL}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def status_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``RssAnon`` of ``pid`` in KiB."""
    wanted = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _sep, value = line.partition(":")
        if key in ("VmRSS", "RssAnon"):
            wanted[key] = int(value.split()[0])
    return wanted


def cpu_seconds(pid: int) -> float:
    """User + system CPU of every thread of ``pid`` so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def row(name: str, memory: dict[str, int], cpu_s: float, seconds: float) -> str:
    rss, anon = memory["VmRSS"] / 1024, memory["RssAnon"] / 1024
    return (
        f"{name:<34} VmRSS {rss:6.1f} MiB  RssAnon {anon:6.1f} MiB"
        f"  CPU {cpu_s:6.3f} s = {100 * cpu_s / seconds:5.2f} %"
    )


def measure(spec_name: str, settle: float, seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="statewarden-idle-") as tmp_name:
        tmp = Path(tmp_name)
        home = make_home(tmp / "home", SPECS[spec_name])
        print(f"load average before: {load()}  ({os.cpu_count()} cores)")
        daemon = start_daemon(tmp, home)
        anchor = subprocess.Popen(
            [sys.executable, "-c", f"import time; time.sleep({settle + seconds + 5})"]
        )
        try:
            time.sleep(settle)
            pids = {"statewarden run (idle)": daemon.pid, "python3 sleeping (anchor)": anchor.pid}
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            started = time.monotonic()
            time.sleep(seconds)
            elapsed = time.monotonic() - started
            after = {name: cpu_seconds(pid) for name, pid in pids.items()}
            memory = {name: status_kib(pid) for name, pid in pids.items()}
        finally:
            for proc in (daemon, anchor):
                proc.terminate()
                proc.wait()
        print(f"{spec_name} home; after {settle:.0f} s settled, CPU over {elapsed:.1f} s:")
        for name in pids:
            print(row(name, memory[name], after[name] - before[name], elapsed))
        daemon_rss = memory["statewarden run (idle)"]["VmRSS"]
        anchor_rss = memory["python3 sleeping (anchor)"]["VmRSS"]
        print(f"daemon VmRSS / anchor VmRSS: {daemon_rss / anchor_rss:.2f}x")
        print(f"load average after: {load()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spec", choices=sorted(SPECS), default="small")
    parser.add_argument("--settle", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    measure(args.spec, args.settle, args.seconds)


if __name__ == "__main__":
    main()
