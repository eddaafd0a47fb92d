"""A local HTTP server on 127.0.0.1 that speaks the Telegram Bot API's shape.

``POST /bot<token>/sendMessage`` with a JSON body is recorded (token, chat, text, ...)
and answered by the scripted behaviour: ``ok`` (200 with a ``message_id``), ``429``
(with ``parameters.retry_after``), ``500``, ``400``, ``401``, ``hang`` (no answer until
released). A script is a list consumed one request at a time; when it is empty, the
``default`` answers. :meth:`BotApi.stop` closes the port, so requests are refused.

Hostile answers (:data:`HOSTILE`), each what a broken proxy or a hostile server could send:
``429huge`` (``retry_after`` 10**400), ``429far`` (10**9 s), ``deep`` (60 KB of ``[``),
``huge`` (100 MB, no Content-Length), ``drip`` (headers, then one byte every ``drip_s``),
``html``, ``notjson``, ``array``, ``ok_noresult`` (``ok: true`` and no result),
``200notok`` (200 with ``ok: false``), ``badutf8``, ``reset`` (connection reset mid-body),
``loop`` (a redirect to itself), ``leak`` (a redirect whose ``Location`` carries the token
percent-encoded), ``leakdesc`` (a 500 whose description carries the token raw,
JSON-escaped and base64). :attr:`BotApi.sent_bytes` counts the body bytes each streamed
answer got out before the client hung up.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, quote_plus

HOSTILE = (
    "429huge",
    "429far",
    "deep",
    "huge",
    "drip",
    "html",
    "notjson",
    "array",
    "ok_noresult",
    "200notok",
    "badutf8",
    "reset",
    "loop",
    "leak",
    "leakdesc",
)
HUGE_BYTES = 100 * 1024 * 1024
_CHUNK = b"a" * 65536


def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


@dataclass
class Request:
    token: str
    method: str
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    answered: str = ""  # how it was answered: "ok", "429", one of HOSTILE, ...

    @property
    def text(self) -> str:
        return str(self.body.get("text", ""))


class BotApi:
    def __init__(
        self, default: str = "ok", retry_after: int = 1, port: int = 0, token: str | None = None
    ) -> None:
        """``port`` 0 picks a free one; a stopped server can be started again on its port.
        ``token``: the only bot token accepted (others get 401), None: any."""
        self.token = token
        self.default = default
        self.retry_after = retry_after
        self.drip_s = 4.0
        self.sent_bytes: dict[str, int] = {}
        self.script: list[str] = []
        self.requests: list[Request] = []  # every request, whatever the answer
        self.accepted: list[Request] = []  # the ones answered 200
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._next_id = 1
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                parts = self.path.strip("/").split("/")
                token = parts[0][3:] if parts and parts[0].startswith("bot") else ""
                method = parts[1] if len(parts) > 1 else ""
                api.answer(self, Request(token, method, body))

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a hostile answer ends in a closed or reset socket on purpose

        self.server = Server(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, handler: BaseHTTPRequestHandler, req: Request) -> None:
        with self._lock:
            self.requests.append(req)
            how = self.script.pop(0) if self.script else self.default
        if self.token is not None and req.token != self.token:
            how = "401"
        req.answered = how
        if how == "hang":
            self.release.wait(60)
            how = "500"
        if how in HOSTILE:
            self._hostile(handler, req, how)
        elif how == "ok" and req.method == "sendMessage" and req.body.get("text"):
            with self._lock:
                message_id = self._next_id
                self._next_id += 1
                self.accepted.append(req)
            self._send(handler, 200, {"ok": True, "result": {"message_id": message_id}})
        elif how == "429":
            self._send(
                handler,
                429,
                {
                    "ok": False,
                    "error_code": 429,
                    "description": f"Too Many Requests: retry after {self.retry_after}",
                    "parameters": {"retry_after": self.retry_after},
                },
            )
        elif how == "401":
            self._send(
                handler, 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
            )
        elif how == "301":
            handler.send_response(301)
            handler.send_header("Location", f"https://127.0.0.1/bot{req.token}/sendMessage")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        elif how == "400chat":
            self._send(
                handler,
                400,
                {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"},
            )
        elif how == "400":
            self._send(
                handler,
                400,
                {
                    "ok": False,
                    "error_code": 400,
                    "description": "Bad Request: can't parse entities",
                },
            )
        else:
            self._send(
                handler,
                500,
                {"ok": False, "error_code": 500, "description": "Internal Server Error"},
            )

    def _hostile(self, h: BaseHTTPRequestHandler, req: Request, how: str) -> None:
        def raw(status: int, body: bytes, ctype: str = "application/json") -> None:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)

        try:
            if how == "429huge":
                raw(
                    429,
                    b'{"ok": false, "error_code": 429, "description": "Too Many Requests",'
                    b' "parameters": {"retry_after": 1' + b"0" * 400 + b"}}",
                )
            elif how == "429far":
                raw(
                    429,
                    b'{"ok": false, "error_code": 429, "description": "Too Many Requests",'
                    b' "parameters": {"retry_after": 1000000000}}',
                )
            elif how == "deep":
                raw(200, b"[" * 60_000)  # under the size limit: for the parser
            elif how == "html":
                raw(200, b"<html><body><h1>Welcome to nginx!</h1></body></html>", "text/html")
            elif how == "notjson":
                raw(200, b"OK", "text/plain")
            elif how == "array":
                raw(200, b'[{"ok": true, "result": {"message_id": 1}}]')
            elif how == "ok_noresult":
                raw(200, b'{"ok": true}')
            elif how == "200notok":
                raw(200, b'{"ok": false, "error_code": 200, "description": "not today"}')
            elif how == "badutf8":
                raw(200, b'{"ok": true, "result": {"message_id": 1, "text": "\xff\xfe"}}')
            elif how in ("loop", "leak"):
                h.send_response(307 if how == "leak" else 302)
                if how == "leak":
                    where = (
                        f"https://127.0.0.1/bot{quote(req.token, safe='')}/sendMessage"
                        f"?t={_lower_hex(quote_plus(req.token))}"
                    )
                else:
                    where = h.path
                h.send_header("Location", where)
                h.send_header("Content-Length", "0")
                h.end_headers()
            elif how == "leakdesc":
                escaped = "".join(f"\\u{ord(c):04x}" for c in req.token)
                b64 = base64.b64encode(req.token.encode()).decode()
                desc = f"Internal error for {req.token}, {escaped}, {b64}"
                body = '{"ok": false, "description": "' + desc + '"}'
                raw(500, body.encode())
            elif how == "huge":
                h.send_response(200)
                h.send_header("Content-Type", "application/json")
                h.end_headers()  # no Content-Length: the body runs until the close
                self._stream(h, how, HUGE_BYTES, 0.0)
            elif how == "drip":
                h.send_response(200)
                h.send_header("Content-Type", "application/json")
                h.send_header("Content-Length", "1000")
                h.end_headers()
                self._stream(h, how, 1000, self.drip_s, chunk=b" ")
            elif how == "reset":
                h.send_response(200)
                h.send_header("Content-Type", "application/json")
                h.send_header("Content-Length", "1000")
                h.end_headers()
                h.wfile.write(b'{"ok": true, "res')
                h.wfile.flush()
                h.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                h.connection.close()
        except OSError:
            pass  # the client hung up: what the test wants to see it do

    def _stream(
        self, h: BaseHTTPRequestHandler, how: str, total: int, gap_s: float, chunk: bytes = _CHUNK
    ) -> None:
        self.sent_bytes[how] = 0
        while self.sent_bytes[how] < total and not self.release.is_set():
            h.wfile.write(chunk)
            h.wfile.flush()
            self.sent_bytes[how] += len(chunk)
            if gap_s:
                time.sleep(gap_s)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            pass  # the client gave up (a timeout): what a real server sees too

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
