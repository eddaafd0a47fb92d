"""A local HTTP server on 127.0.0.1 that takes pings and posts as a monitor would.

Every request (method, path with its query, body, headers) is recorded in :attr:`PushServer.requests`
and answered by the script (consumed one request at a time, then ``default``): ``ok``
(200 "OK"), ``500``, ``404``, ``redirect`` (302 to /elsewhere), ``huge`` (100 MB, no
Content-Length), ``drip`` (headers, then a byte every :data:`DRIP_S`: each read well within a
per-step timeout of a second, never a whole answer in time), ``slow`` (``ok`` after :data:`SLOW_S`: the request is recorded while its answer
is still on its way), ``echo`` (401 whose body repeats the request's Basic credentials,
decoded, as a careless proxy does). A JSON ``answer_body`` may be set for ``ok``. :meth:`stop` closes the
port.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Seconds a ``slow`` answer waits before its 200, long enough to act while it is pending.
SLOW_S = 0.5
# A byte every 0.2 s: a client reading with a per-step timeout of 1 s never times out a
# read on it, even on a loaded machine (a byte a second raced that timeout), and its whole
# deadline ends the exchange: 1,000 bytes take 200 s.
DRIP_S = 0.2
HUGE_BYTES = 100 * 1024 * 1024
_CHUNK = b"a" * 65536


@dataclass
class Hit:
    method: str
    path: str
    body: bytes
    at: float = field(default_factory=time.monotonic)
    headers: dict[str, str] = field(default_factory=dict)
    answered: str = ""

    def json(self) -> Any:
        return json.loads(self.body)


class PushServer:
    def __init__(self, default: str = "ok", port: int = 0) -> None:
        self.default = default
        self.script: list[str] = []
        self.requests: list[Hit] = []
        self.answer_body: Any = None
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                hit = Hit(
                    self.command,
                    self.path,
                    self.rfile.read(length) if length else b"",
                    headers={k.lower(): v for k, v in self.headers.items()},
                )
                with server._lock:
                    how = server.script.pop(0) if server.script else server.default
                    hit.answered = how
                    server.requests.append(hit)
                server.answer(self, how)

            do_GET = do_POST = do_HEAD = _any

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hung up mid-answer is expected

        self._server = Server(("127.0.0.1", port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        with self._lock:
            return [h.path for h in self.requests]

    def answer(self, h: BaseHTTPRequestHandler, how: str) -> None:
        if how == "slow":
            time.sleep(SLOW_S)
            how = "ok"
        if how == "ok":
            body = b"OK" if self.answer_body is None else json.dumps(self.answer_body).encode()
            self._plain(h, 200, body)
        elif how == "echo":
            auth = h.headers.get("Authorization", "")
            user_pass = base64.b64decode(auth.partition(" ")[2] or "").decode("utf-8", "replace")
            self._plain(h, 401, f"bad credentials {user_pass!r} ({auth})".encode())
        elif how in ("500", "404"):
            self._plain(h, int(how), b"no")
        elif how == "redirect":
            h.send_response(302)
            h.send_header("Location", "/elsewhere")
            h.send_header("Content-Length", "0")
            h.end_headers()
        elif how == "huge":
            h.send_response(200)
            h.send_header("Connection", "close")
            h.end_headers()
            sent = 0
            while sent < HUGE_BYTES:
                h.wfile.write(_CHUNK)
                sent += len(_CHUNK)
        elif how == "drip":
            h.send_response(200)
            h.send_header("Content-Length", "1000")
            h.end_headers()
            for _ in range(1000):
                h.wfile.write(b"a")
                h.wfile.flush()
                time.sleep(DRIP_S)
        else:  # pragma: no cover - a test's typo
            raise ValueError(how)

    @staticmethod
    def _plain(h: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
