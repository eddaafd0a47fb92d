"""The journald sink into a real journald (the private systemd namespace, as root): the
entries read back with ``journalctl -o json`` carry the kind's MESSAGE_ID, PRIORITY and
the STATEWARDEN_* fields, and ``journalctl -x`` shows the catalogue's text; each incident
change is one entry under its MESSAGE_ID, also when the outbox cannot be written; the
committed catalogue file is the one the code generates."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from statewarden.alerts.catalog import catalog_text
from statewarden.incidents.signals import KINDS
from tests.support.repo import REPO
from tests.support.systemd_harness import UserSystemd, unavailable_reason, user_systemd

CATALOG = REPO / "systemd" / "statewarden.catalog"

SEND = textwrap.dedent(
    """\
    import asyncio
    from statewarden.alerts.journald_sink import JournaldSink
    from statewarden.alerts.message import Item, Notification
    from statewarden.alerts.outbox import Entry

    corrupt = Item(3, "corruption", "critical", "/home/u/.hermes/state.db", "work",
                   "state.db routing save failed: database disk image is malformed", "opened",
                   1.0, 2.0, 4, evidence=["ERROR gateway.session: malformed"],
                   next_step="statewardenctl check --profile work")
    stale = Item(5, "stale_holder", "critical", "/home/u/.hermes/state.db", "work",
                 "pid 42 holds a deleted state.db-wal", "resolved", 1.0, 2.0, 1)
    firing = Notification("firing:i3@1.1", "firing", "box", 1.0, [corrupt])
    resolved = Notification("resolved:i5@1.2", "resolved", "box", 1.0, [stale])
    sink = JournaldSink()
    assert sink.sender.available, "no journal socket"
    for n in (firing, resolved):
        print(asyncio.run(sink.deliver(Entry(1, "journald", n, 1.0), lambda p: None)))
    """
)

# What the daemon does with each incident update (``Daemon._on_update``): the announcer
# (its own log line and the timeline) and the alert service (router, outbox, sinks), with
# the daemon's logging set up as under systemd. argv: state folder, mode ("ok"; "full":
# the state folder a full 64 KiB tmpfs, so no outbox entry can be written; "planted": the
# outbox folder a symlink someone planted, so nothing is written through it).
CHANGES = textwrap.dedent(
    """\
    import asyncio, json, sys
    from pathlib import Path
    from tests.support.full_disk import mount_full_tmpfs
    state, mode = Path(sys.argv[1]), sys.argv[2]
    if mode == "full":
        mount_full_tmpfs(state)
    if mode == "planted":
        (state / "elsewhere").mkdir(mode=0o700)
        (state / "outbox").symlink_to(state / "elsewhere")
    from statewarden import logs
    from statewarden.alerts.announce import Announcer
    from statewarden.alerts.service import Alerts
    from statewarden.config import AlertsConfig
    from statewarden.incidents.book import IncidentBook
    from statewarden.incidents.signals import Signal
    from statewarden.incidents.timeline import Timeline

    assert logs.configure("info", "journald") == "journald"
    log = logs.get_logger()
    db = f"/home/u/.hermes-{mode}/state.db"
    alerts = Alerts(AlertsConfig(group_wait=0.2), state, log=log, host="box")
    announcer = Announcer(Timeline(state / "timeline"))
    book = IncidentBook(None)
    signals = [
        Signal("wal_growth", db, "WAL 60 MB and growing", source="files"),
        Signal("wal_growth", db, "WAL 70 MB and growing", source="files"),
        Signal("wal_growth", db, "WAL 900 MB", source="files", severity="critical"),
        Signal("wal_growth", db, "WAL checkpointed", source="files", clears=True),
    ]

    async def main():
        task = asyncio.create_task(alerts.run())
        changes = []
        for s in signals:
            update = book.record(s)
            changes.append(update.change)
            announcer.submit(update)
            alerts.submit(update)
            notified = len([c for c in changes if c != "updated"])
            for _ in range(200):  # past the group wait, until the sink took it
                await asyncio.sleep(0.05)
                if alerts.status()["sinks"]["journald"]["delivered"] >= notified:
                    break
        await asyncio.sleep(0.5)  # time for a second entry, were there one
        status = alerts.status()
        task.cancel()
        await alerts.close()
        return {"changes": changes, "persist_error": status["persist_error"],
                "delivered": status["sinks"]["journald"]["delivered"]}

    print(json.dumps(asyncio.run(main())))
    """
)


class TestCatalogFile:
    def test_committed_catalog_is_generated(self) -> None:
        """systemd/statewarden.catalog equals `python -m statewarden.alerts.catalog`."""
        assert CATALOG.read_text() == catalog_text()

    def test_every_kind_has_an_entry_with_a_next_step(self) -> None:
        """The journal catalog file has an entry for every incident kind's MESSAGE_ID, with a
        subject and what to do."""
        text = CATALOG.read_text()
        for kind in KINDS:
            block = text.split(f"-- {KINDS[kind].message_id}\n")[1].split("\n-- ")[0]
            assert "Subject: statewarden: " in block
            assert "What to do: " in block


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UserSystemd]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with user_systemd(tmp_path_factory.mktemp("alerts-journal")) as m:
        yield m


@pytest.mark.systemd
class TestRealJournal:
    def test_fields_and_catalogue_text(self, manager: UserSystemd) -> None:
        """Entries have MESSAGE_ID, PRIORITY (2 firing critical, 5 resolved), the
        STATEWARDEN_* fields; -p warning hides the resolved one; -x shows the catalogue."""
        # Installed where install.sh puts it (journalctl reads /usr/local/lib/systemd/catalog
        # and /usr/lib/systemd/catalog); the database is written under /var/lib. tmpfs on
        # both, in the private namespace only, keeps the host untouched.
        setup = (
            "mount -t tmpfs tmpfs /usr/local/lib && mkdir -p /usr/local/lib/systemd/catalog && "
            "mkdir -p /var/lib/systemd/catalog && "
            "mount -t tmpfs tmpfs /var/lib/systemd/catalog && "
            f"cp {CATALOG} /usr/local/lib/systemd/catalog/ && journalctl --update-catalog"
        )
        r = manager.run("sh", "-c", setup)
        assert r.returncode == 0, r.stderr
        r = manager.run("sh", "-c", f'cd "{REPO}" && exec "{sys.executable}" -c "$0"', SEND)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["1 entry written to the journal"] * 2
        manager.run("journalctl", "--flush")
        out = manager.run(
            "journalctl", "-o", "json", "--no-pager", "SYSLOG_IDENTIFIER=statewarden"
        ).stdout
        entries = [json.loads(line) for line in out.splitlines()]
        firing = next(e for e in entries if e.get("STATEWARDEN_STATE") == "firing")
        resolved = next(e for e in entries if e.get("STATEWARDEN_STATE") == "resolved")
        assert firing["MESSAGE_ID"] == KINDS["corruption"].message_id
        assert firing["PRIORITY"] == "2"
        assert firing["STATEWARDEN_INCIDENT"] == "3"
        assert firing["STATEWARDEN_KIND"] == "corruption"
        assert firing["STATEWARDEN_DB"] == "/home/u/.hermes/state.db"
        assert firing["STATEWARDEN_PROFILE"] == "work"
        assert firing["MESSAGE"].startswith("CRITICAL corruption on box, profile work")
        assert resolved["MESSAGE_ID"] == KINDS["stale_holder"].message_id
        assert resolved["PRIORITY"] == "5"
        warn = manager.run(
            "journalctl",
            "-o",
            "json",
            "--no-pager",
            "-p",
            "warning",
            "SYSLOG_IDENTIFIER=statewarden",
        ).stdout
        states = [json.loads(line).get("STATEWARDEN_STATE") for line in warn.splitlines()]
        assert states == ["firing"]
        corruption_id = KINDS["corruption"].message_id
        explained = manager.run(
            "journalctl", "-x", "--no-pager", f"MESSAGE_ID={corruption_id}"
        ).stdout
        assert "Subject: statewarden: Hermes state.db is corrupt" in explained
        assert "Incident 3 on /home/u/.hermes/state.db (profile work), firing." in explained
        assert "What to do: statewardenctl check --profile work" in explained

    @pytest.mark.parametrize("mode", ["ok", "full", "planted"])
    def test_one_entry_per_incident_change(
        self, manager: UserSystemd, tmp_path: Path, mode: str
    ) -> None:
        """An incident that opens, is updated, escalates and resolves is three entries under
        the kind's MESSAGE_ID (opened, escalated, resolved: the journald sink's, after the
        group wait), not six: the daemon's own log lines of the same changes carry no
        MESSAGE_ID. With the state folder on a full disk ("full") or the outbox folder a
        planted symlink ("planted") nothing reaches the outbox on disk, and every change
        still reaches the journal once, from memory."""
        state = tmp_path / "state"
        state.mkdir(mode=0o700)
        r = manager.run(
            "sh",
            "-c",
            f'cd "{REPO}" && exec "{sys.executable}" -c "$0" "$1" "$2"',
            CHANGES,
            str(state),
            mode,
        )
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["changes"] == ["opened", "updated", "escalated", "resolved"]
        assert out["delivered"] == 3
        if mode == "full":
            assert "No space left on device" in out["persist_error"]
        elif mode == "planted":
            assert out["persist_error"].endswith("; not written to")
            assert list((state / "elsewhere").iterdir()) == []
        else:
            assert out["persist_error"] == ""
        manager.run("journalctl", "--flush")
        db = f"/home/u/.hermes-{mode}/state.db"
        lines = manager.run(
            "journalctl",
            "-o",
            "json",
            "--no-pager",
            "SYSLOG_IDENTIFIER=statewarden",
            f"STATEWARDEN_DB={db}",
        ).stdout.splitlines()
        entries = [json.loads(line) for line in lines]
        alerts = [e for e in entries if "MESSAGE_ID" in e]
        assert [e["MESSAGE_ID"] for e in alerts] == [KINDS["wal_growth"].message_id] * 3
        assert [e["STATEWARDEN_CHANGE"] for e in alerts] == ["opened", "escalated", "resolved"]
        assert [e["PRIORITY"] for e in alerts] == ["4", "2", "5"]
        own = [e for e in entries if "MESSAGE_ID" not in e]
        assert [e["MESSAGE"] for e in own] == [
            "incident opened: WAL 60 MB and growing",
            "incident escalated: WAL 900 MB",
            "incident resolved: wal_growth (WAL checkpointed)",
        ]
        assert {e["PRIORITY"] for e in own} == {"6"}
