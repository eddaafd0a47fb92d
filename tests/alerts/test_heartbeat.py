"""The dead man's switch against a real local HTTP server: pings while healthy, the fail
form while a critical incident is open, bounded answers, failures counted and scrubbed,
the URL read only from a private file or a credential; and in the real daemon."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.push_server import PushServer
from statewarden.alerts.heartbeat import Heartbeat, fail_url_of
from statewarden.config import HeartbeatConfig, parse_config
from statewarden.errors import ConfigError
from tests.support.alerts import Log
from tests.support.cli import run_ctl
from tests.support.daemon import DaemonProc
from tests.support.hermes_logs import hermes_logger, malformed
from tests.support.waiting import wait_for

pytestmark = pytest.mark.process

UUID = "5f1c0a2e-8b3d-4c1e-9f6a-2d7b8e9c0a1b"


@pytest.fixture
def server() -> Iterator[PushServer]:
    s = PushServer()
    yield s
    s.stop()


def url_file(tmp_path: Path, url: str, mode: int = 0o600) -> Path:
    path = tmp_path / "ping.url"
    path.write_text(url + "\n")
    path.chmod(mode)
    return path


def beat(tmp_path: Path, server: PushServer, trouble: list[str], **kw: object) -> Heartbeat:
    cfg = HeartbeatConfig(
        url_file=url_file(tmp_path, f"{server.url}/ping/{UUID}"),
        interval=3600.0,
        timeout=1.0,
        deadline=2.0,
        **kw,  # type: ignore[arg-type]
    )
    return Heartbeat(cfg, log=Log(), trouble=lambda: trouble[0] if trouble else "")


class TestPing:
    def test_ok_then_fail_while_critical_then_ok_again(
        self, tmp_path: Path, server: PushServer
    ) -> None:
        """Healthy: GET the URL; a critical incident opens: at once GET <url>/fail; it
        closes: at once the URL again. Each change is one ping, not one per interval."""
        trouble: list[str] = []
        hb = beat(tmp_path, server, trouble)

        async def scenario() -> None:
            task = asyncio.create_task(hb.run())
            await asyncio.to_thread(wait_for, server.paths, what="a ping")
            trouble.append("critical incident #1 corruption open on /x/state.db")
            hb.nudge()
            # Delivered means answered: the server has the request before the answer is in.
            await asyncio.to_thread(
                wait_for,
                lambda: len(server.paths()) == 2 and hb.health.pings_ok == 2,
                what="the fail ping delivered",
            )
            assert hb.health.state == "fail"
            assert hb.health.why.startswith("critical incident #1")
            hb.nudge()  # nothing changed: no ping
            trouble.clear()
            hb.nudge()
            await asyncio.to_thread(
                wait_for,
                lambda: len(server.paths()) == 3 and hb.health.pings_ok == 3,
                what="ok again, delivered",
            )
            task.cancel()
            await hb.close()

        asyncio.run(scenario())
        assert server.paths() == [f"/ping/{UUID}", f"/ping/{UUID}/fail", f"/ping/{UUID}"]
        assert {h.method for h in server.requests} == {"GET"}
        assert hb.health.pings_ok == 3
        assert hb.health.state == "ok"

    def test_a_change_while_a_ping_is_on_its_way_is_pinged_at_once(
        self, tmp_path: Path, server: PushServer
    ) -> None:
        """A critical incident opening while the ok ping still waits for its answer sends the
        fail ping as soon as that answer is in, not an interval (here an hour) later."""
        trouble: list[str] = []
        hb = beat(tmp_path, server, trouble)
        server.script = ["slow"]

        async def scenario() -> None:
            task = asyncio.create_task(hb.run())
            await asyncio.to_thread(wait_for, server.paths, what="the first ping")
            assert hb.health.pings_ok == 0  # its answer is still on its way
            trouble.append("critical incident #1 corruption open on /x/state.db")
            hb.nudge()
            # Delivered means answered: the signal is recorded once the answer is in.
            await asyncio.to_thread(
                wait_for,
                lambda: len(server.paths()) == 2 and hb.health.signal == "fail",
                what="the fail ping delivered",
                timeout_s=10.0,
            )
            task.cancel()
            await hb.close()

        asyncio.run(scenario())
        assert server.paths() == [f"/ping/{UUID}", f"/ping/{UUID}/fail"]
        assert hb.health.signal == "fail"

    @pytest.mark.parametrize(
        ("url", "suffix", "fail"),
        [
            ("https://hc-ping.com/abc", "/fail", "https://hc-ping.com/abc/fail"),
            ("https://hc-ping.com/abc/", "/fail", "https://hc-ping.com/abc/fail"),
            (
                "https://kuma/api/push/k1?status=up",
                "&status=down",
                "https://kuma/api/push/k1?status=up&status=down",
            ),
            ("https://kuma/api/push/k1", "?status=down", "https://kuma/api/push/k1?status=down"),
        ],
    )
    def test_fail_url(self, url: str, suffix: str, fail: str) -> None:
        """The fail URL is the ping URL with the fail suffix appended: one slash between path parts,
        a query suffix (``&status=down``, ``?status=down``) kept as given."""
        assert fail_url_of(url, suffix) == fail

    def test_configured_fail_suffix_is_used(self, tmp_path: Path, server: PushServer) -> None:
        """A configured fail_suffix is what a failing ping requests, not the default ``/fail``."""
        hb = beat(tmp_path, server, ["critical"], fail_suffix="?status=down")
        assert asyncio.run(hb.ping()) is True
        assert server.paths() == [f"/ping/{UUID}?status=down"]

    @pytest.mark.parametrize(
        ("answer", "error"),
        [
            ("500", "500 Internal Server Error"),
            ("redirect", "302 Found"),
            ("huge", "200 answer over the 64 KiB limit: cut; not read"),
            ("drip", "within the 2 s deadline"),
        ],
    )
    def test_a_failed_ping_is_counted_logged_and_scrubbed(
        self, tmp_path: Path, server: PushServer, answer: str, error: str
    ) -> None:
        """A 500, a redirect, an oversized or a too-slow answer is a failed ping: counted, health
        failing with the reason, one warning logged, and the URL's secret UUID in none of it."""
        server.default = answer
        hb = beat(tmp_path, server, [])
        assert asyncio.run(hb.ping()) is False
        assert hb.health.state == "failing"
        assert hb.health.pings_failed == 1
        assert error in hb.health.last_error
        assert isinstance(hb.log, Log)
        ((level, event, kw),) = hb.log.lines
        assert (level, event) == ("warning", "heartbeat ping failed")
        assert kw["server"] == server.url
        assert UUID not in json.dumps([hb.health.to_json(), hb.log.lines])

    def test_a_server_that_is_down_is_a_failure_not_a_crash(self, tmp_path: Path) -> None:
        """A server that is not listening is a failed ping saying it cannot be reached, without the
        secret UUID, not an exception."""
        s = PushServer()
        s.stop()
        hb = beat(tmp_path, s, [])
        assert asyncio.run(hb.ping()) is False
        assert hb.health.last_error.startswith(f"cannot reach {s.url}")
        assert UUID not in hb.health.last_error


