"""The Alertmanager sink against a real Alertmanager (Debian's prometheus-alertmanager):
labels and annotations as posted, the resolved state (Alertmanager's own webhook says
"resolved"), re-posting while firing, all through the outbox; failures kept there."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from lab.alertmanager import Alertmanager
from lab.push_server import PushServer
from statewarden.alerts.alertmanager import AlertmanagerSink, rfc3339
from statewarden.alerts.delivery import Delivery
from statewarden.alerts.message import Item, Notification
from statewarden.alerts.outbox import Outbox
from statewarden.alerts.service import Alerts
from statewarden.config import AlertmanagerConfig, AlertsConfig, JournaldAlertsConfig, parse_config
from statewarden.errors import ConfigError
from statewarden.incidents.book import IncidentBook
from tests.support.alerts import DB, Log, sig
from tests.support.daemon import DaemonProc
from tests.support.hermes_logs import hermes_logger, malformed
from tests.support.secret_files import unfit_secret_file
from tests.support.waiting import wait_for

pytestmark = pytest.mark.process

T0 = time.time() - 3600  # Alertmanager refuses an alert that starts in the future


@pytest.fixture
def hook() -> Iterator[PushServer]:
    s = PushServer()
    yield s
    s.stop()


@pytest.fixture
def am(tmp_path: Path, hook: PushServer) -> Iterator[Alertmanager]:
    a = Alertmanager(tmp_path / "am", f"{hook.url}/hook")
    yield a
    a.stop()


def item(change: str = "opened", incident: int = 7) -> Item:
    return Item(
        incident,
        "corruption",
        "critical",
        DB,
        "default",
        "state.db is malformed",
        change,
        T0,
        T0 + 5,
        2,
        evidence=["ERROR gateway: database disk image is malformed"],
        next_step="statewardenctl check --profile default",
    )


def webhook_states(hook: PushServer) -> list[tuple[str, str]]:
    out = []
    for h in list(hook.requests):
        for a in h.json()["alerts"]:
            out.append((a["labels"]["alertname"], a["status"]))
    return out


def deliver(sink: AlertmanagerSink, outbox: Outbox, n: Notification) -> Delivery:
    d = Delivery(sink, outbox, retry_max_s=1.0, log=Log())
    outbox.put(n, sink.name)

    async def once() -> None:
        await d.deliver_one()
        await sink.close()

    asyncio.run(once())
    return d


def deliver_with_password(
    tmp_path: Path, password: str, answer: str
) -> tuple[PushServer, Path, Outbox, Delivery]:
    """One alert delivered to a server that gives ``answer``, through a URL file (mode
    0600) whose URL carries user ``statewarden`` and ``password``; the server is stopped
    and returned with what it saw, with the URL file, the outbox and the delivery."""
    s = PushServer(default=answer)
    try:
        url_file = tmp_path / "am.url"
        url_file.write_text(f"http://statewarden:{password}@127.0.0.1:{s.port}/\n")
        url_file.chmod(0o600)
        sink = AlertmanagerSink(AlertmanagerConfig(enabled=True, url_file=url_file, timeout=2.0))
        outbox = Outbox(tmp_path / "outbox", max_entries=10)
        d = deliver(sink, outbox, Notification("k1", "firing", "box", T0, [item()]))
    finally:
        s.stop()
    return s, url_file, outbox, d


class TestSink:
    def test_firing_then_resolved(self, tmp_path: Path, am: Alertmanager, hook: PushServer) -> None:
        """Posted: the labels (alertname = kind, severity, database, profile, host,
        incident), annotations and startsAt; resolved: gone from the active alerts and
        Alertmanager's webhook sends it on as resolved."""
        outbox = Outbox(tmp_path / "outbox", max_entries=10)
        sink = AlertmanagerSink(AlertmanagerConfig(enabled=True, url=am.url, timeout=5.0))
        d = deliver(sink, outbox, Notification("k1", "firing", "box", T0 + 6, [item()]))
        assert d.health.last_answer == "1 alert posted (200)", d.health.last_error
        (alert,) = am.alerts()
        assert alert["labels"] == {
            "alertname": "corruption",
            "severity": "critical",
            "database": DB,
            "profile": "default",
            "host": "box",
            "incident": "7",
        }
        assert alert["annotations"] == {
            "summary": "state.db is malformed",
            "next_step": "statewardenctl check --profile default",
            "evidence": "ERROR gateway: database disk image is malformed",
        }
        assert alert["startsAt"] == rfc3339(T0)
        assert alert["status"]["state"] == "active"
        wait_for(lambda: ("corruption", "firing") in webhook_states(hook), what="firing hook")
        resolved = Notification("k2", "resolved", "box", T0 + 60, [item("resolved")])
        deliver(AlertmanagerSink(sink.cfg), outbox, resolved)
        assert am.alerts() == []
        wait_for(lambda: ("corruption", "resolved") in webhook_states(hook), what="resolved")
        assert outbox.pending() == []

    def test_alertmanager_down_keeps_the_entry(self, tmp_path: Path) -> None:
        """An Alertmanager that cannot be reached leaves the delivery retrying, saying so, and the
        entry in the outbox."""
        s = PushServer()
        s.stop()
        outbox = Outbox(tmp_path / "outbox", max_entries=10)
        sink = AlertmanagerSink(AlertmanagerConfig(enabled=True, url=s.url, timeout=1.0))
        d = deliver(sink, outbox, Notification("k1", "firing", "box", T0, [item()]))
        assert d.health.state == "retrying"
        assert d.health.last_error.startswith(f"cannot reach {s.url}")
        assert [e.key for e in outbox.pending("alertmanager")] == ["k1"]

    @pytest.mark.parametrize(
        ("answer", "state"), [("404", "rejected"), ("redirect", "rejected"), ("500", "retrying")]
    )
    def test_answers(self, tmp_path: Path, answer: str, state: str) -> None:
        """A 404 or a redirect from /api/v2/alerts is rejected and a 500 retried; either way the
        entry stays in the outbox."""
        s = PushServer(default=answer)
        try:
            outbox = Outbox(tmp_path / "outbox", max_entries=10)
            sink = AlertmanagerSink(AlertmanagerConfig(enabled=True, url=s.url, timeout=1.0))
            d = deliver(sink, outbox, Notification("k1", "firing", "box", T0, [item()]))
        finally:
            s.stop()
        assert d.health.state == state
        assert len(outbox.pending("alertmanager")) == 1
        assert s.requests[0].path == "/api/v2/alerts"

    def test_config(self) -> None:
        """An enabled alertmanager sink needs a url, and one that is not http(s) is refused."""
        with pytest.raises(ConfigError, match="is required when alertmanager is enabled"):
            parse_config("alerts:\n  alertmanager: {enabled: true}\n")
        with pytest.raises(ConfigError, match="expected an http"):
            parse_config("alerts:\n  alertmanager: {enabled: true, url: 'am:9093'}\n")


