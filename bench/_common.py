"""Shared helpers for benchmarks: timing and a one-line figure format."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
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
