"""Reading ``/proc/locks``: who owns a lock on a database's files, and whose OFD locks.

``/proc/locks`` is readable by everyone. Each line names a lock's kind (``POSIX``,
``FLOCK``, ``OFDLCK``), its mode, its owner's pid and the file as
``major:minor:inode``. :func:`read_locks` reads it once per scan into a
:class:`LockTable`: every owner of a POSIX lock on any file (an owner ``/proc`` does not
list is a hidden process), and per target what each owner holds on the target's files.

An open file description (OFD) lock names no owner (pid -1). The ``lock:`` lines of
``/proc/<pid>/fdinfo/<fd>`` (:func:`fd_locks`) say which descriptor carries one;
:func:`attribute` matches them, counting descriptors that share one open file
description once (``kcmp``), and leaves the rest ``ownerless``. The scanner
(``scan.py``) decides what an ownerless lock means for the scan.

A reader of ``/proc/locks`` takes the kernel's file-lock semaphore for writing
(``locks_start`` in fs/locks.c: ``percpu_down_write``), and the first such writer after a
quiet spell waits out an RCU grace period: 5 to 15 ms of wall time (not CPU) measured
on a 2-core VM, more than half of what ``fuser`` takes for a whole run. For about a
grace period after a writer leaves, the next one does not wait. :class:`ReadAhead`
reads the file in a thread while a one-shot scan reads the processes, so the wait is
taken alongside; the scan's own read, after the processes as always, is then quick.
"""

from __future__ import annotations

import _thread
import os
import time

from statewarden.holders import processes as P
from statewarden.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

# (major, minor, inode, mode, start, end): an OFD lock as /proc/locks and fdinfo print it.
LockKey = tuple[int, int, int, str, int, str]
# (major, minor, inode) of a target's file -> (target index, file name, stale)
FileIds = dict[tuple[int, int, int], tuple[int, str, bool]]
# (pid, target index) -> (file name, stale, kind, mode, start, end) of each lock it owns
Owned = dict[tuple[int, int], list[tuple[str, bool, str, str, int, str]]]


class LockTable(Record):
    """What ``/proc/locks`` says, read once per scan."""

    __slots__ = ("owned", "ownerless", "pids", "unnamed")

    def __init__(
        self,
        owned: Owned,
        pids: set[int],
        unnamed: dict[int, list[tuple[str, LockKey | None]]],
        ownerless: dict[int, list[str]] | None = None,
    ) -> None:
        self.owned = owned
        self.pids = pids  # the owner of every POSIX lock, on any file
        # target index -> (what, OFD lock key or None) of each lock on its files that
        # names no owner: -1 is an open file description lock
        self.unnamed = unnamed
        # target index -> what of each unnamed lock no readable descriptor carries
        self.ownerless: dict[int, list[str]] = {} if ownerless is None else ownerless


# A LockTable, or why /proc/locks could not be read.
Locks = LockTable | str

# How often ReadAhead reads /proc/locks (well within a grace period), and for how long
# at most if it is never stopped.
READ_AHEAD_EVERY_S = 0.004
READ_AHEAD_MOST_S = 10.0


class ReadAhead:
    """Reads ``<proc>/locks`` in a thread, every few ms, until :meth:`stop` (module
    docstring: the kernel's wait for its first reader is taken alongside a scan).

    What it reads is thrown away. ``_thread``, not ``threading``: ``statewardenctl
    holders`` imports neither functools nor collections on its way.
    """

    def __init__(self, proc: str = "/proc") -> None:
        self._stopped = False
        _thread.start_new_thread(self._run, (f"{proc}/locks",))

    def _run(self, path: str) -> None:
        deadline = time.monotonic() + READ_AHEAD_MOST_S
        while not self._stopped and time.monotonic() < deadline:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return  # the scan's own read reports why
            try:
                os.read(fd, 1)
            except OSError:
                return
            finally:
                os.close(fd)
            time.sleep(READ_AHEAD_EVERY_S)

    def stop(self) -> None:
        """No more reads (the thread ends within one period; nothing waits for it)."""
        self._stopped = True


def read_locks(proc: str, by_id: FileIds) -> Locks:
    """Every lock owner, and what each owns on the files ``by_id`` names.

    Returns why, instead, when ``<proc>/locks`` cannot be read.
    """
    try:
        text = P.read_file(f"{proc}/locks").decode("ascii", "replace")
    except OSError as exc:
        return f"{proc}/locks: {exc.strerror or exc}"
    table = LockTable(owned={}, pids=set(), unnamed={})
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8 or parts[1] == "->":
            continue  # a waiter, not an owner
        try:
            pid = int(parts[4])
            maj, mnr, ino = parts[5].split(":")
            key = (int(maj, 16), int(mnr, 16), int(ino))
        except ValueError:
            continue
        if pid > 0 and parts[1] == "POSIX":
            # Only a POSIX lock dies with its owner. A FLOCK keeps the pid of whoever
            # took it, which may have exited since, leaving it to a forked child.
            table.pids.add(pid)
        if key not in by_id:
            continue
        i, name, stale = by_id[key]
        if pid <= 0:
            what = f"{parts[1]} {parts[3]} on {name}"
            table.unnamed.setdefault(i, []).append((what, ofd_key(parts)))
            continue
        table.owned.setdefault((pid, i), []).append(
            (name, stale, parts[1], parts[3], int(parts[6]), parts[7])
        )
    return table


def fd_locks(fdinfo: str) -> list[LockKey]:
    """The OFD locks a descriptor's open file description carries (the ``lock:`` lines of
    its ``fdinfo``).

    A descriptor closed since, or an fdinfo that cannot be read, gives nothing: the lock
    it may carry then stays ownerless (fail closed).
    """
    try:
        info = P.read_file(fdinfo)
    except OSError:
        return []
    out: list[LockKey] = []
    for line in info.splitlines():
        if line.startswith(b"lock:"):
            key = ofd_key(line[5:].decode("ascii", "replace").split())
            if key is not None:
                out.append(key)
    return out


def attribute(locks: LockTable, carriers: dict[LockKey, list[tuple[int, int]]]) -> bool:
    """Match each unnamed OFD lock to a (pid, fd) in ``carriers`` that carries it.

    Fills ``locks.ownerless`` with what no readable descriptor carries; True if any.
    Descriptors sharing one open file description (``dup``, ``fork``) count once.
    """
    left: dict[LockKey, int] = {
        key: count_descriptions(holders) for key, holders in carriers.items()
    }
    locks.ownerless = {}
    for index, unnamed in locks.unnamed.items():
        for what, lock in unnamed:
            if lock is not None and left.get(lock, 0) > 0:
                left[lock] -= 1
                continue
            locks.ownerless.setdefault(index, []).append(what)
    return bool(locks.ownerless)


def ofd_key(parts: Sequence[str]) -> LockKey | None:
    """The key of an OFD lock from the fields of its ``/proc/locks`` or ``lock:`` line."""
    if len(parts) < 8 or parts[1] != "OFDLCK":
        return None
    try:
        maj, mnr, ino = parts[5].split(":")
        return (int(maj, 16), int(mnr, 16), int(ino), parts[3], int(parts[6]), parts[7])
    except ValueError:
        return None


def count_descriptions(carriers: list[tuple[int, int]]) -> int:
    """How many open file descriptions the (pid, fd) pairs are: pairs the kernel shows to
    share one (``kcmp``), or cannot tell apart, count once."""
    distinct: list[tuple[int, int]] = []
    for pid, fd in carriers:
        if not any(P.same_open_file(pid, fd, p, f) is not False for p, f in distinct):
            distinct.append((pid, fd))
    return len(distinct)
