"""Silences: notifications of one kind muted for a while, the incidents kept; what is
still open notified when the silence ends; ``statewardenctl silence`` with and without a
running daemon, surviving its restart; bad input a one-line usage error."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lab.bot_api import BotApi
from lab.push_server import PushServer
from statewarden.alerts.message import plain_text
from statewarden.alerts.service import Alerts
from statewarden.alerts.silences import Silence, SilenceFile
from statewarden.config import AlertmanagerConfig, AlertsConfig, JournaldAlertsConfig
from statewarden.errors import EXIT_USAGE
from statewarden.incidents.book import IncidentBook
from tests.support.alerts import T0, Log, Rig, configure, sig
from tests.support.cli import run_ctl
from tests.support.daemon import DaemonProc
from tests.support.hermes_logs import hermes_logger, malformed
from tests.support.waiting import wait_for

pytestmark = pytest.mark.process


def silence(sid: int, kind: str, start: float, hours: float = 2, db: str | None = None) -> Silence:
    return Silence(sid, kind, db, "bulk import", start, start + hours * 3600)


class TestRouter:
    def test_silenced_kind_is_recorded_not_sent_then_sent_when_it_ends(
        self, tmp_path: Path
    ) -> None:
        """A silenced kind's incident is in the book, muted; another kind still goes; at
        the silence's end the one still open is notified."""
        rig = Rig(tmp_path)
        s = silence(1, "corruption", T0 - 10)
        rig.router.set_silences([s], T0)
        rig.fire(sig("corruption", T0))
        rig.fire(sig("task_died", T0, severity="critical"))
        (n,) = rig.router.tick(T0)
        assert [i.kind for i in n.items] == ["task_died"]
        (inc,) = [i for i in rig.book.open_incidents() if i.kind == "corruption"]
        assert rig.router.state_of(inc.id) == {"state": "muted: silence #1"}
        assert rig.router.next_deadline() == s.ends_at
        assert rig.router.set_silences([], s.ends_at) == [s]
        (after,) = rig.router.tick(s.ends_at)
        assert [(i.kind, i.change) for i in after.items] == [("corruption", "opened")]

    def test_silence_on_another_database_mutes_nothing_here(self, tmp_path: Path) -> None:
        """A silence of a kind on another database does not mute that kind on this one."""
        rig = Rig(tmp_path)
        rig.router.set_silences([silence(1, "corruption", T0, db="/elsewhere/state.db")], T0)
        rig.fire(sig("corruption", T0))
        (n,) = rig.router.tick(T0)
        assert n.items[0].kind == "corruption"

    def test_reminders_are_muted_and_one_goes_at_the_end(self, tmp_path: Path) -> None:
        """Notified before the silence: its reminders are muted; at the end, one reminder."""
        rig = Rig(tmp_path)
        rig.fire(sig("corruption", T0))
        rig.router.tick(T0)
        s = silence(1, "corruption", T0 + 60, hours=6)
        rig.router.set_silences([s], T0 + 60)
        assert rig.router.tick(T0 + 4 * 3600) == []
        rig.router.set_silences([], s.ends_at)
        (n,) = rig.router.tick(s.ends_at)
        assert n.items[0].change == "reminder"
        assert "REMINDER" in plain_text(n)

    def test_resolved_while_silenced_is_sent_at_the_end(self, tmp_path: Path) -> None:
        """Notified firing, then resolved under the silence: the reader learns it at the end;
        one that opened and resolved inside the silence is never sent."""
        rig = Rig(tmp_path)
        rig.fire(sig("corruption", T0, key="a"))
        rig.router.tick(T0)
        s = silence(1, "corruption", T0 + 1)
        rig.router.set_silences([s], T0 + 1)
        (inc,) = rig.book.open_incidents()
        short = rig.fire(sig("corruption", T0 + 5, key="b"))
        for u in (
            rig.book.resolve(inc.id, "fixed", at=T0 + 10),
            rig.book.resolve(short.incident.id, "fixed", at=T0 + 11),
        ):
            assert u is not None
            rig.router.submit(u, now=u.incident.resolved_at)
        assert rig.router.tick(T0 + 100) == []
        rig.router.set_silences([], s.ends_at)
        (n,) = rig.router.tick(s.ends_at)
        assert [(i.incident, i.change) for i in n.items] == [(inc.id, "resolved")]


