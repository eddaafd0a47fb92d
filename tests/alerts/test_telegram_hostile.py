"""The Telegram sink against a hostile Bot API server (lab/bot_api.py on 127.0.0.1): every
odd answer ends in a logged error and a retry (or a reported configuration problem), the
delivery loop survives anything, answers are read bounded, a request has a total
deadline, a huge retry_after is capped, the token leaks in no encoding, and the next
alert is still delivered, exactly once."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from lab.bot_api import HOSTILE, BotApi
from statewarden.alerts.delivery import POISON_FAILURES, Delivery
from statewarden.alerts.outbox import Entry, Outbox
from statewarden.alerts.sink import Progress
from statewarden.alerts.telegram import MAX_ANSWER_BYTES, TelegramSink
from statewarden.config import TelegramConfig
from statewarden.redact import Scrubber
from tests.support.alerts import TOKEN, Log, cfg, note
from tests.support.cli import run_ctl
from tests.support.daemon import DaemonProc
from tests.support.hermes_logs import hermes_logger, malformed
from tests.support.waiting import wait_for

pytestmark = pytest.mark.process

ENV = {"STATEWARDEN_TELEGRAM_TOKEN": TOKEN}
FAILED = (
    "alert sink failed; retrying with backoff",
    "alert sink rejected the notification: a configuration problem",
)
HANG_S = 60.0  # only a hung test waits this long


def token_spellings(token: str = TOKEN) -> list[str]:
    """What a leak could look like, spelled out here, independently of the scrubber."""
    secret = token.split(":", 1)[1]
    pct = quote(token, safe="")
    out = [
        token,
        secret,
        pct,
        re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), pct),
        quote_plus(token),
        json.dumps(token)[1:-1],
        "".join(f"\\u{ord(c):04x}" for c in token),
    ]
    for raw in (token.encode(), secret.encode()):
        for shift in range(3):
            piece = raw[shift : shift + (len(raw) - shift) // 3 * 3]
            out += [base64.b64encode(piece).decode(), base64.urlsafe_b64encode(piece).decode()]
    return out


def leaks(text: str) -> list[str]:
    return [s for s in token_spellings() if s in text]


@pytest.fixture
def api() -> Iterator[BotApi]:
    server = BotApi()
    server.drip_s = 0.3
    yield server
    server.stop()


async def until(cond: Callable[[], object], what: str) -> None:
    """Wait for ``cond`` (the limit is for a hung test, not a timing check)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG_S
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.02)


def hostile_cfg(api: BotApi) -> Any:
    return cfg(api, timeout=1.0, deadline=1.5, min_interval=0.01)


class TestEveryHostileAnswer:
    def test_each_odd_answer_is_an_error_and_the_next_alert_arrives_once(
        self, api: BotApi, tmp_path: Path
    ) -> None:
        """One running delivery loop with the real outbox; for each hostile answer in turn,
        a notification: its first try gets the hostile answer, which is logged as an
        error (a redirect as a configuration problem, resumed as a config reload would),
        and it is delivered exactly once on a later try; the loop never restarts."""
        box = Outbox(tmp_path / "outbox", max_entries=100)
        sink = TelegramSink(hostile_cfg(api), ENV)
        log = Log()
        d = Delivery(sink, box, retry_max_s=0.3, log=log)

        async def go() -> None:
            task = asyncio.create_task(d.run())
            try:
                for mode in HOSTILE:
                    api.script = [mode]
                    box.put(note(f"k-{mode}", summary=f"after {mode}"), "telegram")
                    d.wake()
                    await until(lambda: d.health.state == "rejected" or not box.pending(), mode)
                    if d.health.state == "rejected":
                        d.resume()  # what a config reload does
                    await until(lambda: box.pending() == [], f"delivery after {mode}")
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await sink.close()

        asyncio.run(go())
        summaries = [r.text.split("\n")[2] for r in api.accepted]
        assert summaries == [f"<i>what:</i> #7 corruption: after {m}" for m in HOSTILE]
        assert [r.answered for r in api.requests] == [x for m in HOSTILE for x in (m, "ok")]
        failures = [(event, kw["error"]) for _lvl, event, kw in log.lines if event in FAILED]
        assert [e for e, _ in failures] == [
            FAILED[1] if m in ("loop", "leak") else FAILED[0] for m in HOSTILE
        ]
        errors = [why for _, why in failures]
        by_mode = dict(zip(HOSTILE, errors, strict=True))
        port = api.port
        assert by_mode["429huge"] == (
            "429 Too Many Requests (retry_after too long: capped at alerts.retry_max, 0.3 s)"
        )
        assert by_mode["429far"] == (
            "429 Too Many Requests (retry_after 1e+09 s: capped at alerts.retry_max, 0.3 s)"
        )
        assert by_mode["deep"] == "200 but the answer is not JSON (application/json)"
        assert by_mode["huge"] == "200 answer over the 64 KiB limit: cut; not read"
        assert by_mode["drip"] == (
            f"no complete answer from http://127.0.0.1:{port} within the 1.5 s deadline"
        )
        assert by_mode["html"] == "200 but the answer is not JSON (text/html)"
        assert by_mode["notjson"] == "200 but the answer is not JSON (text/plain)"
        assert by_mode["array"] == "200 but the answer is a JSON list, not an object"
        assert by_mode["ok_noresult"] == (
            "200 ok but no message in the answer (not a Bot API server?)"
        )
        assert by_mode["200notok"] == "200 but the answer is ok: False, not today"
        assert by_mode["badutf8"] == "200 but the answer is not JSON (application/json)"
        assert by_mode["reset"].startswith(f"broken answer from http://127.0.0.1:{port}: ")
        assert by_mode["loop"] == (
            "302 redirect to /bot***redacted***/sendMessage: set api_base to the final URL"
        )
        assert by_mode["leak"] == (
            "307 redirect to https://127.0.0.1/bot***redacted***/sendMessage?t=***redacted***:"
            " set api_base to the final URL"
        )
        assert by_mode["leakdesc"] == (
            "500 Internal error for ***redacted***, ***redacted***, ***redacted***"
        )
        assert d.health.restarts == 0
        assert d.health.state == "ok"
        assert d.health.delivered == len(HOSTILE)
        assert leaks(repr(log.lines) + json.dumps(d.health.to_json())) == []


