"""The alerts part as the daemon runs it: router, outbox and one delivery loop per sink.

:class:`Alerts` is built from ``config.alerts`` and the state directory. The daemon hands
it every incident-book :class:`~statewarden.incidents.book.Update` (:meth:`Alerts.submit`),
reconciles it with the book once at start-up, and runs :meth:`Alerts.run`: group waits
and reminders fire on time, new outbox entries wake their sink. Each sink's delivery loop
supervises itself (:meth:`Delivery.run`) and tells the router what it delivered, so
``incidents`` says "notified" only once a sink confirmed it. State files:
``<state_dir>/outbox/`` (the outbox) and ``<state_dir>/alerts.json`` (what was notified).

:func:`send_test` is ``statewardenctl alerts test``: one test notification straight
through each configured sink, with each sink's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statewarden.alerts.delivery import Delivery, bounded_wait
from statewarden.alerts.journald_sink import JournaldSink
from statewarden.alerts.message import Notification
from statewarden.alerts.outbox import Entry, Outbox
from statewarden.alerts.router import Route, Router, describe_notified, read_notified
from statewarden.alerts.silences import (
    CHECK_S,
    Silence,
    SilenceFile,
    describe,
    listing,
)
from statewarden.alerts.sink import Refused, Rejected, Retry, Sink, scrubber_of
from statewarden.backoff import Backoff
from statewarden.config import AlertsConfig
from statewarden.errors import StatewardenError
from statewarden.incidents import Incident, Update

if TYPE_CHECKING:
    from statewarden.alerts.heartbeat import Heartbeat

SINK_NAMES = ("journald", "telegram", "alertmanager", "apprise")


def routes_of(cfg: AlertsConfig) -> dict[str, Route]:
    out: dict[str, Route] = {}
    if cfg.journald.enabled:
        out["journald"] = Route(cfg.journald.min_severity, frozenset(cfg.journald.kinds))
    if cfg.telegram.enabled:
        out["telegram"] = Route(cfg.telegram.min_severity, frozenset(cfg.telegram.kinds))
    am = cfg.alertmanager
    if am.enabled:
        out["alertmanager"] = Route(am.min_severity, frozenset(am.kinds))
    if cfg.apprise.enabled:
        out["apprise"] = Route(cfg.apprise.min_severity, frozenset(cfg.apprise.kinds))
    return out


def make_sinks(cfg: AlertsConfig, env: Mapping[str, str] | None = None) -> dict[str, Sink]:
    sinks: dict[str, Sink] = {}
    if cfg.journald.enabled:
        sinks["journald"] = JournaldSink()
    if cfg.telegram.enabled:
        # httpx is imported only when Telegram is on: every statewardenctl command
        # imports this module, and most never send anything.
        from statewarden.alerts.telegram import TelegramSink  # noqa: PLC0415

        sinks["telegram"] = TelegramSink(cfg.telegram, env)
    if cfg.alertmanager.enabled:
        from statewarden.alerts.alertmanager import AlertmanagerSink  # noqa: PLC0415

        sinks["alertmanager"] = AlertmanagerSink(cfg.alertmanager, env=env)
    if cfg.apprise.enabled:
        from statewarden.alerts.apprise_sink import AppriseSink  # noqa: PLC0415

        sinks["apprise"] = AppriseSink(cfg.apprise, env)
    return sinks


class Alerts:
    def __init__(
        self,
        cfg: AlertsConfig,
        state_dir: Path,
        *,
        log: Any,
        profile_of: Callable[[str], str] = lambda db: "default",
        holders_of: Callable[[str], list[str]] = lambda db: [],
        env: Mapping[str, str] | None = None,
        host: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.log = log
        self.env = env
        self.outbox = Outbox(state_dir / "outbox", max_entries=cfg.outbox_max_entries)
        for problem in self.outbox.load_problems:
            log.error("alert outbox entry damaged", problem=problem)
        self.router = Router(
            cfg,
            self.outbox,
            routes_of(cfg),
            state_path=state_dir / "alerts.json",
            host=host or socket.gethostname(),
            profile_of=profile_of,
            holders_of=holders_of,
        )
        self.deliveries: dict[str, Delivery] = {}
        self._set_sinks(make_sinks(cfg, env))
        self._wake: asyncio.Event | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._persist_reported = ""
        self._am_refreshed = time.time()
        self.silence_file = SilenceFile(state_dir)
        self.silences: list[Silence] = []
        self.silences_error = ""
        self._silences_seen: tuple[int, int, int] | None = None
        self._silences_checked = 0.0
        self.refresh_silences(force=True)
        self.heartbeat: Heartbeat | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._set_heartbeat(cfg)

    def _set_heartbeat(self, cfg: AlertsConfig) -> None:
        if not cfg.heartbeat.enabled:
            self.heartbeat = None
            return
        # httpx only when a heartbeat is configured (as for Telegram).
        from statewarden.alerts.heartbeat import Heartbeat  # noqa: PLC0415

        self.heartbeat = Heartbeat(cfg.heartbeat, log=self.log, trouble=self.trouble, env=self.env)

    def trouble(self) -> str:
        """Why the heartbeat says "fail": an open critical incident no silence mutes; ""."""
        for inc in sorted(self.router.incidents.values(), key=lambda i: i.id):
            if (
                inc.state == "open"
                and inc.severity == "critical"
                and self.router.silence_of(inc.kind, inc.db) is None
            ):
                return f"critical incident #{inc.id} {inc.kind} open on {inc.db}"
        return ""

    def _set_sinks(self, sinks: dict[str, Sink]) -> None:
        self.deliveries = {
            name: Delivery(
                sink,
                self.outbox,
                retry_max_s=self.cfg.retry_max,
                log=self.log,
                on_outcome=self._confirmed,
            )
            for name, sink in sinks.items()
        }
        for name, sink in sinks.items():
            problem = getattr(sink, "token_problem", "")
            if problem:
                self.log.error("alert sink not usable", sink=name, error=problem)

    # ------------------------------------------------------------- input

    def reconcile(self, incidents: Iterable[Incident]) -> None:
        self.router.reconcile(incidents)
        self._kick()

    def submit(self, update: Update) -> None:
        """One incident change from the book (cheap: the sending happens in :meth:`run`)."""
        self.router.submit(update)
        if update.change != "updated":
            self._kick()
            if self.heartbeat is not None:
                self.heartbeat.nudge()

    def set_maintenance(self, db: str, active: bool) -> None:
        self.router.set_maintenance(db, active)
        self._kick()

    def in_maintenance(self) -> frozenset[str]:
        """The databases whose alerts are muted for a maintenance run now."""
        return frozenset(self.router.maintenance)

    def notify(self, n: Notification) -> list[str]:
        """Queue a notification that is not an incident's (a maintenance run's outcome)
        for every sink whose route takes it; the sinks it went to. The outbox keeps it
        durable, and a key already queued or delivered is not sent again."""
        if any(self.router.silence_of(i.kind, i.db) for i in n.items):
            return []
        sinks = [
            name
            for name, route in self.router.routes.items()
            if name in self.deliveries and all(route.accepts(i) for i in n.items)
        ]
        for name in sinks:
            self.outbox.put(n, name)
            self.deliveries[name].wake()
        self._report_persist()
        return sinks

    def refresh_silences(self, now: float | None = None, *, force: bool = False) -> None:
        """Read the silences file again if it changed (or ``force``); tell the router
        which silences are in force, and so notify what an ended one muted."""
        now = time.time() if now is None else now
        signature = self.silence_file.signature()
        if force or signature != self._silences_seen:
            self._silences_seen = signature
            try:
                self.silences = self.silence_file.read()
            except StatewardenError as exc:
                if str(exc) != self.silences_error:
                    self.log.error(
                        "silences file unreadable; keeping the last ones read", error=str(exc)
                    )
                self.silences_error = str(exc)
            else:
                self.silences_error = ""
        self._silences_checked = now
        ended = self.router.set_silences([s for s in self.silences if s.active(now)], now)
        for s in ended:
            self.log.info(
                "silence ended; what it muted and is still open is notified", silence=describe(s)
            )
        if ended:
            self._kick()

    def silence_status(self, now: float | None = None) -> dict[str, Any]:
        now = time.time() if now is None else now
        return {"silences": listing(self.silences, now), "silences_error": self.silences_error}

    def _confirmed(self, entry: Entry, outcome: str) -> None:
        """A sink delivered (or set aside) an entry: the incidents' state says so now."""
        self.router.confirmed(entry.sink, entry.notification, outcome)

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # ------------------------------------------------------------- running

    def flush(self, now: float | None = None) -> list[Notification]:
        """Queue what is due; wake the sinks that have something to send."""
        if (now or time.time()) - self._silences_checked >= CHECK_S or self.router.silences:
            self.refresh_silences(now)
        sent = self.router.tick(now)
        self._refresh_alertmanager(time.time() if now is None else now)
        if self.outbox.persist_error:
            self.outbox.retry_persist()
        self._report_persist()
        if sent:
            for d in self.deliveries.values():
                d.wake()
        return sent

    def _refresh_alertmanager(self, now: float) -> None:
        """Every ``resend_interval``, the incidents still firing in Alertmanager posted
        again (it resolves what is not), through the outbox; not while one waits there."""
        name = "alertmanager"
        if (
            name not in self.deliveries
            or now - self._am_refreshed < self.cfg.alertmanager.resend_interval
        ):
            return
        self._am_refreshed = now
        if self.outbox.pending(name):
            return
        n = self.router.firing_for(name, now)
        if n is not None:
            self.outbox.put(n, name)
            self.deliveries[name].wake()

    def _report_persist(self) -> None:
        problem = self.outbox.persist_error or self.router.save_error
        if problem and problem != self._persist_reported:
            self.log.error(
                "alerts cannot be written to disk; sending from memory (a restart now "
                "would lose the ones not yet delivered)",
                error=problem,
            )
        elif not problem and self._persist_reported:
            self.log.info("alerts are written to disk again")
        self._persist_reported = problem

    async def run(self) -> None:
        self._wake = asyncio.Event()
        self._start_deliveries()
        while True:
            self._start_deliveries()  # one that ended (it cannot, but if it did) runs again
            self.flush()
            deadline = self.router.next_deadline()
            # At most CHECK_S: a silence written while no one told the daemon is read then.
            timeout = CHECK_S if deadline is None else min(CHECK_S, deadline - time.time())
            timeout = max(0.0, timeout)
            if self.outbox.persist_error:
                timeout = min(timeout or 5.0, 5.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            self._wake.clear()

    def _start_deliveries(self) -> None:
        if self.heartbeat is not None and (
            self._heartbeat_task is None or self._heartbeat_task.done()
        ):
            self._heartbeat_task = asyncio.get_running_loop().create_task(self.heartbeat.run())
        for name, d in self.deliveries.items():
            if name not in self._tasks or self._tasks[name].done():
                task = asyncio.get_running_loop().create_task(d.run())
                task.add_done_callback(self._delivery_ended)
                self._tasks[name] = task

    def _delivery_ended(self, task: asyncio.Task[None]) -> None:
        """:meth:`Delivery.run` supervises itself; should its task end anyway, say so and
        have :meth:`run` start it again."""
        if task.cancelled() or task not in self._tasks.values():
            return
        exc = task.exception()
        for name, d in self.deliveries.items():
            if self._tasks.get(name) is task:
                why = d.scrub(f"{type(exc).__name__}: {exc}" if exc else "ended")
                d.health.restarts += 1
                d.health.state = "restarting"
                d.health.last_error = f"delivery failed: {why}"
                self.log.error("alert delivery task ended; starting it again", sink=name, error=why)
        self._kick()

    async def reload(self, cfg: AlertsConfig) -> None:
        """A new config: new routes and sinks; entries waiting in the outbox are kept."""
        await self._stop_deliveries()
        for d in self.deliveries.values():
            await d.sink.close()
        self.cfg = cfg
        self.router.config = cfg
        self.router.routes = routes_of(cfg)
        self.outbox.max_entries = cfg.outbox_max_entries
        self.refresh_silences(force=True)
        if self.heartbeat is not None:
            await self.heartbeat.close()
        self._set_heartbeat(cfg)
        self._set_sinks(make_sinks(cfg, self.env))
        if self._wake is not None:
            self._start_deliveries()
        self._kick()

    async def _stop_deliveries(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        if self._heartbeat_task is not None:
            tasks.append(self._heartbeat_task)
            self._heartbeat_task = None
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        await self._stop_deliveries()
        if self.heartbeat is not None:
            with contextlib.suppress(Exception):
                await self.heartbeat.close()
        for d in self.deliveries.values():
            with contextlib.suppress(Exception):
                await d.sink.close()
        self.router.save()

    # ------------------------------------------------------------- queries

    def incident_state(self, incident_id: int) -> dict[str, Any]:
        return self.router.state_of(incident_id)

    def health_summary(self) -> dict[str, dict[str, Any]]:
        """Each sink's health in short, for ``statewardenctl status``."""
        out: dict[str, dict[str, Any]] = {}
        for name, d in sorted(self.deliveries.items()):
            h = d.health
            out[name] = {
                "state": h.state,
                "pending": len(self.outbox.pending(name)),
                "errors_in_row": h.errors_in_row,
                "restarts": h.restarts,
                "last_error": h.last_error,
            }
        return out

    def status(self) -> dict[str, Any]:
        sinks: dict[str, Any] = {}
        for name in sorted({*self.deliveries, *self.outbox.sinks()}):
            d = self.deliveries.get(name)
            pending = self.outbox.pending(name)
            sinks[name] = {
                "enabled": d is not None,
                **(d.health.to_json() if d else {"state": "disabled"}),
                "pending": len(pending),
            }
        return {
            "sinks": sinks,
            "outbox": [entry_json(e) for e in self.outbox.pending()],
            "persist_error": self.outbox.persist_error or self.router.save_error,
            "maintenance": sorted(self.router.maintenance),
            **self.silence_status(),
            "heartbeat": self.heartbeat.health.to_json() if self.heartbeat else None,
        }


def entry_json(e: Entry) -> dict[str, Any]:
    n = e.notification
    return {
        "seq": e.seq,
        "sink": e.sink,
        "key": e.key,
        "state": n.state,
        "incidents": [i.incident for i in n.items],
        "kinds": sorted({i.kind for i in n.items}),
        "queued_at": e.queued_at,
        "attempts": e.attempts,
        "parts_sent": e.parts_sent,
        "last_error": e.last_error,
        "on_disk": e.on_disk,
    }


def outbox_status(state_dir: Path, cfg: AlertsConfig) -> dict[str, Any]:
    """What ``statewardenctl alerts`` shows with no daemon: the outbox as it is on disk."""
    outbox = Outbox(state_dir / "outbox", max_entries=cfg.outbox_max_entries)
    enabled = set(routes_of(cfg))
    sinks = {
        name: {
            "enabled": name in enabled,
            "state": "unknown (daemon not running)",
            "pending": len(outbox.pending(name)),
        }
        for name in sorted(enabled | set(outbox.sinks()))
    }
    try:
        silences, silences_error = SilenceFile(state_dir).read(), ""
    except StatewardenError as exc:
        silences, silences_error = [], str(exc)
    return {
        "sinks": sinks,
        "outbox": [entry_json(e) for e in outbox.pending()],
        "persist_error": outbox.persist_error,
        "maintenance": [],
        "silences": listing(silences, time.time()),
        "silences_error": silences_error,
        "heartbeat": {"state": "unknown (daemon not running)"} if cfg.heartbeat.enabled else None,
    }


async def send_direct(
    sinks: Mapping[str, Sink],
    n: Notification,
    *,
    retries: int = 0,
    retry_wait_s: float = 2.0,
) -> dict[str, dict[str, str]]:
    """Deliver ``n`` straight through each sink, not through the outbox (a test, or the
    alert that the daemon itself is dead); each sink's answer. A sink that says "retry"
    is tried ``retries`` more times, waiting ``retry_wait_s``, then twice that, ..."""
    results: dict[str, dict[str, str]] = {}
    for name, sink in sinks.items():
        entry = Entry(0, name, n, n.created_at, on_disk=False)
        scrub = scrubber_of(sink)
        backoff = Backoff(retry_wait_s, retry_wait_s * 2**retries)
        try:
            for attempt in range(retries + 1):
                try:
                    answer = await sink.deliver(entry, lambda _parts: None)
                    break
                except Retry as exc:
                    if attempt == retries:
                        raise
                    asked = bounded_wait(exc.after_s, backoff.max_s) or 0.0
                    await asyncio.sleep(backoff.failed(at_least_s=asked))
        except (Retry, Rejected, Refused) as exc:
            kind = {Retry: "failed", Rejected: "rejected", Refused: "refused"}[type(exc)]
            results[name] = {"result": kind, "answer": scrub(str(exc))}
        except Exception as exc:  # noqa: BLE001 - a sink's failure is an answer, not a crash
            results[name] = {"result": "failed", "answer": scrub(f"{type(exc).__name__}: {exc}")}
        else:
            results[name] = {"result": "ok", "answer": scrub(answer)}
        finally:
            with contextlib.suppress(Exception):
                await sink.close()
    return results


async def send_test(
    cfg: AlertsConfig, only: str | None = None, env: Mapping[str, str] | None = None
) -> dict[str, dict[str, str]]:
    """Send one test notification through each configured sink (or ``only``)."""
    sinks = make_sinks(cfg, env)
    if only is not None:
        sinks = {k: v for k, v in sinks.items() if k == only}
    now = time.time()
    return await send_direct(
        sinks, Notification(f"test:{now:.6f}", "test", socket.gethostname(), now, [])
    )


def saved_states(state_dir: Path) -> dict[int, dict[str, Any]]:
    """Each incident's notification state as last saved (``incidents`` with no daemon)."""
    return {k: describe_notified(v) for k, v in read_notified(state_dir / "alerts.json").items()}
