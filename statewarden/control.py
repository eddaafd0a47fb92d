"""The control socket: how ``statewardenctl`` talks to a running daemon.

``$XDG_RUNTIME_DIR/statewarden/control.sock``, a Unix stream socket, mode 0600 in a 0700
directory, and every peer's uid checked with SO_PEERCRED (only the daemon's own user
may talk to it). Protocol: JSON lines. A request is ``{"cmd": NAME, ...args}``; a reply
is ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "one line"}``. A request
line is at most ``MAX_REQUEST_BYTES``; a longer one, or one that is not JSON, gets an
error reply and the connection stays usable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import stat
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from statewarden.errors import AlreadyRunning, ControlError, DaemonNotRunning, StatewardenError

MAX_REQUEST_BYTES = 64 * 1024
DEFAULT_CLIENT_TIMEOUT_S = 10.0
SOCKET_NAME = "control.sock"

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def _socket_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


class ControlServer:
    def __init__(self, path: Path, handler: Handler, *, uid: int | None = None) -> None:
        self.path = path
        self.handler = handler
        self.uid = os.getuid() if uid is None else uid
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.path.parent, 0o700)
        if self.path.exists() or self.path.is_symlink():
            if not stat.S_ISSOCK(os.lstat(self.path).st_mode):
                raise StatewardenError(f"{self.path}: exists and is not a socket; remove it")
            if _socket_answers(self.path):
                raise AlreadyRunning(f"another statewarden daemon is serving {self.path}")
            self.path.unlink()
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
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
        await writer.drain()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        try:
            uid = peer_uid(sock)
        except OSError:
            uid = -1
        try:
            if uid != self.uid:
                await self._reply(
                    writer, {"ok": False, "error": f"uid {uid} may not use this socket"}
                )
                return
            buf = b""
            discarding = False
            while True:
                chunk = await reader.read(65536)
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
                        await self._reply(writer, await self._dispatch(line))
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _dispatch(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
        except ValueError:
            return {"ok": False, "error": "request is not JSON"}
        if not isinstance(request, dict) or not isinstance(request.get("cmd"), str):
            return {"ok": False, "error": 'request must be a JSON object with a string "cmd"'}
        try:
            return {"ok": True, "result": await self.handler(request)}
        except StatewardenError as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - one bad request must not end the daemon
            return {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}


def request(
    path: Path, cmd: str, *, timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S, **args: Any
) -> Any:
    """Send one request and return its result; raise DaemonNotRunning / ControlError."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        try:
            s.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise DaemonNotRunning(f"no statewarden daemon at {path} ({exc.strerror})") from None
        except OSError as exc:
            raise DaemonNotRunning(f"cannot reach the daemon at {path}: {exc}") from None
        # A refusal can be answered and the connection closed before the request is read:
        # the answer is still there to read below.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
        buf = b""
        try:
            while b"\n" not in buf:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
        except TimeoutError:
            raise ControlError(f"the daemon did not answer within {timeout_s:.0f} s") from None
    if not buf:
        raise ControlError("the daemon closed the connection without an answer")
    reply = json.loads(buf.split(b"\n", 1)[0])
    if not reply.get("ok"):
        raise ControlError(str(reply.get("error")))
    return reply.get("result")


def socket_path(runtime_dir: Path) -> Path:
    return runtime_dir / SOCKET_NAME