class TestUrlSecret:
    def test_a_file_others_can_read_is_refused(self, tmp_path: Path) -> None:
        """A URL file readable by others is refused, and the problem names its mode and the
        chmod."""
        path = url_file(tmp_path, f"http://127.0.0.1:1/ping/{UUID}", mode=0o644)
        hb = Heartbeat(HeartbeatConfig(url_file=path), log=Log(), trouble=lambda: "")
        assert hb.problem == (
            f"no heartbeat URL: file {path}: is readable by others (mode 644); chmod 600 {path}"
        )

    def test_a_symlink_is_refused(self, tmp_path: Path) -> None:
        """A URL file that is a symbolic link is refused, and the problem says so."""
        target = url_file(tmp_path, f"http://127.0.0.1:1/ping/{UUID}")
        link = tmp_path / "link.url"
        link.symlink_to(target)
        hb = Heartbeat(HeartbeatConfig(url_file=link), log=Log(), trouble=lambda: "")
        assert hb.problem == f"no heartbeat URL: file {link}: is a symbolic link"

    def test_credential(self, tmp_path: Path, server: PushServer) -> None:
        """The URL from a systemd credential (``$CREDENTIALS_DIRECTORY``) is used for pings and
        named as the source of the health."""
        creds = tmp_path / "creds"
        creds.mkdir()
        (creds / "heartbeat-url").write_text(f"{server.url}/ping/{UUID}")
        hb = Heartbeat(
            HeartbeatConfig(credential="heartbeat-url"),
            log=Log(),
            trouble=lambda: "",
            env={"CREDENTIALS_DIRECTORY": str(creds)},
        )
        assert hb.problem == ""
        assert asyncio.run(hb.ping()) is True
        assert hb.health.source == "credential heartbeat-url"

    def test_not_a_url(self, tmp_path: Path) -> None:
        """A URL file whose text is not one http(s) URL is a problem that says so."""
        hb = Heartbeat(
            HeartbeatConfig(url_file=url_file(tmp_path, "hc-ping.com/x")),
            log=Log(),
            trouble=lambda: "",
        )
        assert hb.problem.endswith(": not one http(s) URL")

    def test_config_takes_no_url_and_checks_the_suffix(self) -> None:
        """The config takes no URL itself (an unknown key), refuses a fail_suffix that is neither a
        path nor a query, and reads the interval as a duration."""
        with pytest.raises(ConfigError, match="unknown key"):
            parse_config("alerts:\n  heartbeat: {url: 'https://hc-ping.com/x'}\n")
        with pytest.raises(ConfigError, match="expected a path or query"):
            parse_config("alerts:\n  heartbeat: {credential: hb, fail_suffix: fail}\n")
        cfg = parse_config("alerts:\n  heartbeat: {credential: hb, interval: 5m}\n")
        assert cfg.alerts.heartbeat.enabled
        assert cfg.alerts.heartbeat.interval == 300.0


