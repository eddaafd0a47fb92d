"""A real headless browser for the web page's tests: Debian's chromium, run once per visit.

:func:`browse` loads a URL in a fresh profile (no cookie from an earlier visit), prints
the DOM as the browser built it, and keeps chromium's own network log
(``--log-net-log``): every request the browser made, as its network stack started it.
:meth:`Visit.page_requests` picks the requests made for the page (their network
isolation key is the page's site, or the page's origin initiated them) from chromium's
own background traffic (update checks, time queries), which a fresh profile makes too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CHROMIUM = shutil.which("chromium")
BROWSE_TIMEOUT_S = 120
FLAGS = (
    "--headless=new",
    "--no-sandbox",  # as root, and in containers without user namespaces
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
)


@dataclass
class Requested:
    url: str
    initiator: str
    isolation_key: str
    status: int | None = None  # the answer's status code; None: no answer was read


@dataclass
class Visit:
    dom: str
    requests: list[Requested]

    def page_requests(self, origin: str) -> list[str]:
        """The URLs the browser requested for a page of ``origin`` (its navigation, its
        redirects and anything the page itself asked for)."""
        site = site_of(origin)
        return [
            r.url
            for r in self.requests
            if r.initiator == origin or r.isolation_key.split(" ")[0] == site
        ]

    def statuses(self, url: str) -> list[int | None]:
        """The status code of each request of ``url``, in order."""
        return [r.status for r in self.requests if r.url == url]

    def third_party(self, origin: str) -> list[str]:
        """The page's requests that went anywhere but ``origin``."""
        return [u for u in self.page_requests(origin) if origin_of(u) != origin]


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def site_of(origin: str) -> str:
    """``http://127.0.0.1:8080`` -> ``http://127.0.0.1`` (what an isolation key names)."""
    parts = urlsplit(origin)
    host = parts.hostname or ""
    return f"{parts.scheme}://{f'[{host}]' if ':' in host else host}"


def requests_in(netlog: dict[str, Any]) -> list[Requested]:
    """Every request chromium's network stack started (``URL_REQUEST_START_JOB``), with
    the status of the answer it read (``HTTP_TRANSACTION_READ_RESPONSE_HEADERS``)."""
    kinds = netlog["constants"]["logEventTypes"]
    start_job = kinds["URL_REQUEST_START_JOB"]
    answered = kinds["HTTP_TRANSACTION_READ_RESPONSE_HEADERS"]
    by_source: dict[int, Requested] = {}
    out = []
    for event in netlog["events"]:
        params = event.get("params") or {}
        source = int(event["source"]["id"])
        if event["type"] == start_job and "url" in params:
            r = Requested(
                str(params["url"]),
                str(params.get("initiator", "")),
                str(params.get("network_isolation_key", "")),
            )
            by_source[source] = r  # a redirect starts a new job on the same request
            out.append(r)
        elif event["type"] == answered and source in by_source and params.get("headers"):
            by_source[source].status = int(str(params["headers"][0]).split(" ")[1])
    return out


def browse(url: str, profile: Path) -> Visit:
    """Load ``url`` in chromium with a new profile folder; the DOM and every request."""
    assert CHROMIUM is not None
    profile.mkdir(parents=True)
    netlog = profile / "net-log.json"
    r = subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={profile / 'profile'}",
            f"--log-net-log={netlog}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=BROWSE_TIMEOUT_S,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return Visit(r.stdout, requests_in(json.loads(netlog.read_text())))
