"""Hermes' own word on which holders are its gateway backends: ``gateway_heartbeats``.

Hermes since schema 29 records each running gateway backend in
``gateway_heartbeats(backend_id, pid, started_at, last_heartbeat, profile, host)``. A
holder whose command line does not say what it is (kind ``unknown``: a gateway started
through a wrapper, a renamed interpreter) but that a heartbeat row names is a gateway,
and its ``kind_evidence`` says so. The row must name this host (when it has a host), the
holder's pid, and, when it has ``started_at``, the holder's start time to within a few
seconds: a pid alone may have been reused since.

Read-only (a ``mode=ro`` connection with ``query_only``: never a write, never a
checkpoint), after the scan and only when a holder needs it. Anything that fails (no such
table, a damaged or busy file, an unreadable one) leaves every kind as it was, and so
does a sidecar SQLite must not be let near (a symlink, a FIFO, a folder; a ``-wal``
with no ``-shm``, beside which a reader would create one): nothing is opened then.
"""

from __future__ import annotations

import os

import apsw

from statewarden.errors import DatabaseError
from statewarden.record import FrozenRecord
from statewarden.sidecars import SHM_SUFFIX, WAL_SUFFIX, SidecarFiles
from statewarden.sqlite import no_sidecars, readonly

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from statewarden.holders.report import HolderScan

__all__ = ["Heartbeat", "apply_heartbeats", "read_heartbeats"]

# A heartbeat's started_at and the process's own start time agree to within this.
START_SLACK_S = 5.0
# Kinds a heartbeat may turn into "gateway": only a holder nothing else explains.
REFINABLE_KINDS = frozenset({"unknown"})


class Heartbeat(FrozenRecord):
    """One row of ``gateway_heartbeats``."""

    __slots__ = ("backend_id", "host", "last_heartbeat", "pid", "started_at")
    pid: int
    backend_id: str | None
    started_at: float | None
    last_heartbeat: float | None
    host: str | None

    def __init__(
        self,
        pid: int,
        backend_id: str | None,
        started_at: float | None,
        last_heartbeat: float | None,
        host: str | None,
    ) -> None:
        self._set(
            pid=pid,
            backend_id=backend_id,
            started_at=started_at,
            last_heartbeat=last_heartbeat,
            host=host,
        )


def read_heartbeats(db: str | os.PathLike[str]) -> list[Heartbeat]:
    """The rows of ``gateway_heartbeats``; empty when the table or file cannot be read,
    or when a sidecar is not one SQLite may be let near (:func:`_sidecars_fit`)."""
    fit = _sidecars_fit(db)
    if fit is None:
        return []
    try:
        with readonly(db, busy_timeout_ms=200, immutable=fit) as conn:
            cols = {str(r[1]) for r in conn.execute("PRAGMA table_info(gateway_heartbeats)")}
            if not {"pid"} <= cols:
                return []
            want = ["backend_id", "started_at", "last_heartbeat", "host"]
            select = ", ".join(c if c in cols else "NULL" for c in want)
            rows = conn.execute(f"SELECT pid, {select} FROM gateway_heartbeats").fetchall()
    except (DatabaseError, apsw.Error, OSError):
        return []
    out: list[Heartbeat] = []
    for pid, backend, started, last, host in rows:
        if not isinstance(pid, int):
            continue
        out.append(Heartbeat(pid, _text(backend), _number(started), _number(last), _text(host)))
    return out


def _sidecars_fit(db: str | os.PathLike[str]) -> bool | None:
    """None when a sidecar of ``db`` (named after its real path, as SQLite names them)
    is a symlink or not a regular file (a FIFO ``-journal`` hangs the open), or when a
    ``-wal`` has no ``-shm`` (a reader would create one beside it); else whether the
    file is read ``immutable`` (no sidecar at all: :func:`no_sidecars`)."""
    files = SidecarFiles(db)
    if files.trouble() is not None or files.error is not None:
        return None
    if WAL_SUFFIX in files.present and SHM_SUFFIX not in files.present:
        return None
    return no_sidecars(files.real)


def apply_heartbeats(scans: Iterable[HolderScan], *, host: str | None = None) -> None:
    """Call a holder of kind ``unknown`` that a heartbeat row names a gateway."""
    # What socket.gethostname() answers on Linux (uname's node name), without the socket module.
    here = host if host is not None else os.uname().nodename
    for scan in scans:
        if not any(h.kind in REFINABLE_KINDS for h in scan.holders):
            continue
        beats = read_heartbeats(scan.db)
        for h in scan.holders:
            if h.kind not in REFINABLE_KINDS:
                continue
            for beat in beats:
                if beat.pid != h.pid or (beat.host and beat.host != here):
                    continue
                started = h.started
                if beat.started_at is not None and abs(beat.started_at - started) > START_SLACK_S:
                    continue  # the pid was reused: another process had it then
                h.kind = "gateway"
                name = f" {beat.backend_id}" if beat.backend_id else ""
                h.kind_evidence = f"gateway_heartbeats: backend{name} (pid {beat.pid})"
                break


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
