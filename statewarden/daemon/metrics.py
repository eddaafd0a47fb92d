"""Prometheus metrics of the running daemon, on ``metrics.listen`` (off by default).

Served by prometheus-client's own HTTP server thread (``GET /metrics``). The daemon's
loop hands over a :class:`Snapshot` (:meth:`Metrics.refresh`) at most once a second; a
scrape only reads the latest one, so the server thread never touches the daemon's live
state.

- ``statewarden_open_incidents{kind}``: open incidents by kind (every kind, 0 included);
- ``statewarden_holders{db,kind}``: processes holding each database, by kind;
- ``statewarden_holders_scan_complete{db}``: 1 when the last holder scan saw every
  process, 0 when some could not be inspected;
- ``statewarden_wal_bytes{db}``: size of each database's ``-wal`` (0 when there is none);
- ``statewarden_last_check_damage{db,damage}`` (1 for the last ``check``'s or
  verification's damage class) and ``statewarden_last_check_timestamp_seconds{db}``;
- ``statewarden_alert_outbox_depth{sink}``: notifications waiting for each sink;
- ``statewarden_alerts_delivered{sink}``: notifications each sink accepted since start.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statewarden.alerts import Alerts
from statewarden.daemon.databases import WatchedDatabases
from statewarden.daemon.holders import HolderScans
from statewarden.errors import StatewardenError
from statewarden.incidents import IncidentBook
from statewarden.kinds import KINDS
from statewarden.sidecars import WAL_SUFFIX, sidecar

# prometheus-client (and the http.server, wsgiref and email it loads: ~4 MiB) only when
# metrics are served: off by default, and the idle daemon's memory is its users'.
if TYPE_CHECKING:
    from prometheus_client.core import Metric

REFRESH_S = 1.0


@dataclass
class Snapshot:
    open_incidents: dict[str, int] = field(default_factory=dict)
    holders: dict[tuple[str, str], int] = field(default_factory=dict)  # (db, kind) -> count
    scan_complete: dict[str, int] = field(default_factory=dict)  # db -> 1 / 0
    wal_bytes: dict[str, int] = field(default_factory=dict)
    last_check: dict[str, tuple[float, str]] = field(default_factory=dict)  # db -> (at, damage)
    outbox_depth: dict[str, int] = field(default_factory=dict)
    delivered: dict[str, int] = field(default_factory=dict)


def parse_listen(listen: str) -> tuple[str, int]:
    """``127.0.0.1:9108`` -> (host, port); ``[::1]:9108`` for IPv6 (checked by config)."""
    host, _sep, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


class Metrics:
    def __init__(self, listen: str, take: Callable[[], Snapshot] = Snapshot) -> None:
        self.host, self.port = parse_listen(listen)
        self.snapshot = Snapshot()
        self._take = take
        self._server: Any = None
        self._refreshed_at = 0.0

    @classmethod
    def started(cls, listen: str | None, take: Callable[[], Snapshot], log: Any) -> Metrics | None:
        """Metrics serving on ``listen`` (``metrics.listen``), each snapshot from ``take``;
        None when off or the port is unavailable."""
        if listen is None:
            return None
        metrics = cls(listen, take)
        try:
            metrics.start()
        except StatewardenError as exc:
            log.error("metrics unavailable", error=str(exc))
            return None
        metrics.refresh(force=True)
        log.info("metrics served", url=f"http://{listen}/metrics")
        return metrics

    def refresh(self, *, force: bool = False) -> None:
        """A new snapshot of the daemon's state, at most every :data:`REFRESH_S`."""
        now = time.monotonic()
        if not force and now - self._refreshed_at < REFRESH_S:
            return
        self._refreshed_at = now
        self.update(self._take())

    def start(self) -> None:
        from prometheus_client import CollectorRegistry, start_http_server  # noqa: PLC0415

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        try:
            self._server, _thread = start_http_server(self.port, self.host, registry)
        except OSError as exc:
            raise StatewardenError(
                f"metrics: cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None

    def update(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot  # one reference swap: a scrape sees the old or the new

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

        s = self.snapshot
        g = GaugeMetricFamily("statewarden_open_incidents", "Open incidents", labels=["kind"])
        for kind, n in s.open_incidents.items():
            g.add_metric([kind], n)
        yield g
        g = GaugeMetricFamily(
            "statewarden_holders", "Processes holding a database", labels=["db", "kind"]
        )
        for (db, kind), n in s.holders.items():
            g.add_metric([db, kind], n)
        yield g
        g = GaugeMetricFamily(
            "statewarden_holders_scan_complete",
            "1 when the last holder scan saw every process, 0 when it did not",
            labels=["db"],
        )
        for db, n in s.scan_complete.items():
            g.add_metric([db], n)
        yield g
        g = GaugeMetricFamily("statewarden_wal_bytes", "Size of the -wal file", labels=["db"])
        for db, n in s.wal_bytes.items():
            g.add_metric([db], n)
        yield g
        damage = GaugeMetricFamily(
            "statewarden_last_check_damage",
            "Damage class of the last check",
            labels=["db", "damage"],
        )
        when = GaugeMetricFamily(
            "statewarden_last_check_timestamp_seconds", "When the last check ran", labels=["db"]
        )
        for db, (at, cls) in s.last_check.items():
            damage.add_metric([db, cls], 1)
            when.add_metric([db], at)
        yield damage
        yield when
        g = GaugeMetricFamily(
            "statewarden_alert_outbox_depth", "Notifications waiting for a sink", labels=["sink"]
        )
        for sink, n in s.outbox_depth.items():
            g.add_metric([sink], n)
        yield g
        g = GaugeMetricFamily(
            "statewarden_alerts_delivered",
            "Notifications a sink accepted since start",
            labels=["sink"],
        )
        for sink, n in s.delivered.items():
            g.add_metric([sink], n)
        yield g

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def snapshot_of(
    book: IncidentBook,
    holder_scans: HolderScans,
    databases: WatchedDatabases,
    alerts: Alerts,
    last_check: dict[str, tuple[float, str]],
) -> Snapshot:
    """What a scrape reads: the open incidents, each database's holders and ``-wal``, the
    last checks and the alert sinks' outboxes."""
    snap = Snapshot(open_incidents=dict.fromkeys(KINDS, 0), last_check=dict(last_check))
    for inc in book.open_incidents():
        snap.open_incidents[inc.kind] = snap.open_incidents.get(inc.kind, 0) + 1
    for db, scan in holder_scans.last.items():
        snap.scan_complete[str(db)] = 1 if scan.complete else 0
        for h in scan.holders:
            snap.holders[(str(db), h.kind)] = snap.holders.get((str(db), h.kind), 0) + 1
    for key, m in databases.monitors.items():
        try:
            snap.wal_bytes[key] = os.stat(sidecar(m.target.db, WAL_SUFFIX)).st_size
        except OSError:
            snap.wal_bytes[key] = 0
    for name, s in alerts.status()["sinks"].items():
        snap.outbox_depth[name] = s["pending"]
        snap.delivered[name] = s.get("delivered", 0)
    return snap
