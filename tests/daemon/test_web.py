"""The read-only web page: its address rule, its token, what it answers and how it escapes.

The server tests run the real :class:`WebServer` on a real loopback or Unix socket and
speak raw HTTP to it; the rendering tests feed the real renderer pages whose every text
came from an attacker.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import socket
import stat
import time
from collections.abc import Awaitable, Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, TypeVar

import pytest

from statewarden.config import parse_config
from statewarden.daemon.verify import Verified
from statewarden.daemon.web import (
    COOKIE,
    CSP,
    MAX_HEAD_BYTES,
    Request,
    WebServer,
    answer,
    token_matches,
)
from statewarden.daemon.web_data import COUNTS_KEEP, History, PageData, PlanView, thinned
from statewarden.daemon.web_page import CSS, STYLE_HASH, render
from statewarden.endpoints import web_address
from statewarden.errors import ConfigError
from tests.support.cli import run_ctl

T = TypeVar("T")
RIGHT = "right-token"  # the token of the answer tests
PAGE = "<!DOCTYPE html><html><body><p>the page</p></body></html>"


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    error = warning = info


async def the_page() -> str:
    return PAGE


# -- where it may listen -------------------------------------------------------------------

ACCEPTED = {
    "127.0.0.1:8080": ("127.0.0.1", 8080),
    "127.0.0.1:0": ("127.0.0.1", 0),
    "[::1]:65535": ("::1", 65535),
    "unix:/run/user/1000/statewarden/web.sock": Path("/run/user/1000/statewarden/web.sock"),
}
REFUSED = [
    "0.0.0.0:8080",
    "192.168.1.5:8080",
    "localhost:8080",
    "[::]:8080",
    "::1:8080",
    "127.0.0.2:8080",
    "127.0.0.1:65536",
    "127.0.0.1:",
    "127.0.0.1",
    ":8080",
    "127.0.0.1:80x",
    " 127.0.0.1:8080",
    "http://127.0.0.1:8080",
    "unix:relative/web.sock",
    "unix:",
    "unix:/" + "x" * 200,
]


@pytest.mark.parametrize("listen", sorted(ACCEPTED))
def test_loopback_and_unix_addresses_are_taken(listen: str) -> None:
    """A loopback address (port 0 too) or an absolute Unix socket path is valid, and is
    read back as the address the server binds."""
    config = parse_config(json.dumps({"web": {"listen": listen}}))
    assert config.web.listen == listen
    assert web_address(listen) == ACCEPTED[listen]


@pytest.mark.parametrize("listen", REFUSED)
def test_any_other_address_is_a_one_line_error_naming_the_key(listen: str) -> None:
    """Every address that is not this machine's loopback or a Unix socket path is refused
    in one line that names web.listen and the value given."""
    with pytest.raises(ConfigError) as caught:
        parse_config(json.dumps({"web": {"listen": listen}}), source="c.yaml")
    text = str(caught.value)
    assert "web.listen" in text
    assert repr(listen) in text
    assert "\n" not in text


def test_config_check_refuses_a_public_address_with_exit_2(tmp_path: Path) -> None:
    """statewardenctl config check on a file that puts the page on every interface: exit 2,
    one line naming the file, the key and the line, no traceback."""
    path = tmp_path / "config.yaml"
    path.write_text("web:\n  listen: 0.0.0.0:8080\n")
    r = run_ctl("config", "check", "--config", str(path))
    assert r.exit_code == 2
    assert "web.listen" in r.stderr
    assert f"{path}:2" in r.stderr
    assert "Traceback" not in r.stderr


# -- the token -----------------------------------------------------------------------------


def request(
    path: str = "/",
    method: str = "GET",
    query: dict[str, list[str]] | None = None,
    cookie: str | None = None,
) -> Request:
    headers = {"cookie": f"{COOKIE}={cookie}"} if cookie is not None else {}
    return Request(method, path, query or {}, headers)


def answered(req: Request) -> Any:
    return asyncio.run(answer(req, RIGHT, the_page))


@pytest.mark.parametrize(
    "given",
    [None, "", "right-toke", "right-tokenX", "RIGHT-TOKEN", "right-token\x00", "ŕight-token"],
)
def test_without_the_right_token_the_answer_is_403_and_nothing_else(given: str | None) -> None:
    """No token, a wrong one, one a character short or long, or one with bytes that are
    not ASCII: 403, no body, no cookie, whatever the method and path."""
    for path, method in (("/", "GET"), ("/", "POST"), ("/x", "GET"), ("/", "HEAD")):
        for req in (
            request(path, method, cookie=given),
            request(path, method, query={"token": [given]} if given is not None else None),
        ):
            r = answered(req)
            assert r.status == 403
            assert r.body == b""
            assert not any(name == "Set-Cookie" for name, _ in r.headers)


def test_the_token_in_the_query_sets_a_strict_cookie_and_leaves_the_url() -> None:
    """?token= once: a redirect to the same path without it, and an HttpOnly SameSite=Strict
    cookie holding it; two tokens in one query are refused."""
    r = answered(request(query={"token": ["right-token"]}))
    assert r.status == 303
    headers = dict(r.headers)
    assert headers["Location"] == "/"
    cookie = headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE}=right-token;")
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert answered(request(query={"token": ["right-token", "right-token"]})).status == 403


def test_with_the_cookie_get_and_head_are_the_only_methods() -> None:
    """The cookie opens the page to GET and HEAD; every other method is 405 naming them."""
    ok = answered(request(cookie="right-token"))
    assert ok.status == 200
    assert ok.body.decode() == PAGE
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"):
        r = answered(request(method=method, cookie="right-token"))
        assert r.status == 405
        assert dict(r.headers)["Allow"] == "GET, HEAD"
        assert r.body == b""
    assert answered(request("/favicon.ico", cookie="right-token")).status == 404


def test_token_comparison_takes_any_text() -> None:
    """Text of any length and any characters is compared without an error."""
    assert token_matches("abc", "abc")
    for given in ("", "ab", "abcd", "ábc", "\udcff", "a" * 10_000):
        assert not token_matches(given, "abc")
    assert not token_matches(None, "abc")


# -- the real server -----------------------------------------------------------------------


def serving(
    tmp_path: Path,
    listen: str,
    body: Callable[[WebServer], Awaitable[T]],
    **kwargs: Any,
) -> T:
    """Start a real WebServer on ``listen``, run ``body`` against it, close it."""

    async def run() -> T:
        server = WebServer(listen, the_page, tmp_path / "state" / "web-token.json", Log(), **kwargs)
        await server.start()
        try:
            return await body(server)
        finally:
            await server.close()

    return asyncio.run(run())


async def exchange(server: WebServer, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` and read the whole answer: (status, headers, body)."""
    if isinstance(server.address, Path):
        reader, writer = await asyncio.open_unix_connection(str(server.address))
    else:
        port = int(server.url.rsplit(":", 1)[1].strip("/"))
        reader, writer = await asyncio.open_connection(server.address[0], port)
    writer.write(raw)
    await writer.drain()
    writer.write_eof()  # all of the request is sent (a head cut short ends here)
    data = await reader.read()
    writer.close()
    head, _sep, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return int(status_line.split(" ")[1]), headers, body


