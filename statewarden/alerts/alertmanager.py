"""The Alertmanager sink: each incident posted to ``POST <url>/api/v2/alerts``.

One alert per incident in a notification, labelled ``alertname`` (the incident kind),
``severity``, ``database``, ``profile``, ``host`` and ``incident`` (its number: two open
incidents of one kind on one database stay two alerts), annotated with ``summary``,
``next_step`` and ``evidence``; ``startsAt`` is when the incident was first seen,
``endsAt`` is set once it is resolved. Alertmanager resolves a firing alert that is not
posted again within its ``resolve_timeout``, so :class:`~statewarden.alerts.service.Alerts`
queues, every ``alerts.alertmanager.resend_interval``, one refresh of every incident
still firing there: through the outbox like every notification, and only when none is
already waiting. A notification that is not an incident's (a maintenance outcome, a
test) is an alert that ends :data:`EVENT_S` after it was made.

The URL is written in the config, or, when it carries a secret (a proxy's user and
password), read from ``url_file`` or a systemd credential (:mod:`statewarden.alerts.secrets`);
such a URL is scrubbed from every text about the sink, and only its scheme, host and port
are named. A secret that cannot be read is a configuration problem: entries wait.

Answers: 2xx delivered; 400 (Alertmanager finds an alert invalid) refused, set aside;
401, 403, 404 and redirects a configuration problem (the URL); 5xx, 429, timeouts and
refused connections retried. Requests are bounded as the Telegram sink's are
(:mod:`statewarden.alerts.http`).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from typing import Any

import httpx

from statewarden.alerts import http
from statewarden.alerts.message import Item, Notification
from statewarden.alerts.outbox import Entry
from statewarden.alerts.secrets import read_secret, url_secrets
from statewarden.alerts.sink import Progress, Refused, Rejected, Retry
from statewarden.config import AlertmanagerConfig
from statewarden.errors import SecretMissing

EVENT_S = 300.0
ANNOTATION_CHARS = 1000
API_PATH = "/api/v2/alerts"


def rfc3339(ts: float) -> str:
    ms = round((ts % 1) * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(ts))) + f".{ms:03d}Z"


def alert_of(n: Notification, item: Item) -> dict[str, Any]:
    """One Alertmanager alert for one item of a notification."""
    event = item.incident == 0 or n.state == "test"
    labels = {
        "alertname": item.kind,
        "severity": item.severity,
        "database": item.db,
        "profile": item.profile,
        "host": n.host or socket.gethostname(),
        "incident": str(item.incident) if not event else n.key,
    }
    annotations = {
        "summary": item.summary[:ANNOTATION_CHARS],
        "next_step": item.next_step[:ANNOTATION_CHARS],
    }
    if item.evidence:
        annotations["evidence"] = "\n".join(item.evidence)[:ANNOTATION_CHARS]
    if item.resolution:
        annotations["resolution"] = item.resolution[:ANNOTATION_CHARS]
    alert: dict[str, Any] = {"labels": labels, "annotations": annotations}
    if event:
        alert["startsAt"] = rfc3339(n.created_at)
        alert["endsAt"] = rfc3339(n.created_at + EVENT_S)
    else:
        alert["startsAt"] = rfc3339(item.first_seen)
        if item.state == "resolved":
            alert["endsAt"] = rfc3339(max(n.created_at, item.first_seen))
    return alert


def test_item(n: Notification) -> Item:
    return Item(
        0,
        "statewarden_test",
        "info",
        "-",
        "-",
        "statewarden alert test",
        "test",
        n.created_at,
        n.created_at,
        1,
    )


class AlertmanagerSink(http.HttpSender):
    name = "alertmanager"

    def __init__(
        self,
        cfg: AlertmanagerConfig,
        client: httpx.AsyncClient | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.cfg = cfg
        self.problem = ""
        self.source = "alerts.alertmanager.url"
        base = cfg.url or ""
        secret = False
        if cfg.url is None:
            try:
                base, self.source = read_secret(
                    cfg.url_file, cfg.credential, "Alertmanager URL", env
                )
                secret = True
            except SecretMissing as exc:
                self.problem = str(exc)
            if secret and ("\n" in base or not base.startswith(("https://", "http://"))):
                self.problem = f"Alertmanager URL from {self.source}: not one http(s) URL"
                base = ""
        base = base.rstrip("/")
        self.url = base + API_PATH if base else ""
        super().__init__(
            secrets=url_secrets(base) if secret and base else (),
            server=http.server_of(base, path=not secret),
            timeout=cfg.timeout,
            deadline=cfg.deadline,
            client=client,
        )

    async def deliver(self, entry: Entry, progress: Progress) -> str:
        if self.problem:
            raise Rejected(self.problem)
        n = entry.notification
        items = n.items or [test_item(n)]
        alerts = [alert_of(n, item) for item in items]
        status, reason, _headers, body = await self.request("POST", self.url, alerts)
        text = self.scrub(http.one_line(body.decode("utf-8", "replace")) or reason)
        if 200 <= status < 300:
            return f"{len(alerts)} alert{'s' if len(alerts) != 1 else ''} posted ({status})"
        if status >= 500 or status == 429:
            raise Retry(f"{status} {text}")
        if 300 <= status < 400 or status in (401, 403, 404, 405):
            raise Rejected(
                f"{status} {text}: check the Alertmanager URL of {self.source} ({self.server})"
            )
        if status == 400:
            raise Refused(f"{status} {text}")
        raise Retry(f"{status} {text}")
