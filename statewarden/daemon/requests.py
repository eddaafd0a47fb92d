"""The daemon's control requests: a table of handlers, one per request name.

``statewardenctl`` sends ``{"cmd": NAME, ...}`` over the control socket
(``statewarden.daemon.control``); :meth:`Requests.handle` looks ``NAME`` up in
:attr:`Requests.handlers` and awaits the handler with the request. An unknown name,
or a bad argument, is a ``UsageError``: a one-line error reply, and the socket goes on
serving.

| request | answers |
|---|---|
| ``status`` | the daemon, the units watcher, each database's status, watchers, journal |
| ``holders`` | a fresh holder scan of every database |
| ``incidents`` | open incidents (``all``: resolved ones too) |
| ``incident`` | one incident (``id``) with the timeline around its first signal |
| ``check`` | ``check`` of one watched database (``db`` or ``profile``), one at a time |
| ``verify`` | verify now (``db`` or ``profile``, else every watched database), as on schedule |
| ``ack`` | acknowledge an incident (``id``) |
| ``alerts`` | each alert sink's health and the outbox |
| ``silences`` | the silences, after reading ``silences.json`` again |
| ``maintenance`` | the maintenance policy, runs in flight, each database's last report |
| ``maintenance_run`` | a maintenance run on ``db``, streamed (``daemon.handoff``) |
| ``maintenance_cancel`` | cancel the run handed to the daemon on ``db`` |
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statewarden.alerts import Alerts
from statewarden.atomic import private_dir
from statewarden.daemon.databases import WatchedDatabases
from statewarden.daemon.handoff import HandedRuns
from statewarden.daemon.holders import HolderScans
from statewarden.daemon.verify import Verifications, give_back
from statewarden.errors import UsageError
from statewarden.incidents import IncidentBook, Timeline, show_incident
from statewarden.maintenance import AutoMaintenance
from statewarden.mounts import read_mounts
from statewarden.recovery import check_database
from statewarden.watch import UnitWatcher

Request = dict[str, Any]
Handler = Callable[[Request], Awaitable[Any]]


@dataclass
class Sources:
    """What the requests answer from: the daemon's parts, not the daemon."""

    book: IncidentBook
    timeline: Timeline
    alerts: Alerts
    databases: WatchedDatabases
    holder_scans: HolderScans
    units: UnitWatcher
    verify: Verifications
    maintenance: AutoMaintenance
    handoff: HandedRuns
    state_dir: Path
    last_check: dict[str, tuple[float, str]]  # db -> (when, damage class), for the metrics
    about: Callable[[], dict[str, Any]]  # the daemon itself: pid, version, config, status
    file_events_degraded: Callable[[], str | None]  # why file events poll (None: inotify)


