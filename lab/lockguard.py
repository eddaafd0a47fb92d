"""Open file description locks as current Hermes adds them (upstream ``hermes_state_lockguard``).

Since September 2026 every Hermes writer adds OFD read locks (``F_OFD_SETLK``), on the
descriptors SQLite itself holds, over the two ranges that protect a live WAL generation:
the SHARED range of ``state.db`` (``0x40000002``, 510 bytes) and the DMS byte (128) of
``state.db-shm``. They belong to the open file description, not the process, so a stray
``close()`` elsewhere in the process does not cancel them; ``/proc/locks`` shows them as
``OFDLCK ... -1`` (no pid) and ``/proc/PID/fdinfo/FD`` of the holder on its ``lock:`` lines.

This is the lab's own writer of that shape (stdlib only), used by ``hermes_writer.py hold
--ofd-guard`` and the schema-30 fixture writer.
"""

from __future__ import annotations

import fcntl
import os
import struct

SHARED_FIRST = 0x40000000 + 2
SHARED_SIZE = 510
SHM_DMS_BYTE = 128
_F_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", 37)  # 37 on every Linux architecture


def _flock(lock_type: int, start: int, length: int) -> bytes:
    # struct flock on glibc: l_type, l_whence (short), l_start, l_len (off_t), l_pid (int)
    return struct.pack("@hhqqi", lock_type, os.SEEK_SET, start, length, 0)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _guarded_fds(db_path: str) -> list[tuple[int, tuple[int, int]]]:
    """(fd, range) for every descriptor of this process on ``db_path`` and its ``-shm``."""
    ranges: dict[tuple[int, int], tuple[int, int]] = {}
    for path, rng in (
        (db_path, (SHARED_FIRST, SHARED_SIZE)),
        (db_path + "-shm", (SHM_DMS_BYTE, 1)),
    ):
        ident = _identity(path)
        if ident is not None:
            ranges[ident] = rng
    found: list[tuple[int, tuple[int, int]]] = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        want = ranges.get((st.st_dev, st.st_ino))
        if want is not None:
            found.append((fd, want))
    return found


def arm(db_path: str) -> int:
    """OFD read locks on every descriptor of this process on ``db_path`` and its ``-shm``.

    Returns how many descriptors were locked.
    """
    found = _guarded_fds(db_path)
    for fd, (start, length) in found:
        fcntl.fcntl(fd, _F_OFD_SETLK, _flock(fcntl.F_RDLCK, start, length))
    return len(found)


def release(db_path: str) -> None:
    """Lift the guard before the connection closes, as Hermes does: take SQLite's POSIX read
    lock back on each range first (a stray close may have cancelled it), then drop the OFD
    lock, so the last close can still end the WAL generation."""
    for fd, (start, length) in _guarded_fds(db_path):
        fcntl.fcntl(fd, fcntl.F_SETLK, _flock(fcntl.F_RDLCK, start, length))
        fcntl.fcntl(fd, _F_OFD_SETLK, _flock(fcntl.F_UNLCK, start, length))


def drop_posix_locks(db_path: str) -> None:
    """Open and close ``db_path`` outside SQLite: the process's POSIX locks on it are gone
    (docs/stories.md story 7); OFD locks stay."""
    fd = os.open(db_path, os.O_RDONLY)
    os.close(fd)
