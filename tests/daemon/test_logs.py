"""The daemon following real Hermes-format logs: lines with tracebacks become incidents,
rotation mid-write loses nothing, a restart neither repeats nor misses a line."""

from __future__ import annotations

from pathlib import Path

from tests.support.daemon import DaemonProc
from tests.support.hermes_logs import hermes_logger, malformed
from tests.support.waiting import wait_for


class TestDaemonLogs:
    def test_corruption_line_with_traceback(self, daemon: DaemonProc, hermes_home: Path) -> None:
        """A Hermes 'database disk image is malformed' line with its traceback opens one
        critical corruption incident whose evidence holds the traceback."""
        log = hermes_logger(hermes_home / "logs", "gateway.session")
        malformed(log)
        (inc,) = wait_for(lambda: daemon.incidents_of("corruption"), what="corruption incident")
        assert inc["severity"] == "critical"
        assert inc["count"] == 1
        assert "Traceback (most recent call last):" in inc["evidence"][0]
        assert "RuntimeError: database disk image is malformed" in inc["evidence"][0]

    def test_rotation_mid_write_loses_nothing(self, daemon: DaemonProc, hermes_home: Path) -> None:
        """With agent.log rotating every few records, every matching record is counted once
        (enough backups are kept that rotation itself deletes nothing unread)."""
        log = hermes_logger(hermes_home / "logs", "gateway.session", max_bytes=4000, backups=50)
        for i in range(60):
            log.info("gateway.session: filler line %d", i)
            malformed(log)
        assert (hermes_home / "logs" / "agent.log.1").exists()
        wait_for(
            lambda: [i for i in daemon.incidents_of("corruption") if i["count"] == 60],
            what="60 corruption records counted",
        )

    def test_restart_no_duplicate_no_missed_line(
        self, env: dict[str, str], hermes_home: Path
    ) -> None:
        """Lines written while the daemon is down are read after restart; old ones are not re-read."""
        d = DaemonProc(env)
        d.wait_for_line("statewarden ready")
        log = hermes_logger(hermes_home / "logs", "run_agent")
        for _ in range(3):
            malformed(log)
        wait_for(
            lambda: [i for i in d.incidents_of("corruption") if i["count"] == 3], what="3 counted"
        )
        assert d.stop() == 0
        for _ in range(2):
            malformed(log)
        d2 = DaemonProc(env)
        try:
            d2.wait_for_line("statewarden ready")
            (inc,) = wait_for(
                lambda: [i for i in d2.incidents_of("corruption") if i["count"] == 5],
                what="5 counted",
            )
            d2.ctl_raw("status")  # let one more poll pass; the count must not move past 5
            wait_for(lambda: d2.ctl_raw("status")["databases"][0]["watchers"][1]["errors"] == 0)
            (same,) = d2.incidents_of("corruption")
            assert same["count"] == 5
            assert same["id"] == inc["id"]
        finally:
            d2.stop()

    def test_cron_session_on_timeline(self, daemon: DaemonProc, hermes_home: Path) -> None:
        """A cron session id seen in a log line is a 'cron job started' entry on the timeline."""
        log = hermes_logger(hermes_home / "logs", "cron.scheduler")
        log.info("running job", extra={"session_id": "cron_d0aa05fd7f4a_20260909_090008"})
        malformed(log)
        (inc,) = wait_for(lambda: daemon.incidents_of("corruption"))
        shown = daemon.ctl("incidents", "show", str(inc["id"]))
        whats = [e["what"] for e in shown["timeline"]]
        assert "cron_started" in whats
