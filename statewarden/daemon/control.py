"""The control socket: how ``statewardenctl`` talks to a running daemon.

``$XDG_RUNTIME_DIR/statewarden/control.sock``, a Unix stream socket, mode 0600 in a 0700
directory, and every peer's uid checked with SO_PEERCRED (only the daemon's own user
may talk to it). Protocol: JSON lines. A request is ``{"cmd": NAME, ...args}``; a reply
is ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "one line"}``. A request
line is at most ``MAX_REQUEST_BYTES``; a longer one, or one that is not JSON (or
nested too deeply to parse), gets an error reply and the connection stays usable.

Bounds, so that connections cannot starve the daemon of descriptors (its default
``LimitNOFILE`` is 1024 and it needs them for /proc scans, logs and state files): at
most ``MAX_CONNECTIONS`` at once, and none while fewer than ``FD_RESERVE``
descriptors are free; a connection over either limit gets a one-line error and is
closed, unless a connection is idle (connected, no request under way): then the one
idle longest is closed to make room, so idle clients can never lock the others out. A
client whose connect finds the queue full (a burst: EAGAIN) waits and tries again for
its timeout, then says the daemon is busy, never that it is not running. A connection
with no request for ``IDLE_TIMEOUT_S``, a request line not
finished within ``REQUEST_TIMEOUT_S`` of its first byte, or a reply not taken within
``WRITE_TIMEOUT_S`` is closed.

A streamed reply (a maintenance run handed to the daemon): the handler returns a
:class:`Streamed`; each of its events goes out as ``{"ok": true, "event": {...}}`` as it
happens, then the result as usual. A client that goes away ends its stream, not what
the stream was watching. An error reply from a handler carries ``exit_code``, the exit
code the same error has in ``statewardenctl``.

This module is the server (asyncio); the client is
:mod:`statewarden.daemon.control_client` (plain sockets, no asyncio), whose names are
here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import socket
import stat
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statewarden.atomic import private_dir
from statewarden.daemon.control_client import (
    DEFAULT_CLIENT_TIMEOUT_S,
    SOCKET_NAME,
    STREAM_POLL_S,
    StreamClient,
    request,
    socket_path,
)
from statewarden.errors import AlreadyRunning, StatewardenError

# The client's names, here too: ``control`` is the socket both ends speak.
__all__ = [
    "DEFAULT_CLIENT_TIMEOUT_S",
    "SOCKET_NAME",
    "STREAM_POLL_S",
    "ControlServer",
    "StreamClient",
    "Streamed",
    "free_descriptors",
    "peer_uid",
    "request",
    "socket_answers",
    "socket_path",
]

MAX_REQUEST_BYTES = 64 * 1024
MAX_CONNECTIONS = 32
# asyncio accepts up to ``backlog`` connections in one go before any is served (and so
# before any over the limits is refused): a small backlog bounds that burst.
ACCEPT_BACKLOG = 16
FD_RESERVE = 128
IDLE_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 10.0

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


@dataclass
class Streamed:
    """A reply sent as it happens: each of ``events``, then ``result()``."""

    events: AsyncIterator[dict[str, Any]]
    result: Callable[[], Any]


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def free_descriptors() -> int:
    """Descriptors this process may still open under its soft ``RLIMIT_NOFILE``."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:  # no descriptor left even for the listing
        return 0
    return int(soft) - used


