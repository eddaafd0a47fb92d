"""What the web page shows, gathered from the daemon's parts (``daemon.web`` serves it).

Every fact comes from the producer the control requests already use, never worked out
a second time: the ``status``, ``incidents`` and ``maintenance`` requests
(``daemon.requests``), ``incidents.show_incident`` for each incident's timeline, the
last holder scan of each database (a page view starts no scan), and the verifications
(``daemon.verify``). What is kept for the page alone:

- **WAL size over time**: read from the evidence timeline, which already keeps a
  ``wal_size`` sample of each database's ``-wal`` once a minute while one exists, and a
  ``checkpoint`` entry each time it shrinks (``watch.files``). The timeline file is read
  in a worker thread, at most every :data:`TIMELINE_REREAD_S` and only when it changed,
  and the series is thinned to :data:`SERIES_POINTS` (the largest size of each stretch).
- **sessions and messages over time**: the daemon keeps only each database's *last*
  verification (``verified.json``), with the rows its full scan counted. Each new one
  is added to ``web-history.json`` in the state folder (the newest :data:`COUNTS_KEEP`
  per database), so the plot survives a restart. Collected only while the page is on.
- **maintenance history**: the ``maintenance`` request gives each database's last run
  report (the runs the daemon started or was handed); each new report is added to the
  same file (the newest :data:`RUNS_KEEP`), with its downtime. A run made with
  ``statewardenctl maintenance --here`` never reaches the daemon's reports and is not
  listed.
- **the plan the next run would follow**: ``statewardenctl maintenance --dry-run`` of
  each database (a subprocess, exactly what a user runs: it stops nothing and writes
  nothing but its run lock), computed when a page view finds it older than
  ``web.plan_interval``, one at a time, never while a run is in progress on the
  database, and kept until the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewarden.atomic import write_atomic
from statewarden.config import Config
from statewarden.daemon.handoff import HandedRuns
from statewarden.daemon.requests import Requests
from statewarden.daemon.verify import Verified, maintenance_on
from statewarden.errors import StatewardenError
from statewarden.incidents import Timeline, show_incident
from statewarden.maintenance import AutoMaintenance

HISTORY_FILE = "web-history.json"
COUNTS_KEEP = 400  # verifications per database: more than a year of daily ones
RUNS_KEEP = 100
RECENT_RESOLVED_S = 7 * 86400.0  # resolved incidents shown for a week
RESOLVED_SHOWN = 20
TIMELINE_SHOWN = 60  # timeline entries shown per incident (the newest of its window)
TIMELINE_REREAD_S = 30.0
SERIES_POINTS = 240
PLAN_TIMEOUT_S = 120.0
PAGE_REUSE_S = 1.0  # page views within this share one gathering
WAL_WHATS = ("wal_size", "checkpoint")
RUN_FIELDS = (
    "db",
    "run_id",
    "action",
    "outcome",
    "exit_code",
    "message",
    "downtime_s",
    "swap_s",
    "units_stopped",
)

Point = tuple[float, float]


@dataclass
class PlanView:
    """The plan the next maintenance run on one database would follow, as last computed."""

    at: float | None = None  # when it was computed; None: never yet
    lines: list[str] = field(default_factory=list)  # what --dry-run prints
    plan: dict[str, Any] | None = None
    error: str | None = None
    note: str | None = None  # why it is not computed now
    computing: bool = False


@dataclass
class PageData:
    """Everything the page shows, gathered at one moment."""

    at: float
    host: str
    daemon: dict[str, Any]
    databases: list[dict[str, Any]]  # the status request's databases
    series: dict[str, dict[str, list[Point]]]  # db -> "sessions"/"messages"/"wal" -> points
    incidents: list[dict[str, Any]]  # show_incident documents, open ones first
    holders: list[dict[str, Any]]  # the last holder scan of each database
    respawned: set[str]  # commands a run saw started again by a respawner
    maintenance: dict[str, Any]  # the maintenance request's answer
    runs: list[dict[str, Any]]  # the maintenance history, newest first
    plans: dict[str, PlanView]


class History:
    """Sessions and messages at each verification, and the maintenance runs, kept for the
    page in ``web-history.json`` (bounded)."""

    def __init__(self, state_dir: Path, log: Any) -> None:
        self.path = state_dir / HISTORY_FILE
        self.log = log
        self.counts: dict[str, list[list[float]]] = {}  # db -> [[at, sessions, messages]]
        self.runs: list[dict[str, Any]] = []
        self._reports: dict[str, dict[str, Any]] = {}  # db -> the last report seen
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
            counts = data["counts"]
            runs = data["runs"]
            if not isinstance(counts, dict) or not isinstance(runs, list):
                raise TypeError("not a history")
            self.counts = {str(db): [list(map(float, p)) for p in v] for db, v in counts.items()}
            self.runs = [r for r in runs if isinstance(r, dict)]
        except (OSError, ValueError, TypeError, KeyError):
            self.counts, self.runs = {}, []  # none yet, or unreadable: started again

    def note(self, verified: dict[str, Verified], reports: dict[str, dict[str, Any]]) -> None:
        """Add each verification and run report not seen before; saved when one was."""
        changed = False
        for db, v in verified.items():
            if v.sessions is None or v.messages is None:
                continue
            points = self.counts.setdefault(db, [])
            if points and points[-1][0] >= v.at:
                continue
            points.append([v.at, float(v.sessions), float(v.messages)])
            del points[:-COUNTS_KEEP]
            changed = True
        for db, report in reports.items():
            if self._reports.get(db) is report:
                continue
            self._reports[db] = report  # a new run replaces the dict: identity says "new"
            run = {k: report.get(k) for k in RUN_FIELDS}
            run["db"] = run["db"] or db
            run["seen_at"] = time.time()
            if any(r.get("run_id") == run["run_id"] for r in self.runs if run["run_id"]):
                continue  # seen before a restart
            self.runs.append(run)
            del self.runs[:-RUNS_KEEP]
            changed = True
        if changed:
            self._save()

    def _save(self) -> None:
        try:
            write_atomic(self.path, json.dumps({"counts": self.counts, "runs": self.runs}))
        except (OSError, StatewardenError) as exc:
            self.log.warning("cannot save the web page's history", error=str(exc))

    def series(self, db: str) -> dict[str, list[Point]]:
        points = self.counts.get(db, [])
        return {
            "sessions": [(p[0], p[1]) for p in points],
            "messages": [(p[0], p[2]) for p in points],
        }


class TimelineView(Timeline):
    """The daemon's timeline, read for the page: each database's entries read in a worker
    thread when the file changed (at most every :data:`TIMELINE_REREAD_S`), then served
    from memory, so ``show_incident`` and the WAL series cost the loop no file read."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        # db -> (when looked at, the file's inode/size/mtime, its entries)
        self._cache: dict[str, tuple[float, tuple[int, int, int], list[Any]]] = {}

    def entries(self, db: str) -> list[Any]:
        cached = self._cache.get(db)
        return cached[2] if cached is not None else []

    async def refresh(self, db: str, now: float) -> None:
        cached = self._cache.get(db)
        if cached is not None and now - cached[0] < TIMELINE_REREAD_S:
            return
        try:
            st = os.stat(self.path_for(db))
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            stamp = (0, 0, 0)
        if cached is not None and cached[1] == stamp:
            self._cache[db] = (now, stamp, cached[2])
            return
        read = await asyncio.to_thread(Timeline.entries, self, db)
        self._cache[db] = (now, stamp, read)

    def wal_series(self, db: str) -> list[Point]:
        return thinned(
            [
                (e.at, float(e.fields["wal_bytes"]))
                for e in self.entries(db)
                if e.what in WAL_WHATS and isinstance(e.fields.get("wal_bytes"), int)
            ]
        )


