"""Detection figures for the daemon, each next to what a user would otherwise run.

1. Latency from a Hermes log line being written to the incident being visible on the
   control socket, p50 and p99 over N lines; next to `tail -F agent.log | grep
   --line-buffered malformed` (time from the write to grep printing the line).
2. A flood: 100,000 lines/s appended for 10 s (1,000,000 Hermes-format lines): how
   many the daemon counted, how long it took to catch up (and so its lines/s), its peak
   RSS (VmHWM), and how long its control socket took to answer an ``incidents`` request
   while it caught up (p50, p99, max; asked every 50 ms from a thread). At the default
   rate the daemon keeps up when it catches up as the writing ends (10 s); its own rate
   shows with the whole million written at once: ``--flood-rate 1000000 --flood-seconds 1``.
3. Idle: CPU share and RSS of the daemon over 60 s with nothing happening.
4. Busy Hermes: the daemon's CPU share while a real Hermes writer commits every 2 ms
   (500 commits/s, far above a normal day), next to that writer's own CPU share.

Run: .venv/bin/python -m bench.detect [--lines 1000] [--flood-seconds 10] [--idle-seconds 60]
     [--parts latency,flood,idle,busy]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from bench._common import start_daemon
from lab.hermes_fixtures import TINY, holding, log_line, make_home
from statewarden.daemon.control import request

LINE = "gateway.session: state.db routing save failed: database disk image is malformed"


def _count(sock: Path) -> int:
    incs = request(sock, "incidents")
    return sum(i["count"] for i in incs if i["kind"] == "corruption")


def _line(i: int) -> str:
    import datetime as dt

    return log_line(dt.datetime.now(), "WARNING", "gateway.session", f"{LINE} #{i}") + "\n"


def _proc_status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def latency(log: Path, sock: Path, n: int) -> list[float]:
    out = []
    base = _count(sock)
    with open(log, "a") as f:
        for i in range(n):
            t0 = time.perf_counter()
            f.write(_line(i))
            f.flush()
            while _count(sock) < base + i + 1:
                pass
            out.append(time.perf_counter() - t0)
    return out


def grep_latency(log: Path, n: int) -> list[float]:
    log.touch()  # tail follows an existing file with inotify (a missing one is polled)
    tail = subprocess.Popen(["tail", "-n", "0", "-F", str(log)], stdout=subprocess.PIPE)
    grep = subprocess.Popen(
        ["grep", "--line-buffered", "malformed"],
        stdin=tail.stdout,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert grep.stdout is not None
    time.sleep(1.0)
    out = []
    with open(log, "a") as f:
        for i in range(n):
            t0 = time.perf_counter()
            f.write(_line(i))
            f.flush()
            grep.stdout.readline()
            out.append(time.perf_counter() - t0)
    tail.kill()
    grep.kill()
    return out


class SocketProbe:
    """Times an ``incidents`` request to the control socket every ``every_s`` from a
    thread, until stopped: how long a ``statewardenctl`` user waits meanwhile."""

    def __init__(self, sock: Path, every_s: float = 0.05) -> None:
        self.sock = sock
        self.every_s = every_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            t0 = time.perf_counter()
            request(self.sock, "incidents")
            self.samples.append(time.perf_counter() - t0)

    def __enter__(self) -> SocketProbe:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * p))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--flood-seconds", type=int, default=10)
    ap.add_argument("--flood-rate", type=int, default=100_000)
    ap.add_argument("--idle-seconds", type=int, default=60)
    ap.add_argument("--parts", default="latency,flood,idle,busy")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="statewarden-bench-"))
    home = make_home(tmp / "hermes", TINY)
    daemon = start_daemon(tmp, home)
    sock = tmp / "run" / "statewarden" / "control.sock"
    log = home / "logs" / "agent.log"
    log.touch()
    try:
        time.sleep(0.5)
        if "latency" in parts:
            measure_latency(log, sock, home, args.lines)
        if "flood" in parts:
            flood(log, sock, daemon.pid, args.flood_rate, args.flood_seconds)
        if "idle" in parts:
            idle(daemon.pid, args.idle_seconds)
        if "busy" in parts:
            busy(home, daemon.pid)
    finally:
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def measure_latency(log: Path, sock: Path, home: Path, lines: int) -> None:
    ours = latency(log, sock, lines)
    theirs = grep_latency(home / "logs" / "other.log", lines)
    print(
        f"detect latency over {lines} lines: p50 {statistics.median(ours) * 1000:.1f} ms, "
        f"p99 {pct(ours, 0.99) * 1000:.1f} ms (line written -> incident visible on the "
        f"control socket)  |  tail -F | grep: p50 {statistics.median(theirs) * 1000:.1f} ms, "
        f"p99 {pct(theirs, 0.99) * 1000:.1f} ms (line written -> grep prints it)"
    )


def flood(log: Path, sock: Path, pid: int, rate: int, seconds: int) -> None:
    before = _count(sock)
    total = rate * seconds
    chunk = "".join(_line(i) for i in range(1000))
    t0 = time.monotonic()
    with SocketProbe(sock) as probe:
        with open(log, "a") as f:
            for sec in range(seconds):
                for _ in range(rate // 1000):
                    f.write(chunk)
                f.flush()
                wait = t0 + sec + 1 - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
        written_s = time.monotonic() - t0
        deadline = time.monotonic() + 600
        while _count(sock) < before + total and time.monotonic() < deadline:
            time.sleep(0.05)
        caught_up_s = time.monotonic() - t0
    counted = _count(sock) - before
    peak = _proc_status(pid, "VmHWM")
    t1 = time.monotonic()
    tail = subprocess.Popen(["tail", "-n", "+1", str(log)], stdout=subprocess.PIPE)
    subprocess.run(["grep", "-c", "malformed"], stdin=tail.stdout, check=False, capture_output=True)
    tail.wait()
    grep_s = time.monotonic() - t1
    samples = probe.samples or [0.0]
    print(
        f"flood {rate}/s for {seconds} s ({total} lines, written in {written_s:.1f} s): "
        f"counted {counted}, caught up after {caught_up_s:.1f} s "
        f"({counted / caught_up_s:,.0f} lines/s), peak RSS {peak / 2**20:.0f} MiB; control "
        f"socket meanwhile ({len(probe.samples)} requests): p50 "
        f"{statistics.median(samples) * 1000:.1f} ms, p99 {pct(samples, 0.99) * 1000:.1f} ms, "
        f"max {max(samples) * 1000:.1f} ms  |  tail | grep -c over the same file: {grep_s:.2f} s"
    )


def idle(pid: int, seconds: int) -> None:
    time.sleep(5)  # let the flood's aftermath settle
    cpu0, w0 = _cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    cpu = (_cpu_s(pid) - cpu0) / (time.monotonic() - w0)
    rss = _proc_status(pid, "VmRSS")
    print(f"idle over {seconds} s: CPU {cpu * 100:.2f} %, RSS {rss / 2**20:.0f} MiB")


def busy(home: Path, pid: int) -> None:
    with holding(home, write_every_s=0.002) as writer:
        time.sleep(1)
        d0, h0, w0 = _cpu_s(pid), _cpu_s(writer.pid), time.monotonic()
        time.sleep(10)
        wall = time.monotonic() - w0
        daemon_cpu = (_cpu_s(pid) - d0) / wall
        writer_cpu = (_cpu_s(writer.pid) - h0) / wall
    print(
        f"daemon CPU while Hermes commits every 2 ms: {daemon_cpu * 100:.2f} %"
        f"  |  the Hermes writer itself: {writer_cpu * 100:.1f} %"
    )


if __name__ == "__main__":
    main()
