"""The daemon end to end: a Hermes log line -> an incident -> a Telegram request at a real
local Bot API server, with text a person can act on; an outage with a kill -9 of the
daemon in the middle loses nothing, sends nothing twice and keeps the order."""

from __future__ import annotations

import json
import logging
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from lab.bot_api import BotApi
from statewarden.cli.ctl import main as ctl
from tests.support.alerts import configure
from tests.support.daemon import DaemonProc
from tests.support.hermes_logs import hermes_logger, malformed
from tests.support.waiting import wait_for

TOKEN = "123456789:AAHfakeTokenForTestsOnly_abcdefghijk"


@pytest.fixture
def api() -> Iterator[BotApi]:
    server = BotApi()
    yield server
    server.stop()


def task_died(log: logging.Logger, task: str) -> None:
    log.error("Supervised task %s died: RuntimeError('boom')", task)


class TestDaemonTelegram:
    def test_malformed_line_becomes_an_actionable_message(
        self, env: dict[str, str], hermes_home: Path, api: BotApi, tmp_path: Path
    ) -> None:
        """'database disk image is malformed' in agent.log -> one Telegram message naming
        the kind, host, profile, database, since/how often, evidence and the next step;
        the incident shows it was notified; the token appears in no output or state file."""
        configure(env, api.url)
        d = DaemonProc(env)
        try:
            d.wait_for_line("statewarden ready")
            malformed(hermes_logger(hermes_home / "logs", "gateway.session"))
            (req,) = wait_for(lambda: list(api.accepted), what="a Telegram message")
            text = req.text
            host = socket.gethostname()
            assert text.startswith(f"<b>CRITICAL corruption on {host}, profile default</b>")
            assert f"<i>database:</i> {hermes_home / 'state.db'}" in text
            assert "seen 1 time, last" in text
            assert "state.db routing save failed: database disk image is malformed" in text
            assert (
                "statewardenctl check --profile default, then statewardenctl maintenance --dry-run"
                in text
            )
            (inc,) = d.incidents_of("corruption")
            assert wait_for(
                lambda: (
                    d.incidents_of("corruption")[0]["notification"]["state"] == "notified firing"
                )
            )
            assert inc["severity"] == "critical"
            status = wait_for(
                lambda: (s := d.ctl("alerts"))["sinks"]["telegram"]["delivered"] == 1 and s
            )
            assert status["outbox"] == []
            assert status["sinks"]["journald"]["state"] == "ok"
            listing = CliRunner(env=env).invoke(ctl, ["alerts"])
            assert "telegram  ok        0 waiting; last delivered" in listing.stdout
        finally:
            d.stop()
        seen = "\n".join(d.output()) + json.dumps(status) + listing.stdout
        for f in (tmp_path / "xdg-state").rglob("*"):
            if f.is_file():
                seen += f.read_text(errors="replace")
        assert TOKEN not in seen
        assert TOKEN.split(":")[1] not in seen

    def test_kill_9_mid_outage_loses_nothing_and_sends_nothing_twice(
        self, env: dict[str, str], hermes_home: Path, tmp_path: Path
    ) -> None:
        """Telegram unreachable (connections refused), incidents fire, the daemon is killed
        with SIGKILL, more fire while it is down; when the daemon and the network are back,
        every incident arrives exactly once, in the order they fired."""
        api = BotApi()
        port = api.port
        api.stop()  # the outage: nothing listens on the port
        configure(env, f"http://127.0.0.1:{port}")
        log = hermes_logger(hermes_home / "logs", "gateway.run")
        d = DaemonProc(env)
        try:
            d.wait_for_line("statewarden ready")
            malformed(hermes_logger(hermes_home / "logs", "gateway.session"))
            wait_for(lambda: d.incidents_of("corruption"), what="corruption incident")
            task_died(log, "cron_ticker")
            task_died(log, "delivery_worker")
            outbox = tmp_path / "xdg-state" / "statewarden" / "outbox"
            wait_for(
                lambda: len(list(outbox.glob("*.telegram.json"))) >= 2,
                what="two Telegram entries in the outbox",
            )
            d.wait_for_line("alert sink failed")
        finally:
            d.stop(signal.SIGKILL)
        task_died(log, "session_reaper")  # fires while the daemon is down
        api = BotApi(port=port)
        try:
            d = DaemonProc(env)
            try:
                d.wait_for_line("statewarden ready")
                wait_for(lambda: len(api.accepted) >= 3, what="three messages")
                wait_for(lambda: not list(outbox.glob("*.telegram.json")), what="outbox empty")
                kinds = [r.text.split("\n")[0] for r in api.accepted]
                whats = [
                    ln
                    for r in api.accepted
                    for ln in r.text.split("\n")
                    if ln.startswith("<i>what:</i>")
                ]
            finally:
                d.stop()
        finally:
            api.stop()
        assert kinds[0].startswith("<b>CRITICAL corruption on")
        tasks = [w for w in whats if "task_died" in w]
        assert [t.split("gateway task ")[1].split(" ")[0] for t in tasks] == [
            "cron_ticker",
            "delivery_worker",
            "session_reaper",
        ]
        assert len(whats) == len(set(whats)) == 4


class TestReload:
    def test_wrong_token_then_fixed_with_a_reload(
        self, env: dict[str, str], hermes_home: Path, tmp_path: Path
    ) -> None:
        """A wrong token: 401, reported once, the notification kept; the token file fixed
        and SIGHUP: it is delivered, once."""
        api = BotApi(token=TOKEN)
        try:
            token_file = tmp_path / "telegram.token"
            token_file.write_text("987654321:AAHwrongTokenwrongTokenwrongToken_xyz\n")
            token_file.chmod(0o600)
            configure(env, api.url)
            del env["STATEWARDEN_TELEGRAM_TOKEN"]
            cfg = Path(env["XDG_CONFIG_HOME"]) / "statewarden" / "config.yaml"
            cfg.write_text(cfg.read_text() + f"    token_file: {token_file}\n")
            d = DaemonProc(env)
            try:
                d.wait_for_line("statewarden ready")
                malformed(hermes_logger(hermes_home / "logs", "gateway.session"))
                d.wait_for_line("alert sink rejected the notification: a configuration problem")
                status = d.ctl("alerts")
                assert status["sinks"]["telegram"]["state"] == "rejected"
                assert status["sinks"]["telegram"]["pending"] == 1
                assert (
                    "401 Unauthorized: check the bot token (token_file"
                    in status["sinks"]["telegram"]["last_error"]
                )
                token_file.write_text(TOKEN + "\n")
                d.proc.send_signal(signal.SIGHUP)
                wait_for(lambda: len(api.accepted) == 1, what="the kept notification delivered")
                wait_for(lambda: d.ctl("alerts")["outbox"] == [], what="the outbox emptied")
            finally:
                d.stop()
            assert len(api.accepted) == 1
            assert sum("rejected the notification" in ln for ln in d.output()) == 1
            assert "AAHwrongToken" not in "\n".join(d.output())
        finally:
            api.stop()