class Requests:
    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self._checking = asyncio.Lock()
        self.handlers: dict[str, Handler] = {
            "status": self.status,
            "holders": self.holders,
            "incidents": self.incidents,
            "incident": self.incident,
            "check": self.check,
            "verify": self.verify,
            "ack": self.ack,
            "alerts": self.alerts,
            "silences": self.silences,
            "maintenance": self.maintenance,
            "maintenance_run": self.maintenance_run,
            "maintenance_cancel": self.maintenance_cancel,
        }

    async def handle(self, req: Request) -> Any:
        cmd = req["cmd"]
        handler = self.handlers.get(cmd)
        if handler is None:
            raise UsageError(f"unknown request {cmd!r}")
        return await handler(req)

    async def status(self, _req: Request) -> Any:
        d = self.sources
        mounts = read_mounts()
        dbs = []
        for key, m in d.databases.monitors.items():
            st = await d.databases.status_of(m.target, mounts)
            dbs.append(
                {
                    **st.to_json(),
                    "watchers": m.status(),
                    "journal": d.databases.journal_status(key),
                    "open_incidents": sum(1 for i in d.book.open_incidents() if i.db == key),
                    "verified": d.verify.status_of(key),
                }
            )
        return {
            "units": d.units.status,
            "daemon": d.about(),
            "alerts": {name: s["state"] for name, s in d.alerts.status()["sinks"].items()},
            # Watchers polling for want of inotify, with why (None: inotify works).
            "inotify": {
                "file_events": d.file_events_degraded(),
                "holder_opens": d.holder_scans.watcher.open_watch_degraded,
            },
            "alert_sinks": d.alerts.health_summary(),
            "databases": dbs,
        }

    async def holders(self, _req: Request) -> Any:
        await self.sources.holder_scans.scan()
        return [s.to_json() for s in self.sources.holder_scans.last.values()]

    async def incidents(self, req: Request) -> Any:
        listing = self.sources.book.listing(include_resolved=bool(req.get("all")))
        alerts = self.sources.alerts
        return [{**i.to_json(), "notification": alerts.incident_state(i.id)} for i in listing]

    async def alerts(self, _req: Request) -> Any:
        return self.sources.alerts.status()

    async def silences(self, _req: Request) -> Any:
        self.sources.alerts.refresh_silences(force=True)
        return self.sources.alerts.silence_status()

    async def incident(self, req: Request) -> Any:
        return show_incident(self.sources.book, self.sources.timeline, _incident_id(req))

    async def maintenance(self, _req: Request) -> Any:
        """The daemon's maintenance policy, runs in flight and each database's last report."""
        return self.sources.maintenance.status()

    async def maintenance_run(self, req: Request) -> Any:
        """A maintenance run handed to the daemon, streamed (``daemon.handoff``)."""
        return await self.sources.handoff.start(req)

    async def maintenance_cancel(self, req: Request) -> Any:
        return await self.sources.handoff.cancel(req)

    async def ack(self, req: Request) -> Any:
        return self.sources.book.ack(_incident_id(req)).to_json()

    async def check(self, req: Request) -> Any:
        """Diagnose one watched database (by ``db`` path or ``profile``) on a private copy."""
        d = self.sources
        monitors = d.databases.monitors
        wanted = req.get("db") or req.get("profile")
        chosen = [m for key, m in monitors.items() if wanted in (None, key, m.target.name)]
        if len(chosen) != 1:
            names = ", ".join(f"{m.target.name} ({k})" for k, m in monitors.items()) or "none"
            raise UsageError(f"name one database to check with db or profile (watched: {names})")
        if self._checking.locked():
            raise UsageError("a check is already running; try again when it has finished")
        async with self._checking:
            parent = private_dir(d.state_dir / "work")
            try:
                diagnosis = await asyncio.to_thread(
                    check_database,
                    chosen[0].target.db,
                    parent,
                    copy_guard=d.databases.source_reads,
                )
            finally:
                give_back()  # what the check freed: the daemon idles again after it
        d.last_check[str(chosen[0].target.db)] = (time.time(), diagnosis.damage)
        return diagnosis.to_json()

    async def verify(self, req: Request) -> Any:
        """Verify now, as the schedule does (incident on damage): one database (``db`` or
        ``profile``) or every watched one; answers when every verification is done."""
        d = self.sources
        monitors = d.databases.monitors
        wanted = req.get("db") or req.get("profile")
        if wanted is not None and not isinstance(wanted, str):
            raise UsageError("db and profile must be strings")
        chosen = [m for key, m in monitors.items() if wanted in (None, key, m.target.name)]
        if not chosen:
            names = ", ".join(f"{m.target.name} ({k})" for k, m in monitors.items()) or "none"
            raise UsageError(f"no watched database {wanted!r} (watched: {names})")
        results = []
        for m in chosen:
            if not m.target.db.exists():
                raise UsageError(f"{m.target.db}: state.db does not exist (yet)")
            results.append((await d.verify.verify(m.target, "requested")).to_json())
        return results


def _incident_id(req: Request) -> int:
    value = req.get("id")
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise UsageError("id must be an incident number")
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"id must be an incident number, got {value!r}") from None
