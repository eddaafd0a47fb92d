"""One daemon per state folder: an exclusive ``flock`` on the folder itself.

Two daemons on one state folder would both append to the incident book and the
timeline and race over the same files (``install.sh --run`` while the unit is active
does exactly that). The lock is taken on the folder's own descriptor, so it needs no
file to be created (it works on a full disk) and dies with the process (kill -9
included: the kernel drops it). The second daemon gets :class:`AlreadyRunning`
naming the pid that holds the lock, read from ``/proc/locks``.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from statewarden.errors import AlreadyRunning


class StateLock:
    """The held lock; :meth:`release` (or process exit) lets another daemon start."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lock_state_dir(directory: Path) -> StateLock:
    """Lock ``directory`` (which must exist) for this process, or raise AlreadyRunning."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        st = os.fstat(fd)
        os.close(fd)
        pid = _holder_pid(st.st_dev, st.st_ino)
        by = f" (pid {pid})" if pid else ""
        raise AlreadyRunning(
            f"another statewarden daemon{by} is already running on {directory}",
            hint="stop it first (systemctl --user stop statewarden), or give this one "
            "another paths.state_dir",
        ) from None
    except BaseException:
        os.close(fd)
        raise
    return StateLock(directory, fd)


def daemon_pid(directory: Path) -> int | None:
    """The pid of the daemon that holds ``directory`` (its state folder), or None."""
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return _holder_pid(st.st_dev, st.st_ino)


def _holder_pid(dev: int, ino: int) -> int | None:
    """The pid holding a FLOCK on (dev, ino), from /proc/locks, if it can be told."""
    want = f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            for line in f:
                parts = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 00:2f:5678 0 EOF"
                if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == want:
                    return int(parts[4])
    except (OSError, ValueError):
        return None
    return None