def deliver_after(
    api: BotApi, answer: str, tmp_path: Path, *, retry_max_s: float, delivered: list[bool]
) -> tuple[Delivery, Outbox]:
    """Queue one alert for Telegram and try to deliver it once per item of ``delivered``,
    the Bot API giving ``answer`` first; each try's outcome must be the item's."""
    api.script = [answer]
    box = Outbox(tmp_path / "outbox", max_entries=10)
    box.put(note("a"), "telegram")
    sink = TelegramSink(hostile_cfg(api), ENV)
    d = Delivery(sink, box, retry_max_s=retry_max_s, log=Log())

    async def go() -> None:
        for want in delivered:
            assert bool(await d.deliver_one()) is want
        await sink.close()

    asyncio.run(go())
    return d, box


class TestBounds:
    def test_a_100_mb_answer_is_cut_at_64_kib(self, api: BotApi, tmp_path: Path) -> None:
        """The answer is read streaming and cut past 64 KiB: the server gets only as far as
        the socket buffers before the client hangs up, and the retry delivers."""
        deliver_after(api, "huge", tmp_path, retry_max_s=0.1, delivered=[False, True])
        assert MAX_ANSWER_BYTES == 64 * 1024
        assert api.sent_bytes["huge"] < 32 * 1024 * 1024  # of 100 MB
        assert len(api.accepted) == 1

    def test_a_dripping_answer_is_cut_at_the_deadline(self, api: BotApi, tmp_path: Path) -> None:
        """Headers, then a byte every 0.3 s (each read well within the 1 s timeout): the
        request ends at its 1.5 s deadline, long before the 1,000 bytes are out."""
        d, _box = deliver_after(api, "drip", tmp_path, retry_max_s=0.1, delivered=[False])
        assert d.health.last_error.endswith("within the 1.5 s deadline")
        assert api.sent_bytes["drip"] < 100

    def test_retry_after_of_10_to_the_9_is_capped(self, api: BotApi, tmp_path: Path) -> None:
        """retry_after 10**9 s (2058) waits alerts.retry_max at most, and says so."""
        d, box = deliver_after(api, "429far", tmp_path, retry_max_s=300.0, delivered=[False])
        assert d.health.retry_at is not None
        assert d.health.retry_at <= time.time() + 300.0
        assert "(retry_after 1e+09 s: capped at alerts.retry_max, 300 s)" in d.health.last_error
        assert box.pending()[0].last_error == d.health.last_error


class Exploding:
    """A sink that fails with something no sink should raise (a bug), then delegates."""

    name = "telegram"

    def __init__(self, inner: TelegramSink, fail: Callable[[Entry], bool]) -> None:
        self.inner = inner
        self.fail = fail
        self.scrub = inner.scrub
        self.before_each: Callable[[], None] = lambda: None

    async def deliver(self, entry: Entry, progress: Progress) -> str:
        self.before_each()
        if self.fail(entry):
            raise ZeroDivisionError(f"bug while sending to /bot{quote(TOKEN)}/sendMessage")
        return await self.inner.deliver(entry, progress)

    async def close(self) -> None:
        await self.inner.close()


