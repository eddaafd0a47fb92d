"""One sink's delivery loop: its outbox entries, oldest first, one at a time.

An entry leaves the outbox only when the sink accepted it, so delivery is in order and
nothing is lost. A passing failure (:class:`~statewarden.alerts.sink.Retry`) keeps the
entry first in line: tried again after the sink's ``retry_after`` (capped at
``alerts.retry_max``, and the error says so) or the backoff
(:class:`~statewarden.backoff.Backoff`: 1, 2, 4, ... seconds capped at
``alerts.retry_max``). A configuration problem (:class:`~statewarden.alerts.sink.Rejected`)
pauses the sink until :meth:`Delivery.resume` (a config reload) or
:data:`REJECTED_RETRY_S`; it is reported once. An entry the sink refuses for good is set
aside (``<seq>.<sink>.json.rejected``). A failing streak is logged when it begins, each
time its error changes (the same error again is not repeated) and once when it ends
("recovered after N errors").

The loop is supervised: any other exception (a bug, a sink that raised something it
should not) is logged, counted (``restarts`` in the health), shown as the sink's state
``restarting``, and the loop starts again after a backoff; nothing can end it but a
cancel. An entry that made it fail :data:`POISON_FAILURES` times is set aside. Every
text about the sink passes through its scrubber (:func:`~statewarden.alerts.sink.scrubber_of`)
before it is logged, stored or shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from statewarden.alerts.outbox import Entry, Outbox
from statewarden.alerts.sink import Refused, Rejected, Retry, Sink, scrubber_of
from statewarden.backoff import Backoff

FIRST_BACKOFF_S = 1.0
REJECTED_RETRY_S = 3600.0
RESTART_FIRST_S = 1.0  # the supervised loop's first restart wait; doubles up to retry_max
POISON_FAILURES = 3  # unexpected failures on one entry before it is set aside
ERROR_CHARS = 300  # of an unexpected exception's text kept in the health and the log

Outcome = Callable[[Entry, str], None]  # (entry, "delivered" | "set aside")


@dataclass
class Health:
    """How one sink is doing, for ``statewardenctl alerts`` and ``status``."""

    state: str = "ok"  # ok, retrying, rejected, restarting
    last_ok_at: float | None = None
    last_answer: str = ""
    last_error: str = ""
    errors_in_row: int = 0
    delivered: int = 0
    set_aside: int = 0
    retry_at: float | None = None
    restarts: int = 0  # times the delivery loop failed and was started again
    last_restart_error: str = ""

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
            "restarts": self.restarts,
            "last_restart_error": self.last_restart_error,
        }


def seconds_asked(value: object) -> float | None:
    """A wait a sink asked for as a float (``inf`` if too large for one), or None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except OverflowError:
        return math.inf
    except (TypeError, ValueError):
        return None
    return None if math.isnan(seconds) else seconds


def bounded_wait(value: object, most_s: float) -> float | None:
    """A wait a sink asked for, as a finite number of seconds in [0, ``most_s``]."""
    seconds = seconds_asked(value)
    return None if seconds is None else min(max(seconds, 0.0), most_s)


