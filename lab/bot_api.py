"""A local HTTP server on 127.0.0.1 that speaks the Telegram Bot API's shape.

``POST /bot<token>/sendMessage`` with a JSON body is recorded (token, chat, text, ...)
and answered by the scripted behaviour: ``ok`` (200 with a ``message_id``), ``429``
(with ``parameters.retry_after``), ``500``, ``400``, ``401``, ``hang`` (no answer until
released). A script is a list consumed one request at a time; when it is empty, the
``default`` answers. :meth:`BotApi.stop` closes the port, so requests are refused.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    token: str
    method: str
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)

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

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
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
        if how == "hang":
            self.release.wait(60)
            how = "500"
        if how == "ok" and req.method == "sendMessage" and req.body.get("text"):
            with self._lock:
                message_id = self._next_id
                self._next_id += 1
                self.accepted.append(req)
            self._send(handler, 200, {"ok": True, "result": {"message_id": message_id}})
        elif how == "429":
            self._send(handler, 429, {"ok": False, "error_code": 429,
                                      "description": "Too Many Requests: retry after "
                                      f"{self.retry_after}",
                                      "parameters": {"retry_after": self.retry_after}})  # fmt: skip
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
            self._send(handler, 400, {"ok": False, "error_code": 400,
                                      "description": "Bad Request: chat not found"})  # fmt: skip
        elif how == "400":
            self._send(handler, 400, {"ok": False, "error_code": 400,
                                      "description": "Bad Request: can't parse entities"})  # fmt: skip
        else:
            self._send(handler, 500, {"ok": False, "error_code": 500,
                                      "description": "Internal Server Error"})  # fmt: skip

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
