"""The asyncio supervisor behind ``statewarden run``.

Start-up phases: state (incident book, timeline) -> control socket -> discovery and
watchers -> file events -> ``READY=1``. The main loop wakes on a file event (inotify,
through watchdog's observer thread and ``call_soon_threadsafe``), on the
``watch.poll_interval`` ticker, or on a signal; each wake polls every database's
watchers (cheap: stats and new log bytes). Discovery runs again every
``discovery.rescan_interval``, so a home or database that appears later is picked up.

Signal handlers only record the signal; the loop acts on it: SIGTERM/SIGINT stop
(in stages, each with a time limit), SIGHUP reloads the config and keeps the old one
if the new one is invalid. What watchers find goes to :meth:`Daemon.handle`:
observations into the timeline, signals into the incident book, and every incident
that opens, reopens, escalates or resolves to the journal with its kind's MESSAGE_ID.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import resource
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statewarden import __version__, journald
from statewarden.atomic import private_dir
from statewarden.config import Config, runtime_dir, state_dir
from statewarden.control import ControlServer, socket_path
from statewarden.errors import ConfigError, StatewardenError, UsageError
from statewarden.incidents.book import IncidentBook, Update, from_logs
from statewarden.incidents.signals import KINDS, Found, Observation, Signal, is_state_kind
from statewarden.incidents.timeline import Timeline, format_entry
from statewarden.lock import lock_state_dir
from statewarden.logs import get_logger
from statewarden.mounts import read_mounts
from statewarden.recovery.bundle import make_work_copy
from statewarden.recovery.diagnose import diagnose
from statewarden.status import DatabaseStatus, database_status
from statewarden.targets import Target, discover
from statewarden.watch.events import FileEvents
from statewarden.watch.holders import HolderWatcher
from statewarden.watch.journal import JOURNAL_REMEDY, JournalFollower
from statewarden.watch.monitor import Guard, TargetMonitor
from statewarden.watch.units import UnitWatcher

STOP_STAGE_TIMEOUT_S = 5.0
BUNDLE_CHANGES = frozenset(
    {"sidecar_created", "sidecar_deleted", "file_replaced", "db_created", "db_deleted"}
)
EVENT_HOLDER_SCAN_GAP_S = 0.5  # file events trigger a holder re-scan at most this often
MIN_POLL_GAP_S = 0.005  # a burst of log events is one poll, not hundreds
_LOG_LEVEL = {"info": "info", "warning": "warning", "error": "error", "critical": "critical"}
# After a restart, open incidents of state kinds are evaluated afresh: those the first
# complete holder scan does not find again resolve then; those the start-up poll, mount
# check and first scan do not find again resolve then; the windowed ones (a WAL growing
# over a window, restarts within a window) when their window passed without them.
HOLDER_KINDS = frozenset({"stale_holder", "lost_locks", "multi_writer", "unexpected_holder"})
START_KINDS = frozenset({"unsafe_mount", "watcher_failed", "state_unwritable"})
RESTART_RESOLUTION = "no longer the case (evaluated afresh after a restart)"


class Daemon:
    def __init__(self, config: Config, reload: Callable[[], Config]) -> None:
        self.config = config
        self._reload = reload
        self.log = get_logger()
        self._wake = asyncio.Event()
        self._stop_signal: int | None = None
        self._reload_requested = False
        self.started_at = time.time()
        self.monitors: dict[str, TargetMonitor] = {}
        self._present: dict[str, bool] = {}
        self._announced_empty = False
        self._last_rescan = 0.0
        self._unsafe_checked: dict[str, bool] = {}
        # One daemon per state folder, checked (owned by the user, 0700) before use.
        sdir = private_dir(state_dir(config))
        self.state_dir = sdir
        self.lock = lock_state_dir(sdir)
        self.book = self._open_book(sdir, config)
        # fingerprint -> incident id of state-kind incidents open at start, until a
        # fresh evaluation finds them again or resolves them.
        self._restart_pending: dict[str, tuple[str, int]] = {
            i.fingerprint: (i.kind, i.id)
            for i in self.book.open_incidents()
            if is_state_kind(i.kind) and not from_logs(i)
        }
        self._unwritable = False
        self._journal_problems: dict[str, str] = {}
        self.timeline = Timeline(
            sdir / "timeline",
            max_age_s=config.timeline.max_age,
            max_bytes=config.timeline.max_bytes,
        )
        self.control = ControlServer(socket_path(runtime_dir(config)), self.handle_request)
        self.events: FileEvents | None = None
        self.holders = HolderWatcher(
            [],
            max_writers=config.holders.max_writers,
            expected_kinds=tuple(config.holders.expected_kinds),
            exempt_comms=config.holders.exempt_comms,
        )
        self._holders_scanned_at = 0.0
        self._holder_task: asyncio.Task[None] | None = None
        # Set when a database file was opened (a new holder) or a sidecar came, went or
        # was replaced (a holder may now be on an old inode): a holder scan is due soon.
        self._holder_event = False
        self.journals: dict[str, tuple[JournalFollower, asyncio.Task[None]]] = {}
        self.units = UnitWatcher(self._handle_from_units, self._db_for_unit)
        self._check_lock = asyncio.Lock()
        self._source_io = asyncio.Lock()
        # Holder scans cover every database at once; their failures are reported once,
        # under the "*" database.
        self._holders_guard = Guard("holders", "*", lambda _now: [])

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

    # -------------------------------------------------------------- signals

    def _on_signal(self, signum: int) -> None:
        if signum == signal.SIGHUP:
            self._reload_requested = True
        else:
            self._stop_signal = signum
        self._wake.set()

    def wake(self, _path: str = "") -> None:
        """Called (thread-safely, via the loop) when a file in a logs directory changed."""
        self._wake.set()

    # -------------------------------------------------------------- findings

    def handle(self, found: Found) -> Update | None:
        if isinstance(found, Observation):
            if found.what in BUNDLE_CHANGES:
                self._holder_event = True
            self.timeline.add(found.db, found.what, found.text, found.at, **found.fields)
            return None
        update = self.book.record(found)
        if not found.clears:
            self._restart_pending.pop(found.fingerprint, None)
            self.timeline.add_signal(
                found.db, found.fingerprint, found.summary, found.at, kind=found.kind
            )
        if update is not None and update.change != "updated":
            self._announce(update, found)
        return update

    def _settle_restart(self, kinds: frozenset[str]) -> None:
        """Resolve incidents of ``kinds`` open since before the restart and not found again."""
        for fp, (kind, inc_id) in list(self._restart_pending.items()):
            if kind not in kinds:
                continue
            del self._restart_pending[fp]
            update = self.book.resolve(inc_id, RESTART_RESOLUTION)
            if update is not None:
                self._announce(update, Signal(kind, update.incident.db, "", clears=True))

    def _check_journals(self) -> None:
        """A journal this user cannot read is a ``watcher_failed`` incident with the remedy."""
        for key, (follower, _task) in self.journals.items():
            was = self._journal_problems.get(key, "")
            if follower.problem == was:
                continue
            self._journal_problems[key] = follower.problem
            units = ", ".join(follower.units)
            if follower.problem:
                summary = (
                    f"the journal of {units} cannot be read ({follower.problem}), so the "
                    f"JSONL-fallback line Hermes prints only there cannot be seen; {JOURNAL_REMEDY}"
                )
                self.handle(
                    Signal(
                        "watcher_failed",
                        key,
                        summary,
                        key="journal",
                        source="journal",
                        evidence=(follower.problem,),
                    )
                )
            else:
                self.handle(
                    Signal(
                        "watcher_failed",
                        key,
                        f"the journal of {units} can be read again",
                        key="journal",
                        clears=True,
                    )
                )

    def _check_persistence(self) -> None:
        """A state write that failed is a ``state_unwritable`` incident (announced from
        memory: detection and alerts go on); it clears when every write works again."""
        for _f, _task in self.journals.values():
            if _f.write_error is not None:
                _f.save_cursor()
        self.timeline.flush()
        errors = [
            e
            for e in (
                self.book.write_error,
                self.timeline.write_error,
                *(m.logs.write_error for m in self.monitors.values()),
                *(f.write_error for f, _t in self.journals.values()),
            )
            if e is not None
        ]
        if errors and not self._unwritable:
            self._unwritable = True
            self.handle(
                Signal(
                    "state_unwritable",
                    "*",
                    f"statewarden cannot write its state in {self.state_dir} ({errors[0]}); "
                    "detection and alerts go on from memory and writes are retried: free "
                    "space (or descriptors) there",
                    key=str(self.state_dir),
                    source="state",
                    evidence=tuple(str(e) for e in errors),
                )
            )
        elif not errors and self._unwritable:
            self._unwritable = False
            self.handle(
                Signal(
                    "state_unwritable",
                    "*",
                    "state can be written again",
                    key=str(self.state_dir),
                    source="state",
                    clears=True,
                )
            )

    def _announce(self, update: Update, sig: Signal) -> None:
        inc = update.incident
        level = "info" if update.change == "resolved" else _LOG_LEVEL[inc.severity]
        text = f"incident {update.change}: {inc.summary}"
        if update.change == "resolved":
            text = f"incident resolved: {inc.kind} ({inc.resolution})"
        getattr(self.log, level)(
            text,
            message_id=KINDS[inc.kind].message_id,
            incident=inc.id,
            kind=inc.kind,
            db=inc.db,
            count=inc.count,
            change=update.change,
            source=sig.source or None,
        )
        self.timeline.add(inc.db, "incident", text, time.time(), incident=inc.id, kind=inc.kind)

    # -------------------------------------------------------------- discovery

    def rescan(self) -> list[Target]:
        """Discover targets; start watching new ones; log what appeared or went away."""
        self._last_rescan = time.monotonic()
        targets = discover(self.config)
        if not targets and not self._announced_empty:
            self.log.warning(
                "no Hermes home found; waiting for one to appear",
                looked_for=str(self.config.discovery.hermes_home or "$HERMES_HOME or ~/.hermes"),
                rescan_interval_s=self.config.discovery.rescan_interval,
            )
        self._announced_empty = not targets
        current = {str(t.db): t for t in targets}
        for key, t in current.items():
            exists = t.db.exists()
            if key not in self.monitors:
                self.monitors[key] = TargetMonitor(t, self.config)
                self.log.info(
                    "watching database",
                    profile=t.name,
                    db=key,
                    present=exists,
                    gateway_unit=t.gateway_unit,
                )
            elif exists and not self._present.get(key):
                self.log.info("database appeared", profile=t.name, db=key)
            elif not exists and self._present.get(key):
                self.log.warning("database disappeared", profile=t.name, db=key)
            self._present[key] = exists
        for key in list(self.monitors):
            if key not in current:
                gone = self.monitors.pop(key)
                gone.close()
                self._stop_journal(key)
                self._present.pop(key, None)
                self.log.info("no longer watching database", profile=gone.target.name, db=key)
        if self.config.watch.journal:
            for key, m in self.monitors.items():
                if key not in self.journals:
                    self._start_journal(key, m)
        if self.events is not None:
            self.events.watch_dirs(self._watched_dirs())
        self.holders.set_dbs([m.target.db for m in self.monitors.values()])
        return targets

    def _handle_from_units(self, found: Found) -> None:
        self.handle(found)

    def _db_for_unit(self, unit: str) -> str:
        """The database a Hermes unit writes: its target's, the only one, or "*" (all)."""
        for key, m in self.monitors.items():
            if m.target.gateway_unit == unit:
                return key
        return next(iter(self.monitors)) if len(self.monitors) == 1 else "*"

    def _start_journal(self, key: str, m: TargetMonitor) -> None:
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]

        def on_entry(entry: dict[str, Any]) -> None:
            for found in m.journal_entry(entry):
                self.handle(found)

        follower = JournalFollower(
            [m.target.gateway_unit], state_dir(self.config) / f"journal-{digest}.cursor", on_entry
        )
        self.journals[key] = (follower, asyncio.get_running_loop().create_task(follower.run()))

    def _stop_journal(self, key: str) -> None:
        entry = self.journals.pop(key, None)
        self._journal_problems.pop(key, None)
        if entry is not None:
            entry[1].cancel()

    async def source_status(self, t: Target, mounts: list[Any]) -> DatabaseStatus:
        """``database_status`` in a worker thread, never while a check copies the file.

        DESIGN.md rule 2 holds per process: a raw read of the database (the check's
        copy, a header read) closing its descriptor would drop the locks of a SQLite
        connection this process has open on it, so the two never overlap.
        """
        async with self._source_io:
            return await asyncio.to_thread(database_status, t, mounts)

    async def check_mounts(self) -> None:
        mounts = await asyncio.to_thread(read_mounts)
        for m in list(self.monitors.values()):
            if m.target.db.exists():
                self._check_mount(m.target, await self.source_status(m.target, mounts))

    def _check_mount(self, t: Target, st: DatabaseStatus) -> None:
        fs = st.filesystem
        unsafe = bool(fs and fs.unsafe_for_wal and st.journal_mode == "wal")
        key = str(t.db)
        if unsafe and fs is not None:
            self.handle(
                Signal(
                    "unsafe_mount",
                    key,
                    f"state.db is in WAL mode on {fs.type} ({fs.mount_point}): locks are not "
                    "coherent there and WAL can corrupt silently; stop Hermes and convert to "
                    "journal_mode=DELETE or move it to a local volume",
                    source="mounts",
                    fields={"fstype": fs.type, "mount_point": fs.mount_point},
                )
            )
        elif self._unsafe_checked.get(key):
            self.handle(
                Signal(
                    "unsafe_mount",
                    key,
                    "no longer on an unsafe filesystem",
                    source="mounts",
                    clears=True,
                )
            )
        self._unsafe_checked[key] = unsafe

    def _watched_dirs(self) -> set[str]:
        # Only the logs directories: Hermes writes -wal/-shm on every commit, and following
        # those events costs more than the 1 s poll of a few stats. New holders are seen
        # through inotify IN_OPEN on the database files (HolderWatcher.opened).
        dirs = {str(m.target.logs_dir) for m in self.monitors.values()}
        return {d for d in dirs if os.path.isdir(d)}

    # -------------------------------------------------------------- control

    def status_line(self) -> str:
        n = len(self.monitors)
        if n == 0:
            return "waiting for a Hermes home"
        opened = len(self.book.open_incidents())
        return (
            f"{n} database{'s' if n != 1 else ''}, "
            f"{opened} open incident{'s' if opened != 1 else ''}"
        )

    async def handle_request(self, req: dict[str, Any]) -> Any:
        cmd = req["cmd"]
        if cmd == "status":
            mounts = read_mounts()
            dbs = []
            for key, m in self.monitors.items():
                st = await self.source_status(m.target, mounts)
                journal = self.journals.get(key)
                dbs.append(
                    {
                        **st.to_json(),
                        "watchers": m.status(),
                        "journal": journal[0].status if journal else "not followed",
                        "open_incidents": sum(1 for i in self.book.open_incidents() if i.db == key),
                    }
                )
            return {
                "units": self.units.status,
                "daemon": {
                    "pid": os.getpid(),
                    "version": __version__,
                    "started_at": self.started_at,
                    "config": self.config.source,
                    "status": self.status_line(),
                },
                "databases": dbs,
            }
        if cmd == "holders":
            await self.scan_holders()
            return [s.to_json() for s in self.holders.last.values()]
        if cmd == "incidents":
            return [i.to_json() for i in self.book.listing(include_resolved=bool(req.get("all")))]
        if cmd == "incident":
            inc = self.book.get(_int_arg(req, "id"))
            entries = self.timeline.around(inc.db, inc.first_seen)
            return {
                "incident": inc.to_json(),
                "timeline": [{**e.to_json(), "line": format_entry(e)} for e in entries],
            }
        if cmd == "check":
            return await self._check(req)
        if cmd == "ack":
            return self.book.ack(_int_arg(req, "id")).to_json()
        raise UsageError(f"unknown request {cmd!r}")

    async def _check(self, req: dict[str, Any]) -> Any:
        """Diagnose one watched database (by ``db`` path or ``profile``) on a private copy."""
        wanted = req.get("db") or req.get("profile")
        chosen = [m for key, m in self.monitors.items() if wanted in (None, key, m.target.name)]
        if len(chosen) != 1:
            names = ", ".join(f"{m.target.name} ({k})" for k, m in self.monitors.items()) or "none"
            raise UsageError(f"name one database to check with db or profile (watched: {names})")
        if self._check_lock.locked():
            raise UsageError("a check is already running; try again when it has finished")
        db = chosen[0].target.db
        async with self._check_lock:
            parent = private_dir(self.state_dir / "work")
            async with self._source_io:  # the raw copy; see source_status
                work = await asyncio.to_thread(make_work_copy, db, parent)
            try:
                diagnosis = await asyncio.to_thread(
                    diagnose, work.db, truncated=work.truncated_note
                )
            finally:
                await asyncio.to_thread(work.cleanup)
        diagnosis.path = str(db)
        return diagnosis.to_json()

    # -------------------------------------------------------------- life cycle

    async def _apply_reload(self) -> None:
        journald.notify_reloading()
        try:
            new = self._reload()
        except ConfigError as exc:
            self.log.error("config reload failed; keeping the running config", error=str(exc))
        else:
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
            for m in self.monitors.values():
                m.files.wal_warn_bytes = new.watch.wal_warn_bytes
                m.files.wal_growth_window_s = new.watch.wal_growth_window
            self.log.info("config reloaded", source=new.source or "defaults")
        self.rescan()
        await self.check_mounts()
        journald.notify("READY=1", f"STATUS={self.status_line()}")

    def poll_all(self) -> None:
        now = time.time()
        for m in list(self.monitors.values()):
            for found in m.poll(now):
                self.handle(found)
        for update in self.book.tick(now):
            self._announce(
                update, Signal(update.incident.kind, update.incident.db, "", clears=True)
            )
        self._check_journals()
        self.book.flush()
        self._check_persistence()
        if self._restart_pending:
            since = time.time() - self.started_at
            if since >= self.config.watch.wal_growth_window:
                self._settle_restart(frozenset({"wal_growth"}))
            if since >= self.units.crash_window_s:
                self._settle_restart(frozenset({"crash_loop"}))

    def _wait_s(self) -> float:
        waits = [self.config.watch.poll_interval]
        waits += [w for m in self.monitors.values() if (w := m.next_wake_s()) is not None]
        return max(0.0, min(waits))

    async def scan_holders(self) -> None:
        """One holder scan in a worker thread (it reads /proc), diffed on the loop."""
        self._holders_scanned_at = time.monotonic()
        if not self.monitors:
            return
        now = time.time()
        if not self._holders_guard.due(now):
            return
        try:
            scans = await asyncio.to_thread(self.holders.scan)
            found = self.holders.diff(scans, now)
        except Exception as exc:  # noqa: BLE001 - reported like any failing watcher
            found = self._holders_guard.failed(exc, now)
        else:
            found = self._holders_guard.succeeded(found, now)
        for f in found:
            self.handle(f)
        if not self._holders_guard.errors:
            # As the watcher's own clears: what a scan that ran does not find again.
            self._settle_restart(HOLDER_KINDS)

    async def _watchdog(self, interval_s: float) -> None:
        # Pinged from the loop itself, so a hung loop stops pinging and gets restarted.
        while True:
            journald.notify_watchdog()
            await asyncio.sleep(interval_s)

    async def run(self) -> int:
        _raise_descriptor_limit()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(signum, self._on_signal, signum)
        tasks: list[asyncio.Task[Any]] = []
        interval = journald.watchdog_interval_s()
        if interval:
            tasks.append(asyncio.create_task(self._watchdog(interval)))
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
        self.events.start()
        self.rescan()
        await self.check_mounts()
        tasks.append(asyncio.create_task(self.units.run()))
        self.poll_all()  # the baseline: what exists now is not news
        await self.scan_holders()
        self._settle_restart(START_KINDS)
        journald.notify_ready(self.status_line())
        self.log.info("statewarden ready", status=self.status_line())
        last_poll = 0.0
        try:
            while self._stop_signal is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=self._wait_s())
                self._wake.clear()
                if self._stop_signal is not None:
                    break
                if self._reload_requested:
                    self._reload_requested = False
                    await self._apply_reload()
                if time.monotonic() - self._last_rescan >= self.config.discovery.rescan_interval:
                    self.rescan()
                    await self.check_mounts()
                gap = time.monotonic() - last_poll
                if gap < MIN_POLL_GAP_S:
                    await asyncio.sleep(MIN_POLL_GAP_S - gap)
                last_poll = time.monotonic()
                self.poll_all()
                since = last_poll - self._holders_scanned_at
                if self.holders.opened():
                    self._holder_event = True
                due = since >= self.config.watch.holders_interval or (
                    self._holder_event and since >= EVENT_HOLDER_SCAN_GAP_S
                )
                if due and (self._holder_task is None or self._holder_task.done()):
                    self._holder_event = False
                    # In the background: a /proc scan must not delay log detection.
                    self._holder_task = asyncio.create_task(self.scan_holders())
                journald.notify_status(self.status_line())
        finally:
            journald.notify_stopping()
            await self._shutdown(tasks)
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(signum)
            self.lock.release()
        name = signal.Signals(self._stop_signal).name if self._stop_signal else "?"
        self.log.info("statewarden stopped", signal=name)
        return 0

    async def _shutdown(self, tasks: list[asyncio.Task[Any]]) -> None:
        """Stop in stages, each with a time limit; safe to call twice."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.control.close(), STOP_STAGE_TIMEOUT_S)
        if self.events is not None:
            await asyncio.to_thread(self.events.stop, STOP_STAGE_TIMEOUT_S)
            self.events = None
        if self._holder_task is not None:
            tasks.append(self._holder_task)
        for key in list(self.journals):
            tasks.append(self.journals[key][1])
            self._stop_journal(key)
        for m in self.monitors.values():
            m.close()
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                asyncio.gather(*tasks, return_exceptions=True), STOP_STAGE_TIMEOUT_S
            )
        self.book.save()


def _raise_descriptor_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit (systemd's LimitNOFILE=1024:524288 is
    meant to be raised by a service that uses epoll, as asyncio does)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _int_arg(req: dict[str, Any], name: str) -> int:
    value = req.get(name)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise UsageError(f"{name} must be an incident number")
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{name} must be an incident number, got {value!r}") from None
