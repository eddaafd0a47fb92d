"""The desktop app's respawner for ``statewardenctl demo``: copied in as ``bin/hermes-desktop``.

Standard library only. It starts ``hermes serve --isolated`` (the look-alike next to
it, which daemonises and writes its pid to ``$DEMO_PIDFILE``) and starts it again
``RESPAWN_DELAY_S`` after each time that process is gone, as the desktop app does over
SSH. On SIGTERM it stops its current ``serve`` too and exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.05
RESPAWN_DELAY_S = 1.0
START_TIMEOUT_S = 10.0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _read(pidfile: str) -> int:
    try:
        with open(pidfile) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def main() -> None:
    pidfile = os.environ["DEMO_PIDFILE"]
    hermes = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "hermes")
    stopping = False

    def on_term(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    current = 0
    while not stopping:
        if current == 0 or not _alive(current):
            if current:
                time.sleep(RESPAWN_DELAY_S)
            if stopping:
                break
            before = _read(pidfile)
            subprocess.run(
                [hermes, "serve", "--isolated"],
                check=False,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + START_TIMEOUT_S
            while not stopping and _read(pidfile) in (0, before) and time.monotonic() < deadline:
                time.sleep(POLL_S)
            # A serve that could not open the database leaves the old pid: try again.
            current = _read(pidfile) if _read(pidfile) != before else -1
        time.sleep(POLL_S)
    if current > 0 and _alive(current):
        os.kill(current, signal.SIGTERM)


if __name__ == "__main__":
    main()
