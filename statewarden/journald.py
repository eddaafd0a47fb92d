"""journald's native protocol and sd_notify, without a dependency.

Native protocol (systemd.journal-fields(7), "Native Journal Protocol"): one datagram
per entry to ``/run/systemd/journal/socket``; each field is ``NAME=value\\n``, or, when
the value contains a newline, ``NAME\\n`` + the value's length as 64-bit little
endian + the value + ``\\n``. An entry too big for one datagram is written to a
sealed memfd whose descriptor is passed instead (SCM_RIGHTS).

sd_notify (sd_notify(3)): one datagram of ``KEY=VALUE`` lines to ``$NOTIFY_SOCKET``;
a name starting with ``@`` is in the abstract namespace.
"""

from __future__ import annotations

import array
import errno
import fcntl
import os
import socket
import stat
import struct
import time
from collections.abc import Mapping

JOURNAL_SOCKET = "/run/systemd/journal/socket"
ENV_JOURNAL_SOCKET = "STATEWARDEN_JOURNAL_SOCKET"  # tests point this at their own socket

# syslog priorities: the PRIORITY= field, and the <N> prefix of a line on stderr.
PRIORITY_CRIT = 2
PRIORITY_ERR = 3
PRIORITY_WARNING = 4
PRIORITY_NOTICE = 5
PRIORITY_INFO = 6
PRIORITY_DEBUG = 7
# A log level (structlog's; an incident severity is one too) -> its priority.
LEVEL_PRIORITY: dict[str, int] = {
    "debug": PRIORITY_DEBUG,
    "info": PRIORITY_INFO,
    "warning": PRIORITY_WARNING,
    "warn": PRIORITY_WARNING,
    "error": PRIORITY_ERR,
    "critical": PRIORITY_CRIT,
}


def priority_of(level: str) -> int:
    """The syslog priority of a log level or incident severity (unknown: info)."""
    return LEVEL_PRIORITY.get(level, PRIORITY_INFO)


_FIELD_OK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def field_name(name: str) -> str:
    """A valid journal field name: upper case, ``[A-Z0-9_]``, not starting with ``_`` or a digit."""
    out = "".join(c if c in _FIELD_OK else "_" for c in name.upper())
    out = out.lstrip("_")
    if not out or out[0].isdigit():
        out = "F_" + out
    return out[:64]


def encode_entry(fields: Mapping[str, object]) -> bytes:
    """Encode one journal entry in the native protocol."""
    parts: list[bytes] = []
    for name, value in fields.items():
        key = name.encode("ascii")
        data = value if isinstance(value, bytes) else str(value).encode("utf-8", "replace")
        if b"\n" in data:
            parts.append(key + b"\n" + struct.pack("<Q", len(data)) + data + b"\n")
        else:
            parts.append(key + b"=" + data + b"\n")
    return b"".join(parts)


def journal_socket_path() -> str:
    return os.environ.get(ENV_JOURNAL_SOCKET) or JOURNAL_SOCKET


class JournalSender:
    """Sends entries to journald; ``available`` is false when there is no journal socket."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or journal_socket_path()
        self._sock: socket.socket | None = None

    @property
    def available(self) -> bool:
        try:
            return stat.S_ISSOCK(os.stat(self.path).st_mode)
        except OSError:
            return False

    def _socket(self) -> socket.socket:
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        return self._sock

    def send(self, fields: Mapping[str, object]) -> None:
        """Send one entry; raise ``OSError`` if journald cannot be reached."""
        data = encode_entry(fields)
        sock = self._socket()
        try:
            sock.sendto(data, self.path)
        except OSError as exc:
            if exc.errno not in (errno.EMSGSIZE, errno.ENOBUFS):
                raise
            self._send_memfd(sock, data)

    def _send_memfd(self, sock: socket.socket, data: bytes) -> None:
        fd = os.memfd_create("statewarden-journal", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.write(fd, data)
            seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
            fds = array.array("i", [fd])
            sock.sendmsg([], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)], 0, self.path)
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


# --------------------------------------------------------------------------- sd_notify


def _notify_address(value: str) -> str | bytes:
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    return value


def notify(*lines: str, env: Mapping[str, str] | None = None) -> bool:
    """Send ``KEY=VALUE`` lines to the service manager. False when not under a manager.

    Never raises: a manager that went away must not take the daemon down with it.
    """
    env = os.environ if env is None else env
    target = env.get("NOTIFY_SOCKET", "")
    if not target or not lines:
        return False
    payload = "\n".join(lines).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(payload, _notify_address(target))
    except OSError:
        return False
    return True


def notify_ready(status: str | None = None) -> bool:
    return notify("READY=1", *([f"STATUS={status}"] if status else []))


def notify_status(status: str) -> bool:
    return notify(f"STATUS={status}")


def notify_watchdog() -> bool:
    return notify("WATCHDOG=1")


def notify_reloading() -> bool:
    # systemd 253+ wants MONOTONIC_USEC with RELOADING=1 for Type=notify-reload.
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify("RELOADING=1", f"MONOTONIC_USEC={usec}")


def notify_stopping() -> bool:
    return notify("STOPPING=1")


def watchdog_interval_s(env: Mapping[str, str] | None = None) -> float | None:
    """Half of ``$WATCHDOG_USEC`` in seconds (how often to ping), if it is meant for us."""
    env = os.environ if env is None else env
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 2_000_000 if value > 0 else None
