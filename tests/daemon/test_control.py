"""The control socket over a real Unix socket: protocol, limits, permissions."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statewarden.daemon import control
from statewarden.errors import AlreadyRunning, ControlError, DaemonNotRunning, UsageError


async def handler(req: dict[str, Any]) -> Any:
    if req["cmd"] == "echo":
        return {"echo": req.get("value")}
    if req["cmd"] == "boom":
        raise RuntimeError("kaboom")
    raise UsageError(f"unknown command {req['cmd']!r}")


class ServerThread:
    """A ControlServer on its own event loop in a thread, like the daemon's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.loop = asyncio.new_event_loop()
        self.server = control.ControlServer(path, handler)
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.start())
        self.ready.set()
        self.loop.run_forever()

    def stop(self) -> None:
        """Close the server, finish its connections, then close the loop (no leaked socket)."""
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
        fut.result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _shutdown(self) -> None:
        await self.server.close()
        # Let each connection's handler end on its own (its clients have closed): a task
        # cancelled before it started would never close its transport.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if others:
            await asyncio.wait(others, timeout=10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    s = ServerThread(tmp_path / "run" / "control.sock")
    yield s
    s.stop()


def raw_session(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(path))
    return s


def read_line(s: socket.socket) -> dict[str, Any]:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        assert chunk, "server closed the connection"
        buf += chunk
    return json.loads(buf)  # type: ignore[no-any-return]


class TestProtocol:
    def test_request_reply(self, server: ServerThread) -> None:
        """A request gets its result; errors come back as one line."""
        assert control.request(server.path, "echo", value=[1, 2]) == {"echo": [1, 2]}
        with pytest.raises(ControlError, match="unknown command 'nope'"):
            control.request(server.path, "nope")
        with pytest.raises(ControlError, match="internal error: RuntimeError: kaboom"):
            control.request(server.path, "boom")

    def test_malformed_input_keeps_connection_usable(self, server: ServerThread) -> None:
        """Garbage, non-objects and an oversized line get error replies; the next request works."""
        s = raw_session(server.path)
        s.sendall(b"this is not json\n")
        assert read_line(s) == {"ok": False, "error": "request is not JSON"}
        s.sendall(b"[1,2]\n")
        assert read_line(s)["error"] == 'request must be a JSON object with a string "cmd"'
        s.sendall(b"x" * (control.MAX_REQUEST_BYTES + 10) + b"\n")
        assert (
            read_line(s)["error"] == f"request too large (limit {control.MAX_REQUEST_BYTES} bytes)"
        )
        s.sendall(b'{"cmd": "echo", "value": 7}\n')
        assert read_line(s) == {"ok": True, "result": {"echo": 7}}
        s.close()

    def test_socket_is_private(self, server: ServerThread) -> None:
        """The socket is 0600 in a 0700 directory."""
        assert stat.S_IMODE(os.stat(server.path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(server.path.parent).st_mode) == 0o700

    def test_other_uid_is_refused(self, tmp_path: Path) -> None:
        """A peer whose uid is not the daemon's gets a refusal (SO_PEERCRED)."""
        s = ServerThread.__new__(ServerThread)
        s.path = tmp_path / "c.sock"
        s.loop = asyncio.new_event_loop()
        s.server = control.ControlServer(s.path, handler, uid=os.getuid() + 1)
        s.ready = threading.Event()
        s.thread = threading.Thread(target=s._run, daemon=True)
        s.thread.start()
        assert s.ready.wait(10)
        try:
            with pytest.raises(ControlError, match=f"uid {os.getuid()} may not use this socket"):
                control.request(s.path, "echo")
        finally:
            s.stop()

    def test_answer_before_the_request_is_read(self, tmp_path: Path) -> None:
        """A server that answers and closes without reading the request (a refusal) gives
        that answer, not a broken pipe traceback."""
        path = tmp_path / "c.sock"
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(path))
        srv.listen(1)

        def refuse() -> None:
            conn, _ = srv.accept()
            conn.sendall(b'{"ok": false, "error": "uid 1000 may not use this socket"}\n')
            conn.close()

        t = threading.Thread(target=refuse)
        t.start()
        try:
            # Larger than the socket buffer: sendall is still sending when the server closes.
            with pytest.raises(ControlError, match="uid 1000 may not use this socket"):
                control.request(path, "echo", blob="x" * (8 << 20))
        finally:
            t.join()
            srv.close()

    def test_no_daemon(self, tmp_path: Path) -> None:
        """No socket: DaemonNotRunning, which the CLI turns into a local fallback."""
        with pytest.raises(DaemonNotRunning):
            control.request(tmp_path / "none.sock", "status")

    def test_second_server_refuses(self, server: ServerThread) -> None:
        """A second daemon on the same socket refuses to start; a stale socket is replaced."""
        other = control.ControlServer(server.path, handler)
        with pytest.raises(AlreadyRunning):
            asyncio.run(other.start())
        # The first one still answers; this also lets it take in the second one's probe
        # before it closes (Python 3.11 leaks a socket accepted while its server closes).
        assert control.request(server.path, "echo", value=2) == {"echo": 2}

    def test_stale_socket_is_replaced(self, tmp_path: Path) -> None:
        """A socket file left by a crashed daemon (nobody listening) is removed and reused."""
        path = tmp_path / "stale.sock"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        s.close()
        srv = ServerThread(path)
        try:
            assert control.request(path, "echo", value=1) == {"echo": 1}
        finally:
            srv.stop()


class TestBusy:
    def test_a_full_queue_is_busy_not_absent(self, tmp_path: Path) -> None:
        """A socket whose queue of connections is full (a burst; here a listener that never
        accepts): the client waits out its timeout and says the daemon is busy, never that
        it is not running."""
        path = tmp_path / "control.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(path))
            listener.listen(0)
            fillers = []
            for _ in range(4):  # fill the queue (the kernel takes one or two over 0)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.setblocking(False)
                try:
                    s.connect(str(path))
                except BlockingIOError:
                    s.close()
                    break
                fillers.append(s)
            try:
                with pytest.raises(ControlError, match="is busy: its queue of connections"):
                    control.request(path, "status", timeout_s=0.5)
            finally:
                for s in fillers:
                    s.close()
