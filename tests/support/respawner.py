"""A respawner, like the desktop app: ``python -m tests.support.respawner HERMES [ARGS...]``.

Starts ``HERMES ARGS`` (e.g. ``hermes serve --isolated``, which daemonises), reads the
pid it writes to ``$FAKE_HERMES_PIDFILE``, and starts it again each time that process
dies. On SIGTERM it stops its current child too and exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.support.procs import alive

POLL_S = 0.05


def main() -> None:
    pidfile = os.environ["FAKE_HERMES_PIDFILE"]
    stopping = False

    def on_term(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    current = 0
    while not stopping:
        if current == 0 or not alive(current):
            before = _read(pidfile)
            subprocess.run(sys.argv[1:], check=False, stdout=subprocess.DEVNULL)
            while not stopping and _read(pidfile) in (0, before):
                time.sleep(POLL_S)
            current = _read(pidfile)
        time.sleep(POLL_S)
    if current and alive(current):
        os.kill(current, signal.SIGTERM)


def _read(pidfile: str) -> int:
    try:
        with open(pidfile) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


if __name__ == "__main__":
    main()