class Delivery:
    def __init__(
        self,
        sink: Sink,
        outbox: Outbox,
        *,
        retry_max_s: float,
        log: Any,
        on_outcome: Outcome | None = None,
    ) -> None:
        self.sink = sink
        self.outbox = outbox
        self.retry_max_s = retry_max_s
        self.log = log
        self.on_outcome = on_outcome
        self.scrub = scrubber_of(sink)
        self.health = Health()
        self.backoff = Backoff(FIRST_BACKOFF_S, retry_max_s)
        self.restart_backoff = Backoff(RESTART_FIRST_S, max(retry_max_s, RESTART_FIRST_S))
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

    async def run(self) -> None:
        """Deliver until cancelled; a failure of the loop restarts it after a backoff."""
        while True:
            try:
                await self._loop()
            except Exception as exc:  # noqa: BLE001 - supervised: nothing may end delivery
                await self._restart(exc)

    async def _restart(self, exc: Exception) -> None:
        why = self.scrub(f"{type(exc).__name__}: {exc}")[:ERROR_CHARS]
        wait = self.restart_backoff.failed()
        self.health.restarts += 1
        self.health.state = "restarting"
        self.health.last_error = f"delivery failed: {why}"
        self.health.last_restart_error = why
        self.health.retry_at = time.time() + wait
        self.log.error(
            "alert delivery failed; restarting it",
            sink=self.name,
            error=why,
            restarts=self.health.restarts,
            restart_in_s=round(wait, 1),
        )
        await asyncio.sleep(wait)
        self.health.retry_at = None

    async def _loop(self) -> None:
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
            why = self.scrub(str(exc))
            asked = seconds_asked(exc.after_s)
            after_s = bounded_wait(asked, self.retry_max_s)
            if asked is not None and after_s is not None and asked > after_s:
                told = "too long" if math.isinf(asked) else f"{asked:g} s"
                why += f" (retry_after {told}: capped at alerts.retry_max, {after_s:g} s)"
            self._failed(why, "retrying", after_s)
            self.outbox.progress(entry, error=why)
            return False
        except Rejected as exc:
            why = self.scrub(str(exc))
            self._failed(why, "rejected", REJECTED_RETRY_S)
            self.outbox.progress(entry, error=why)
            return False
        except Refused as exc:
            why = self.scrub(str(exc))
            self.outbox.set_aside(entry, why)
            self.health.set_aside += 1
            self.log.error(
                "notification refused by the sink; set aside",
                sink=self.name,
                notification=entry.key,
                error=why,
            )
            self._told(entry, "set aside")
            return True
        except Exception as exc:
            self._poisoned(entry, exc)
            raise  # to run(): logged, counted, restarted after a backoff
        self.outbox.done(entry)
        errors = self.backoff.succeeded()
        self.restart_backoff.succeeded()
        if errors:
            self.log.info("alert sink recovered", sink=self.name, errors=errors)
        self.health.state = "ok"
        self.health.errors_in_row = 0
        self.health.last_error = ""
        self.health.last_ok_at = time.time()
        self.health.last_answer = self.scrub(answer)
        self.health.delivered += 1
        self._told(entry, "delivered")
        return True

    def _poisoned(self, entry: Entry, exc: Exception) -> None:
        """An entry that made the sink fail :data:`POISON_FAILURES` times in a row is set
        aside, so the ones behind it still go."""
        failures = int(entry.extra.get("unexpected_failures", 0)) + 1
        entry.extra["unexpected_failures"] = failures
        if failures < POISON_FAILURES:
            return
        why = self.scrub(f"{type(exc).__name__}: {exc}")[:ERROR_CHARS]
        self.outbox.set_aside(entry, why)
        self.health.set_aside += 1
        self.log.error(
            "notification makes the sink fail; set aside",
            sink=self.name,
            notification=entry.key,
            failures=failures,
            error=why,
        )
        self._told(entry, "set aside")

    def _told(self, entry: Entry, outcome: str) -> None:
        if self.on_outcome is not None:
            self.on_outcome(entry, outcome)

    def _failed(self, why: str, state: str, after_s: float | None) -> None:
        # Logged when a streak begins and whenever the trouble changes (another answer,
        # another error); the same error again, try after try, is one line.
        first = self.health.errors_in_row == 0 or self.health.state != state
        first = first or why != self.health.last_error
        wait = self.backoff.failed(at_least_s=after_s or 0.0)
        self.health.errors_in_row = self.backoff.failures
        self.health.state = state
        self.health.last_error = why
        self.health.retry_at = time.time() + wait
        if first:
            level = self.log.error if state == "rejected" else self.log.warning
            level(
                "alert sink rejected the notification: a configuration problem"
                if state == "rejected"
                else "alert sink failed; retrying with backoff",
                sink=self.name,
                error=why,
                errors=self.health.errors_in_row,
                retry_in_s=round(wait, 1),
            )
