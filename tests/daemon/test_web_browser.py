"""The web page in a real headless browser (Debian's chromium), served by a real daemon.

No third-party request is checked with chromium's own network log (``--log-net-log``):
every request its network stack started for the page is listed, and any whose origin
is not the page's fails the test. The check is shown to fail where it must: the same
browser and the same check on a page that loads an image from another address report
that request (and report none once the page carries the daemon's policy).
"""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from statewarden.daemon.web import CSP
from tests.support.browser import CHROMIUM, browse
from tests.support.cli import run_ctl
from tests.support.daemon import DaemonProc, daemon_env, phantom_home

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (packaging/setup-dev.sh installs it as root)",
)
ELSEWHERE = "http://198.51.100.7/pixel.png"  # TEST-NET-2: no such host anywhere


def web_env(tmp_path: Path, home: Path) -> dict[str, str]:
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"watch": {"verify_interval": "1h"}, "web": {"listen": "127.0.0.1:0"}})
    )
    env = daemon_env(tmp_path, home)
    env["STATEWARDEN_CONFIG"] = str(config)
    return env


def test_a_real_browser_shows_a_phantom_row_incident(tmp_path: Path) -> None:
    """A phantom sessions row found by the daemon's first verification is on the page as
    chromium renders it; the browser asks nothing of any other origin; a browser without
    the token gets 403 and nothing of the page; status shows the full URL, and no log
    line carries the token."""
    home, rowid = phantom_home(tmp_path)
    d = DaemonProc(web_env(tmp_path, home))
    try:
        d.wait_for_line("verification found damage")
        (inc,) = d.incidents_of("corruption")
        web = d.ctl("status")["daemon"]["web"]
        origin = web["url"].rstrip("/")
        visit = browse(web["page"], tmp_path / "with-token")
        assert f'id="incident-{inc["id"]}"' in visit.dom
        assert f"1 phantom duplicate, rowid {rowid}" in visit.dom
        assert "base damage" in visit.dom
        assert "<script" not in visit.dom
        # The log saw the page's own requests (the check is not looking at nothing) ...
        assert f"{origin}/" in visit.page_requests(origin)
        # ... and none to any other origin.
        assert visit.third_party(origin) == []
        assert visit.statuses(web["page"]) == [303]  # the token leaves the address
        assert visit.statuses(web["url"]) == [200]
        refused = browse(web["url"], tmp_path / "without-token")
        assert refused.statuses(web["url"]) == [403]
        assert "statewarden" not in refused.dom
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(web["url"], timeout=30)  # noqa: S310 - http, loopback
        assert caught.value.code == 403
        assert caught.value.read() == b""
        token = web["page"].split("token=", 1)[1]
        shown = run_ctl("status", env=d.env)
        assert f"web page: {web['page']}" in shown.stdout.splitlines()
    finally:
        d.stop()
    served = [line for line in d.output() if "web page served" in line]
    assert served
    assert origin in served[0]
    assert not [line for line in d.output() if token in line]


@contextmanager
def serving(page: bytes, headers: dict[str, str]) -> Iterator[str]:
    """A plain HTTP server on a free loopback port answering ``page``; its origin."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            for name, value in {"Content-Type": "text/html", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_the_request_check_sees_a_request_to_another_origin(tmp_path: Path) -> None:
    """The check fails where it must: a page that loads an image from another address is
    reported with that request; with the daemon's policy header, the same page asks
    nothing of it."""
    page = f'<html><body><p>hi</p><img src="{ELSEWHERE}"></body></html>'.encode()
    with serving(page, {}) as origin:
        open_page = browse(f"{origin}/", tmp_path / "no-policy")
    assert open_page.third_party(origin) == [ELSEWHERE]
    with serving(page, {"Content-Security-Policy": CSP}) as origin:
        guarded = browse(f"{origin}/", tmp_path / "policy")
    assert f"{origin}/" in guarded.page_requests(origin)
    assert guarded.third_party(origin) == []
