"""The Telegram sink against a real local HTTP server speaking the Bot API's shape:
200, 429 with retry_after, 5xx, a hanging server, refused connections, 401; splitting,
escaping, the rate limit, and the token kept out of every error."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.bot_api import BotApi
from statewarden.alerts.delivery import Delivery
from statewarden.alerts.outbox import Outbox
from statewarden.alerts.sink import Rejected
from statewarden.alerts.telegram import TelegramSink, load_token, split_message
from statewarden.config import TelegramConfig
from statewarden.errors import TokenMissing
from tests.support.alerts import TOKEN, Log, cfg, note


@pytest.fixture
def api() -> Iterator[BotApi]:
    server = BotApi()
    yield server
    server.stop()


def run_delivery(sink: TelegramSink, box: Outbox, rounds: int) -> Delivery:
    log = Log()
    d = Delivery(sink, box, retry_max_s=0.2, log=log)

    async def go() -> None:
        for _ in range(rounds):
            if box.next("telegram") is None:
                break
            if not await d.deliver_one():
                await asyncio.sleep(min(0.2, max(0.0, (d.health.retry_at or 0) - time.time())))
        await sink.close()

    asyncio.run(go())
    return d


class TestSend:
    def test_ok_in_order_with_html_escaped(self, api: BotApi, tmp_path: Path) -> None:
        """Three notifications arrive in order, HTML-escaped, to the configured chat and topic."""
        box = Outbox(tmp_path / "outbox", max_entries=10)
        for k in "abc":
            box.put(note(k, summary=f"summary {k}"), "telegram")
        sink = TelegramSink(cfg(api, message_thread_id=5), {"STATEWARDEN_TELEGRAM_TOKEN": TOKEN})
        d = run_delivery(sink, box, 10)
        assert [r.text.split("\n")[2] for r in api.accepted] == [
            "<i>what:</i> #7 corruption: summary a",
            "<i>what:</i> #7 corruption: summary b",
            "<i>what:</i> #7 corruption: summary c",
        ]
        body = api.accepted[0].body
        assert body["chat_id"] == "123456789"
        assert body["message_thread_id"] == 5
        assert body["parse_mode"] == "HTML"
        assert "<code>line 0 &lt;b&gt;&amp;</code>" in body["text"]
        assert api.accepted[0].token == TOKEN
        assert box.pending() == []
        assert d.health.delivered == 3

    def test_429_waits_retry_after_then_delivers_once(self, api: BotApi, tmp_path: Path) -> None:
        """A 429 is retried after its retry_after; the message arrives exactly once."""
        api.script = ["429"]
        api.retry_after = 2
        box = Outbox(tmp_path / "outbox", max_entries=10)
        box.put(note("a"), "telegram")
        sink = TelegramSink(cfg(api), {"STATEWARDEN_TELEGRAM_TOKEN": TOKEN})
        log = Log()
        d = Delivery(sink, box, retry_max_s=5.0, log=log)

        async def go() -> None:
            assert not await d.deliver_one()
            assert d.health.retry_at is not None
            wait = d.health.retry_at - time.time()
            assert wait > 1.9  # retry_after (2 s) honoured, not the 1 s first backoff
            await asyncio.sleep(wait)
            assert await d.deliver_one()
            await sink.close()

        asyncio.run(go())
        assert len(api.requests) == 2
        assert len(api.accepted) == 1
        assert api.requests[1].at - api.requests[0].at >= 2.0

    def test_5xx_hang_and_refused_are_retried(self, api: BotApi, tmp_path: Path) -> None:
        """500, a server that does not answer within the timeout, then 200: delivered once."""
        api.script = ["500", "hang", "ok"]
        box = Outbox(tmp_path / "outbox", max_entries=10)
        box.put(note("a"), "telegram")
        sink = TelegramSink(cfg(api, timeout=0.5), {"STATEWARDEN_TELEGRAM_TOKEN": TOKEN})
        d = run_delivery(sink, box, 20)
        assert len(api.accepted) == 1
        assert box.pending() == []
        assert d.health.state == "ok"
        warnings = [(e, kw["error"]) for lvl, e, kw in d.log.lines if lvl == "warning"]
        port = api.port
        assert warnings == [
            ("alert sink failed; retrying with backoff", "500 Internal Server Error"),
            (
                "alert sink failed; retrying with backoff",
                f"no answer from http://127.0.0.1:{port} in 0.5 s",
            ),
        ]
        assert any(e == "alert sink recovered" for _, e, _ in d.log.lines)

    def test_refused_connection_keeps_the_entry(self, tmp_path: Path) -> None:
        """Nothing listening: the entry stays in the outbox and the error names the server,
        never the token."""
        server = BotApi()
        server.stop()
        box = Outbox(tmp_path / "outbox", max_entries=10)
        box.put(note("a"), "telegram")
        sink = TelegramSink(cfg(server), {"STATEWARDEN_TELEGRAM_TOKEN": TOKEN})
        d = run_delivery(sink, box, 2)
        assert len(box.pending()) == 1
        assert d.health.state == "retrying"
        assert "cannot reach http://127.0.0.1" in d.health.last_error
        assert TOKEN not in repr(d.log.lines) + d.health.last_error
        assert TOKEN not in (tmp_path / "outbox" / box.pending()[0].filename).read_text()

    def test_401_is_a_configuration_problem_reported_once(
        self, api: BotApi, tmp_path: Path
    ) -> None:
        """401 pauses the sink (no retry storm), keeps the entries, says check the token."""
        api.default = "401"
        box = Outbox(tmp_path / "outbox", max_entries=10)
        box.put(note("a"), "telegram")
        box.put(note("b"), "telegram")
        sink = TelegramSink(cfg(api), {"STATEWARDEN_TELEGRAM_TOKEN": TOKEN})
        log = Log()
        d = Delivery(sink, box, retry_max_s=0.2, log=log)

        async def go() -> None:
            assert not await d.deliver_one()
            assert not await d.deliver_one()
            await sink.close()

        asyncio.run(go())
        assert d.health.state == "rejected"
        assert d.health.retry_at is not None
        assert d.health.retry_at - time.time() > 3000
        assert (
            "401 Unauthorized: check the bot token ($STATEWARDEN_TELEGRAM_TOKEN), chat_id 123456789"
            in d.health.last_error
        )
        assert [e for lvl, e, _ in log.lines if lvl == "error"] == [
            "alert sink rejected the notification: a configuration problem"
        ]
        assert len(box.pending()) == 2

    def test_chat_not_found_is_a_configuration_problem(self, api: BotApi, tmp_path: Path) -> None:
        """400 'chat not found' pauses the sink and keeps every entry (none set aside)."""
        api.default = "400chat"
        box = Outbox(tmp_path / "outbox", max_entries=10)
        box.put(note("a"), "telegram")
        box.put(note("b"), "telegram")
        d = run_delivery(TelegramSink(cfg(api), {"STATEWARDEN_TELEGRAM_TOKEN": TOKEN}), box, 3)
        assert d.health.state == "rejected"
        assert "400 Bad Request: chat not found: check the bot token" in d.health.last_error
        assert [e.key for e in box.pending()] == ["a", "b"]
        assert d.health.set_aside == 0

    def test_redirect_is_a_configuration_problem(self, api: BotApi, tmp_path: Path) -> None:
        """An api_base that redirects is not followed (the token would go along): the sink
        pauses, the Location is shown without the token."""
        api.default = "301"
        box = Outbox(tmp_path / "outbox", max_entries=10)
        box.put(note("a"), "telegram")
        d = run_delivery(TelegramSink(cfg(api), {"STATEWARDEN_TELEGRAM_TOKEN": TOKEN}), box, 1)
        assert d.health.state == "rejected"
        assert d.health.last_error == (
            "301 redirect to https://127.0.0.1/bot***redacted***/sendMessage: "
            "set api_base to the final URL"
        )
        assert len(api.requests) == 1

    def test_400_falls_back_to_plain_text(self, api: BotApi, tmp_path: Path) -> None:
        """Telegram refusing the HTML gets the same text as plain text."""
        api.script = ["400"]
        box = Outbox(tmp_path / "outbox", max_entries=10)
        box.put(note("a"), "telegram")
        run_delivery(TelegramSink(cfg(api), {"STATEWARDEN_TELEGRAM_TOKEN": TOKEN}), box, 3)
        (sent,) = api.accepted
        assert "parse_mode" not in sent.body
        assert "line 0 <b>&" in sent.text

    def test_long_message_split_in_order_and_rate_limited(
        self, api: BotApi, tmp_path: Path
    ) -> None:
        """A text over 4,096 characters goes as several messages, each within the limit, in
        order, at least min_interval apart; a retry after part 2 does not resend part 1."""
        api.script = ["ok", "500"]
        box = Outbox(tmp_path / "outbox", max_entries=10)
        long = note("a", summary="x" * 5000, evidence=3)
        box.put(long, "telegram")
        sink = TelegramSink(cfg(api, min_interval=0.3), {"STATEWARDEN_TELEGRAM_TOKEN": TOKEN})
        run_delivery(sink, box, 10)
        texts = [r.text for r in api.accepted]
        assert len(texts) == 3
        assert all(len(t) <= 4096 for t in texts)
        assert texts[0].startswith("<b>CRITICAL corruption on box")
        assert "x" * 5000 in "".join(t.replace("\n", "") for t in texts)
        gaps = [b.at - a.at for a, b in zip(api.requests, api.requests[1:], strict=False)]
        assert min(gaps) >= 0.3

    def test_no_token_is_rejected_with_where_it_looked(self, api: BotApi, tmp_path: Path) -> None:
        """With no bot token, delivery is rejected naming the token file it looked for, and no
        request reaches the Bot API."""
        sink = TelegramSink(cfg(api, token_file=tmp_path / "missing"), {})
        box = Outbox(tmp_path / "outbox", max_entries=10)
        box.put(note("a"), "telegram")
        with pytest.raises(
            Rejected, match=r"no Telegram bot token: token_file .*missing: no such file"
        ):
            asyncio.run(sink.deliver(box.pending()[0], lambda _p: None))
        assert api.requests == []


class TestToken:
    def test_sources_in_order(self, tmp_path: Path) -> None:
        """token_file, then $CREDENTIALS_DIRECTORY/<credential>, then the environment."""
        tf = tmp_path / "tok"
        tf.write_text(TOKEN + "\n")
        creds = tmp_path / "creds"
        creds.mkdir()
        (creds / "telegram-token").write_text("1:credtoken")
        env = {"CREDENTIALS_DIRECTORY": str(creds), "STATEWARDEN_TELEGRAM_TOKEN": "2:envtoken"}
        c = TelegramConfig(enabled=True, chat_id="1", token_file=tf)
        assert load_token(c, env) == (TOKEN, f"token_file {tf}")
        c = dataclasses.replace(c, token_file=None)
        assert load_token(c, env) == ("1:credtoken", "credential telegram-token")
        assert load_token(c, {"STATEWARDEN_TELEGRAM_TOKEN": "2:envtoken"}) == (
            "2:envtoken",
            "$STATEWARDEN_TELEGRAM_TOKEN",
        )

    def test_bad_tokens_are_named_not_shown(self, tmp_path: Path) -> None:
        """An empty file, an unreadable one, a value with spaces: one line, no token text."""
        empty = tmp_path / "empty"
        empty.write_text("\n")
        c = TelegramConfig(enabled=True, chat_id="1", token_file=empty)
        with pytest.raises(TokenMissing) as err:
            load_token(c, {"STATEWARDEN_TELEGRAM_TOKEN": "has space secretvalue"})
        text = str(err.value)
        assert f"token_file {empty}: empty" in text
        assert "does not look like a bot token" in text
        assert "secretvalue" not in text
        if os.geteuid() != 0:
            empty.chmod(0)
            with pytest.raises(TokenMissing, match="cannot read"):
                load_token(c, {})


class TestSplit:
    def test_split_between_lines(self) -> None:
        """A message over 4096 characters is split between lines into parts within the limit that
        join back to the whole."""
        lines = [f"<i>l{k}</i> " + "y" * 1000 for k in range(10)]
        parts = split_message(lines)
        assert all(len(p) <= 4096 for p in parts)
        assert "\n".join(parts) == "\n".join(lines)

    def test_one_huge_line_is_cut_without_breaking_escapes(self) -> None:
        """One line over the limit is cut into parts within it, never inside an HTML escape."""
        parts = split_message(["&" * 5000], limit=100)
        assert all(len(p) <= 100 for p in parts)
        assert "".join(parts) == "&amp;" * 5000
