"""The alerts config section and ``statewardenctl alerts`` / ``alerts test``: the issue's
config shape accepted as is, bad values named, the token never read from YAML or shown,
test notifications through real sinks with each answer and the exit code."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from lab.bot_api import BotApi
from statewarden.alerts.delivery import Delivery
from statewarden.alerts.journald_sink import JournaldSink
from statewarden.alerts.message import Item, Notification
from statewarden.alerts.outbox import Outbox
from statewarden.cli.ctl import main as ctl
from statewarden.config import parse_config
from statewarden.errors import ConfigError
from statewarden.journald import JournalSender
from statewarden.kinds import KINDS
from tests.support.alerts import Log

TOKEN = "123456789:AAHfakeTokenForTestsOnly_abcdefghijk"

ISSUE_SHAPE = """\
alerts:
  journald: {enabled: true}
  telegram:
    enabled: true
    token_file: ~/.config/statewarden/telegram.token
    chat_id: "123456789"
    api_base: https://api.telegram.org
"""


@pytest.fixture
def api() -> Iterator[BotApi]:
    server = BotApi()
    yield server
    server.stop()


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def telegram_config(tmp_path: Path, api: BotApi, token_file: Path) -> Path:
    return write_config(
        tmp_path,
        f"""\
alerts:
  journald: {{enabled: false}}
  telegram:
    enabled: true
    token_file: {token_file}
    chat_id: -1001234567890
    message_thread_id: 7
    api_base: {api.url}
