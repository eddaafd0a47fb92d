"""Know, cheaply, whether anyone opened a database's files since the last look.

An inotify ``IN_OPEN`` watch on ``state.db`` and its sidecars fires for every open of
those inodes, by any process, through any path or mount. The holder scanner uses it
to skip re-reading thousands of unchanged processes on an incremental scan: a process
that was not holding the database can only start to by opening a file (an event
here), by being new (a new pid), or by receiving a descriptor over a socket (rare;
the scanner's round-robin refresh covers it).

``inotify_add_watch`` resolves the path without opening the file, so this does not
touch SQLite's POSIX locks (docs/safety.md rule 2). Plain ctypes, no dependency.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterable

from statewarden.inotify import unavailable

IN_OPEN = 0x00000020
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_EVENT_HEADER = 16  # struct inotify_event: wd, mask, cookie, len
_READ_BYTES = 64 * 1024


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None


class OpenWatch:
    """``IN_OPEN`` watches on a set of files; :meth:`poll` says if any fired since last time.

    When inotify cannot be used (no libc, the user's inotify instances or watches used
    up), the watch reports ``True`` ("maybe opened") so the caller falls back to checking
    every process: it never hides an open. ``problem`` then says why and which
    ``fs.inotify`` limit to raise (``statewarden/inotify.py``); each ``watch`` call tries
    again, so the watch comes back by itself once the limit allows it.
    """

    def __init__(self) -> None:
        self._lib = _libc()
        self._fd = -1
        self._watched: tuple[str | os.PathLike[str], ...] = ()
        self.problem: str | None = None
        self._open_fd()

    def _open_fd(self) -> None:
        self.problem = None
        if self._lib is None:
            self.problem = "libc not found"
            return
        fd = self._lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            self.problem = unavailable(err, f"inotify_init1: {os.strerror(err)}")
            return
        self._fd = fd

    @property
    def usable(self) -> bool:
        return self._fd >= 0 and self.problem is None

    @property
    def degraded(self) -> str | None:
        """Why the watch cannot be used (every process is checked instead), or None."""
        return None if self.usable else (self.problem or "inotify is not set up")

    def watch(self, files: Iterable[str | os.PathLike[str]], *, rearm: bool = False) -> None:
        """Watch ``files`` (those that exist). ``rearm`` after a file was replaced.

        A watch follows an inode, not a name: when a file is replaced the caller
        re-arms so the new inode is watched.
        """
        files = tuple(files)
        if files == self._watched and not rearm and self.usable:
            return
        self.close()
        self._open_fd()  # a fresh inotify descriptor drops every old watch
        if self._lib is None or self._fd < 0:
            return
        self._watched = files
        for path in files:
            wd = self._lib.inotify_add_watch(self._fd, os.fsencode(path), IN_OPEN)
            if wd < 0:
                errno = ctypes.get_errno()
                if errno == 2:  # ENOENT: not there (yet); its creation changes the targets
                    continue
                self.problem = unavailable(errno, f"inotify_add_watch {path}: {os.strerror(errno)}")
                return

    def poll(self) -> bool:
        """True if a watched file may have been opened since the last poll."""
        if not self.usable:
            return True
        fired = False
        while True:
            try:
                data = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                return fired
            except OSError as exc:
                self.problem = f"inotify read: {exc.strerror}"
                return True
            if not data:
                return fired
            offset = 0
            while offset + _EVENT_HEADER <= len(data):
                mask = int.from_bytes(data[offset + 4 : offset + 8], "little")
                length = int.from_bytes(data[offset + 12 : offset + 16], "little")
                if mask & (IN_OPEN | IN_Q_OVERFLOW | IN_IGNORED):
                    fired = True
                offset += _EVENT_HEADER + length

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._watched = ()

    def __del__(self) -> None:
        self.close()