class TestSupervised:
    def test_a_failing_loop_is_logged_counted_and_restarted(
        self, api: BotApi, tmp_path: Path
    ) -> None:
        """An exception the loop does not expect: logged (token scrubbed), counted, shown
        as "restarting", the loop starts again after a backoff and delivers."""
        box = Outbox(tmp_path / "outbox", max_entries=10)
        box.put(note("a"), "telegram")
        failures = [1]

        def once(_entry: Entry) -> bool:
            return bool(failures and failures.pop())

        sink = Exploding(TelegramSink(hostile_cfg(api), ENV), once)
        log = Log()
        d = Delivery(sink, box, retry_max_s=0.3, log=log)
        seen: list[dict[str, Any]] = []
        sink.before_each = lambda: seen.append(d.health.to_json())  # what alerts/status show

        async def go() -> None:
            task = asyncio.create_task(d.run())
            await until(lambda: box.pending() == [], "delivery after the restart")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await sink.close()

        asyncio.run(go())
        assert [h["state"] for h in seen] == ["ok", "restarting"]
        assert seen[1]["restarts"] == 1
        assert seen[1]["last_error"] == (
            "delivery failed: ZeroDivisionError: bug while sending to "
            "/bot***redacted***/sendMessage"
        )
        (crash,) = [kw for lvl, e, kw in log.lines if e == "alert delivery failed; restarting it"]
        assert crash["restarts"] == 1
        assert crash["error"] == seen[1]["last_error"].removeprefix("delivery failed: ")
        assert len(api.accepted) == 1
        assert d.health.state == "ok"
        assert d.health.restarts == 1
        assert leaks(repr(log.lines)) == []

    def test_an_entry_that_always_fails_is_set_aside(self, api: BotApi, tmp_path: Path) -> None:
        """An entry that makes the sink fail every time is set aside after a few restarts;
        the ones behind it are delivered."""
        box = Outbox(tmp_path / "outbox", max_entries=10)
        box.put(note("bad"), "telegram")
        box.put(note("good", summary="the next one"), "telegram")
        sink = Exploding(TelegramSink(hostile_cfg(api), ENV), lambda e: e.key == "bad")
        log = Log()
        d = Delivery(sink, box, retry_max_s=0.3, log=log)

        async def go() -> None:
            task = asyncio.create_task(d.run())
            await until(lambda: box.pending() == [], "the good one delivered")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await sink.close()

        asyncio.run(go())
        assert d.health.restarts == POISON_FAILURES
        assert d.health.set_aside == 1
        assert [r.text.split("\n")[2] for r in api.accepted] == [
            "<i>what:</i> #7 corruption: the next one"
        ]
        assert (tmp_path / "outbox" / "000000000001.telegram.json.rejected").exists()


class TestScrubber:
    @pytest.mark.parametrize("spelling", token_spellings())
    def test_every_spelling_of_the_token_is_scrubbed(self, spelling: str) -> None:
        """Every spelling of the bot token (as is, encoded, in other case), alone or inside a
        sentence, a query string or JSON, is scrubbed without a trace."""
        scrub = Scrubber(TOKEN, TOKEN.split(":", 1)[1])
        for text in (spelling, f"a {spelling} b", f"x={spelling}&y=1", f'{{"d": "{spelling}"}}'):
            assert leaks(scrub(text)) == [], text

    def test_base64_inside_a_longer_value_and_spaces(self) -> None:
        """A Basic value ``user:token`` (any alignment), ``+`` and ``%20`` for spaces."""
        scrub = Scrubber(TOKEN, "two words")
        for prefix in ("", "u:", "us:", "use:"):
            basic = base64.b64encode((prefix + TOKEN).encode()).decode()
            assert leaks(scrub(f"Authorization: Basic {basic}")) == []
            assert leaks(scrub(basic)) == []
        assert scrub("two+words two%20words two%2520words") == " ".join(["***redacted***"] * 3)

    def test_telegram_sink_scrubs_with_it(self) -> None:
        """The Telegram sink's scrub redacts the token in a request path and in plain text."""
        sink = TelegramSink(TelegramConfig(enabled=True, chat_id="1"), ENV)
        lower = token_spellings()[3]
        assert sink.scrub(f"/bot{lower}/x {TOKEN}") == "/bot***redacted***/x ***redacted***"


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/PID/status")


