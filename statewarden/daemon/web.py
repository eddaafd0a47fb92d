"""The read-only web page, served by the daemon on ``web.listen`` (off by default).

On this machine only: a Unix socket (``unix:/path``, mode 0600, its folder the user's
and writable by no one else, every peer's uid checked as on the control socket) or a
loopback address (``127.0.0.1:PORT``, ``[::1]:PORT``); the config refuses any other
(``config.web_address``). A new token each start (``secrets.token_urlsafe``), in
``<state dir>/web-token.json`` (0600, written atomically, never through a symlink);
``statewardenctl status`` shows the page's full URL, the start log line only the
address. A request must carry the token: ``?token=`` once (answered with a redirect to
the page without it, and an ``HttpOnly; SameSite=Strict`` cookie), then the cookie;
compared with ``hmac.compare_digest``. Without it: 403 and nothing else.

Read-only by construction: ``GET`` and ``HEAD`` of ``/`` only (any other method 405,
any other path 404), no form, no script. Every answer carries a strict
Content-Security-Policy (``default-src 'none'``, the one inline style sheet by its
hash, images only ``data:``), so the browser fetches nothing from anywhere, this page
included, beyond the document itself.

A minimal HTTP/1.1 server on the daemon's loop (``asyncio``): one request per
connection (``Connection: close``), a request head of at most :data:`MAX_HEAD_BYTES`
within :data:`HEAD_TIMEOUT_S`, an answer taken within :data:`WRITE_TIMEOUT_S`, at most
:data:`MAX_CONNECTIONS` at once (at the cap, the connection that has waited longest
for its head is closed to make room, so slow clients cannot lock the page away), none
while descriptors are short. What it shows is gathered by ``daemon.web_data`` and
drawn by ``daemon.web_page``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import secrets
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from statewarden.atomic import check_owned_dir, private_dir, write_atomic
from statewarden.config import Config
from statewarden.daemon.control import FD_RESERVE, free_descriptors, peer_uid, socket_answers
from statewarden.daemon.requests import Requests
from statewarden.daemon.web_data import History, PageSources, Plans
from statewarden.daemon.web_page import STYLE_HASH, render
from statewarden.endpoints import web_address
from statewarden.errors import StatewardenError

TOKEN_FILE = "web-token.json"  # noqa: S105 - a file name
COOKIE = "statewarden_web"
MAX_HEAD_BYTES = 8192
MAX_CONNECTIONS = 16
HEAD_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 10.0
SAMPLE_EVERY_S = 60.0  # the history takes new verifications and run reports this often
ALLOWED_METHODS = ("GET", "HEAD")
CSP = (
    f"default-src 'none'; style-src '{STYLE_HASH}'; img-src data:; base-uri 'none';"
    " form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
)
REASONS = {
    200: "OK",
    303: "See Other",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class _BadRequest(ValueError):
    """A request head this server does not take (one line: why)."""


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased; a repeated header's values joined by ", "


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def encode(self, *, head_only: bool = False) -> bytes:
        lines = [f"HTTP/1.1 {self.status} {REASONS[self.status]}"]
        headers = [*SECURITY_HEADERS, *self.headers]
        headers += [("Content-Length", str(len(self.body))), ("Connection", "close")]
        lines += [f"{name}: {value}" for name, value in headers]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


def parse_head(head: bytes) -> Request:
    """The request line and headers of ``head`` (up to the blank line)."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise _BadRequest("not text") from None
    request_line, *header_lines = text.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(f"not an HTTP/1.x request line: {request_line[:80]!r}")
    method, target, _version = parts
    if not method.isalpha() or not target.startswith("/"):
        raise _BadRequest(f"not a method and a path: {request_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in header_lines:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _BadRequest(f"not a header line: {line[:80]!r}")
        key = name.lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    split = urlsplit(target)
    return Request(method, split.path, parse_qs(split.query), headers)


def cookie_value(headers: dict[str, str], name: str) -> str | None:
    for part in headers.get("cookie", "").replace(",", ";").split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value
    return None


def token_matches(given: str | None, token: str) -> bool:
    """The token, compared in constant time (any text given, any length)."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode())


async def answer(req: Request, token: str, page: Callable[[], Awaitable[str]]) -> Response:
    """What one request gets: 403 without the token, the cookie and a redirect for the
    token in the query, 405 for a method that is not GET or HEAD, the page for ``/``."""
    given = req.query.get("token")
    if given is not None:
        if len(given) != 1 or not token_matches(given[0], token):
            return Response(403)
        cookie = f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
        return Response(303, [("Location", req.path), ("Set-Cookie", cookie)])
    if not token_matches(cookie_value(req.headers, COOKIE), token):
        return Response(403)
    if req.method not in ALLOWED_METHODS:
        return Response(405, [("Allow", ", ".join(ALLOWED_METHODS))])
    if req.path != "/":
        return Response(404, [("Content-Type", "text/plain; charset=utf-8")], b"not found\n")
    body = (await page()).encode("utf-8")
    return Response(200, [("Content-Type", "text/html; charset=utf-8")], body)


class WebServer:
    """The page's listener, its token and the connections it serves."""

    def __init__(
        self,
        listen: str,
        page: Callable[[], Awaitable[str]],
        token_file: Path,
        log: Any,
        *,
        max_connections: int = MAX_CONNECTIONS,
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ) -> None:
        self.listen = listen
        self.address = web_address(listen)
        self.page = page
        self.token_file = token_file
        self.log = log
        self.token = secrets.token_urlsafe(32)
        self.max_connections = max_connections
        self.head_timeout_s = head_timeout_s
        self.uid = os.getuid()
        self.url = ""  # the page's address, without the token
        self.connections = 0
        self._waiting: dict[asyncio.StreamWriter, float] = {}  # no full head yet, since
        self._server: asyncio.AbstractServer | None = None

    @property
    def page_url(self) -> str:
        """The URL to open (a Unix socket's through a forwarded port, as ``localhost``)."""
        return f"{self.url}?token={self.token}"

    def about(self) -> dict[str, Any]:
        """What ``status`` shows: where the page is, and its full URL."""
        out = {"listen": self.listen, "url": self.url, "page": self.page_url}
        if isinstance(self.address, Path):
            out["socket"] = str(self.address)
        return out

    async def start(self) -> None:
        if isinstance(self.address, Path):
            await self._start_unix(self.address)
            self.url = "http://localhost/"
        else:
            host, port = self.address
            try:
                self._server = await asyncio.start_server(
                    self._serve, host, port, backlog=16, limit=MAX_HEAD_BYTES
                )
            except OSError as exc:
                raise StatewardenError(
                    f"web.listen: cannot listen on {self.listen}: {exc.strerror or exc}"
                ) from None
            bound = self._server.sockets[0].getsockname()[1]
            shown = f"[{host}]" if ":" in host else host
            self.url = f"http://{shown}:{bound}/"
        data = {"url": self.url, "page": self.page_url, "listen": self.listen, "pid": os.getpid()}
        write_atomic(self.token_file, json.dumps(data) + "\n")

    async def _start_unix(self, path: Path) -> None:
        parent = path.parent
        try:
            if parent.exists():
                check_owned_dir(parent, os.lstat(parent), what="web page socket")
            else:
                private_dir(parent, what="web page socket")
            if path.exists() or path.is_symlink():
                if not stat.S_ISSOCK(os.lstat(path).st_mode):
                    raise StatewardenError(f"web.listen: {path} exists and is not a socket")
                if socket_answers(path):
                    raise StatewardenError(f"web.listen: another process serves {path}")
                path.unlink()  # left by a daemon that stopped
            old = os.umask(0o177)
            try:
                self._server = await asyncio.start_unix_server(
                    self._serve, path=str(path), backlog=16, limit=MAX_HEAD_BYTES
                )
            finally:
                os.umask(old)
        except OSError as exc:
            raise StatewardenError(
                f"web.listen: cannot listen on {path}: {exc.strerror or exc}"
            ) from None

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._waiting):
                writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=2.0)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.token_file.unlink()
        if isinstance(self.address, Path):
            with contextlib.suppress(FileNotFoundError):
                self.address.unlink()

    def _room(self) -> bool:
        """A new connection may be served: under the cap (closing the one that has waited
        longest for its request head, if need be) and descriptors to spare."""
        if self.connections >= self.max_connections:
            if not self._waiting:
                return False
            victim = min(self._waiting, key=self._waiting.__getitem__)
            del self._waiting[victim]
            victim.close()
        return free_descriptors() >= FD_RESERVE

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._room():
            with contextlib.suppress(Exception):
                writer.write(Response(503).encode())
            writer.close()
            return
        self.connections += 1
        try:
            await self._serve_one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            return
        finally:
            self._waiting.pop(writer, None)
            self.connections -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), WRITE_TIMEOUT_S)

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if isinstance(self.address, Path):
            try:
                uid = peer_uid(writer.get_extra_info("socket"))
            except OSError:
                uid = -1
            if uid != self.uid:
                await self._send(writer, Response(403), head_only=False)
                return
        self._waiting[writer] = time.monotonic()
        try:
            head = await self._read_head(reader)
        finally:
            self._waiting.pop(writer, None)
        if isinstance(head, Response):
            await self._send(writer, head, head_only=False)
            return
        try:
            req = parse_head(head)
        except _BadRequest:
            await self._send(writer, Response(400), head_only=False)
            return
        try:
            response = await answer(req, self.token, self.page)
        except Exception as exc:  # noqa: BLE001 - one bad page must not end the daemon
            self.log.error("web page failed", error=f"{type(exc).__name__}: {exc}")
            response = Response(500, [("Content-Type", "text/plain")], b"internal error\n")
        await self._send(writer, response, head_only=req.method == "HEAD")

    async def _read_head(self, reader: asyncio.StreamReader) -> bytes | Response:
        """The request head, or the error to answer: too large, or not finished in time."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.head_timeout_s)
        except asyncio.LimitOverrunError:
            return Response(431)
        except asyncio.IncompleteReadError as exc:
            return exc.partial if exc.partial.endswith(b"\r\n\r\n") else Response(400)
        if len(head) > MAX_HEAD_BYTES:
            return Response(431)
        return head[:-4]

    async def _send(
        self, writer: asyncio.StreamWriter, response: Response, *, head_only: bool
    ) -> None:
        if writer.is_closing():  # closed to make room for another connection
            return
        writer.write(response.encode(head_only=head_only))
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)


class WebPage:
    """The page as the daemon runs it: the server, what it shows, and the history it keeps."""

    def __init__(self, config: Config, requests: Requests, state_dir: Path, log: Any) -> None:
        assert config.web.listen is not None
        d = requests.sources
        self.plans = Plans(
            config=config,
            state_dir=state_dir,
            maintenance=d.maintenance,
            handoff=d.handoff,
            log=log,
        )
        self.sources = PageSources(requests, self.plans, History(state_dir, log))
        self.server = WebServer(config.web.listen, self.html, state_dir / TOKEN_FILE, log)
        self.log = log
        self._sampler: asyncio.Task[None] | None = None

    @classmethod
    async def started(
        cls, config: Config, requests: Requests, state_dir: Path, log: Any
    ) -> WebPage | None:
        """The page serving on ``web.listen``; None when off or it cannot listen."""
        if config.web.listen is None:
            return None
        web = cls(config, requests, state_dir, log)
        try:
            await web.server.start()
        except StatewardenError as exc:
            log.error("web page unavailable", error=str(exc))
            await web.server.close()
            return None
        web._sampler = asyncio.create_task(web._sample())
        log.info(
            "web page served",
            url=web.server.url,
            full_url_shown_by="statewardenctl status",
            written_to=str(web.server.token_file),
        )
        return web

    async def html(self) -> str:
        return render(await self.sources.gather())

    def about(self) -> dict[str, Any]:
        return self.server.about()

    def reconfigure(self, config: Config) -> None:
        self.plans.reconfigure(config)

    async def _sample(self) -> None:
        while True:
            self.sources.sample()
            await asyncio.sleep(SAMPLE_EVERY_S)

    async def close(self) -> None:
        tasks = self.plans.close()
        if self._sampler is not None:
            tasks.append(self._sampler)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.server.close()
