"""Maintenance runs joined to the alerts, in the daemon.

At most every :data:`CHECK_EVERY_S`, from the main loop (:meth:`RunAlerts.tick`):

- **Muting**: the databases with a maintenance run in progress (whoever started it:
  the daemon in a window, a user's ``statewardenctl maintenance`` or ``quarantine
  restore``), or whose run ended less than ``QUIET_AFTER_S`` ago, get
  ``Alerts.set_maintenance(db, True)``; the others ``False``. What a run is comes from
  its lock and ledger (``maintenance.ledger.in_progress``), so a run killed with
  ``kill -9`` mutes nothing.
- **Outcomes**: each outcome a run left (``maintenance.outcomes``) is queued through the
  alert sinks (durable outbox, keyed by the run, so never twice), then removed.
- **Resolution**: a ``repaired`` outcome whose post-check passed resolves the open
  ``corruption`` incidents of its database and every incident folded into them
  (``alerts.router.FOLDED_INTO_CORRUPTION``: ``write_failures``, ``self_repair``,
  ``jsonl_fallback``), with the run id as the resolution: left open, a folded one would
  be sent on its own once the corruption resolved, telling the user to repair again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from statewarden.alerts import FOLDED_INTO_CORRUPTION, Alerts
from statewarden.daemon.databases import WatchedDatabases
from statewarden.incidents import IncidentBook, Recorder
from statewarden.maintenance import AutoMaintenance, outcomes

CHECK_EVERY_S = 0.5
# What a successful repair resolves: the corruption and what was folded into it.
REPAIRED_BY_MAINTENANCE = frozenset({"corruption"}) | FOLDED_INTO_CORRUPTION


class RunAlerts:
    def __init__(
        self,
        *,
        databases: WatchedDatabases,
        maintenance: AutoMaintenance,
        alerts: Alerts,
        book: IncidentBook,
        recorder: Recorder,
        log: Any,
        post_checked: Callable[[str, str, dict[str, Any]], None] | None = None,
    ) -> None:
        """``post_checked(db, run_id, post_check)`` takes each post-check a run made of
        the file it swapped in (the database's verification now)."""
        self.post_checked = post_checked
        self.databases = databases
        self.maintenance = maintenance
        self.alerts = alerts
        self.book = book
        self.recorder = recorder
        self.log = log
        self._last = 0.0
        self.ended: dict[str, float] = {}  # db -> when its last run's outcome was told

    def ran_since(self, db: str, since: float) -> bool:
        """True if a run on ``db`` ended (its outcome told) at or after ``since``."""
        return self.ended.get(db, 0.0) >= since

    def tick(self, now: float) -> None:
        if now - self._last < CHECK_EVERY_S:
            return
        self._last = now
        muted = self.maintenance.muted(self.databases.targets(), now)
        already = self.alerts.in_maintenance()
        for db in sorted(muted - already):
            self.alerts.set_maintenance(db, True)
        for db in sorted(already - muted):
            self.alerts.set_maintenance(db, False)
        for path, data in self.maintenance.outcomes():
            self.tell(data)
            outcomes.done(path)

    def tell(self, data: dict[str, Any]) -> None:
        """One run's outcome: through the sinks, and the corruption it repaired resolved."""
        n = outcomes.notification(data)
        sinks = self.alerts.notify(n)
        kind = n.items[0].kind
        run_id = str(data.get("run_id", ""))
        self.ended[str(data.get("db"))] = time.time()
        self.log.info(
            "maintenance outcome told",
            db=data.get("db"),
            run_id=run_id,
            kind=kind,
            outcome=data.get("outcome"),
            sinks=sinks,
        )
        post_check = data.get("post_check") or {}
        swapped_in = kind == "maintenance_repaired" and isinstance(post_check, dict)
        if swapped_in and post_check and self.post_checked is not None:
            self.post_checked(str(data.get("db")), run_id, post_check)
        if kind != "maintenance_repaired" or post_check.get("ok") is not True:
            return
        for inc in self.book.open_incidents():
            if inc.db == data.get("db") and inc.kind in REPAIRED_BY_MAINTENANCE:
                self.recorder.resolve(inc.id, f"repaired by maintenance run {run_id}")