class TestSecretUrl:
    """A URL that carries a secret (a proxy's user and password) is read from a private
    file or a systemd credential, used as given, and never shown."""

    def test_from_a_credential_to_a_real_alertmanager(
        self, tmp_path: Path, am: Alertmanager
    ) -> None:
        """alerts.alertmanager.credential: the URL read from $CREDENTIALS_DIRECTORY
        reaches the real Alertmanager."""
        creds = tmp_path / "creds"
        creds.mkdir()
        (creds / "alertmanager-url").write_text(am.url + "\n")
        cfg = AlertmanagerConfig(enabled=True, credential="alertmanager-url", timeout=5.0)
        sink = AlertmanagerSink(cfg, env={"CREDENTIALS_DIRECTORY": str(creds)})
        assert sink.source == "credential alertmanager-url"
        outbox = Outbox(tmp_path / "outbox", max_entries=10)
        d = deliver(sink, outbox, Notification("k1", "firing", "box", T0 + 6, [item()]))
        assert d.health.last_answer == "1 alert posted (200)", d.health.last_error
        assert [a["labels"]["alertname"] for a in am.alerts()] == ["corruption"]

    def test_user_and_password_go_as_basic_auth_and_are_never_shown(self, tmp_path: Path) -> None:
        """From url_file: the request carries the URL's user and password as HTTP basic
        auth; a refusal names the server by scheme, host and port only, and no text of
        the sink (error, answer) holds the password."""
        s, url_file, outbox, d = deliver_with_password(tmp_path, "s3cret-pa55word", "404")
        (hit,) = s.requests
        assert hit.path == "/api/v2/alerts"
        assert hit.headers["authorization"] == "Basic c3RhdGV3YXJkZW46czNjcmV0LXBhNTV3b3Jk"
        assert d.health.state == "rejected"
        assert f"(http://127.0.0.1:{s.port})" in d.health.last_error
        assert f"file {url_file}" in d.health.last_error
        for text in (d.health.last_error, d.health.last_answer, str(outbox.pending())):
            assert "s3cret-pa55word" not in text

    @pytest.mark.parametrize("password", ["p.ss", "hunter2", "dot.ted.pass", "a%2Fb%3Ac", "abc"])
    def test_a_password_a_server_echoes_is_scrubbed_whatever_it_is(
        self, tmp_path: Path, password: str
    ) -> None:
        """A server that repeats the Basic credentials in its refusal: the password (with a
        dot, under 8 characters, percent-encoded) is in no text of the sink."""
        _s, _url_file, outbox, d = deliver_with_password(tmp_path, password, "echo")
        assert d.health.state == "rejected"
        shown = " ".join((d.health.last_error, d.health.last_answer, str(outbox.pending())))
        assert "bad credentials" in shown  # the echo is there, its secret is not
        for spelling in {password, unquote(password)}:
            assert spelling not in shown, spelling

    @pytest.mark.parametrize("how", ["readable by others", "symlink", "not a URL", "missing"])
    def test_a_url_file_that_cannot_be_used_keeps_the_entry(self, tmp_path: Path, how: str) -> None:
        """A URL file readable by others, a symlink, a missing file or text that is not
        one http(s) URL: the entry waits in the outbox, the sink says why (rejected)."""
        url_file = tmp_path / "am.url"
        if how == "not a URL":
            url_file.write_text("am.example:9093 s3cret\n")
            url_file.chmod(0o600)
        else:
            unfit_secret_file(url_file, how, "http://127.0.0.1:1\n")
        sink = AlertmanagerSink(AlertmanagerConfig(enabled=True, url_file=url_file))
        outbox = Outbox(tmp_path / "outbox", max_entries=10)
        d = deliver(sink, outbox, Notification("k1", "firing", "box", T0, [item()]))
        assert d.health.state == "rejected"
        assert str(url_file) in d.health.last_error
        assert "s3cret" not in d.health.last_error
        assert len(outbox.pending("alertmanager")) == 1

    def test_config_takes_one_source(self) -> None:
        """url, url_file and credential are alternatives: two at once is an error."""
        with pytest.raises(ConfigError, match="set one of url, url_file or credential"):
            parse_config("alerts:\n  alertmanager: {url: 'http://a:9093', url_file: /x}\n")
        with pytest.raises(ConfigError, match="set one of url, url_file or credential"):
            parse_config("alerts:\n  alertmanager: {url_file: /x, credential: am}\n")
        c = parse_config("alerts:\n  alertmanager: {enabled: true, credential: alertmanager-url}\n")
        assert c.alerts.alertmanager.credential == "alertmanager-url"