class TestDaemonAgainstAHostileServer:
    def test_one_alert_through_every_kind_of_trouble(
        self, env: dict[str, str], hermes_home: Path, tmp_path: Path
    ) -> None:
        """The real daemon; its one corruption alert meets, try after try, a retry_after
        of 10**400, 60 KB of '[', 100 MB of answer, a dripping answer, a reset, HTML, the
        token echoed in a description, then a redirect with the token percent-encoded
        (a configuration problem). Each is an error, the daemon's memory stays small,
        `incidents` says "not yet by telegram" until Telegram took it, `status` and
        `alerts` show the sink's trouble, the token appears in no output, log or state
        file in any encoding, and after a reload the alert arrives exactly once."""
        api = BotApi()
        api.drip_s = 0.3
        script = ["429huge", "deep", "huge", "drip", "reset", "html", "leakdesc", "leak"]
        api.script = list(script)
        path = Path(env["XDG_CONFIG_HOME"]) / "statewarden" / "config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "alerts:\n  retry_max: 500ms\n  group_wait: 300ms\n"
            "  journald: {enabled: true}\n"
            "  telegram:\n    enabled: true\n"
            f'    chat_id: "123456789"\n    api_base: {api.url}\n'
            "    min_interval: 50ms\n    timeout: 1s\n    deadline: 1500ms\n"
        )
        env["STATEWARDEN_TELEGRAM_TOKEN"] = TOKEN
        shown: list[str] = []
        d = DaemonProc(env)
        try:
            d.wait_for_line("statewarden ready")
            malformed(hermes_logger(hermes_home / "logs", "gateway.session"))
            d.wait_for_line("alert sink failed; retrying with backoff")
            d.wait_for_line("alert sink rejected the notification: a configuration problem")
            (inc,) = d.incidents_of("corruption")
            assert inc["notification"]["state"] == "notified firing (not yet by telegram)"
            alerts = d.ctl("alerts")
            sink = alerts["sinks"]["telegram"]
            assert sink["state"] == "rejected"
            assert sink["restarts"] == 0
            assert sink["errors_in_row"] == len(script)
            assert sink["last_error"] == (
                "307 redirect to https://127.0.0.1/bot***redacted***/sendMessage?t=***redacted***"
                ": set api_base to the final URL"
            )
            status = d.ctl("status")
            assert status["alert_sinks"]["telegram"]["state"] == "rejected"
            text = run_ctl("status", env=env).stdout
            assert (
                f"  telegram: rejected, 1 waiting, {len(script)} errors in a row, last error: "
                "307 redirect to https://127.0.0.1/bot***redacted***/sendMessage" in text
            )
            listing = run_ctl("alerts", env=env).stdout
            assert (
                f"telegram  rejected  1 waiting; {len(script)} errors in a row; last error: "
                "307 redirect to https://127.0.0.1/bot***redacted***/sendMessage" in listing
            )
            shown += [
                json.dumps(alerts),
                json.dumps(status),
                text,
                listing,
                run_ctl("incidents", env=env).stdout,
            ]
            d.proc.send_signal(signal.SIGHUP)  # the config fixed: try again
            wait_for(lambda: len(api.accepted) == 1, what="the alert delivered")
            wait_for(
                lambda: (
                    d.incidents_of("corruption")[0]["notification"]["state"] == "notified firing"
                ),
                what="incidents saying notified",
            )
            shown.append(run_ctl("incidents", env=env).stdout)
            peak_kib = peak_rss_kib(d.proc.pid)
        finally:
            d.stop()
            api.stop()
        assert [r.answered for r in api.requests] == [*script, "ok"]
        assert len(api.accepted) == 1
        assert api.sent_bytes["huge"] < 32 * 1024 * 1024
        assert peak_kib < 150 * 1024, f"daemon peak RSS {peak_kib} KiB"
        log = "\n".join(d.output())
        assert "Traceback" not in log
        failed = [ln for ln in d.output() if ln.startswith("warning: alert sink failed;")]
        assert len(failed) == len(script) - 1  # each a new error; the redirect is an error:
        assert sum("alert sink rejected the notification" in ln for ln in d.output()) == 1
        seen = log + "\n".join(shown)
        for f in (tmp_path / "xdg-state").rglob("*"):
            if f.is_file():
                seen += f.read_text(errors="replace")
        assert leaks(seen) == []


class TestAlertsTestCommand:
    @pytest.mark.parametrize(
        ("mode", "result"),
        [("leak", "rejected"), ("leakdesc", "failed"), ("deep", "failed"), ("reset", "failed")],
    )
    def test_a_hostile_answer_is_a_one_line_result_without_the_token(
        self, api: BotApi, tmp_path: Path, mode: str, result: str
    ) -> None:
        """`statewardenctl alerts test` against a hostile server: exit 1, the answer in
        one line, no traceback, the token in no encoding."""
        api.default = mode
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        path = tmp_path / "config.yaml"
        path.write_text(
            "alerts:\n  journald: {enabled: false}\n  telegram:\n    enabled: true\n"
            f"    token_file: {token_file}\n    chat_id: 1\n    api_base: {api.url}\n"
            "    timeout: 1s\n    deadline: 2s\n"
        )
        r = run_ctl("alerts", "test", "--config", str(path), env={})
        assert r.exit_code == 1
        (line,) = r.stdout.splitlines()
        assert line.startswith(f"telegram: {result}: ")
        assert "Traceback" not in r.stdout + r.stderr
        assert leaks(r.stdout + r.stderr) == []