""",
    )


class TestConfig:
    def test_issue_shape_is_accepted_as_is(self) -> None:
        """The alerts section in its documented shape parses as is: both sinks on, the chat id, the
        token file, group wait, repeat interval and no_wait."""
        cfg = parse_config(ISSUE_SHAPE).alerts
        assert cfg.journald.enabled
        assert cfg.telegram.enabled
        assert cfg.telegram.chat_id == "123456789"
        assert str(cfg.telegram.token_file).endswith(".config/statewarden/telegram.token")
        assert cfg.group_wait == 30.0
        assert cfg.repeat_interval == 4 * 3600.0
        assert cfg.no_wait == ("critical",)

    def test_numeric_chat_id_is_kept_as_text(self) -> None:
        """A chat_id written as a YAML number is kept as its text, sign included."""
        cfg = parse_config("alerts: {telegram: {enabled: true, chat_id: -100123}}").alerts
        assert cfg.telegram.chat_id == "-100123"

    def test_token_in_yaml_is_refused_without_echoing_it(self) -> None:
        """A token written in the config file is an unknown key; the error never shows it."""
        with pytest.raises(ConfigError) as err:
            parse_config(f"alerts:\n  telegram:\n    token: {TOKEN}\n", source="c.yaml")
        assert str(err.value).startswith("c.yaml:3: alerts.telegram.token: unknown key")
        assert TOKEN not in str(err.value)

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            (
                "alerts: {telegram: {enabled: true}}",
                "<config>:1: alerts.telegram.chat_id: is required when telegram is enabled",
            ),
            (
                "alerts: {telegram: {api_base: ftp://x}}",
                "<config>:1: alerts.telegram.api_base: expected an http(s) URL, got 'ftp://x'",
            ),
            (
                "alerts: {telegram: {min_severity: loud}}",
                "<config>:1: alerts.telegram.min_severity: expected one of info, warning, error, "
                'critical, got a string ("loud")',
            ),
            (
                "alerts: {journald: {kinds: [corrupt]}}",
                "<config>:1: alerts.journald.kinds[0]: expected one of corruption,",
            ),
            (
                "alerts: {outbox_max_entries: 0}",
                "<config>:1: alerts.outbox_max_entries: must be at least 1, got 0",
            ),
            (
                "alerts: {telegram: {chat_id: [1]}}",
                "<config>:1: alerts.telegram.chat_id: expected a number or a string, got a list",
            ),
        ],
    )
    def test_bad_values_are_one_line(self, text: str, message: str) -> None:
        """Each bad alerts value is a ConfigError whose message names the source, line, key and what
        was expected."""
        with pytest.raises(ConfigError) as err:
            parse_config(text)
        assert str(err.value).startswith(message)

    def test_every_kind_of_the_table_and_no_other_is_accepted(self) -> None:
        """The config takes exactly the kinds of ``statewarden.kinds.KINDS`` (the one
        table; the config reads it), each by name, and refuses a name not in it."""
        names = ", ".join(KINDS)
        config = parse_config(f"alerts: {{journald: {{kinds: [{names}]}}}}")
        assert config.alerts.journald.kinds == tuple(KINDS)
        with pytest.raises(ConfigError) as err:
            parse_config("alerts: {telegram: {kinds: [corruption, sessions_gone]}}")
        assert str(err.value) == (
            f"<config>:1: alerts.telegram.kinds[1]: expected one of {names},"
            ' got a string ("sessions_gone")'
        )


class TestAlertsTest:
    def test_telegram_ok(self, tmp_path: Path, api: BotApi) -> None:
        """alerts test sends one message to the configured chat and topic; exit 0."""
        token_file = tmp_path / "tok"
        token_file.write_text(TOKEN + "\n")
        cfg = telegram_config(tmp_path, api, token_file)
        r = CliRunner().invoke(ctl, ["alerts", "test", "--config", str(cfg)])
        assert r.exit_code == 0, r.output
        assert r.stdout == "telegram: ok: sent as 1 message, last message_id 1\n"
        (req,) = api.accepted
        assert req.body["chat_id"] == "-1001234567890"
        assert req.body["message_thread_id"] == 7
        assert "statewarden test notification from" in req.text
        assert TOKEN not in r.output

    def test_telegram_401_is_exit_1_with_the_reason(self, tmp_path: Path, api: BotApi) -> None:
        """``alerts test`` against a Bot API answering 401: exit 1, the rejection with what to check
        on stdout, one error line, and the token never shown."""
        api.default = "401"
        token_file = tmp_path / "tok"
        token_file.write_text(TOKEN)
        cfg = telegram_config(tmp_path, api, token_file)
        r = CliRunner().invoke(ctl, ["alerts", "test", "--config", str(cfg)])
        assert r.exit_code == 1
        assert r.stdout == (
            f"telegram: rejected: 401 Unauthorized: check the bot token (token_file {token_file}), "
            "chat_id -1001234567890 and message_thread_id\n"
        )
        assert r.stderr == "statewardenctl: error: not delivered by telegram\n"
        assert TOKEN not in r.output

    def test_missing_token_file(self, tmp_path: Path, api: BotApi) -> None:
        """A missing token file is a rejected test (exit 1) whose answer names the file, and no
        request reaches the Bot API."""
        cfg = telegram_config(tmp_path, api, tmp_path / "nope")
        r = CliRunner(env={"STATEWARDEN_TELEGRAM_TOKEN": ""}).invoke(
            ctl, ["alerts", "test", "--config", str(cfg), "--json"]
        )
        assert r.exit_code == 1
        result = json.loads(r.stdout)["sinks"]["telegram"]
        assert result["result"] == "rejected"
        assert f"token_file {tmp_path / 'nope'}: no such file" in result["answer"]
        assert api.requests == []

    def test_journald_without_a_journal_writes_stderr(self, tmp_path: Path) -> None:
        """With no journal socket, the journald sink's test entry goes to stderr and the test says
        so (exit 0)."""
        cfg = write_config(tmp_path, "alerts: {journald: {enabled: true}}\n")
        r = CliRunner(env={"STATEWARDEN_JOURNAL_SOCKET": str(tmp_path / "none")}).invoke(
            ctl, ["alerts", "test", "--config", str(cfg)]
        )
        assert r.exit_code == 0, r.output
        assert r.stdout == "journald: ok: 1 entry written to the stderr (no journal socket)\n"
        assert "<5>statewarden test notification from" in r.stderr

    def test_sink_not_enabled_is_usage_error(self, tmp_path: Path) -> None:
        """``alerts test --sink`` naming a sink that is not enabled is a one-line usage error (exit
        2) naming the config key."""
        cfg = write_config(tmp_path, "alerts: {journald: {enabled: true}}\n")
        r = CliRunner().invoke(ctl, ["alerts", "test", "--sink", "telegram", "--config", str(cfg)])
        assert r.exit_code == 2
        assert r.stderr == (
            "statewardenctl: error: the telegram sink is not enabled "
            "(alerts.telegram.enabled in the config)\n"
        )


class TestAlertsListing:
    def test_local_outbox_listing(self, tmp_path: Path) -> None:
        """With no daemon, `alerts` lists the outbox as it is on disk and says so."""
        outbox = Outbox(tmp_path / "xdg-state" / "statewarden" / "outbox", max_entries=10)
        item = Item(4, "corruption", "critical", "/db", "default", "s", "opened", 1.0, 1.0, 1)
        outbox.put(Notification("k1", "firing", "box", 1.0, [item]), "telegram")
        r = CliRunner().invoke(ctl, ["alerts"])
        assert r.exit_code == 0, r.output
        assert r.stderr == "(daemon not running: read from the state directory)\n"
        lines = r.stdout.splitlines()
        assert lines[0] == "journald  unknown (daemon not running) 0 waiting"
        assert lines[1] == "telegram  unknown (daemon not running) 1 waiting (not enabled)"
        assert lines[2].split()[:5] == ["1", "telegram", "firing", "#4", "corruption"]
        data = json.loads(CliRunner().invoke(ctl, ["alerts", "--json"]).stdout)
        assert data["source"] == "local"
        assert data["outbox"][0]["incidents"] == [4]


class TestIncidentsShowNotificationState:
    def test_local_incidents_listing_says_notified(self, tmp_path: Path) -> None:
        """`statewardenctl incidents` (no daemon) shows each incident's notification state
        from the saved router state."""
        from statewarden.alerts.router import Route, Router
        from statewarden.config import AlertsConfig
        from statewarden.incidents.book import IncidentBook
        from statewarden.incidents.signals import Signal

        sdir = tmp_path / "xdg-state" / "statewarden"
        book = IncidentBook(sdir / "incidents.json")
        router = Router(
            AlertsConfig(),
            Outbox(sdir / "outbox", max_entries=10),
            {"journald": Route("info")},
            state_path=sdir / "alerts.json",
            host="box",
        )
        for kind, db in (("corruption", "/db"), ("wal_growth", "/other.db")):
            update = book.record(Signal(kind, db, f"{kind} here", at=100.0))
            assert update is not None
            router.submit(update, now=100.0)
        router.tick(100.0)  # the critical one goes at once; the warning waits group_wait
        r = CliRunner().invoke(ctl, ["incidents"])
        assert r.exit_code == 0, r.output
        lines = r.stdout.splitlines()
        # In the outbox, not yet delivered: "notified" would be a lie.
        assert lines[1] == "      alerts: queued firing, not delivered yet (journald)"
        assert lines[3] == "      alerts: not notified"
        # The sink delivers it (to a stream: no journal socket here) and confirms.
        stream = io.StringIO()
        sink = JournaldSink(JournalSender(str(tmp_path / "no-journal")), stream)
        d = Delivery(
            sink,
            router.outbox,
            retry_max_s=1.0,
            log=Log(),
            on_outcome=lambda e, outcome: router.confirmed(e.sink, e.notification, outcome),
        )
        assert asyncio.run(d.deliver_one())
        assert "corruption here" in stream.getvalue()
        lines = CliRunner().invoke(ctl, ["incidents"]).stdout.splitlines()
        assert lines[1] == "      alerts: notified firing"
        assert lines[3] == "      alerts: not notified"