class TestThroughTheOutbox:
    def test_incident_posted_reposted_while_firing_then_resolved(
        self, tmp_path: Path, am: Alertmanager, hook: PushServer
    ) -> None:
        """A real incident book's updates through Alerts: posted once it opens, posted
        again every resend_interval while it fires (Alertmanager's updatedAt moves on),
        and resolved in Alertmanager when it closes."""
        cfg = AlertsConfig(
            group_wait=0.1,
            journald=JournaldAlertsConfig(enabled=False),
            alertmanager=AlertmanagerConfig(enabled=True, url=am.url, resend_interval=0.3),
        )
        book = IncidentBook(tmp_path / "incidents.json")
        alerts = Alerts(cfg, tmp_path / "state", log=Log(), host="box")
        seen: list[dict[str, Any]] = []

        async def scenario() -> None:
            task = asyncio.create_task(alerts.run())
            update = book.record(sig("corruption", T0))
            assert update is not None
            alerts.submit(update)
            first = await asyncio.to_thread(wait_for, am.alerts, what="the alert")
            seen.append(first[0])
            await asyncio.to_thread(
                wait_for,
                lambda: alerts.deliveries["alertmanager"].health.delivered >= 3,
                what="two re-posts",
            )
            seen.append(am.alerts()[0])
            resolved = book.resolve(update.incident.id, "fixed", at=T0 + 100)
            assert resolved is not None
            alerts.submit(resolved)
            await asyncio.to_thread(wait_for, lambda: am.alerts() == [], what="resolved")
            task.cancel()
            await alerts.close()

        asyncio.run(scenario())
        first, later = seen
        assert first["labels"]["alertname"] == "corruption"
        assert first["labels"]["host"] == "box"
        assert later["labels"] == first["labels"]
        assert later["updatedAt"] > first["updatedAt"]
        wait_for(lambda: ("corruption", "resolved") in webhook_states(hook), what="resolved")
        assert alerts.outbox.pending() == []

    def test_nothing_is_reposted_once_resolved(self, tmp_path: Path) -> None:
        """The re-post carries only incidents still firing; with none, none is queued."""
        cfg = AlertsConfig(
            journald=JournaldAlertsConfig(enabled=False),
            alertmanager=AlertmanagerConfig(enabled=True, url="http://127.0.0.1:1"),
        )
        alerts = Alerts(cfg, tmp_path / "state", log=Log(), host="box")
        alerts.flush(T0 + 10**6)
        assert alerts.outbox.pending() == []
        assert dataclasses.asdict(cfg.alertmanager)["resend_interval"] == 60.0


