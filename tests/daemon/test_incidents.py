"""The daemon on a real Hermes home: incidents reach the control socket, survive restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.hermes_fixtures import holding
from tests.support.cli import run_ctl
from tests.support.daemon import DaemonProc
from tests.support.waiting import wait_for


class TestDaemonIncidents:
    def test_status_comes_from_the_daemon(self, daemon: DaemonProc, hermes_home: Path) -> None:
        """With the daemon up, status answers from it, with per-database watcher state."""
        data = daemon.ctl("status")
        assert data["source"] == "daemon"
        (db,) = data["databases"]
        assert db["path"] == str(hermes_home / "state.db")
        assert db["schema_version"] == 22
        assert db["open_incidents"] == 0
        assert db["watchers"][0] == {"watcher": "files", "errors": 0, "last_error": None}

    def test_self_repair_backup_opens_incident(self, daemon: DaemonProc, hermes_home: Path) -> None:
        """A new malformed-backup file is an incident on the socket, with the backup named."""
        (hermes_home / "state.db.malformed-backup-20260909_191208").write_bytes(b"x")
        (inc,) = wait_for(lambda: daemon.incidents_of("self_repair"), what="self_repair incident")
        assert inc["summary"] == (
            "Hermes found state.db corrupt and repaired it in place "
            "(backup state.db.malformed-backup-20260909_191208)"
        )
        assert inc["db"] == str(hermes_home / "state.db")
        line = daemon.wait_for_line("incident opened")
        assert "kind=self_repair" in line
        assert "message_id" not in line  # the journald sink's entry has it, not the log

    def test_restart_keeps_incidents_without_duplicates(
        self, env: dict[str, str], hermes_home: Path
    ) -> None:
        """After a restart the same incident is there once; new signals update it."""
        d = DaemonProc(env)
        d.wait_for_line("statewarden ready")
        (hermes_home / "sessions").mkdir()
        f = hermes_home / "sessions" / "s1.jsonl"
        f.write_text("{}\n")
        (first,) = wait_for(lambda: d.incidents_of("jsonl_fallback"), what="jsonl incident")
        assert d.stop() == 0
        d2 = DaemonProc(env)
        try:
            d2.wait_for_line("statewarden ready")
            assert [i["id"] for i in d2.incidents_of("jsonl_fallback")] == [first["id"]]
            with open(f, "a") as fh:
                fh.write("{}\n")
            (again,) = wait_for(
                lambda: [i for i in d2.incidents_of("jsonl_fallback") if i["count"] == 2],
                what="count 2",
            )
            assert again["id"] == first["id"]
        finally:
            d2.stop()

    def test_show_and_ack(self, daemon: DaemonProc, hermes_home: Path, env: dict[str, str]) -> None:
        """`incidents show` gives the evidence and timeline; `ack` marks it."""
        (hermes_home / "state.db.malformed-backup-20260101_000000").write_bytes(b"x")
        (inc,) = wait_for(lambda: daemon.incidents_of("self_repair"))
        shown = daemon.ctl("incidents", "show", str(inc["id"]))
        assert shown["incident"]["evidence"] == ["state.db.malformed-backup-20260101_000000"]
        assert any(e["what"] == "signal" for e in shown["timeline"])
        r = run_ctl("incidents", "ack", str(inc["id"]), env=env)
        assert r.exit_code == 0
        assert r.stdout == f"incident #{inc['id']} acknowledged\n"
        assert daemon.incidents_of("self_repair")[0]["acked"] is True
        r = run_ctl("incidents", "show", "999", env=env)
        assert r.exit_code == 1
        assert r.stderr == "statewardenctl: error: no incident 999\n"

    def test_local_fallback_without_daemon(self, env: dict[str, str], hermes_home: Path) -> None:
        """With no daemon, incidents are read from the state directory, and it says so."""
        d = DaemonProc(env)
        d.wait_for_line("statewarden ready")
        (hermes_home / "state.db.malformed-backup-20260101_000000").write_bytes(b"x")
        wait_for(lambda: d.incidents_of("self_repair"))
        d.stop()
        r = run_ctl("incidents", env=env)
        assert r.exit_code == 0
        assert "(daemon not running: read from the state directory)" in r.stderr
        assert "self_repair" in r.stdout


class TestDaemonHolders:
    def test_unlinked_wal_under_live_writer_is_stale_holder(
        self, daemon: DaemonProc, hermes_home: Path
    ) -> None:
        """Deleting state.db-wal under a live Hermes writer raises stale_holder for that pid;
        when the writer exits, the incident resolves. Arrivals are on the timeline."""
        with holding(hermes_home) as h:
            wait_for(
                lambda: any(
                    x["pid"] == h.pid for s in daemon.ctl_raw("holders") for x in s["holders"]
                ),
                what="holder seen",
            )
            (hermes_home / "state.db-wal").unlink()
            (inc,) = wait_for(lambda: daemon.incidents_of("stale_holder"), what="stale_holder")
            assert inc["key"] == str(h.pid)
            assert "still holds an old or deleted state.db-wal inode" in inc["summary"]
        wait_for(lambda: not daemon.incidents_of("stale_holder"), what="resolved after exit")
        shown = daemon.ctl("incidents", "show", str(inc["id"]))
        texts = [e["text"] for e in shown["timeline"]]
        assert any(t.startswith(f"pid {h.pid} (") and t.endswith("opened state.db") for t in texts)


class TestDaemonCheck:
    def test_check_over_the_socket(self, daemon: DaemonProc, hermes_home: Path) -> None:
        """`check` asked of the daemon diagnoses a private copy of the watched database."""
        result = daemon.ctl_raw("check")
        assert result["damage"] == "none"
        assert result["path"] == str(hermes_home / "state.db")
        assert result["integrity_ok"] is True

    def test_check_names_an_unknown_profile(self, daemon: DaemonProc) -> None:
        """An unknown profile is a one-line error reply, and the socket keeps working."""
        from statewarden.errors import ControlError

        with pytest.raises(ControlError, match="name one database to check"):
            daemon.ctl_raw("check", profile="nope")
        assert daemon.ctl_raw("status")["databases"]


class TestDaemonStatusText:
    def test_human_status_names_the_daemon_and_its_watchers(
        self, daemon: DaemonProc, env: dict[str, str]
    ) -> None:
        """The text form says it came from the daemon, the config it runs on, with the
        journal and units state."""
        r = run_ctl("status", env=env)
        assert r.exit_code == 0
        assert r.stdout.startswith(
            f"daemon: pid {daemon.proc.pid}, 1 database, 0 open incidents\n"
            "config: defaults (running)\nunits: "
        )
        assert "  open incidents  0\n" in r.stdout
        assert "  journal         " in r.stdout
