"""The dead man's switch: a ping to a push URL every ``alerts.heartbeat.interval``.

Healthchecks and Uptime Kuma alert when pings stop coming, so a dead host, a dead user
manager or a hung daemon is noticed by someone else. While statewarden runs and no
critical incident is open (one muted by a silence does not count), it sends an HTTP
GET to the URL; while one is open, to the URL with ``fail_suffix`` added (Healthchecks'
``<url>/fail``; ``?status=down`` for Uptime Kuma), and at once when that changes. The
ping runs on the daemon's event loop, so a hung loop stops it too.

A ping is not queued in the outbox: one late is worth nothing, the next one is due
anyway. The URL is a secret (:mod:`statewarden.alerts.secrets`): never logged, every
text about the heartbeat goes through its scrubber. Each request is bounded
(:mod:`statewarden.alerts.http`: per-step ``timeout``, total ``deadline``, 64 KiB of an
answer). Failures are counted and shown by ``statewardenctl alerts``; a failing streak
is logged when it begins, when its error changes and when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from statewarden.alerts import http
from statewarden.alerts.secrets import read_secret, url_secrets
from statewarden.alerts.sink import Retry
from statewarden.backoff import Backoff
from statewarden.config import HeartbeatConfig
from statewarden.errors import SecretMissing

RESTART_WAIT_S = 5.0


def fail_url_of(url: str, suffix: str) -> str:
    """``url`` with ``suffix`` added: to its path (``/fail``) or to its query
    (``?status=down``, ``&status=down``)."""
    parts = urlsplit(url)
    if suffix[0] in "?&":
        extra = suffix[1:]
        query = f"{parts.query}&{extra}" if parts.query else extra
        return urlunsplit(parts._replace(query=query))
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + suffix))


@dataclass
class HeartbeatHealth:
    state: str = "starting"  # ok, fail (the monitor was told), failing, rejected
    signal: str = ""  # the last one delivered: "ok" or "fail"
    why: str = ""  # what made it "fail"
    pings_ok: int = 0
    pings_failed: int = 0
    errors_in_row: int = 0
    last_ok_at: float | None = None
    last_error: str = ""
    source: str = ""  # where the URL was read from

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Heartbeat(http.HttpSender):
    """Pings the push URL while statewarden is healthy, its fail form while it is not."""

    def __init__(
        self,
        cfg: HeartbeatConfig,
        *,
        log: Any,
        trouble: Callable[[], str],
        env: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.cfg = cfg
        self.log = log
        self.trouble = trouble
        self.health = HeartbeatHealth()
        self.problem = ""
        self.url = self.fail_url = ""
        try:
            url, self.health.source = read_secret(
                cfg.url_file, cfg.credential, "heartbeat URL", env
            )
        except SecretMissing as exc:
            self.problem = str(exc)
        else:
            if "\n" in url or not url.startswith(("https://", "http://")):
                self.problem = f"heartbeat URL from {self.health.source}: not one http(s) URL"
            else:
                self.url, self.fail_url = url, fail_url_of(url, cfg.fail_suffix)
        super().__init__(
            secrets=(*url_secrets(self.url), *url_secrets(self.fail_url)),
            server=http.server_of(self.url),
            timeout=cfg.timeout,
            deadline=cfg.deadline,
            client=client,
        )
        self._wake = asyncio.Event()
        self._backoff = Backoff(1.0, cfg.interval)

    def nudge(self) -> None:
        """Something changed (an incident opened or closed): ping now if the signal did."""
        self._wake.set()

    async def ping(self) -> bool:
        """One ping, ``ok`` or ``fail`` as things are now; True if the monitor took it."""
        why = self.trouble()
        signal = "fail" if why else "ok"
        try:
            status, reason, _headers, _body = await self.request(
                "GET", self.fail_url if why else self.url
            )
            if not 200 <= status < 300:
                raise Retry(f"{status} {self.server_line(reason) or 'error'}")
        except Retry as exc:
            self._failed(self.scrub(str(exc)))
            return False
        if self.health.errors_in_row:
            self.log.info("heartbeat pings go through again", errors=self.health.errors_in_row)
        if signal != self.health.signal and signal == "fail":
            self.log.warning("heartbeat: told the monitor statewarden is failing", why=why)
        self.health.state = signal
        self.health.signal = signal
        self.health.why = why
        self.health.pings_ok += 1
        self.health.errors_in_row = 0
        self.health.last_error = ""
        self.health.last_ok_at = time.time()
        return True

    def _failed(self, why: str) -> None:
        if self.health.errors_in_row == 0 or why != self.health.last_error:
            self.log.warning("heartbeat ping failed", error=why, server=self.server)
        self.health.state = "failing"
        self.health.pings_failed += 1
        self.health.errors_in_row += 1
        self.health.last_error = why

    async def run(self) -> None:
        """Ping until cancelled; a failure of the loop itself restarts it."""
        if self.problem:
            self.health.state = "rejected"
            self.health.last_error = self.problem
            self.log.error("heartbeat not usable", error=self.problem)
            await asyncio.Event().wait()  # until a reload makes a new one
        while True:
            try:
                await self._loop()
            except Exception as exc:  # noqa: BLE001 - supervised: nothing may end the pings
                self._failed(f"heartbeat failed: {http.failure(exc, self.scrub)}")
                await asyncio.sleep(RESTART_WAIT_S)

    async def _loop(self) -> None:
        while True:
            # Cleared before the ping, not after it: a nudge while the ping waits for its
            # answer (an incident opened) is still seen below, and pinged at once.
            self._wake.clear()
            if await self.ping():
                self._backoff.succeeded()
                wait = self.cfg.interval
            else:
                wait = min(self._backoff.failed(), self.cfg.interval)  # sooner than the next
            due = time.monotonic() + wait
            while (left := due - time.monotonic()) > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=left)
                now_signal = "fail" if self.trouble() else "ok"
                if self._wake.is_set() and now_signal != self.health.signal:
                    break
                self._wake.clear()
