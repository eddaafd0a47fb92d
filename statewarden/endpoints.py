"""The daemon's HTTP endpoints as the config describes them: where the Prometheus metrics
(``metrics.listen``) and the read-only web page (``web.listen``) may listen, and the
page's defaults. ``config.py`` checks the addresses with :func:`listen_problems`;
``daemon.web`` binds what :func:`web_address` reads.

The page is served on this machine only: a Unix socket (``unix:/absolute/path``) or a
loopback address, ``127.0.0.1:PORT`` or ``[::1]:PORT`` (port 0: a free one chosen at
start). Any other address, a name such as ``localhost`` included (it resolves to
whatever the resolver says), is refused.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

DEFAULT_WEB_PLAN_INTERVAL_S = 600.0  # the web page's maintenance plan is at most this old
# The longest path a Unix socket address holds (sun_path is 108 bytes with its NUL).
UNIX_PATH_MAX_BYTES = 107
_LOOPBACK = re.compile(r"(127\.0\.0\.1|\[::1\]):([0-9]{1,5})")
_WEB_FORMS = "unix:/absolute/path, 127.0.0.1:PORT or [::1]:PORT"

Key = tuple[str, str]


def listen_problems(metrics: str | None, web: str | None) -> list[tuple[Key, str]]:
    """Each address that cannot be used, as (its key, what is wrong in one line)."""
    out: list[tuple[Key, str]] = []
    if metrics is not None and (problem := metrics_problem(metrics)) is not None:
        out.append((("metrics", "listen"), problem))
    if web is not None and (problem := web_problem(web)) is not None:
        out.append((("web", "listen"), problem))
    return out


def metrics_problem(listen: str) -> str | None:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"expected host:port such as 127.0.0.1:9108, got {listen!r}"
    return None


def web_problem(listen: str) -> str | None:
    """Only this machine may reach the page: a Unix socket, or a loopback address."""
    if listen.startswith("unix:"):
        path = listen.removeprefix("unix:")
        if not path.startswith("/") or "\0" in path:
            return f"expected an absolute path after unix:, got {listen!r}"
        if len(os.fsencode(path)) > UNIX_PATH_MAX_BYTES:
            return f"a socket path is at most {UNIX_PATH_MAX_BYTES} bytes, got {listen!r}"
        return None
    match = _LOOPBACK.fullmatch(listen)
    if match is None or int(match.group(2)) > 65535:
        return f"expected {_WEB_FORMS} (the page is served on this machine only), got {listen!r}"
    return None


def web_address(listen: str) -> tuple[str, int] | Path:
    """``web.listen`` as checked: a Unix socket path, or (host, port) of a loopback
    address (``[::1]`` as ``::1``)."""
    if listen.startswith("unix:"):
        return Path(listen.removeprefix("unix:"))
    host, _sep, port = listen.rpartition(":")
    return host.strip("[]"), int(port)
