"""The Apprise sink: each notification to one list of Apprise URLs (ntfy, Matrix, Slack,
Discord, e-mail, a JSON webhook, ...), through the outbox like every sink.

Apprise is the optional extra ``statewarden[apprise]``; without it an enabled sink is a
configuration problem (its entries wait in the outbox). The URLs carry secrets: they
are read (:mod:`statewarden.alerts.secrets`) from ``alerts.apprise.urls_file`` (one per
line, ``#`` comments; a private regular file) or the systemd credential
``alerts.apprise.credential``, never from the YAML, and every text about the sink goes
through its scrubber (each URL and its key-like pieces), Apprise's own log lines too.

Each URL is one part of the entry, sent in the order of the file: the parts already
sent are recorded in the outbox entry, so a URL that fails is retried (with backoff)
without sending again to the ones before it. Apprise sends synchronously; each URL's
send runs in a thread, its connect and read timeouts set to ``timeout``, and is given up
after ``deadline`` (the thread then ends on its own timeouts). A URL Apprise does not
know is a configuration problem, named by its line, never shown.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Mapping
from typing import Any

from statewarden.alerts.message import plain_lines, severity_rank
from statewarden.alerts.outbox import Entry
from statewarden.alerts.secrets import read_secret, url_secrets
from statewarden.alerts.sink import Progress, Rejected, Retry, Scrubbed
from statewarden.config import AppriseConfig
from statewarden.errors import SecretMissing

ERROR_CHARS = 300

# Apprise's own log lines are read from each send's result (and scrubbed), not let through.
logging.getLogger("apprise").setLevel(logging.CRITICAL)


def parse_urls(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def notify_type(n_state: str, severity: str) -> str:
    if n_state == "resolved":
        return "success"
    if severity in ("critical", "error"):
        return "failure"
    return "warning" if severity == "warning" else "info"


class AppriseSink(Scrubbed):
    name = "apprise"

    def __init__(self, cfg: AppriseConfig, env: Mapping[str, str] | None = None) -> None:
        self.cfg = cfg
        self.token_problem = ""
        self.urls: list[str] = []
        self.source = ""
        try:
            text, self.source = read_secret(cfg.urls_file, cfg.credential, "Apprise URLs", env)
            self.urls = parse_urls(text)
            if not self.urls:
                self.token_problem = f"no Apprise URLs: {self.source}: only comments"
        except SecretMissing as exc:
            self.token_problem = str(exc)
        super().__init__(s for u in self.urls for s in url_secrets(u))
        self._servers: list[Any] | None = None

    def _load(self) -> list[Any]:
        """One Apprise object per URL (raises :class:`Rejected` for a bad one)."""
        if self._servers is None:
            with warnings.catch_warnings():
                # Apprise's plugins (loaded on first use) import imghdr: a warning on 3.11+.
                warnings.simplefilter("ignore", DeprecationWarning)
                self._servers = self._make()
        return self._servers

    def _make(self) -> list[Any]:
        try:
            import apprise  # noqa: PLC0415 - the optional extra, only when enabled
        except ImportError:
            raise Rejected("Apprise is not installed: pip install 'statewarden[apprise]'") from None
        servers = []
        for line, url in enumerate(self.urls, 1):
            a = apprise.Apprise()
            if not a.add(url):
                raise Rejected(f"Apprise URL {line} of {self.source} is not one Apprise knows")
            for plugin in a:
                plugin.socket_connect_timeout = self.cfg.timeout
                plugin.socket_read_timeout = self.cfg.timeout
            servers.append(a)
        return servers

    async def deliver(self, entry: Entry, progress: Progress) -> str:
        if self.token_problem:
            raise Rejected(self.token_problem)
        servers = self._load()
        n = entry.notification
        lines = plain_lines(n)
        title, body = lines[0], "\n".join(lines[1:]).strip("\n") or lines[0]
        worst = max((i.severity for i in n.items), default="info", key=severity_rank)
        kind = notify_type(n.state, worst)
        for index in range(entry.parts_sent, len(servers)):
            where = f"Apprise URL {index + 1} of {len(servers)}"
            try:
                async with asyncio.timeout(self.cfg.deadline):
                    ok, why = await asyncio.to_thread(_send, servers[index], title, body, kind)
            except TimeoutError:
                raise Retry(
                    f"{where}: not sent within the {self.cfg.deadline:g} s deadline"
                ) from None
            if not ok:
                raise Retry(self.scrub(f"{where}: {why or 'not sent'}")[:ERROR_CHARS])
            progress(index + 1)
        count = len(servers)
        return f"sent to {count} Apprise URL{'s' if count != 1 else ''}"

    async def close(self) -> None:
        self._servers = None


def _send(server: Any, title: str, body: str, kind: str) -> tuple[bool, str]:
    """One URL's send (in a thread): whether it went, and Apprise's last warning if not."""
    try:
        result = server.notify(body, title=title, notify_type=kind)
    except Exception as exc:  # noqa: BLE001 - a plugin's failure is an answer, not a crash
        return False, f"{type(exc).__name__}: {exc}"
    if result:
        return True, ""
    why = ""
    for res in getattr(result, "results", []) or []:
        for log in res.logs():
            if log.level in ("WARNING", "ERROR"):
                why = str(log.message)
    return False, why