def thinned(points: list[Point], most: int = SERIES_POINTS) -> list[Point]:
    """At most ``most`` points: the time span cut into equal stretches, the largest value
    of each kept (a WAL that grew for a minute still shows its peak)."""
    if len(points) <= most:
        return points
    start, end = points[0][0], points[-1][0]
    width = (end - start) / most or 1.0
    best: dict[int, Point] = {}
    for t, v in points:
        slot = min(int((t - start) / width), most - 1)
        if slot not in best or v > best[slot][1]:
            best[slot] = (t, v)
    return [best[k] for k in sorted(best)]


class Plans:
    """The dry-run plan of each database, computed on demand, one at a time."""

    def __init__(
        self,
        *,
        config: Config,
        state_dir: Path,
        maintenance: AutoMaintenance,
        handoff: HandedRuns,
        log: Any,
    ) -> None:
        self.interval = config.web.plan_interval
        self.config_source = config.source
        self.state_dir = state_dir
        self.maintenance = maintenance
        self.handoff = handoff
        self.log = log
        self.views: dict[str, PlanView] = {}
        self.task: asyncio.Task[None] | None = None
        self._one = asyncio.Lock()

    def reconfigure(self, config: Config) -> None:
        self.interval = config.web.plan_interval
        self.config_source = config.source

    def busy(self, db: str) -> str | None:
        """Why no plan may be computed for ``db`` now (a run is on it), or None."""
        handed = self.handoff.runs.get(db)
        if db in self.maintenance.running or (handed is not None and not handed.done):
            return "a maintenance run or snapshot is in progress; the plan is computed after it"
        if maintenance_on(self.state_dir, Path(db)):
            return "a maintenance run is in progress; the plan is computed after it"
        return None

    def view(self, dbs: list[str], now: float) -> dict[str, PlanView]:
        """Each database's plan as computed last; one that is due is computed now, in the
        background (the page shows it from its next view on)."""
        for db in dbs:
            v = self.views.setdefault(db, PlanView())
            v.note = self.busy(db)
            due = v.at is None or now - v.at >= self.interval
            idle = self.task is None or self.task.done()
            if due and idle and v.note is None and not v.computing:
                v.computing = True
                self.task = asyncio.create_task(self._compute(db))
        return {db: self.views[db] for db in dbs}

    async def _compute(self, db: str) -> None:
        v = self.views[db]
        try:
            async with self._one:
                lines, plan, error = await self._dry_run(db)
            v.lines, v.plan, v.error = lines, plan, error
        except (OSError, StatewardenError) as exc:
            v.error = f"the dry run could not run: {exc}"
        finally:
            v.at, v.computing = time.time(), False

    async def _dry_run(self, db: str) -> tuple[list[str], dict[str, Any] | None, str | None]:
        argv = [sys.executable, "-m", "statewarden.cli.ctl", "maintenance", "--dry-run"]
        argv += ["--db", db, "--json"]
        if self.config_source:
            argv += ["--config", self.config_source]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), PLAN_TIMEOUT_S)
        except TimeoutError:
            return [], None, f"the dry run did not finish within {PLAN_TIMEOUT_S:.0f} s"
        finally:
            if proc.returncode is None:  # timed out, or the daemon is stopping
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.shield(proc.wait())
        lines: list[str] = []
        for raw in err.splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(raw)
                if isinstance(event, dict) and event.get("event") == "plan":
                    lines = [str(line) for line in event.get("lines") or []]
        try:
            report = json.loads(out)
            plan = report.get("plan") if isinstance(report, dict) else None
        except ValueError:
            plan = None
        if plan is None and not lines:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            return [], None, f"the dry run gave no plan (exit {proc.returncode}): {tail[0]}"
        return lines, plan if isinstance(plan, dict) else None, None

    def close(self) -> list[asyncio.Task[Any]]:
        return [self.task] if self.task is not None else []


