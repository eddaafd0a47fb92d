"""One sink's delivery loop: its outbox entries, oldest first, one at a time.

An entry leaves the outbox only when the sink accepted it, so delivery is in order and
nothing is lost. A passing failure (:class:`~statewarden.alerts.sink.Retry`) keeps the
entry first in line: tried again after the sink's ``retry_after`` or a backoff of 1, 2,
4, ... seconds capped at ``alerts.retry_max``. A configuration problem
(:class:`~statewarden.alerts.sink.Rejected`) pauses the sink until :meth:`Delivery.resume`
(a config reload) or :data:`REJECTED_RETRY_S`; it is reported once. An entry the sink
refuses for good is set aside (``<seq>.<sink>.json.rejected``). A failing streak is
logged once when it begins and once when it ends ("recovered after N errors").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from statewarden.alerts.outbox import Outbox
from statewarden.alerts.sink import Refused, Rejected, Retry, Sink

FIRST_BACKOFF_S = 1.0
REJECTED_RETRY_S = 3600.0


@dataclass
class Health:
    """How one sink is doing, for ``statewardenctl alerts`` and ``status``."""

    state: str = "ok"  # ok, retrying, rejected
    last_ok_at: float | None = None
    last_answer: str = ""
    last_error: str = ""
    errors_in_row: int = 0
    delivered: int = 0
    set_aside: int = 0
    retry_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "last_ok_at": self.last_ok_at,
            "last_answer": self.last_answer,
            "last_error": self.last_error,
            "errors_in_row": self.errors_in_row,
            "delivered": self.delivered,
            "set_aside": self.set_aside,
            "retry_at": self.retry_at,
        }


class Delivery:
    def __init__(self, sink: Sink, outbox: Outbox, *, retry_max_s: float, log: Any) -> None:
        self.sink = sink
        self.outbox = outbox
        self.retry_max_s = retry_max_s
        self.log = log
        self.health = Health()
        self._wake = asyncio.Event()

    @property
    def name(self) -> str:
        return self.sink.name

    def wake(self) -> None:
        self._wake.set()

    def resume(self) -> None:
        """Try again now (after a config change, or on request)."""
        self.health.retry_at = None
        self._wake.set()

    async def _sleep(self, seconds: float | None) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)

    def _backoff(self) -> float:
        exponent = min(30, max(0, self.health.errors_in_row - 1))
        return float(min(self.retry_max_s, FIRST_BACKOFF_S * 2.0**exponent))

    async def run(self) -> None:
        while True:
            entry = self.outbox.next(self.name)
            if entry is None:
                await self._sleep(None)
                continue
            if self.health.retry_at is not None:
                wait = self.health.retry_at - time.time()
                if wait > 0:
                    await self._sleep(wait)
                    if self.health.retry_at is not None and self.health.retry_at > time.time():
                        continue
                self.health.retry_at = None
            await self.deliver_one()

    async def deliver_one(self) -> bool:
        """Try the first entry once; True if it left the outbox."""
        entry = self.outbox.next(self.name)
        if entry is None:
            return False

        def progress(parts: int) -> None:
            self.outbox.progress(entry, parts_sent=parts)

        try:
            answer = await self.sink.deliver(entry, progress)
        except Retry as exc:
            self._failed(str(exc), "retrying", exc.after_s)
            self.outbox.progress(entry, error=str(exc))
            return False
        except Rejected as exc:
            self._failed(str(exc), "rejected", REJECTED_RETRY_S)
            self.outbox.progress(entry, error=str(exc))
            return False
        except Refused as exc:
            self.outbox.set_aside(entry, str(exc))
            self.health.set_aside += 1
            self.log.error(
                "notification refused by the sink; set aside",
                sink=self.name,
                notification=entry.key,
                error=str(exc),
            )
            return True
        self.outbox.done(entry)
        if self.health.errors_in_row:
            self.log.info("alert sink recovered", sink=self.name, errors=self.health.errors_in_row)
        self.health.state = "ok"
        self.health.errors_in_row = 0
        self.health.last_error = ""
        self.health.last_ok_at = time.time()
        self.health.last_answer = answer
        self.health.delivered += 1
        return True

    def _failed(self, why: str, state: str, after_s: float | None) -> None:
        first = self.health.errors_in_row == 0 or self.health.state != state
        self.health.errors_in_row += 1
        self.health.state = state
        self.health.last_error = why
        wait = after_s if after_s is not None else self._backoff()
        self.health.retry_at = time.time() + wait
        if first:
            level = self.log.error if state == "rejected" else self.log.warning
            level(
                "alert sink rejected the notification: a configuration problem"
                if state == "rejected"
                else "alert sink failed; retrying with backoff",
                sink=self.name,
                error=why,
                retry_in_s=round(wait, 1),
            )
