"""The Apprise sink through real Apprise URLs (``json://``) pointed at a local HTTP server:
what arrives, each URL one part of the outbox entry (a retry does not send again to the
ones that took it), the URLs read only from a private file or a credential and never
shown; and in the real daemon."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.push_server import PushServer
from statewarden.alerts.apprise_sink import AppriseSink
from statewarden.alerts.delivery import Delivery
from statewarden.alerts.message import Item, Notification, headline
from statewarden.alerts.outbox import Outbox
from statewarden.config import AppriseConfig, parse_config
from statewarden.errors import ConfigError
from tests.support.alerts import DB, T0, Log
from tests.support.daemon import DaemonProc
from tests.support.hermes_logs import hermes_logger, malformed
from tests.support.waiting import wait_for

pytestmark = pytest.mark.process

TOPIC = "statewarden-topic-Zq81xKp3"  # a secret-looking path piece


@pytest.fixture
def server() -> Iterator[PushServer]:
    s = PushServer()
    yield s
    s.stop()


def urls_file(tmp_path: Path, *urls: str, mode: int = 0o600) -> Path:
    path = tmp_path / "apprise.urls"
    path.write_text("# statewarden's Apprise URLs\n" + "\n".join(urls) + "\n")
    path.chmod(mode)
    return path


def note(key: str = "k1") -> Notification:
    item = Item(
        3,
        "corruption",
        "critical",
        DB,
        "default",
        "state.db is malformed",
        "opened",
        T0,
        T0,
        1,
        next_step="statewardenctl check --profile default",
    )
    return Notification(key, "firing", "box", T0, [item])


def sink_for(path: Path, **env: str) -> AppriseSink:
    return AppriseSink(
        AppriseConfig(enabled=True, urls_file=path, timeout=2.0, deadline=5.0), env=env
    )


def attempt(d: Delivery, times: int = 1) -> None:
    async def go() -> None:
        for _ in range(times):
            await d.deliver_one()

    asyncio.run(go())


class TestSink:
    def test_a_notification_arrives_as_apprise_json(
        self, tmp_path: Path, server: PushServer
    ) -> None:
        """A notification reaches a ``json://`` Apprise URL as one POST with the headline as title,
        the summary and next step in the message and type failure; the outbox is emptied."""
        sink = sink_for(urls_file(tmp_path, f"json://127.0.0.1:{server.port}/{TOPIC}"))
        outbox = Outbox(tmp_path / "outbox", max_entries=10)
        d = Delivery(sink, outbox, retry_max_s=1.0, log=Log())
        outbox.put(note(), "apprise")
        attempt(d)
        (hit,) = server.requests
        assert (hit.method, hit.path) == ("POST", f"/{TOPIC}")
        body = hit.json()
        assert body["title"] == headline(note()) == "CRITICAL corruption on box, profile default"
        assert "state.db is malformed" in body["message"]
        assert "statewardenctl check --profile default" in body["message"]
        assert body["type"] == "failure"
        assert d.health.last_answer == "sent to 1 Apprise URL"
        assert outbox.pending() == []

    def test_a_retry_sends_only_to_the_urls_that_did_not_take_it(
        self, tmp_path: Path, server: PushServer
    ) -> None:
        """URL 1 takes it, URL 2 answers 500: the entry stays with URL 1 done (on disk);
        after a restart of the sink, the retry goes to URL 2 only."""
        second = PushServer()
        second.script = ["500"]
        try:
            path = urls_file(
                tmp_path,
                f"json://127.0.0.1:{server.port}/{TOPIC}",
                f"json://127.0.0.1:{second.port}/{TOPIC}",
            )
            outbox = Outbox(tmp_path / "outbox", max_entries=10)
            d = Delivery(sink_for(path), outbox, retry_max_s=1.0, log=Log())
            outbox.put(note(), "apprise")
            attempt(d)
            assert d.health.state == "retrying"
            assert d.health.last_error.startswith("Apprise URL 2 of 2: ")
            assert TOPIC not in d.health.last_error
            reread = Outbox(tmp_path / "outbox", max_entries=10)
            (entry,) = reread.pending("apprise")
            assert entry.parts_sent == 1
            d2 = Delivery(sink_for(path), reread, retry_max_s=1.0, log=Log())
            attempt(d2)
            assert d2.health.state == "ok"
        finally:
            second.stop()
        assert len(server.requests) == 1
        assert [h.answered for h in second.requests] == ["500", "ok"]
        assert reread.pending() == []

    def test_an_unknown_url_is_a_configuration_problem_never_shown(self, tmp_path: Path) -> None:
        """A URL with a scheme Apprise does not know is a rejected delivery naming its position in
        the file, never the URL itself; the notification stays in the outbox."""
        path = urls_file(tmp_path, f"nosuchscheme://{TOPIC}")
        outbox = Outbox(tmp_path / "outbox", max_entries=10)
        d = Delivery(sink_for(path), outbox, retry_max_s=1.0, log=Log())
        outbox.put(note(), "apprise")
        attempt(d)
        assert d.health.state == "rejected"
        assert d.health.last_error == f"Apprise URL 1 of file {path} is not one Apprise knows"
        assert TOPIC not in json.dumps(d.log.lines)
        assert len(outbox.pending("apprise")) == 1

    def test_a_urls_file_others_can_read_is_refused(self, tmp_path: Path) -> None:
        """A URLs file readable by others is refused, and the problem names its mode and the
        chmod."""
        path = urls_file(tmp_path, f"json://127.0.0.1:1/{TOPIC}", mode=0o640)
        sink = sink_for(path)
        assert sink.token_problem == (
            f"no Apprise URLs: file {path}: is readable by others (mode 640); chmod 600 {path}"
        )

    def test_credential(self, tmp_path: Path, server: PushServer) -> None:
        """The URLs from a systemd credential (``$CREDENTIALS_DIRECTORY``) are used: one request,
        the sink healthy."""
        creds = tmp_path / "creds"
        creds.mkdir()
        (creds / "apprise-urls").write_text(f"json://127.0.0.1:{server.port}/{TOPIC}\n")
        sink = AppriseSink(
            AppriseConfig(enabled=True, credential="apprise-urls"),
            env={"CREDENTIALS_DIRECTORY": str(creds)},
        )
        outbox = Outbox(tmp_path / "outbox", max_entries=10)
        d = Delivery(sink, outbox, retry_max_s=1.0, log=Log())
        outbox.put(note(), "apprise")
        attempt(d)
        assert d.health.state == "ok"
        assert len(server.requests) == 1

    def test_config_never_takes_urls(self) -> None:
        """The config takes no URLs itself (an unknown key), and an enabled apprise sink needs its
        URLs file or credential."""
        with pytest.raises(ConfigError, match="unknown key"):
            parse_config("alerts:\n  apprise: {enabled: true, urls: ['ntfy://x']}\n")
        with pytest.raises(ConfigError, match="is required when apprise is enabled"):
            parse_config("alerts:\n  apprise: {enabled: true}\n")


class TestDaemon:
    def test_the_daemon_sends_corruption_through_apprise(
        self, env: dict[str, str], hermes_home: Path, server: PushServer, tmp_path: Path
    ) -> None:
        """A real daemon sends a corruption incident through Apprise, counts it delivered, and the
        URL's secret is in none of its output, status or state files."""
        path = Path(env["XDG_CONFIG_HOME"]) / "statewarden" / "config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        secret = urls_file(tmp_path, f"json://127.0.0.1:{server.port}/{TOPIC}")
        path.write_text(
            f"alerts:\n  journald: {{enabled: false}}\n  apprise: {{enabled: true, urls_file: {secret}}}\n"
        )
        d = DaemonProc(env)
        try:
            d.wait_for_line("statewarden ready")
            malformed(hermes_logger(hermes_home / "logs", "gateway.session"))
            (hit,) = wait_for(lambda: list(server.requests), what="the Apprise post")
            wait_for(
                lambda: (
                    d.incidents_of("corruption")[0]["notification"]["state"] == "notified firing"
                )
            )
            status = d.ctl("alerts")
        finally:
            d.stop()
        assert hit.json()["title"].startswith("CRITICAL corruption on ")
        assert status["sinks"]["apprise"]["delivered"] == 1
        seen = "\n".join(d.output()) + json.dumps(status)
        for f in (tmp_path / "xdg-state").rglob("*"):
            if f.is_file():
                seen += f.read_text(errors="replace")
        assert TOPIC not in seen