def get(path: str, method: str = "GET", cookie: str | None = None) -> bytes:
    extra = f"Cookie: {COOKIE}={cookie}\r\n" if cookie else ""
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode()


def test_a_real_server_on_loopback(tmp_path: Path) -> None:
    """Over TCP: 403 with no body without the token, the redirect with the cookie, the page
    with it (and HEAD the same head with no body), 405 for POST; every answer carries the
    strict Content-Security-Policy; the token file is 0600 and names the page's URL."""

    async def body(server: WebServer) -> None:
        token = server.token
        status, headers, content = await exchange(server, get("/"))
        assert (status, content) == (403, b"")
        assert headers["Content-Security-Policy"] == CSP
        status, headers, _ = await exchange(server, get(f"/?token={token}"))
        assert status == 303
        assert headers["Set-Cookie"].startswith(f"{COOKIE}={token};")
        status, headers, content = await exchange(server, get("/", cookie=token))
        assert (status, content.decode()) == (200, PAGE)
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        assert headers["Content-Security-Policy"] == CSP
        assert headers["X-Content-Type-Options"] == "nosniff"
        status, head_headers, content = await exchange(server, get("/", "HEAD", token))
        assert (status, content) == (200, b"")
        assert head_headers["Content-Length"] == headers["Content-Length"]
        status, headers, _ = await exchange(server, get("/", "POST", token))
        assert (status, headers["Allow"]) == (405, "GET, HEAD")
        assert headers["Content-Security-Policy"] == CSP
        saved = tmp_path / "state" / "web-token.json"
        assert stat.S_IMODE(os.lstat(saved).st_mode) == 0o600
        assert json.loads(saved.read_text())["page"] == f"{server.url}?token={token}"

    serving(tmp_path, "127.0.0.1:0", body)
    assert not (tmp_path / "state" / "web-token.json").exists()  # the token dies with it


