"""Incident changes -> notifications: grouping, routing, reminders, inhibition.

Alertmanager's semantics, on the incident book's :class:`~statewarden.incidents.book.Update`s:

- **Grouping**: incidents of one database that fire together are one notification. The
  first one of a group waits ``alerts.group_wait`` (30 s) for the others; an incident of a
  severity in ``alerts.no_wait`` (``critical``) sends its group at once.
- **One notification per incident opening** (opened, reopened after it was resolved, or
  escalated to a higher severity); plain updates (another matching line) send nothing.
- **Reminders** every ``alerts.repeat_interval`` (4 h) while an incident stays open and is
  not acknowledged.
- **Resolved**: one notification when an incident that was notified closes
  (``alerts.send_resolved``). An incident that resolves before its group was sent is
  never notified at all, and one that reopens before its "resolved" went out sends neither.
- **Inhibition**: while a maintenance run is in progress on a database, the holder and
  unit incidents it causes (:data:`MAINTENANCE_MUTES`) are muted; while a ``corruption``
  incident is open on a database, the narrower ones on it (:data:`FOLDED_INTO_CORRUPTION`)
  are not sent on their own but listed in the corruption notification. A muted incident
  still open when the inhibition ends is notified then.
- **Routing**: each sink takes the incidents at or above its ``min_severity`` and of its
  ``kinds`` (empty = every kind).

What was notified is saved (``<state_dir>/alerts.json``) after the notification is in the
outbox, and again when each sink confirms it (:meth:`Router.confirmed`): ``incidents``
says "notified" only after a sink delivered it, "queued ..., not delivered yet" before.
A restart neither repeats nor forgets one: :meth:`Router.reconcile` compares it
with the incident book and queues what the book has that was never sent.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statewarden.alerts.message import Item, Notification, item_for, severity_rank
from statewarden.alerts.outbox import Outbox
from statewarden.alerts.silences import Silence
from statewarden.atomic import write_atomic
from statewarden.config import AlertsConfig
from statewarden.incidents import Incident, Update
from statewarden.kinds import KINDS

# Views of the kinds table (each kind's ``muted_in_maintenance``, ``folded_into_corruption``).
MAINTENANCE_MUTES = frozenset(n for n, k in KINDS.items() if k.muted_in_maintenance)
FOLDED_INTO_CORRUPTION = frozenset(n for n, k in KINDS.items() if k.folded_into_corruption)
FOLDED_SHOWN = 10  # folded incidents listed by name in a corruption notification
KEEP_RESOLVED = 2000  # resolved incidents remembered (the book itself keeps 500)


@dataclass(frozen=True)
class Route:
    """Which incidents one sink takes."""

    min_severity: str = "info"
    kinds: frozenset[str] = frozenset()

    def accepts(self, item: Item) -> bool:
        if severity_rank(item.severity) < severity_rank(self.min_severity):
            return False
        return not self.kinds or item.kind in self.kinds


@dataclass
class Notified:
    """What the router did about one incident (persisted)."""

    first_seen: float
    n: int = 0  # notifications queued for it so far
    notified: str = ""  # "", "firing" or "resolved": the last state sent
    at: float = 0.0  # when the last notification was queued
    muted: str = ""  # why it was not sent: "maintenance", "folded into #N", "not routed"
    sinks: list[str] = field(default_factory=list)
    # Outbox keys queued for each sink and not yet confirmed by it, and the state
    # ("firing"/"resolved") of the last notification each sink confirmed.
    pending: dict[str, list[str]] = field(default_factory=dict)
    delivered: dict[str, str] = field(default_factory=dict)
    set_aside: dict[str, str] = field(default_factory=dict)  # sink -> why it refused the last


@dataclass
class _Group:
    deadline: float
    changes: dict[int, str] = field(default_factory=dict)  # incident id -> change


class Router:
    def __init__(
        self,
        config: AlertsConfig,
        outbox: Outbox,
        routes: dict[str, Route],
        *,
        state_path: Path | None,
        host: str,
        profile_of: Callable[[str], str] = lambda db: "default",
        holders_of: Callable[[str], list[str]] = lambda db: [],
    ) -> None:
        self.config = config
        self.outbox = outbox
        self.routes = routes
        self.state_path = state_path
        self.host = host
        self.profile_of = profile_of
        self.holders_of = holders_of
        self.incidents: dict[int, Incident] = {}
        self.notified: dict[int, Notified] = {}
        self.maintenance: set[str] = set()
        self.silences: list[Silence] = []  # the active ones (Alerts keeps them current)
        self._groups: dict[tuple[str, str], _Group] = {}
        self._rates: dict[int, float | None] = {}
        self.save_error = ""
        self._load()

    # ------------------------------------------------------------- persistence

    def _load(self) -> None:
        if self.state_path is None:
            return
        try:
            self.notified = read_notified(self.state_path, strict=True)
        except (OSError, ValueError, TypeError, AttributeError):
            # Unreadable: start afresh; reconcile re-queues what is open (the outbox's keys
            # keep what was already delivered from going out twice).
            with contextlib.suppress(OSError):
                self.state_path.rename(self.state_path.with_suffix(f".damaged-{int(time.time())}"))
            self.notified = {}

    def save(self) -> None:
        if self.state_path is None:
            return
        data = {"incidents": {str(k): asdict(v) for k, v in self.notified.items()}}
        try:
            write_atomic(self.state_path, json.dumps(data))
        except OSError as exc:
            self.save_error = f"{self.state_path}: {exc.strerror or exc}"
        else:
            self.save_error = ""

    def _record(self, inc: Incident) -> Notified:
        rec = self.notified.get(inc.id)
        if rec is None or rec.first_seen != inc.first_seen:
            # A new incident, or a reused id (the book was started afresh).
            rec = Notified(first_seen=inc.first_seen)
            self.notified[inc.id] = rec
        return rec

    # ------------------------------------------------------------- input

    def reconcile(self, incidents: Iterable[Incident], now: float | None = None) -> None:
        """After a start: queue what the book has that was never notified (or never closed)."""
        now = time.time() if now is None else now
        live = {inc.id: inc for inc in incidents}
        self.incidents.update(live)
        for stale in set(self.notified) - set(live):
            del self.notified[stale]
        queued = self._queued_in_outbox()
        for inc in live.values():
            rec = self._record(inc)
            if inc.state == "open" and not rec.notified and inc.id in queued:
                self._take_as_queued(rec, queued[inc.id], now)
            elif inc.state == "open" and rec.notified != "firing":
                self._add(inc, "opened", now)
            elif inc.state == "resolved" and rec.notified == "firing":
                self._add(inc, "resolved", now)

    def _queued_in_outbox(self) -> dict[int, list[tuple[str, str]]]:
        """Incident id -> (sink, key) of each firing notification waiting in the outbox
        that holds it. A run killed after the outbox write and before it saved so
        (``alerts.json``) left them there: made again they would be grouped with other
        incidents under a new key the outbox cannot recognise, and sent twice."""
        out: dict[int, list[tuple[str, str]]] = {}
        for entry in self.outbox.pending():
            if entry.notification.state == "firing":
                for item in entry.notification.items:
                    out.setdefault(item.incident, []).append((entry.sink, entry.key))
        return out

    def _take_as_queued(self, rec: Notified, queued: list[tuple[str, str]], now: float) -> None:
        """``rec`` as the killed run would have saved it once its notification was queued."""
        for sink, key in queued:
            keys = rec.pending.setdefault(sink, [])
            if key not in keys:
                keys.append(key)
        rec.sinks = sorted({*rec.sinks, *(sink for sink, _ in queued)})
        rec.n += 1
        rec.notified = "firing"
        rec.at = now
        rec.muted = ""

    def submit(self, update: Update, now: float | None = None) -> None:
        """One incident change from the book."""
        now = time.time() if now is None else now
        inc = update.incident
        self.incidents[inc.id] = inc
        if update.rate_per_min is not None:
            self._rates[inc.id] = update.rate_per_min
        if update.change == "updated":
            return
        rec = self._record(inc)
        firing, resolved = (
            self._groups.get((inc.db, "firing")),
            self._groups.get((inc.db, "resolved")),
        )
        if update.change == "resolved":
            if firing is not None and firing.changes.pop(inc.id, None) is not None:
                return  # resolved before it was sent: never notified at all
            if rec.notified == "firing" and self.config.send_resolved:
                self._add(inc, "resolved", now)
            rec.muted = ""
            if inc.kind == "corruption":
                self._unfold(inc.db, now)
            return
        if resolved is not None and resolved.changes.pop(inc.id, None) is not None:
            return  # reopened before its "resolved" went out: nothing changed for the reader
        if update.change in ("opened", "reopened") or rec.notified != "firing":
            self._add(inc, "opened" if rec.notified != "resolved" else "reopened", now)
        elif update.change == "escalated":
            self._add(inc, "escalated", now)

    def set_maintenance(self, db: str, active: bool, now: float | None = None) -> None:
        """A maintenance run started (mutes holder and unit incidents) or ended on ``db``."""
        now = time.time() if now is None else now
        if active:
            self.maintenance.add(db)
            return
        self.maintenance.discard(db)
        for inc in self.incidents.values():
            rec = self.notified.get(inc.id)
            if inc.db == db and inc.state == "open" and rec and rec.muted == "maintenance":
                self._add(inc, "opened", now)

    def silence_of(self, kind: str, db: str) -> Silence | None:
        """The active silence that mutes notifications of ``kind`` on ``db``, if any."""
        for s in self.silences:
            if s.matches(kind, db):
                return s
        return None

    def set_silences(self, active: list[Silence], now: float | None = None) -> list[Silence]:
        """The silences in force now; those that ended since the last call (returned)
        notify what they muted: an incident still open, or one that resolved while its
        "firing" had gone out."""
        now = time.time() if now is None else now
        still = {s.id for s in active}
        ended = [s for s in self.silences if s.id not in still]
        self.silences = list(active)
        if not ended:
            return []
        for inc in self.incidents.values():
            rec = self.notified.get(inc.id)
            if rec is None or not rec.muted.startswith("silence"):
                continue
            if not any(s.matches(inc.kind, inc.db) for s in ended):
                continue
            if self.silence_of(inc.kind, inc.db) is not None:
                continue  # another silence still covers it
            if inc.state == "open":
                self._add(inc, "reminder" if rec.notified == "firing" else "opened", now)
            elif rec.notified == "firing" and self.config.send_resolved:
                self._add(inc, "resolved", now)
            else:
                rec.muted = ""
        return ended

    def next_silence_end(self) -> float | None:
        return min((s.ends_at for s in self.silences), default=None)

    def _unfold(self, db: str, now: float) -> None:
        for inc in self.incidents.values():
            rec = self.notified.get(inc.id)
            if (
                inc.db == db
                and inc.state == "open"
                and rec is not None
                and rec.muted.startswith("folded")
            ):
                self._add(inc, "opened", now)

    def _add(self, inc: Incident, change: str, now: float) -> None:
        state = "resolved" if change == "resolved" else "firing"
        wait = 0.0 if inc.severity in self.config.no_wait else self.config.group_wait
        group = self._groups.get((inc.db, state))
        if group is None:
            group = self._groups[(inc.db, state)] = _Group(deadline=now + wait)
        group.deadline = min(group.deadline, now + wait)
        group.changes.setdefault(inc.id, change)

    # ------------------------------------------------------------- output

    def next_deadline(self) -> float | None:
        """When the next group is due or the next reminder is (epoch seconds)."""
        times = [g.deadline for g in self._groups.values() if g.changes]
        reminders = [
            rec.at + self.config.repeat_interval
            for inc_id, rec in self.notified.items()
            if rec.notified == "firing" and self._remindable(inc_id)
        ]
        times += reminders
        silence_end = self.next_silence_end()
        if silence_end is not None:
            times.append(silence_end)
        return min(times) if times else None

    def _remindable(self, inc_id: int) -> bool:
        inc = self.incidents.get(inc_id)
        return inc is not None and inc.state == "open" and not inc.acked

    def tick(self, now: float | None = None) -> list[Notification]:
        """Queue reminders that are due and every group whose wait is over."""
        now = time.time() if now is None else now
        for inc_id, rec in self.notified.items():
            inc = self.incidents.get(inc_id)
            if (
                inc is not None
                and rec.notified == "firing"
                and self._remindable(inc_id)
                and now - rec.at >= self.config.repeat_interval
            ):
                group = self._groups.setdefault((inc.db, "firing"), _Group(deadline=now))
                group.deadline = min(group.deadline, now)
                group.changes.setdefault(inc_id, "reminder")
                rec.at = now  # the next one is due a repeat_interval later, even if muted
        sent: list[Notification] = []
        for key in [k for k, g in self._groups.items() if g.deadline <= now]:
            group = self._groups.pop(key)
            notification = self._send(key[0], key[1], group, now)
            if notification is not None:
                sent.append(notification)
        if sent:
            self.save()
        self._prune()
        return sent

    def _prune(self) -> None:
        """Forget the oldest resolved incidents past :data:`KEEP_RESOLVED` (memory stays flat)."""
        resolved = [i for i in self.incidents.values() if i.state == "resolved"]
        if len(resolved) <= KEEP_RESOLVED:
            return
        waiting = {i for g in self._groups.values() for i in g.changes}
        resolved.sort(key=lambda i: i.resolved_at or 0.0)
        for inc in resolved[: len(resolved) - KEEP_RESOLVED]:
            if inc.id in waiting:
                continue
            del self.incidents[inc.id]
            self.notified.pop(inc.id, None)
            self._rates.pop(inc.id, None)

    def _corruption_open(self, db: str) -> Incident | None:
        for inc in self.incidents.values():
            if inc.db == db and inc.kind == "corruption" and inc.state == "open":
                return inc
        return None

    def _folded_names(self, db: str) -> list[str]:
        folded = [
            f"{i.kind} #{i.id} (x{i.count})"
            for i in self.incidents.values()
            if i.db == db and i.state == "open" and i.kind in FOLDED_INTO_CORRUPTION
        ]
        if len(folded) > FOLDED_SHOWN:
            folded = [*folded[:FOLDED_SHOWN], f"and {len(folded) - FOLDED_SHOWN} more"]
        return folded

    def _send(self, db: str, state: str, group: _Group, now: float) -> Notification | None:
        items: list[Item] = []
        keys: list[str] = []
        corruption = self._corruption_open(db) if state == "firing" else None
        profile = self.profile_of(db)
        for inc_id, change in sorted(group.changes.items()):
            inc = self.incidents.get(inc_id)
            if inc is None:
                continue
            rec = self._record(inc)
            silence = self.silence_of(inc.kind, db)
            if silence is not None and (state == "firing" or rec.notified == "firing"):
                rec.muted = f"silence #{silence.id}"
                continue
            if state == "firing":
                if inc.state != "open":
                    continue
                if db in self.maintenance and inc.kind in MAINTENANCE_MUTES:
                    rec.muted = "maintenance"
                    continue
                if corruption is not None and inc.kind in FOLDED_INTO_CORRUPTION:
                    rec.muted = f"folded into #{corruption.id}"
                    continue
            elif rec.notified != "firing":
                continue
            item = item_for(
                inc,
                change,
                profile=profile,
                holders=self.holders_of(db) if state == "firing" else [],
                folded=self._folded_names(db) if inc.kind == "corruption" else [],
                rate_per_min=self._rates.get(inc.id),
            )
            if state == "resolved":
                sinks = [s for s in rec.sinks if s in self.routes]
            else:
                sinks = [name for name, route in self.routes.items() if route.accepts(item)]
            if not sinks:
                rec.muted = "not routed"
                continue
            items.append(item)
            keys.append(f"i{inc.id}@{int(inc.first_seen)}.{rec.n + 1}")
        if not items:
            return None
        notification = Notification(
            key=f"{state}:{','.join(keys)}",
            state="resolved" if state == "resolved" else "firing",
            host=self.host,
            created_at=now,
            items=items,
        )
        for name, route in self.routes.items():
            if state == "resolved":
                mine = [i for i in items if name in self.notified[i.incident].sinks]
            else:
                mine = [i for i in items if route.accepts(i)]
            if mine:
                _queue(self.outbox, name, notification, mine, self.notified)
        _mark_notified(self.notified, items, state, now, self.routes)
        return notification

    def firing_for(self, sink: str, now: float) -> Notification | None:
        """Every incident ``sink`` was told is firing and that is still open, not muted,
        in one notification (Alertmanager's re-post); None when there is none."""
        items = []
        for inc_id, rec in sorted(self.notified.items()):
            inc = self.incidents.get(inc_id)
            if inc is None or inc.state != "open" or rec.muted or rec.notified != "firing":
                continue
            if sink not in rec.sinks:
                continue
            items.append(
                item_for(
                    inc,
                    "reminder",
                    profile=self.profile_of(inc.db),
                    rate_per_min=self._rates.get(inc.id),
                )
            )
        if not items:
            return None
        return Notification(f"{sink}-refresh:{now:.6f}", "firing", self.host, now, items)

    def confirmed(self, sink: str, n: Notification, outcome: str) -> None:
        """``sink`` delivered (or set aside) notification ``n``: only now may ``incidents``
        say it went out."""
        for item in n.items:
            rec = self.notified.get(item.incident)
            if rec is None:
                continue
            keys = rec.pending.get(sink, [])
            if n.key in keys:
                keys.remove(n.key)
            if not keys:
                rec.pending.pop(sink, None)
            if outcome == "delivered":
                rec.delivered[sink] = n.state
                rec.set_aside.pop(sink, None)
            else:
                rec.set_aside[sink] = outcome
        self.save()

    # ------------------------------------------------------------- queries

    def state_of(self, incident_id: int) -> dict[str, Any]:
        """The notification state of one incident, for ``statewardenctl incidents``."""
        for (_db, state), group in self._groups.items():
            if incident_id in group.changes:
                return {"state": f"waiting ({state})", "due": group.deadline}
        rec = self.notified.get(incident_id)
        if rec is not None:
            for sink, keys in rec.pending.items():
                # Dropped from a full outbox: it will never be confirmed.
                keys[:] = [k for k in keys if self.outbox.known(sink, k)]
            rec.pending = {s: keys for s, keys in rec.pending.items() if keys}
        return describe_notified(rec)


def read_notified(path: Path, *, strict: bool = False) -> dict[int, Notified]:
    """The router's saved state; empty if missing (or, unless ``strict``, unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        out = {}
        for k, raw in data.get("incidents", {}).items():
            rec = Notified(**raw)
            if "delivered" not in raw and rec.notified:
                # Saved before deliveries were confirmed: what was queued is taken as sent.
                rec.delivered = dict.fromkeys(rec.sinks, rec.notified)
            out[int(k)] = rec
        return out
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, AttributeError):
        if strict:
            raise
        return {}


def describe_notified(rec: Notified | None) -> dict[str, Any]:
    """ "notified firing" only once a sink confirmed it; "queued firing, not delivered
    yet" while every sink still has it in the outbox."""
    if rec is None or (not rec.muted and not rec.notified):
        return {"state": "not notified"}
    if rec.muted:
        return {"state": f"muted: {rec.muted}"}
    waiting = sorted(s for s, keys in rec.pending.items() if keys)
    done = sorted(s for s, st in rec.delivered.items() if st == rec.notified and s not in waiting)
    out: dict[str, Any] = {"at": rec.at, "sinks": done, "waiting": waiting}
    if done:
        out["state"] = f"notified {rec.notified}"
        if waiting:
            out["state"] += f" (not yet by {', '.join(waiting)})"
    elif waiting:
        out["state"] = f"queued {rec.notified}, not delivered yet ({', '.join(waiting)})"
    else:
        refused = sorted(rec.set_aside)
        out["state"] = f"not delivered: {rec.notified} " + (
            f"refused by {', '.join(refused)}" if refused else "dropped from the outbox"
        )
    return out


def _queue(
    outbox: Outbox,
    sink: str,
    notification: Notification,
    mine: list[Item],
    notified: dict[int, Notified],
) -> None:
    """Put the part of ``notification`` holding ``mine`` (the items ``sink`` takes) in
    ``sink``'s outbox, and note on each item's record whether it is pending there or
    went already (made again after a restart, and delivered before it)."""
    part = notification
    if len(mine) != len(notification.items):
        part = Notification(
            notification.key,
            notification.state,
            notification.host,
            notification.created_at,
            mine,
            notification.dropped,
        )
    queued = outbox.put(part, sink)
    for item in mine:
        rec = notified[item.incident]
        if queued is None and outbox.delivered(sink, part.key):
            rec.delivered[sink] = part.state
        else:
            rec.pending.setdefault(sink, []).append(part.key)


def _mark_notified(
    notified: dict[int, Notified],
    items: list[Item],
    state: str,
    now: float,
    routes: Mapping[str, Route],
) -> None:
    """Each item's record: told once more, of ``state``, at ``now``, no longer muted;
    a firing one remembers every sink it went to (its resolution goes to those)."""
    for item in items:
        rec = notified[item.incident]
        rec.n += 1
        rec.notified = state
        rec.at = now
        rec.muted = ""
        if state == "firing":
            rec.sinks = sorted({*rec.sinks, *(n for n, r in routes.items() if r.accepts(item))})
