"""The control socket's client: what ``statewardenctl`` sends a running daemon.

One request and its reply (:func:`request`), or a streamed reply read event by event
(:class:`StreamClient`), over the Unix socket :func:`socket_path` names; the protocol
and the server are :mod:`statewarden.daemon.control`'s. Plain blocking sockets: a
command asking the daemon (``status`` first of all) imports no asyncio, which alone
costs more than the rest of such a command.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from typing import Any

from statewarden.errors import ControlError, DaemonNotRunning

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

DEFAULT_CLIENT_TIMEOUT_S = 10.0
SOCKET_NAME = "control.sock"
STREAM_POLL_S = 0.5  # a streamed reply's reader wakes this often (to act on Ctrl-C)


def request(
    path: Path, cmd: str, *, timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S, **args: Any
) -> Any:
    """Send one request and return its result; raise DaemonNotRunning / ControlError."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        _connect(s, path, timeout_s)
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
        except ConnectionResetError:
            pass  # what arrived before the reset is read below
    if not buf:
        raise ControlError("the daemon closed the connection without an answer")
    return _result_of(json.loads(buf.split(b"\n", 1)[0]))


def _connect(s: socket.socket, path: Path, timeout_s: float) -> None:
    """Connect, waiting out a full queue (a burst of clients: the daemon is there, busy)
    for up to ``timeout_s``; only a socket nobody listens on is "not running"."""
    deadline = time.monotonic() + timeout_s
    pause = 0.01
    while True:
        try:
            s.connect(str(path))
            return
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise DaemonNotRunning(f"no statewarden daemon at {path} ({exc.strerror})") from None
        except BlockingIOError:
            if time.monotonic() + pause > deadline:
                raise ControlError(
                    f"the daemon at {path} is busy: its queue of connections stayed full"
                    f" for {timeout_s:.0f} s; try again"
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.25)
        except OSError as exc:
            raise DaemonNotRunning(f"cannot reach the daemon at {path}: {exc}") from None


def _result_of(reply: dict[str, Any], *, with_exit_code: bool = False) -> Any:
    """The result of a reply, or its error raised (with the exit code the reply names
    when ``with_exit_code``; the one-shot requests keep exit 1 for a refusal)."""
    if not reply.get("ok"):
        err = ControlError(str(reply.get("error")))
        code = reply.get("exit_code")
        if with_exit_code and isinstance(code, int) and not isinstance(code, bool):
            err.exit_code = code
        raise err
    return reply.get("result")


class StreamClient:
    """The client side of a streamed request: :meth:`next` gives each event as it
    comes, then the result (``("event", {...})``, ..., ``("result", ...)``)."""

    def __init__(self, path: Path, cmd: str, **args: Any) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(DEFAULT_CLIENT_TIMEOUT_S)
        try:
            self.sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            self.sock.close()
            raise DaemonNotRunning(f"no statewarden daemon at {path} ({exc.strerror})") from None
        except OSError as exc:
            self.sock.close()
            raise DaemonNotRunning(f"cannot reach the daemon at {path}: {exc}") from None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.sock.sendall(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
        self.sock.settimeout(STREAM_POLL_S)
        self._buf = b""

    def next(self) -> tuple[str, Any] | None:
        """The next event or the result; None if nothing came within STREAM_POLL_S.
        A ControlError for an error reply or a daemon that went away."""
        while b"\n" not in self._buf:
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                return None
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise ControlError("the daemon closed the connection before the run's end")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        reply = json.loads(line)
        if reply.get("ok") and "event" in reply:
            return "event", reply["event"]
        return "result", _result_of(reply, with_exit_code=True)

    def close(self) -> None:
        self.sock.close()


def socket_path(runtime_dir: Path) -> Path:
    return runtime_dir / SOCKET_NAME