def test_each_start_has_a_new_token(tmp_path: Path) -> None:
    """Two starts, two tokens, each long and URL-safe; the first no longer opens the page."""

    async def token_of(server: WebServer) -> str:
        return server.token

    first = serving(tmp_path, "127.0.0.1:0", token_of)
    second = serving(tmp_path, "127.0.0.1:0", token_of)
    assert first != second
    assert re.fullmatch(r"[A-Za-z0-9_-]{40,}", first)

    async def old_token(server: WebServer) -> int:
        return (await exchange(server, get("/", cookie=first)))[0]

    assert serving(tmp_path, "127.0.0.1:0", old_token) == 403


def test_bad_heads_get_400_and_huge_ones_431(tmp_path: Path) -> None:
    """A request line that is not HTTP, an absolute target, a broken header, or a head
    cut short: 400; a head past MAX_HEAD_BYTES: 431. The server goes on serving."""

    async def body(server: WebServer) -> list[int]:
        out = []
        for raw in (
            b"hello\r\n\r\n",
            b"GET http://example.com/ HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\n",
            b"GET / HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n",
        ):
            out.append((await exchange(server, raw))[0])
        out.append((await exchange(server, get("/", cookie=server.token)))[0])
        return out

    assert serving(tmp_path, "127.0.0.1:0", body) == [400, 400, 400, 400, 431, 200]


def test_slow_clients_cannot_lock_the_page_away(tmp_path: Path) -> None:
    """At the connection cap, the connection that has waited longest for its request head
    is closed to make room: a full request after a cap's worth of silent ones is served."""

    async def body(server: WebServer) -> tuple[int, bytes]:
        port = int(server.url.rsplit(":", 1)[1].strip("/"))
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
        await asyncio.sleep(0.2)  # each is accepted and waiting for its head
        status, _, _content = await exchange(server, get("/", cookie=server.token))
        first_reader = silent[0][0]
        closed = await asyncio.wait_for(first_reader.read(), 10)
        for _r, w in silent:
            w.close()
        return status, closed

    status, closed = serving(tmp_path, "127.0.0.1:0", body, max_connections=4)
    assert status == 200
    assert closed == b""  # the oldest silent connection was closed, given nothing


def test_a_unix_socket_is_0600_in_a_private_folder(tmp_path: Path) -> None:
    """unix:/path: the socket is 0600, its missing folder made 0700, the page served on
    it, and the socket removed at close."""
    path = tmp_path / "run" / "web.sock"

    async def body(server: WebServer) -> int:
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700
        assert server.about()["socket"] == str(path)
        return (await exchange(server, get("/", cookie=server.token)))[0]

    assert serving(tmp_path, f"unix:{path}", body) == 200
    assert not path.exists()


def test_a_socket_folder_others_may_write_is_refused(tmp_path: Path) -> None:
    """A socket folder writable by others is refused in one line, and nothing listens."""
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)

    async def run() -> str:
        server = WebServer(f"unix:{folder}/web.sock", the_page, tmp_path / "t.json", Log())
        try:
            await server.start()
        except Exception as exc:  # noqa: BLE001 - the error is what is checked
            return str(exc)
        finally:
            await server.close()
        return "started"

    error = asyncio.run(run())
    assert "writable by others" in error
    assert not (folder / "web.sock").exists()


# -- what the page is made of -------------------------------------------------------------


def test_the_policy_names_the_one_style_sheet_by_its_hash() -> None:
    """default-src 'none', the style by its sha256 (never 'unsafe-inline'), images data:
    only; the hash is that of the style element the page carries."""
    assert CSP.startswith("default-src 'none';")
    assert "unsafe-inline" not in CSP
    assert "img-src data:;" in CSP
    digest = base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode()
    assert f"sha256-{digest}" == STYLE_HASH
    assert f"style-src '{STYLE_HASH}'" in CSP
    html = render(hostile_page("plain"))
    (style,) = re.findall(r"<style>(.*?)</style>", html, re.S)
    assert style == CSS


HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "'><svg onload=alert(1)>",
    "</pre></details><script>alert(1)</script>",
    "</style><script>alert(1)</script>",
    "</title><script>alert(1)</script>",
    "]]><!--<script>-->",
    "&lt;script&gt;",
    "javascript:alert(1)",
    "<a href=http://evil.example/>x</a>",
]


def hostile_page(s: str) -> PageData:
    """A page whose every text from outside is ``s``: the session id in an incident,
    command lines, paths, log lines, the plan, a run's message."""
    now = time.time()
    inc = {
        "id": 7,
        "kind": "corruption",
        "db": s,
        "severity": "critical",
        "summary": f"session {s} stored twice",
        "first_seen": now - 60,
        "last_seen": now,
        "count": 2,
        "state": "open",
        "resolution": s,
        "evidence": [s, f"sessions: 1 phantom duplicate, rowid {s}"],
    }
    holder = {
        "pid": 42,
        "kind": s,
        "unit": s,
        "orphan": True,
        "flags": [s],
        "fds": {s: 1},
        "maps": {s: 1},
        "locks": [{"kind": s, "mode": s, "file": s, "start": 0, "end": s}],
        "lock_state": s,
        "cmdline": ["hermes", "chat", "--session", s],
        "comm": s,
        "parents": [{"pid": 1, "comm": s}],
    }
    return PageData(
        at=now,
        host=s,
        daemon={"status": s, "pid": 1, "version": s},
        databases=[
            {
                "path": s,
                "profile": s,
                "open_incidents": 1,
                "verified": {"at": now, "result": s, "reason": s, "findings": [s]},
            }
        ],
        series={s: {"sessions": [(now - 10, 1.0), (now, 2.0)], "wal": [(now, 5.0)]}},
        incidents=[{"incident": inc, "timeline": [{"line": s}, {"line": f"12:00 {s}"}]}],
        holders=[{"db": s, "complete": False, "problems": [s], "holders": [holder]}],
        respawned={s},
        maintenance={"auto_repair": s, "windows": [s], "in_progress": {s: s}},
        runs=[{"db": s, "action": s, "outcome": s, "run_id": s, "message": s, "seen_at": now}],
        plans={s: PlanView(at=now, lines=[s], plan={"refusals": [s]}, error=s, note=s)},
    )


ALLOWED_TAGS = {
    *("html", "head", "meta", "link", "title", "style", "body", "h1", "h2", "p", "div"),
    *("span", "strong", "pre", "code", "details", "summary", "ul", "li", "table", "tr"),
    *("th", "td", "svg", "text", "line", "polyline", "circle"),
}