@pytest.fixture
def api() -> Iterator[BotApi]:
    server = BotApi()
    yield server
    server.stop()


def ctl(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    r = run_ctl(*args, env=env)
    return r.exit_code, r.stdout, r.stderr


class TestCommand:
    def test_add_list_expire_without_daemon(self, env: dict[str, str], tmp_path: Path) -> None:
        """No daemon: the command writes silences.json (atomically, 0600) and says so."""
        code, out, err = ctl(
            env, "silence", "add", "--kind", "wal_growth", "--for", "2h", "--reason", "bulk import"
        )
        assert code == 0, err
        assert out.startswith("silence #1 (wal_growth) until ")
        assert "daemon not running" in err
        path = tmp_path / "xdg-state" / "statewarden" / "silences.json"
        assert path.stat().st_mode & 0o777 == 0o600
        (saved,) = SilenceFile(path.parent).read()
        assert saved.kind == "wal_growth"
        assert saved.db is None
        assert round(saved.ends_at - saved.created_at) == 7200
        code, out, _ = ctl(
            env,
            "silence",
            "add",
            "--kind",
            "corruption",
            "--db",
            "/srv/h/state.db",
            "--for",
            "30m",
            "--reason",
            "r",
        )
        assert code == 0
        assert out.startswith("silence #2 (corruption on /srv/h/state.db)")
        code, out, _ = ctl(env, "silence", "expire", "1")
        assert (code, out) == (0, "silence #1 (wal_growth) expired\n")
        rows = json.loads(ctl(env, "silence", "list", "--json")[1])["silences"]
        assert [(r["id"], r["state"]) for r in rows] == [(2, "active"), (1, "ended")]
        alerts = json.loads(ctl(env, "alerts", "--json")[1])
        assert [s["id"] for s in alerts["silences"]] == [2, 1]
        assert "silence #2 corruption on /srv/h/state.db until" in ctl(env, "alerts")[1]

    @pytest.mark.parametrize(
        ("args", "error"),
        [
            (["add", "--kind", "nope", "--for", "2h", "--reason", "r"], "unknown kind 'nope'"),
            (
                ["add", "--kind", "corruption", "--for", "soon", "--reason", "r"],
                "bad duration 'soon'",
            ),
            (["add", "--kind", "corruption", "--for", "0s", "--reason", "r"], "bad duration '0s'"),
            (["expire", "7"], "no silence #7 (active ones: none)"),
            (["expire", "x1"], "bad silence ID 'x1'"),
        ],
    )
    def test_bad_input_is_one_line_with_the_usage_code(
        self, env: dict[str, str], args: list[str], error: str
    ) -> None:
        """A bad kind, duration or silence ID, or expiring one that does not exist, is one error
        line with the usage exit code and nothing on stdout."""
        code, out, err = ctl(env, "silence", *args)
        assert code == EXIT_USAGE
        assert out == ""
        assert err.count("\n") == 1
        assert err.startswith(f"statewardenctl: error: {error}")

    def test_expiring_twice_is_refused(self, env: dict[str, str]) -> None:
        """Expiring a silence that has already ended is a one-line usage error saying so."""
        ctl(env, "silence", "add", "--kind", "corruption", "--for", "1h", "--reason", "r")
        assert ctl(env, "silence", "expire", "1")[0] == 0
        code, _, err = ctl(env, "silence", "expire", "1")
        assert code == EXIT_USAGE
        assert err == "statewardenctl: error: silence #1 has already ended\n"


class TestFile:
    def test_commands_at_once_lose_no_silence(self, tmp_path: Path) -> None:
        """Twenty adds at once (each its own lock descriptor, as separate commands have):
        twenty silences, twenty different IDs, the file whole."""
        files = [SilenceFile(tmp_path) for _ in range(20)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            made = list(pool.map(lambda f: f.add("corruption", None, 60, "r", time.time()), files))
        assert sorted(s.id for s in made) == list(range(1, 21))
        assert sorted(s.id for s in SilenceFile(tmp_path).read()) == list(range(1, 21))

    def test_a_damaged_file_is_a_one_line_error(self, env: dict[str, str], tmp_path: Path) -> None:
        """A silences file that is not JSON makes ``silence list`` fail with one line naming the
        file (exit 1), nothing on stdout."""
        path = tmp_path / "xdg-state" / "statewarden" / "silences.json"
        path.parent.mkdir(parents=True)
        path.write_text("{not json")
        code, out, err = ctl(env, "silence", "list")
        assert out == ""
        assert code == 1
        assert err.startswith(f"statewardenctl: error: {path}: unreadable (")
        assert err.count("\n") == 1


class TestOnItsOwn:
    def test_a_silence_whose_time_is_up_sends_what_is_still_open(self, tmp_path: Path) -> None:
        """Alerts running for real: a silence of one second, written to the state folder;
        the incident is muted, and posted once they are over (no one expired it)."""
        hook = PushServer()
        cfg = AlertsConfig(
            journald=JournaldAlertsConfig(enabled=False),
            alertmanager=AlertmanagerConfig(enabled=True, url=hook.url, timeout=2.0),
        )
        state = tmp_path / "state"
        SilenceFile(state).add("corruption", None, 4.0, "a few seconds", time.time())
        book = IncidentBook(tmp_path / "incidents.json")
        alerts = Alerts(cfg, state, log=Log(), host="box")

        async def scenario() -> None:
            task = asyncio.create_task(alerts.run())
            update = book.record(sig("corruption", time.time()))
            assert update is not None
            alerts.submit(update)
            alerts.flush()
            assert alerts.incident_state(update.incident.id) == {"state": "muted: silence #1"}
            assert hook.requests == []
            await asyncio.to_thread(wait_for, lambda: hook.requests, what="the post after")
            task.cancel()
            await alerts.close()

        try:
            asyncio.run(scenario())
        finally:
            hook.stop()
        (hit,) = hook.requests
        assert hit.json()[0]["labels"]["alertname"] == "corruption"
        assert alerts.silence_status()["silences"][0]["state"] == "ended"


class TestDaemon:
    def test_muted_across_a_restart_and_notified_when_expired(
        self, env: dict[str, str], hermes_home: Path, api: BotApi
    ) -> None:
        """A silence added while the daemon runs mutes corruption's Telegram message (the
        incident is recorded, "muted: silence #1"); it holds across a restart; expired, the
        still-open incident is sent then, once."""
        configure(env, api.url)
        d = DaemonProc(env)
        try:
            d.wait_for_line("statewarden ready")
            code, _, err = ctl(
                env,
                "silence",
                "add",
                "--kind",
                "corruption",
                "--for",
                "1h",
                "--reason",
                "disk swap",
            )
            assert code == 0
            assert err == ""
            status = d.ctl("alerts")
            assert [(s["id"], s["state"]) for s in status["silences"]] == [(1, "active")]
            malformed(hermes_logger(hermes_home / "logs", "gateway.session"))
            wait_for(
                lambda: (
                    d.incidents_of("corruption")
                    and d.incidents_of("corruption")[0]["notification"]["state"]
                    == "muted: silence #1"
                ),
                what="a muted corruption incident",
            )
        finally:
            d.stop()
        d = DaemonProc(env)
        try:
            d.wait_for_line("statewarden ready")
            wait_for(
                lambda: (
                    d.incidents_of("corruption")[0]["notification"]["state"] == "muted: silence #1"
                ),
                what="still muted after the restart",
            )
            assert api.accepted == []
            assert ctl(env, "silence", "expire", "1")[0] == 0
            (req,) = wait_for(lambda: list(api.accepted), what="the message after the silence")
            assert req.text.startswith("<b>CRITICAL corruption on")
            wait_for(
                lambda: (
                    d.incidents_of("corruption")[0]["notification"]["state"] == "notified firing"
                )
            )
        finally:
            d.stop()
        assert len(api.accepted) == 1

    def test_silence_written_behind_its_back_is_read_on_its_own(
        self, env: dict[str, str], hermes_home: Path, api: BotApi, tmp_path: Path
    ) -> None:
        """A silence file written while the daemon was not told (no control socket call)
        is read on the daemon's next look: ``alerts`` lists it."""
        configure(env, api.url)
        d = DaemonProc(env)
        try:
            d.wait_for_line("statewarden ready")
            now = time.time()
            SilenceFile(tmp_path / "xdg-state" / "statewarden").add(
                "corruption", None, 3600, "quiet", now
            )
            wait_for(lambda: d.ctl_raw("alerts")["silences"], what="the silence read")
        finally:
            d.stop()
