"""The router on real incident-book updates: grouping, routing, reminders, resolved,
inhibition, and a restart that neither repeats nor forgets a notification."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from statewarden.alerts.message import plain_text
from statewarden.alerts.outbox import Outbox
from statewarden.alerts.router import Route
from statewarden.incidents.book import IncidentBook, Update
from tests.support.alerts import CFG, DB, T0, Rig, sig


class TestGrouping:
    def test_warnings_wait_then_go_together(self, tmp_path: Path) -> None:
        """Two warnings on one database within group_wait are one notification, sent
        only when the wait is over."""
        rig = Rig(tmp_path)
        rig.fire(sig("write_failures", T0))
        rig.fire(sig("wal_growth", T0 + 5))
        assert rig.router.tick(T0 + 29) == []
        (n,) = rig.router.tick(T0 + 30)
        assert [i.kind for i in n.items] == ["write_failures", "wal_growth"]
        assert len(rig.sent("telegram")) == 1
        assert "2 incidents on box, profile default" in plain_text(n)

    def test_critical_goes_at_once(self, tmp_path: Path) -> None:
        """A critical incident is not held for group_wait."""
        rig = Rig(tmp_path)
        rig.fire(sig("corruption", T0))
        (n,) = rig.router.tick(T0)
        assert n.items[0].kind == "corruption"
        assert n.items[0].severity == "critical"

    def test_updates_send_nothing_more(self, tmp_path: Path) -> None:
        """More lines of an open incident update its count; no second notification."""
        rig = Rig(tmp_path)
        rig.fire(sig("corruption", T0))
        rig.router.tick(T0)
        for k in range(1, 50):
            rig.fire(sig("corruption", T0 + k))
        assert rig.router.tick(T0 + 100) == []
        assert len(rig.sent()) == 1


class TestResolvedAndReminders:
    def test_resolved_after_notified(self, tmp_path: Path) -> None:
        """A notified incident that closes sends one 'resolved' to the sinks that had it."""
        rig = Rig(tmp_path)
        rig.fire(sig("stale_holder", T0, key="42"))
        rig.router.tick(T0)
        rig.fire(sig("stale_holder", T0 + 60, key="42", clears=True))
        (n,) = rig.router.tick(T0 + 60)
        assert n.state == "resolved"
        assert plain_text(n).startswith("RESOLVED stale_holder on box")
        assert len(rig.sent("telegram")) == 2

    def test_resolved_before_sent_is_never_notified(self, tmp_path: Path) -> None:
        """A warning that clears inside its group wait sends neither firing nor resolved."""
        rig = Rig(tmp_path)
        rig.fire(sig("wal_growth", T0))
        rig.fire(sig("wal_growth", T0 + 10, clears=True))
        assert rig.router.tick(T0 + 100) == []
        assert rig.sent() == []

    def test_reminder_every_repeat_interval_until_acked(self, tmp_path: Path) -> None:
        """An open incident is reminded after 4 h; once acknowledged, no more reminders."""
        rig = Rig(tmp_path)
        upd = rig.fire(sig("stale_holder", T0, key="1"))
        rig.router.tick(T0)
        assert rig.router.tick(T0 + 4 * 3600 - 1) == []
        (n,) = rig.router.tick(T0 + 4 * 3600)
        assert n.items[0].change == "reminder"
        assert plain_text(n).startswith("REMINDER CRITICAL stale_holder")
        rig.book.ack(upd.incident.id)
        assert rig.router.tick(T0 + 9 * 3600) == []

    def test_reopened_is_notified_again(self, tmp_path: Path) -> None:
        """Resolved, notified, then firing again: a new notification saying 'reopened'."""
        rig = Rig(tmp_path)
        rig.fire(sig("stale_holder", T0, key="1"))
        rig.router.tick(T0)
        rig.fire(sig("stale_holder", T0 + 10, key="1", clears=True))
        rig.router.tick(T0 + 10)
        rig.fire(sig("stale_holder", T0 + 20, key="1"))
        (n,) = rig.router.tick(T0 + 20)
        assert n.items[0].change == "reopened"
        assert len(set(rig.sent())) == 3


class TestInhibition:
    def test_maintenance_mutes_holder_incidents(self, tmp_path: Path) -> None:
        """During a maintenance run holder/unit incidents are muted; one still open when
        the run ends is notified then; one that cleared during it never is."""
        rig = Rig(tmp_path)
        rig.router.set_maintenance(DB, True)
        rig.fire(sig("stale_holder", T0, key="1"))
        rig.fire(sig("crash_loop", T0, key="hermes-gateway.service"))
        assert rig.router.tick(T0 + 60) == []
        assert rig.router.state_of(1)["state"] == "muted: maintenance"
        rig.fire(sig("stale_holder", T0 + 61, key="1", clears=True))
        rig.router.set_maintenance(DB, False, now=T0 + 62)
        (n,) = rig.router.tick(T0 + 200)
        assert [i.kind for i in n.items] == ["crash_loop"]

    def test_corruption_folds_narrower_incidents(self, tmp_path: Path) -> None:
        """With corruption open, write_failures on the same db is listed in it, not sent
        alone; after the corruption resolves, the still-open one is sent."""
        rig = Rig(tmp_path)
        rig.fire(sig("write_failures", T0))
        rig.fire(sig("corruption", T0 + 1))
        (n,) = rig.router.tick(T0 + 1)
        assert [i.kind for i in n.items] == ["corruption"]
        assert n.items[0].folded == ["write_failures #1 (x1)"]
        assert "also open:  write_failures #1 (x1)" in plain_text(n)
        assert rig.router.state_of(1)["state"] == "muted: folded into #2"
        corruption = rig.book.get(2)
        corruption.state = "resolved"
        rig.router.submit(Update("resolved", corruption), now=T0 + 100)
        sent = rig.router.tick(T0 + 200)
        assert sorted(i.kind for n in sent for i in n.items) == ["corruption", "write_failures"]


class TestRouting:
    def test_severity_routes(self, tmp_path: Path) -> None:
        """An info incident goes to journald only (telegram takes warning and above)."""
        rig = Rig(tmp_path)
        rig.fire(sig("multi_writer", T0))
        rig.router.tick(T0 + 30)
        assert len(rig.sent("journald")) == 1
        assert rig.sent("telegram") == []

    def test_kinds_route(self, tmp_path: Path) -> None:
        """A sink limited to some kinds gets only those; an incident no sink takes is 'not routed'."""
        rig = Rig(tmp_path)
        rig.router.routes = {"telegram": Route("info", frozenset({"corruption"}))}
        rig.fire(sig("wal_growth", T0))
        rig.fire(sig("corruption", T0))
        rig.router.tick(T0 + 30)
        (entry,) = rig.outbox.pending("telegram")
        assert [i.kind for i in entry.notification.items] == ["corruption"]
        assert rig.router.state_of(1)["state"] == "muted: not routed"


class TestRestart:
    def test_restart_repeats_nothing_and_forgets_nothing(self, tmp_path: Path) -> None:
        """After a restart, an incident already queued is not queued again; one that
        opened but whose group had not been sent (killed during group wait) is sent."""
        rig = Rig(tmp_path)
        rig.fire(sig("corruption", T0))
        rig.router.tick(T0)
        rig.fire(sig("wal_growth", T0 + 1))  # waiting 30 s when the process dies
        book = IncidentBook(tmp_path / "incidents.json")
        outbox = Outbox(tmp_path / "outbox", max_entries=100)
        rig.outbox = outbox
        router = rig.make_router()
        router.reconcile(book.incidents.values(), now=T0 + 5)
        (n,) = router.tick(T0 + 60)
        assert [i.kind for i in n.items] == ["wal_growth"]
        assert len(outbox.pending("journald")) == 2

    def test_requeue_after_lost_router_state_is_deduplicated(self, tmp_path: Path) -> None:
        """The router's own file lost after the outbox write: the same notification is
        made again and the outbox drops it (same key)."""
        rig = Rig(tmp_path)
        rig.fire(sig("corruption", T0))
        rig.router.tick(T0)
        (tmp_path / "alerts.json").unlink()
        outbox = Outbox(tmp_path / "outbox", max_entries=100)
        rig.outbox = outbox
        router = rig.make_router()
        router.reconcile(IncidentBook(tmp_path / "incidents.json").incidents.values(), T0 + 1)
        router.tick(T0 + 1)
        assert len(outbox.pending("journald")) == 1

    def test_queued_before_a_kill_is_not_queued_again_with_others(self, tmp_path: Path) -> None:
        """Killed after the outbox write and before alerts.json said so, while another
        incident waited for its group: after the restart the first is not made again in
        a notification with the second (a new key the outbox cannot recognise), it is
        taken as queued from the outbox, and each incident is sent exactly once."""
        rig = Rig(tmp_path)
        rig.fire(sig("corruption", T0))
        rig.router.tick(T0)
        rig.fire(sig("wal_growth", T0 + 1))  # waiting for its group when the process dies
        (tmp_path / "alerts.json").unlink()
        outbox = Outbox(tmp_path / "outbox", max_entries=100)
        rig.outbox = outbox
        router = rig.make_router()
        router.reconcile(IncidentBook(tmp_path / "incidents.json").incidents.values(), T0 + 5)
        router.tick(T0 + 5)
        router.tick(T0 + 60)
        kinds = [i.kind for e in outbox.pending("journald") for i in e.notification.items]
        assert sorted(kinds) == ["corruption", "wal_growth"]
        assert router.state_of(1)["state"].startswith("queued")

    def test_no_resolved_when_disabled(self, tmp_path: Path) -> None:
        """send_resolved: false sends no 'resolved'."""
        rig = Rig(tmp_path, dataclasses.replace(CFG, send_resolved=False))
        rig.fire(sig("stale_holder", T0, key="1"))
        rig.router.tick(T0)
        rig.fire(sig("stale_holder", T0 + 5, key="1", clears=True))
        assert rig.router.tick(T0 + 100) == []


class TestLongRun:
    def test_muted_reminder_does_not_spin(self, tmp_path: Path) -> None:
        """A reminder that falls during maintenance is muted, and the next one is due a
        repeat_interval later (not at once, over and over)."""
        rig = Rig(tmp_path)
        rig.fire(sig("stale_holder", T0, key="1"))
        rig.router.tick(T0)
        rig.router.set_maintenance(DB, True)
        assert rig.router.tick(T0 + 4 * 3600) == []
        deadline = rig.router.next_deadline()
        assert deadline is not None
        assert deadline >= T0 + 8 * 3600

    def test_resolved_incidents_are_forgotten_past_the_bound(self, tmp_path: Path) -> None:
        """Thousands of incidents that opened and resolved leave a bounded router."""
        rig = Rig(tmp_path)
        rig.book.keep_resolved = 10_000
        rig.book.path = None  # in memory: 4,200 saves of a growing book would be the test
        for k in range(2100):
            rig.fire(sig("stale_holder", T0 + k, key=str(k)))
            rig.fire(sig("stale_holder", T0 + k, key=str(k), clears=True))
        rig.router.tick(T0 + 3000)
        assert len(rig.router.incidents) == 2000
        assert len(rig.router.notified) <= 2000


class TestEscalationAndDamage:
    def test_escalation_is_notified_again(self, tmp_path: Path) -> None:
        """A notified warning that escalates to critical is sent again, saying so, at once."""
        rig = Rig(tmp_path)
        rig.fire(sig("write_failures", T0))
        rig.router.tick(T0 + 30)
        rig.fire(sig("write_failures", T0 + 40, severity="critical"))
        (n,) = rig.router.tick(T0 + 40)
        assert n.items[0].change == "escalated"
        assert plain_text(n).startswith("CRITICAL write_failures")

    def test_damaged_router_state_is_set_aside(self, tmp_path: Path) -> None:
        """An unreadable alerts.json is renamed *.damaged-<time>; what the book has open is
        queued again and the outbox keeps it from going out twice."""
        rig = Rig(tmp_path)
        rig.fire(sig("corruption", T0))
        rig.router.tick(T0)
        (tmp_path / "alerts.json").write_text('{"incidents": {"1": {"bogus": 1}}}')
        router = rig.make_router()
        assert list(tmp_path.glob("alerts.damaged-*"))
        router.reconcile(IncidentBook(tmp_path / "incidents.json").incidents.values(), T0 + 1)
        router.tick(T0 + 1)
        assert len(rig.outbox.pending("journald")) == 1


class TestNotifiedMeansDelivered:
    def test_notified_only_once_a_sink_confirmed(self, tmp_path: Path) -> None:
        """Queued is not notified; one sink's confirmation is, naming the one still
        waiting; a sink that set it aside is said so; the state survives a restart."""
        rig = Rig(tmp_path)
        rig.fire(sig("corruption", T0))
        rig.router.tick(T0)
        state = rig.router.state_of(1)
        assert state["state"] == "queued firing, not delivered yet (journald, telegram)"
        (journald,) = rig.outbox.pending("journald")
        rig.outbox.done(journald)
        rig.router.confirmed("journald", journald.notification, "delivered")
        assert rig.router.state_of(1)["state"] == "notified firing (not yet by telegram)"
        restarted = rig.make_router()
        assert restarted.state_of(1)["state"] == "notified firing (not yet by telegram)"
        (telegram,) = rig.outbox.pending("telegram")
        rig.router.confirmed("telegram", telegram.notification, "delivered")
        assert rig.router.state_of(1) == {
            "state": "notified firing",
            "at": T0,
            "sinks": ["journald", "telegram"],
            "waiting": [],
        }

    def test_set_aside_everywhere_is_not_notified(self, tmp_path: Path) -> None:
        """A notification set aside by every sink is not "notified": the incident's state says which
        sinks refused it."""
        rig = Rig(tmp_path)
        rig.fire(sig("corruption", T0))
        rig.router.tick(T0)
        for sink in ("journald", "telegram"):
            (entry,) = rig.outbox.pending(sink)
            rig.outbox.set_aside(entry, "400 Bad Request")
            rig.router.confirmed(sink, entry.notification, "set aside")
        assert rig.router.state_of(1)["state"] == (
            "not delivered: firing refused by journald, telegram"
        )

    def test_made_again_after_a_restart_and_already_delivered(self, tmp_path: Path) -> None:
        """Delivered, then stopped before alerts.json said so: the same notification made
        again is not queued again (the outbox knows its key) and counts as delivered."""
        rig = Rig(tmp_path)
        rig.fire(sig("corruption", T0))
        rig.router.tick(T0)
        for sink in ("journald", "telegram"):
            (entry,) = rig.outbox.pending(sink)
            rig.outbox.done(entry)  # delivered; the router was never told
        (tmp_path / "alerts.json").unlink()
        again = rig.make_router()
        again.reconcile(rig.book.incidents.values(), now=T0 + 1)
        again.tick(T0 + 1)
        assert rig.outbox.pending() == []
        assert again.state_of(1)["state"] == "notified firing"