class PageSources:
    """The page's data, gathered from the control requests' producers."""

    def __init__(self, requests: Requests, plans: Plans, history: History) -> None:
        self.requests = requests
        self.plans = plans
        self.history = history
        self.timeline = TimelineView(requests.sources.timeline.directory)
        self._last: PageData | None = None

    def sample(self) -> None:
        """Add the latest verifications and run reports to the history."""
        d = self.requests.sources
        self.history.note(d.verify.last, d.maintenance.last)

    async def gather(self) -> PageData:
        now = time.time()
        if self._last is not None and 0 <= now - self._last.at < PAGE_REUSE_S:
            return self._last
        self.sample()
        status = await self.requests.status({})
        dbs = [str(d["path"]) for d in status["databases"]]
        for db in dbs:
            await self.timeline.refresh(db, now)
        maintenance = await self.requests.maintenance({})
        page = PageData(
            at=now,
            host=socket.gethostname(),
            daemon=status["daemon"],
            databases=status["databases"],
            series={db: self._series(db, status) for db in dbs},
            incidents=await self._incidents(now),
            holders=[s.to_json() for s in self.requests.sources.holder_scans.last.values()],
            respawned=respawned(maintenance),
            maintenance=maintenance,
            runs=sorted(self.history.runs, key=lambda r: -float(r.get("seen_at") or 0)),
            plans=self.plans.view(dbs, now),
        )
        self._last = page
        return page

    def _series(self, db: str, status: dict[str, Any]) -> dict[str, list[Point]]:
        series = self.history.series(db)
        wal = self.timeline.wal_series(db)
        for d in status["databases"]:
            if d["path"] == db and isinstance(d.get("wal_bytes"), int):
                wal = [*wal, (time.time(), float(d["wal_bytes"]))]  # the size now
        series["wal"] = wal
        return series

    async def _incidents(self, now: float) -> list[dict[str, Any]]:
        """Open incidents, then those resolved in the last week (newest first), each with
        the timeline around its first signal."""
        listing = await self.requests.incidents({"all": True})
        opened = [i for i in listing if i["state"] == "open"]
        recent = [
            i
            for i in listing
            if i["state"] == "resolved"
            and now - float(i.get("resolved_at") or 0) <= RECENT_RESOLVED_S
        ]
        recent.sort(key=lambda i: -float(i.get("resolved_at") or 0))
        out = []
        for inc in [*opened, *recent[:RESOLVED_SHOWN]]:
            await self.timeline.refresh(str(inc["db"]), now)
            doc = show_incident(self.requests.sources.book, self.timeline, int(inc["id"]))
            doc["timeline"] = doc["timeline"][-TIMELINE_SHOWN:]
            doc["notification"] = inc.get("notification")
            out.append(doc)
        return out


def respawned(maintenance: dict[str, Any]) -> set[str]:
    """The commands the last runs signalled and saw running again (their respawner, the
    desktop app for ``serve --isolated``, started them again)."""
    out: set[str] = set()
    for report in (maintenance.get("last") or {}).values():
        for p in report.get("start_again") or []:
            if isinstance(p, dict) and p.get("running_again"):
                out.add(str(p.get("command")))
    return out
