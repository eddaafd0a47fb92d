"""Shared helpers for benchmarks: timing and a one-line figure format."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO


def time_it(fn: Callable[[], object], repeat: int = 20, warmup: int = 2) -> float:
    """Median wall time of ``fn`` in seconds."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def figure(
    name: str, seconds: float, *, versus: str | None = None, other_s: float | None = None
) -> str:
    """``name: 12.3 ms`` and, when given, the comparison tool's figure from the same run."""
    line = f"{name}: {seconds * 1000:.2f} ms"
    if versus and other_s is not None:
        line += f"  |  {versus}: {other_s * 1000:.2f} ms  (ratio {seconds / other_s:.2f}x)"
    return line


def start_daemon(tmp: Path, home: Path, **extra_env: str) -> subprocess.Popen[str]:
    """A real ``statewarden run`` on ``home``, its state, runtime and config folders under
    ``tmp``; returns once it logs "statewarden ready".

    Its stderr is then read to the end by a thread (and thrown away, or appended to
    ``STATEWARDEN_BENCH_DAEMON_LOG`` when set): left unread, the pipe fills under a flood
    and the daemon blocks in its next log write, which is the bench's fault, not its.
    """
    env = dict(
        os.environ,
        HERMES_HOME=str(home),
        XDG_STATE_HOME=str(tmp / "state"),
        XDG_RUNTIME_DIR=str(tmp / "run"),
        XDG_CONFIG_HOME=str(tmp / "cfg"),
        **extra_env,
    )
    env.pop("NOTIFY_SOCKET", None)
    command = [sys.executable, "-m", "statewarden.cli.daemon_cmd"]
    if profile := os.environ.get("STATEWARDEN_BENCH_PROFILE"):
        command[1:1] = ["-m", "cProfile", "-o", profile]
    daemon = subprocess.Popen(
        [*command, "run", "--log-format", "plain"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert daemon.stderr is not None
    while "statewarden ready" not in daemon.stderr.readline():
        if daemon.poll() is not None:
            raise SystemExit(f"the daemon exited with {daemon.returncode} before it was ready")
    threading.Thread(target=_drain, args=(daemon.stderr,), daemon=True).start()
    return daemon


def _drain(stream: IO[str]) -> None:
    """Read ``stream`` to its end, keeping it in ``STATEWARDEN_BENCH_DAEMON_LOG`` if set."""
    keep = os.environ.get("STATEWARDEN_BENCH_DAEMON_LOG")
    with open(keep or os.devnull, "a", encoding="utf-8") as out:
        for line in stream:
            out.write(line)


def rss_anon(pid: int) -> int:
    """``pid``'s RssAnon in bytes (what it owns: a mapped file's pages are not counted,
    as they are in VmRSS); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for row in status:
                if row.startswith(b"RssAnon:"):
                    return int(row.split()[1]) * 1024
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    """``pid``'s children, theirs, and so on (whichever thread started them)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as children:
                    kids = [int(p) for p in children.read().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


@dataclass
class WholeRun:
    """One process run to its end: wall seconds, CPU seconds from ``wait4`` (its own and
    its waited-for children's), peak RssAnon of the process itself, of any one of its
    descendants, and of their sum, sampled every ``every`` seconds; its stdout."""

    wall_s: float
    cpu_s: float
    own_peak: int
    child_peak: int
    sum_peak: int
    out: str


def run_whole(argv: list[str], env: dict[str, str] | None = None, every: float = 0.005) -> WholeRun:
    """Run ``argv`` as a whole process, sampling the RssAnon of it and its descendants."""
    own = child = total = 0
    with tempfile.TemporaryFile("w+") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out)
        while True:
            waited, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if waited:
                break
            mine = rss_anon(proc.pid)
            theirs = [rss_anon(p) for p in descendants(proc.pid)]
            own, child = max(own, mine), max([child, *theirs])
            total = max(total, mine + sum(theirs))
            time.sleep(every)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if proc.returncode:
        raise SystemExit(f"{argv} exited with {proc.returncode}")
    return WholeRun(wall, usage.ru_utime + usage.ru_stime, own, child, total, text)
