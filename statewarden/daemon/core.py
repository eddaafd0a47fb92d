"""The asyncio supervisor behind ``statewarden run``: start-up, main loop, shutdown.

:meth:`Daemon.run` is :meth:`~Daemon.startup`, :meth:`~Daemon.main_loop` and
:meth:`~Daemon.shutdown`. Start-up phases: state (incident book, timeline) -> control
socket -> discovery and watchers -> file events -> ``READY=1``. The main loop wakes on
a file event (inotify, through watchdog's observer thread and
``call_soon_threadsafe``), on the ``watch.poll_interval`` ticker, or on a signal; each
wake polls every database's watchers (cheap: stats and new log bytes) and starts a
holder scan when one is due. Discovery runs again every ``discovery.rescan_interval``,
so a home or database that appears later is picked up.

Signal handlers only record the signal; the loop acts on it: SIGTERM/SIGINT stop (in
stages, each with a time limit and logged with its name, duration and outcome by
``daemon.shutdown``: control socket, metrics, file events, background tasks, alerts,
incident book), SIGHUP reloads the config and keeps the old one if the
new one is invalid. ``WATCHDOG=1`` is sent from the loop itself, so a hung loop gets
restarted.

Start-up first takes the state folder: checked (owned by the user, no one else may
write it, 0700) and locked, so a second daemon on it exits with
:class:`~statewarden.errors.AlreadyRunning` (exit 5). Its descriptor limit is raised
to the hard limit. State incidents open from the last run are evaluated afresh
(``incidents.restart``).

The parts it wires together: the databases watched (``daemon.databases``), holder
scans (``daemon.holders``), the units watcher, the control requests
(``daemon.requests``), its own health (``daemon.health``: state it cannot write, a
journal it cannot read), maintenance runs joined to the alerts (``daemon.runs``), each
database verified on a schedule (``daemon.verify``), sessions that vanish
(``daemon.vanished``), maintenance runs handed to it by ``statewardenctl maintenance``
(``daemon.handoff``). Each part is given what it uses
(the book, the alert service, the watched databases, the holder scans, a callback),
never the daemon, so none imports this module back. Everything they find goes to
:meth:`Daemon.handle`, which hands it to the incident recorder; every incident update
the recorder makes goes to the announcer (``statewarden.alerts.announce``) and to the
alerts (``statewarden.alerts.service``: journald and Telegram notifications).
Metrics (``daemon.metrics``) and the read-only web page (``daemon.web``) when configured.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import resource
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statewarden import __version__, journald
from statewarden.alerts import Alerts, Announcer
from statewarden.atomic import private_dir
from statewarden.config import Config, runtime_dir, state_dir
from statewarden.daemon.control import ControlServer, socket_path
from statewarden.daemon.databases import WatchedDatabases
from statewarden.daemon.handoff import HandedRuns
from statewarden.daemon.health import OwnHealth
from statewarden.daemon.holders import HolderScans
from statewarden.daemon.metrics import Metrics, Snapshot, snapshot_of
from statewarden.daemon.requests import Requests, Sources
from statewarden.daemon.runs import RunAlerts
from statewarden.daemon.shutdown import run_stage
from statewarden.daemon.vanished import VanishWatch
from statewarden.daemon.verify import Verifications
from statewarden.daemon.web import WebPage
from statewarden.errors import ConfigError, StatewardenError
from statewarden.incidents import (
    HOLDER_KINDS,
    START_KINDS,
    Found,
    IncidentBook,
    Recorder,
    RestartCheck,
    Signal,
    Timeline,
    Update,
)
from statewarden.kinds import KINDS
from statewarden.lock import lock_state_dir
from statewarden.logs import get_logger
from statewarden.maintenance import AutoMaintenance, lock_holder, run_dir
from statewarden.watch import FileEvents, UnitWatcher, describe

STOP_STAGE_TIMEOUT_S = 5.0
MIN_POLL_GAP_S = 0.005  # a burst of log events is one poll, not hundreds
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Daemon:
    def __init__(self, config: Config, reload: Callable[[], Config]) -> None:
        self.config = config
        self._reload = reload
        self.log = get_logger()
        self._wake = asyncio.Event()
        self._stop_signal: int | None = None
        self._reload_requested = False
        # The last reload's error while the running config is the one before it
        # (``status`` shows it), None once a reload succeeds.
        self.config_rejected: dict[str, Any] | None = None
        self.started_at = time.time()
        # One daemon per state folder, checked (owned by the user, 0700) before use.
        sdir = private_dir(state_dir(config))
        self.state_dir = sdir
        self.lock = lock_state_dir(sdir)
        self.book = self._open_book(sdir, config)
        self.timeline = Timeline(
            sdir / "timeline",
            max_age_s=config.timeline.max_age,
            max_bytes=config.timeline.max_bytes,
        )
        self.announcer = Announcer(self.timeline)
        self.alerts = Alerts(
            config.alerts,
            sdir,
            log=self.log,
            profile_of=self._profile_of,
            holders_of=self._holders_of,
        )
        self.recorder = Recorder(self.book, self.timeline, self._on_update)
        self.restart = RestartCheck(self.book, self._on_update)
        self.metrics: Metrics | None = None
        self.web: WebPage | None = None
        self.last_check: dict[str, tuple[float, str]] = {}  # db -> (when, damage class)
        self.databases = WatchedDatabases(config, self.handle)
        self.health = OwnHealth(sdir, self.book, self.timeline, self.databases, self.handle)
        self.holder_scans = HolderScans(config, self.handle, self._maintenance_pids)
        self.holder_scans.open_at_start(self.book.open_incidents())
        self.units = UnitWatcher(self.handle, self.databases.db_for_unit)
        self.maintenance = AutoMaintenance(config, self.log)
        self.runs = RunAlerts(
            databases=self.databases,
            maintenance=self.maintenance,
            alerts=self.alerts,
            book=self.book,
            recorder=self.recorder,
            log=self.log,
        )
        self.verify = Verifications(
            config=config,
            state_dir=sdir,
            databases=self.databases,
            handle=self.handle,
            ran_since=self.runs.ran_since,
            last_check=self.last_check,
            log=self.log,
        )
        self.runs.post_checked = self.verify.post_checked
        self.vanished = VanishWatch(
            databases=self.databases,
            verified=self.verify.last,
            state_dir=sdir,
            handle=self.handle,
            log=self.log,
        )
        self.handoff = HandedRuns(config, sdir, self.maintenance, self.log)
        self.requests = Requests(
            Sources(
                book=self.book,
                timeline=self.timeline,
                alerts=self.alerts,
                databases=self.databases,
                holder_scans=self.holder_scans,
                units=self.units,
                verify=self.verify,
                maintenance=self.maintenance,
                handoff=self.handoff,
                state_dir=sdir,
                last_check=self.last_check,
                about=self.about,
                file_events_degraded=self._file_events_degraded,
            )
        )
        self.control = ControlServer(socket_path(runtime_dir(config)), self.requests.handle)
        self.events: FileEvents | None = None
        self._tasks: list[asyncio.Task[Any]] = []

    def _open_book(self, sdir: Path, config: Config) -> IncidentBook:
        """The incident book; a damaged one is set aside (by IncidentBook) and restarted empty."""

        def book() -> IncidentBook:
            return IncidentBook(
                sdir / "incidents.json",
                reopen_window_s=config.incidents.reopen_window,
                quiet_resolve_s=config.incidents.quiet_resolve,
            )

        try:
            return book()
        except StatewardenError as exc:
            self.log.error("incident book damaged; starting a new one", error=str(exc))
            return book()

    # -------------------------------------------------------------- wiring

    def handle(self, found: Found) -> None:
        """Everything a watcher finds comes here (a damage signal stamped with the
        identity of the file it is about: ``Kind.of_one_file``)."""
        found = of_file(found)
        self.holder_scans.notice(found)
        self.verify.notice(found)
        self.restart.seen(found)
        self.recorder.record(found)

    def _on_update(self, update: Update) -> None:
        self.announcer.submit(update)
        self.alerts.submit(update)

    def _profile_of(self, db: str) -> str:
        m = self.databases.monitors.get(db)
        return m.target.name if m is not None else "-"

    def _holders_of(self, db: str) -> list[str]:
        scan = self.holder_scans.last.get(db)
        return [describe(h) for h in scan.holders] if scan is not None else []

    def _maintenance_pids(self) -> frozenset[int]:
        """The pids holding a maintenance run's lock on a watched database (blocking)."""
        pids = set()
        for db in self.databases.paths():
            with contextlib.suppress(OSError, StatewardenError):
                pid = lock_holder(run_dir(self.state_dir, Path(os.path.abspath(db))))
                if pid is not None:
                    pids.add(pid)
        return frozenset(pids)

    def _on_signal(self, signum: int) -> None:
        if signum == signal.SIGHUP:
            self._reload_requested = True
        else:
            self._stop_signal = signum
        self._wake.set()

    def wake(self, _path: str = "") -> None:
        """Called (thread-safely, via the loop) when a file in a logs directory changed."""
        self._wake.set()

    def about(self) -> dict[str, Any]:
        """The daemon itself, as the ``status`` request shows it."""
        return {
            "pid": os.getpid(),
            "version": __version__,
            "started_at": self.started_at,
            "config": self.config.source,
            "config_rejected": self.config_rejected,
            "status": self.status_line(),
            "web": self.web.about() if self.web is not None else None,
        }

    def _file_events_degraded(self) -> str | None:
        return self.events.degraded if self.events is not None else None

    def _snapshot(self) -> Snapshot:
        return snapshot_of(
            self.book, self.holder_scans, self.databases, self.alerts, self.last_check
        )

    def status_line(self) -> str:
        n = len(self.databases.monitors)
        if n == 0:
            return "waiting for a Hermes home"
        opened = len(self.book.open_incidents())
        return (
            f"{n} database{'s' if n != 1 else ''}, "
            f"{opened} open incident{'s' if opened != 1 else ''}"
        )

    def rescan(self) -> None:
        """Discover databases again; file events and holder scans follow the result."""
        self.databases.rescan()
        if self.events is not None:
            self.events.watch_dirs(self.databases.log_dirs())
        self.holder_scans.set_dbs(self.databases.paths())

    def poll(self) -> None:
        """Every database's watchers once, then the quiet resolutions."""
        now = time.time()
        # Before the logs: a moved-aside file is told with what it held, Hermes' own line
        # about it then folds into that incident.
        self.vanished.poll(now)
        self.databases.poll(now)
        self.recorder.tick(now)
        self.health.check()
        if self.restart.pending:
            if self.holder_scans.scans_done:
                self.restart.settle(HOLDER_KINDS)
            since = now - self.started_at
            if since >= self.config.watch.wal_growth_window:
                self.restart.settle(frozenset({"wal_growth"}))
            if since >= self.units.crash_window_s:
                self.restart.settle(frozenset({"crash_loop"}))

    def _wait_s(self) -> float:
        waits = [self.config.watch.poll_interval]
        if (soonest := self.databases.next_wake_s()) is not None:
            waits.append(soonest)
        return max(0.0, min(waits))

    # -------------------------------------------------------------- life cycle

    async def run(self) -> int:
        _raise_descriptor_limit()
        loop = asyncio.get_running_loop()
        for signum in HANDLED_SIGNALS:
            loop.add_signal_handler(signum, self._on_signal, signum)
        try:
            await self.startup()
            await self.main_loop()
        finally:
            journald.notify_stopping()
            await self.shutdown()
            for signum in HANDLED_SIGNALS:
                loop.remove_signal_handler(signum)
            self.lock.release()
        name = signal.Signals(self._stop_signal).name if self._stop_signal else "?"
        self.log.info("statewarden stopped", signal=name)
        return 0

    async def startup(self) -> None:
        loop = asyncio.get_running_loop()
        interval = journald.watchdog_interval_s()
        if interval:
            self._tasks.append(asyncio.create_task(self._watchdog(interval)))
        self.log.info(
            "statewarden started", config=self.config.source or "defaults", version=__version__
        )
        try:
            await self.control.start()
        except StatewardenError as exc:
            self.log.error(
                "control socket unavailable; statewardenctl will work locally", error=str(exc)
            )

        def from_observer_thread(path: str) -> None:
            loop.call_soon_threadsafe(self.wake, path)

        self.events = FileEvents(from_observer_thread)
        self.events.start()  # without inotify: polling, and a watcher_degraded incident
        self.rescan()
        for found in self.events.signals(time.time()):
            self.handle(found)
        # An interrupted maintenance run is finished or rolled back first (in the background).
        targets = self.databases.targets()
        self._tasks.append(asyncio.create_task(self.maintenance.resume_unfinished(targets)))
        await self.databases.check_mounts()
        self._tasks.append(asyncio.create_task(self.units.run()))
        self.alerts.reconcile(self.book.incidents.values())
        self._tasks.append(asyncio.create_task(self.alerts.run()))
        self.metrics = Metrics.started(self.config.metrics.listen, self._snapshot, self.log)
        self.web = await WebPage.started(self.config, self.requests, self.state_dir, self.log)
        self.poll()  # the baseline: what exists now is not news
        await self.holder_scans.scan()
        if self.holder_scans.scans_done:
            self.restart.settle(HOLDER_KINDS)
        self.restart.settle(START_KINDS)
        journald.notify_ready(self.status_line())
        self.log.info("statewarden ready", status=self.status_line())

    async def main_loop(self) -> None:
        last_poll = 0.0
        while self._stop_signal is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._wait_s())
            self._wake.clear()
            if self._stop_signal is not None:
                break
            if self._reload_requested:
                self._reload_requested = False
                await self.reload()
            if self.databases.rescan_due(time.monotonic()):
                self.rescan()
                await self.databases.check_mounts()
            gap = time.monotonic() - last_poll
            if gap < MIN_POLL_GAP_S:
                await asyncio.sleep(MIN_POLL_GAP_S - gap)
            last_poll = time.monotonic()
            self.poll()
            self.maintenance.tick(self.databases.targets(), self.book.open_incidents())
            self.runs.tick(time.time())
            self.verify.tick(time.time())
            self.holder_scans.schedule(last_poll)
            if self.events is not None:
                self.events.retry(last_poll)
                for found in self.events.signals(time.time()):
                    self.handle(found)
            if self.metrics is not None:
                self.metrics.refresh()
            journald.notify_status(self.status_line())

    async def reload(self) -> None:
        """SIGHUP: the config read again; an invalid one is reported and the old one kept."""
        journald.notify_reloading()
        try:
            new = self._reload()
        except ConfigError as exc:
            self.log.error("config reload failed; keeping the running config", error=str(exc))
            self.config_rejected = {"error": str(exc), "at": time.time()}
        else:
            self.config_rejected = None
            if new.paths != self.config.paths:
                # The state folder is locked and its files open: moving needs a restart.
                self.log.warning(
                    "paths.* changed; that takes effect after a restart "
                    "(systemctl --user restart statewarden), the running paths are kept",
                    state_dir=str(state_dir(self.config)),
                    runtime_dir=str(runtime_dir(self.config)),
                )
                new = dataclasses.replace(new, paths=self.config.paths)
            self.config = new
            self.databases.reconfigure(new)
            self.holder_scans.reconfigure(new)
            await self.alerts.reload(new.alerts)
            self.maintenance.reconfigure(new)
            self.verify.reconfigure(new)
            self.handoff.reconfigure(new)
            if self.web is not None:
                self.web.reconfigure(new)
            self.log.info("config reloaded", source=new.source or "defaults")
        self.rescan()
        await self.databases.check_mounts()
        journald.notify("READY=1", f"STATUS={self.status_line()}")

    async def _watchdog(self, interval_s: float) -> None:
        # Pinged from the loop itself, so a hung loop stops pinging and gets restarted.
        while True:
            journald.notify_watchdog()
            await asyncio.sleep(interval_s)

    async def shutdown(self) -> None:
        """Stop in stages, each with a time limit, each logged with its name, duration and
        outcome (a stage that fails or overruns says so, and the next one runs); safe to
        call twice. The incident book is saved last; a book that cannot be saved is an
        error the caller sees."""
        limit = STOP_STAGE_TIMEOUT_S
        await run_stage(self.log, "control socket", self.control.close(), limit)
        if self.metrics is not None:
            metrics, self.metrics = self.metrics, None
            await run_stage(self.log, "metrics", asyncio.to_thread(metrics.close), limit)
        if self.web is not None:
            web, self.web = self.web, None
            await run_stage(self.log, "web page", web.close(), limit)
        if self.events is not None:
            events, self.events = self.events, None
            # events.stop waits up to the limit itself; the stage allows a little more.
            stop = asyncio.to_thread(events.stop, limit)
            await run_stage(self.log, "file events", stop, limit + 1.0)
        tasks, self._tasks = self._tasks, []
        if self.holder_scans.task is not None:
            tasks.append(self.holder_scans.task)
        tasks += self.databases.close()
        tasks += self.verify.close()
        tasks += self.vanished.close()
        tasks += self.handoff.close()
        for task in tasks:
            task.cancel()
        gathered = asyncio.gather(*tasks, return_exceptions=True)
        await run_stage(self.log, "background tasks", gathered, limit)
        await run_stage(self.log, "alerts", self.alerts.close(), limit)

        async def save_book() -> None:
            self.book.save()

        await run_stage(self.log, "incident book", save_book(), limit, reraise=True)


def of_file(found: Found) -> Found:
    """A damage signal (``Kind.of_one_file``) with the identity of its database file as it
    is now (``<device>:<inode>``) when it names none; anything else as it is."""
    if not isinstance(found, Signal) or found.clears or found.file:
        return found
    kind = KINDS.get(found.kind)
    if kind is None or not kind.of_one_file:
        return found
    try:
        st = os.stat(found.db)
    except (OSError, ValueError):
        return found
    return dataclasses.replace(found, file=f"{st.st_dev}:{st.st_ino}")


def _raise_descriptor_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit (systemd's LimitNOFILE=1024:524288 is
    meant to be raised by a service that uses epoll, as asyncio does)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