def socket_answers(path: Path) -> bool:
    """Something listens on the Unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


class ControlServer:
    def __init__(
        self,
        path: Path,
        handler: Handler,
        *,
        uid: int | None = None,
        max_connections: int = MAX_CONNECTIONS,
        fd_reserve: int = FD_RESERVE,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        write_timeout_s: float = WRITE_TIMEOUT_S,
    ) -> None:
        self.path = path
        self.handler = handler
        self.uid = os.getuid() if uid is None else uid
        self.max_connections = max_connections
        self.fd_reserve = fd_reserve
        self.idle_timeout_s = idle_timeout_s
        self.request_timeout_s = request_timeout_s
        self.write_timeout_s = write_timeout_s
        self.connections = 0
        self.refused = 0  # connections refused by the limits, since start
        self.evicted = 0  # idle connections closed to make room, since start
        self._idle: dict[asyncio.StreamWriter, float] = {}  # waiting for a request, since
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        private_dir(self.path.parent, what="control socket")
        if self.path.exists() or self.path.is_symlink():
            if not stat.S_ISSOCK(os.lstat(self.path).st_mode):
                raise StatewardenError(f"{self.path}: exists and is not a socket; remove it")
            if socket_answers(self.path):
                raise AlreadyRunning(f"another statewarden daemon is serving {self.path}")
            self.path.unlink()
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(
                self._serve, path=str(self.path), backlog=ACCEPT_BACKLOG
            )
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=2.0)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _reply(self, writer: asyncio.StreamWriter, payload: dict[str, Any]) -> None:
        writer.write(json.dumps(payload, default=str).encode() + b"\n")
        await asyncio.wait_for(writer.drain(), self.write_timeout_s)

    def _over_limit(self) -> str | None:
        if self.connections >= self.max_connections and not self._evict_idle():
            return f"too many connections (at most {self.max_connections}); try again"
        if free_descriptors() < self.fd_reserve:
            return "the daemon is short of file descriptors; try again"
        return None

    def _evict_idle(self) -> bool:
        """Make room for a new connection: close the one that has waited longest for a
        request (a client that connected and said nothing), so idle connections can never
        lock the others out. False when every connection is busy."""
        if not self._idle:
            return False
        victim = min(self._idle, key=self._idle.__getitem__)
        del self._idle[victim]
        victim.close()
        self.evicted += 1
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        refused = self._over_limit()
        if refused is not None:
            self.refused += 1
            with contextlib.suppress(Exception):
                writer.write(json.dumps({"ok": False, "error": refused}).encode() + b"\n")
            writer.close()
            return
        self.connections += 1
        try:
            await self._serve_one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            return
        finally:
            self.connections -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), self.write_timeout_s)

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        try:
            uid = peer_uid(sock)
        except OSError:
            uid = -1
        if uid != self.uid:
            await self._reply(writer, {"ok": False, "error": f"uid {uid} may not use this socket"})
            return
        buf = b""
        discarding = False
        line_started = 0.0
        while True:
            if buf or discarding:
                # A request line must be finished soon after it began (no slow drip).
                line_started = line_started or time.monotonic()
                wait = line_started + self.request_timeout_s - time.monotonic()
            else:
                line_started = 0.0
                wait = self.idle_timeout_s
            if not buf and not discarding:
                self._idle[writer] = time.monotonic()
            try:
                chunk = await asyncio.wait_for(reader.read(65536), max(wait, 0.0))
            finally:
                self._idle.pop(writer, None)
            if not chunk:
                return
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    if len(buf) > MAX_REQUEST_BYTES:
                        if not discarding:
                            await self._reply(
                                writer,
                                {
                                    "ok": False,
                                    "error": (
                                        f"request too large (limit {MAX_REQUEST_BYTES} bytes)"
                                    ),
                                },
                            )
                        discarding = True
                        buf = b""
                    break
                line, buf = buf[:nl], buf[nl + 1 :]
                if discarding:
                    discarding = False
                    continue
                if len(line) > MAX_REQUEST_BYTES:
                    await self._reply(
                        writer,
                        {
                            "ok": False,
                            "error": (f"request too large (limit {MAX_REQUEST_BYTES} bytes)"),
                        },
                    )
                    continue
                if line.strip():
                    reply = await self._dispatch(line)
                    if isinstance(reply, Streamed):
                        await self._stream(writer, reply)
                    else:
                        await self._reply(writer, reply)

    async def _stream(self, writer: asyncio.StreamWriter, streamed: Streamed) -> None:
        events = streamed.events
        try:
            async for event in events:
                await self._reply(writer, {"ok": True, "event": event})
            await self._reply(writer, {"ok": True, "result": streamed.result()})
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    async def _dispatch(self, line: bytes) -> dict[str, Any] | Streamed:
        try:
            request = json.loads(line)
        except ValueError:
            return {"ok": False, "error": "request is not JSON"}
        except RecursionError:
            return {"ok": False, "error": "request is nested too deeply"}
        if not isinstance(request, dict) or not isinstance(request.get("cmd"), str):
            return {"ok": False, "error": 'request must be a JSON object with a string "cmd"'}
        try:
            result = await self.handler(request)
        except StatewardenError as exc:
            return {"ok": False, "error": str(exc), "exit_code": exc.exit_code}
        except Exception as exc:  # noqa: BLE001 - one bad request must not end the daemon
            return {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}
        if isinstance(result, Streamed):
            return result
        return {"ok": True, "result": result}