class TestDaemon:
    def test_the_daemon_pings_and_fails_while_corruption_is_open(
        self, env: dict[str, str], hermes_home: Path, server: PushServer, tmp_path: Path
    ) -> None:
        """A real daemon pings at start, sends the fail ping while a corruption incident is open,
        and ``alerts`` shows the heartbeat failing with that incident as the reason."""
        path = Path(env["XDG_CONFIG_HOME"]) / "statewarden" / "config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        secret = url_file(tmp_path, f"{server.url}/ping/{UUID}")
        path.write_text(
            f"alerts:\n  heartbeat: {{url_file: {secret}, interval: 1h, timeout: 2s}}\n"
        )
        d = DaemonProc(env)
        try:
            d.wait_for_line("statewarden ready")
            wait_for(lambda: server.paths() == [f"/ping/{UUID}"], what="the first ping")
            malformed(hermes_logger(hermes_home / "logs", "gateway.session"))
            wait_for(lambda: f"/ping/{UUID}/fail" in server.paths(), what="the fail ping")
            status = wait_for(lambda: (s := d.ctl("alerts"))["heartbeat"]["signal"] == "fail" and s)
            text = run_ctl("alerts", env=env).stdout
            d_incidents = d.ctl("incidents")["incidents"]
        finally:
            d.stop()
        hb = status["heartbeat"]
        assert hb["state"] == "fail"
        assert hb["pings_ok"] == 2
        (inc,) = [i for i in d_incidents if i["kind"] == "corruption"]
        assert (
            hb["why"]
            == f"critical incident #{inc['id']} corruption open on {hermes_home / 'state.db'}"
        )
        assert "heartbeat fail " in text
        seen = "\n".join(d.output()) + json.dumps(status) + text
        for f in (tmp_path / "xdg-state").rglob("*"):
            if f.is_file():
                seen += f.read_text(errors="replace")
        assert UUID not in seen
        assert os.stat(secret).st_mode & 0o777 == 0o600