class TestDaemon:
    def test_the_daemon_posts_corruption(
        self, env: dict[str, str], hermes_home: Path, am: Alertmanager
    ) -> None:
        """A real daemon posts a corruption incident to a real Alertmanager with the kind, severity,
        database, profile and incident id as labels and the next step as an annotation."""
        path = Path(env["XDG_CONFIG_HOME"]) / "statewarden" / "config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "alerts:\n  journald: {enabled: false}\n"
            f"  alertmanager: {{enabled: true, url: '{am.url}', timeout: 2s}}\n"
        )
        d = DaemonProc(env)
        try:
            d.wait_for_line("statewarden ready")
            malformed(hermes_logger(hermes_home / "logs", "gateway.session"))
            (alert,) = wait_for(am.alerts, what="the corruption alert")
            (inc,) = d.incidents_of("corruption")
            wait_for(
                lambda: (
                    d.incidents_of("corruption")[0]["notification"]["state"] == "notified firing"
                )
            )
        finally:
            d.stop()
        assert alert["labels"]["alertname"] == "corruption"
        assert alert["labels"]["severity"] == "critical"
        assert alert["labels"]["database"] == str(hermes_home / "state.db")
        assert alert["labels"]["profile"] == "default"
        assert alert["labels"]["incident"] == str(inc["id"])
        assert alert["annotations"]["next_step"].startswith("statewardenctl check --profile")