class Structure(HTMLParser):
    """The tags, attributes and text of a document, as a browser's tokenizer sees them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attributes: list[tuple[str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes += [(name, value or "") for name, value in attrs]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.mark.parametrize("s", HOSTILE)
def test_text_from_outside_is_only_ever_text(s: str) -> None:
    """Whatever a session id, a command line, a path or a log line holds, the document has
    only the page's own tags, no event-handler attribute and no link anywhere, and shows
    the text itself, exactly."""
    html = render(hostile_page(s))
    doc = Structure()
    doc.feed(html)
    assert doc.tags <= ALLOWED_TAGS, doc.tags - ALLOWED_TAGS
    names = {name for name, _value in doc.attributes}
    assert not {n for n in names if n.startswith("on")}
    links = [v for n, v in doc.attributes if n in ("href", "src", "action", "xlink:href")]
    assert links == ["data:,"]  # the empty icon, nothing else
    assert any(s in chunk for chunk in doc.text)  # shown as written
    assert s not in html or s == html_escaped(s)


def html_escaped(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def test_the_page_has_no_script_form_or_outside_address() -> None:
    """No script, no form, no address but the data: icon: nothing to run, post or fetch."""
    html = render(hostile_page("ok"))
    assert "<script" not in html.lower()
    assert "<form" not in html.lower()
    assert not re.search(r"(src|href|action)\s*=\s*[\"'](?!data:)", html)
    assert "http://" not in html
    assert "https://" not in html


# -- what is kept for the page -----------------------------------------------------------


def verified(db: str, at: float, sessions: int | None, messages: int | None) -> Verified:
    return Verified(db, at, "none", "scheduled", sessions=sessions, messages=messages)


def test_the_history_adds_each_verification_once_and_is_bounded(tmp_path: Path) -> None:
    """A verification is added once however often it is looked at, one without counts not
    at all; the file keeps the newest COUNTS_KEEP and is read back after a restart."""
    h = History(tmp_path, Log())
    h.note({"/db": verified("/db", 100.0, 12, 60)}, {})
    h.note({"/db": verified("/db", 100.0, 12, 60)}, {})
    h.note({"/db": verified("/db", 200.0, None, None)}, {})
    assert h.series("/db") == {"sessions": [(100.0, 12.0)], "messages": [(100.0, 60.0)]}
    for i in range(COUNTS_KEEP + 5):
        h.note({"/db": verified("/db", 1000.0 + i, i, 2 * i)}, {})
    again = History(tmp_path, Log())
    sessions = again.series("/db")["sessions"]
    assert len(sessions) == COUNTS_KEEP
    assert sessions[-1] == (1000.0 + COUNTS_KEEP + 4, float(COUNTS_KEEP + 4))
    assert stat.S_IMODE(os.lstat(tmp_path / "web-history.json").st_mode) == 0o600


def test_the_history_takes_each_run_report_once(tmp_path: Path) -> None:
    """A report (a new dict per run) is one row with its downtime, however often it is
    looked at, and not a second one after a restart."""
    report = {"run_id": "r1", "action": "repair", "outcome": "repaired", "downtime_s": 2.5}
    h = History(tmp_path, Log())
    h.note({}, {"/db": report})
    h.note({}, {"/db": report})
    assert [(r["run_id"], r["downtime_s"], r["db"]) for r in h.runs] == [("r1", 2.5, "/db")]
    again = History(tmp_path, Log())
    again.note({}, {"/db": dict(report)})
    assert len(again.runs) == 1
    again.note({}, {"/db": {**report, "run_id": "r2"}})
    assert [r["run_id"] for r in again.runs] == ["r1", "r2"]


def test_a_damaged_history_file_is_started_again(tmp_path: Path) -> None:
    """An unreadable history is no error: the page starts a new one."""
    for text in ("{", "[]", '{"counts": [], "runs": {}}', '{"counts": {"x": [["a"]]}}'):
        (tmp_path / "web-history.json").write_text(text)
        h = History(tmp_path, Log())
        assert (h.counts, h.runs) == ({}, [])


def test_thinning_keeps_the_peaks() -> None:
    """A long series is cut to at most the given points, keeping each stretch's largest
    value: a one-sample spike survives."""
    points = [(float(t), 10.0) for t in range(10_000)]
    points[5_555] = (5_555.0, 9_999.0)
    thin = thinned(points, 100)
    assert len(thin) <= 100
    assert (5_555.0, 9_999.0) in thin
    assert thin == sorted(thin)
    assert thinned(points[:50], 100) == points[:50]


def test_the_plot_is_drawn_from_the_points() -> None:
    """Each point of a short series is a circle with its value as a tooltip."""
    page = hostile_page("db")
    page.series = {"db": {"sessions": [(100.0, 3.0), (200.0, 7.0), (300.0, 5.0)]}}
    html = render(page)
    (svg,) = [s for s in re.findall(r"<svg.*?</svg>", html, re.S) if "sessions" in s]
    assert svg.count("<circle") == 3
    assert "sessions: 5 last, at most 7" in svg
    assert "<title>7 at " in svg


def test_an_unused_port_is_not_taken_by_two(tmp_path: Path) -> None:
    """A port already in use is one line naming web.listen, not a traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        async def run() -> str:
            server = WebServer(f"127.0.0.1:{port}", the_page, tmp_path / "t.json", Log())
            try:
                await server.start()
            except Exception as exc:  # noqa: BLE001 - the error is what is checked
                return str(exc)
            await server.close()
            return "started"

        error = asyncio.run(run())
    assert error.startswith(f"web.listen: cannot listen on 127.0.0.1:{port}")
