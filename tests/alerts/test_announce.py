"""The announcer: incident changes to the daemon's log (no MESSAGE_ID: that is the journald
sink's alone) and the timeline."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from statewarden.alerts.announce import Announcer, announcement
from statewarden.incidents.book import IncidentBook
from statewarden.incidents.signals import KINDS, Signal
from statewarden.incidents.timeline import Timeline
from tests.support.journal import decode_entry

pytestmark = pytest.mark.process

DB = "/home/u/.hermes/state.db"


SIGNALS = [
    Signal("wal_growth", DB, "WAL 60 MB and growing", 1000.0, source="files"),
    Signal("wal_growth", DB, "WAL 70 MB and growing", 1001.0, source="files"),
    Signal("wal_growth", DB, "WAL 900 MB", 1002.0, source="files", severity="critical"),
    Signal("wal_growth", DB, "WAL checkpointed", 1003.0, source="files", clears=True),
]


class TestAnnouncer:
    def test_each_change_but_updated_is_one_entry(self, tmp_path: Path) -> None:
        """opened, escalated and resolved are announced, each one info line naming the
        severity and no MESSAGE_ID; a plain update is not."""
        book = IncidentBook(None)
        timeline = Timeline(tmp_path / "timeline")
        announcer = Announcer(timeline)
        changes = []
        with capture_logs() as logs:
            for s in SIGNALS:  # each update submitted as it happens, as the daemon does
                update = book.record(s)
                assert update is not None
                changes.append(update.change)
                announcer.submit(update)
        assert changes == ["opened", "updated", "escalated", "resolved"]
        assert [e["change"] for e in logs] == ["opened", "escalated", "resolved"]
        assert [e["log_level"] for e in logs] == ["info", "info", "info"]
        assert [e["severity"] for e in logs] == ["warning", "critical", "critical"]
        assert not [e for e in logs if "message_id" in e]
        assert logs[0]["event"] == "incident opened: WAL 60 MB and growing"
        assert logs[2]["event"] == "incident resolved: wal_growth (WAL checkpointed)"
        assert all(e["source"] == "files" and e["db"] == DB for e in logs)
        lines = [e.text for e in timeline.entries(DB) if e.what == "incident"]
        assert lines == [e["event"] for e in logs]

    def test_a_quiet_resolution_has_no_source(self, tmp_path: Path) -> None:
        """A log-rule incident resolved by the book's tick names no watcher."""
        book = IncidentBook(None, quiet_resolve_s=60.0)
        book.record(
            Signal(
                "corruption", DB, "database disk image is malformed", 1000.0, source="log:agent.log"
            )
        )
        (resolved,) = book.tick(2000.0)
        with capture_logs() as logs:
            Announcer(Timeline(tmp_path / "timeline")).submit(resolved)
        (entry,) = logs
        assert entry["source"] is None
        assert entry["event"] == announcement(resolved)
        assert entry["event"].startswith("incident resolved: corruption (no new signal for 60 s)")


class TestDaemonAnnounces:
    def test_an_incident_opening_is_one_entry_with_its_message_id(
        self, tmp_path: Path, env: dict[str, str], hermes_home: Path
    ) -> None:
        """A real daemon under systemd-style logging: Hermes' self-repair backup appearing
        is one native-protocol entry with the self_repair MESSAGE_ID (the journald sink's,
        at error priority, after the group wait); the daemon's own line about it names
        the incident, the change and the watcher, at info, with no MESSAGE_ID."""
        config = Path(env["XDG_CONFIG_HOME"]) / "statewarden" / "config.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text("alerts:\n  group_wait: 1s\n")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(tmp_path / "journal.sock"))
        sock.settimeout(30)
        proc = subprocess.Popen(
            [sys.executable, "-m", "statewarden.cli.daemon_cmd", "run"],
            env={
                **env,
                "JOURNAL_STREAM": "8:1234",
                "STATEWARDEN_JOURNAL_SOCKET": str(tmp_path / "journal.sock"),
            },
        )
        message_id = KINDS["self_repair"].message_id
        try:
            while decode_entry(sock.recv(1 << 20))["MESSAGE"] != "statewarden ready":
                pass
            (hermes_home / "state.db.malformed-backup-20260101_000000").write_bytes(b"x")
            entries = [decode_entry(sock.recv(1 << 20))]
            while entries[-1].get("MESSAGE_ID") != message_id:
                entries.append(decode_entry(sock.recv(1 << 20)))
            sock.settimeout(2.0)  # the group wait is 1 s: a second entry would be here
            with contextlib.suppress(TimeoutError):
                while True:
                    entries.append(decode_entry(sock.recv(1 << 20)))
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0
            sock.close()
        (alert,) = [e for e in entries if "MESSAGE_ID" in e]
        assert alert["MESSAGE_ID"] == message_id
        assert alert["PRIORITY"] == "3"
        assert alert["STATEWARDEN_STATE"] == "firing"
        assert alert["STATEWARDEN_CHANGE"] == "opened"
        (own,) = [e for e in entries if e["MESSAGE"].startswith("incident opened: ")]
        assert own["PRIORITY"] == "6"
        assert own["STATEWARDEN_KIND"] == "self_repair"
        assert own["STATEWARDEN_SEVERITY"] == "error"
        assert own["STATEWARDEN_CHANGE"] == "opened"
        assert own["STATEWARDEN_SOURCE"] == "files"
        assert own["STATEWARDEN_DB"] == str(hermes_home / "state.db")
