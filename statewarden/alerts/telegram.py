"""The Telegram sink: Bot API ``sendMessage`` over HTTPS with httpx.

The bot token is never in the config file. It is read, first found wins, from
``alerts.telegram.token_file``, from the systemd credential ``alerts.telegram.credential``
(``$CREDENTIALS_DIRECTORY/<name>``, set by ``LoadCredential=``), or from the environment
variable ``alerts.telegram.token_env``. It is never logged: every error text that could
hold it (httpx puts the URL, ``/bot<token>/``, in its messages; a server can echo it in a
``Location`` or a description, percent-encoded, JSON-escaped, base64) goes through the
sink's :class:`~statewarden.redact.Scrubber` first.

Sending: HTML (``parse_mode=HTML``, text escaped); a text over 4,096 characters is split
between lines into several messages, and the parts already sent are recorded in the outbox
entry so a retry does not send them again. At most one message per ``min_interval`` (1 s)
to the chat. Answers:

- 200 ``ok`` with the sent message: delivered;
- 429: :class:`Retry` after the answer's ``parameters.retry_after`` (the delivery loop
  caps it at ``alerts.retry_max``);
- 5xx, timeouts, refused connections: :class:`Retry` (the delivery loop backs off);
- any odd answer: a 2xx that is not ``ok`` with a message (HTML, not JSON, a JSON list,
  invalid UTF-8, ``ok: false``), a body over :data:`MAX_ANSWER_BYTES` (read streaming and
  cut there), a connection reset mid-answer, no whole answer within ``deadline`` (30 s,
  however slowly it trickles in): :class:`Retry`, never an exception of another kind;
- a redirect (not followed: the token would go along): :class:`Rejected`;
- 400 "can't parse entities": sent again as plain text, then :class:`Refused`;
- other 400 (chat or topic not found), 401, 403, 404: :class:`Rejected`, a configuration
  problem (token, chat, topic), reported once; the entries wait for a fixed config;
- any other 4xx: :class:`Refused` (this entry is set aside).
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import math
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from statewarden.alerts import http
from statewarden.alerts.message import html_lines
from statewarden.alerts.outbox import Entry
from statewarden.alerts.sink import Progress, Refused, Rejected, Retry, SinkError
from statewarden.config import TelegramConfig
from statewarden.errors import TokenMissing

MAX_MESSAGE_CHARS = 4096  # Bot API limit for sendMessage text
MAX_ANSWER_BYTES = http.MAX_ANSWER_BYTES
_TAG_RE = re.compile(r"<[^>]+>")
_TOKEN_OK = re.compile(r"^[A-Za-z0-9:_-]+$")

# httpx logs each request's URL (with the token) at INFO; never let that through.
logging.getLogger("httpx").setLevel(logging.WARNING)
logging.getLogger("httpcore").setLevel(logging.WARNING)


def retry_after(params: object) -> float | None:
    """A 429's ``parameters.retry_after`` in seconds (``inf`` for a number too large for
    a float; the delivery loop caps it); None (the backoff decides) when it is missing,
    not a number or negative."""
    after = params.get("retry_after") if isinstance(params, dict) else None
    if isinstance(after, bool) or not isinstance(after, int | float):
        return None
    try:
        seconds = float(after)
    except OverflowError:
        seconds = math.inf
    if math.isnan(seconds) or seconds < 0:
        return None
    return seconds


def load_token(cfg: TelegramConfig, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The bot token and where it came from ("token_file /x", "credential y", "$Z")."""
    env = os.environ if env is None else env
    looked: list[str] = []
    candidates: list[tuple[str, Path | None, str | None]] = []
    if cfg.token_file is not None:
        candidates.append((f"token_file {cfg.token_file}", cfg.token_file, None))
    creds = env.get("CREDENTIALS_DIRECTORY", "")
    if creds:
        candidates.append((f"credential {cfg.credential}", Path(creds) / cfg.credential, None))
    candidates.append((f"${cfg.token_env}", None, env.get(cfg.token_env)))
    for source, path, given in candidates:
        value = given
        if path is not None:
            try:
                value = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                looked.append(f"{source}: no such file")
                continue
            except (OSError, UnicodeDecodeError) as exc:
                why = getattr(exc, "strerror", None) or type(exc).__name__
                looked.append(f"{source}: cannot read ({why})")
                continue
        if value is None:
            looked.append(f"{source}: not set")
            continue
        token = value.strip()
        if not token:
            looked.append(f"{source}: empty")
            continue
        if not _TOKEN_OK.match(token):
            looked.append(f"{source}: does not look like a bot token (one line, 123456:ABC...)")
            continue
        return token, source
    raise TokenMissing("no Telegram bot token: " + "; ".join(looked))


def split_message(lines: list[str], limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """Pack HTML lines into texts of at most ``limit`` characters, splitting between lines.

    A single line longer than the limit loses its tags and is cut into escaped pieces.
    """
    pieces: list[str] = []
    for line in lines:
        if len(line) <= limit:
            pieces.append(line)
            continue
        plain = html.unescape(_TAG_RE.sub("", line))
        current = ""
        for ch in plain:
            esc = html.escape(ch)
            if len(current) + len(esc) > limit:
                pieces.append(current)
                current = ""
            current += esc
        if current:
            pieces.append(current)
    out: list[str] = []
    current = ""
    for piece in pieces:
        candidate = f"{current}\n{piece}" if current else piece
        if len(candidate) <= limit:
            current = candidate
            continue
        if current.strip():
            out.append(current)
        current = piece
    if current.strip():
        out.append(current)
    return out or [""]


def as_plain(text: str) -> str:
    return html.unescape(_TAG_RE.sub("", text))


class TelegramSink(http.HttpSender):
    name = "telegram"

    def __init__(
        self,
        cfg: TelegramConfig,
        env: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.cfg = cfg
        try:
            self.token, self.token_source = load_token(cfg, env)
            self.token_problem = ""
        except TokenMissing as exc:
            self.token, self.token_source = "", ""
            self.token_problem = str(exc)
        super().__init__(
            secrets=(self.token, self.token.partition(":")[2]),
            server=cfg.api_base,
            timeout=cfg.timeout,
            deadline=cfg.deadline,
            client=client,
        )
        self._last_sent = 0.0

    async def _pace(self) -> None:
        wait = self._last_sent + self.cfg.min_interval - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)

    async def deliver(self, entry: Entry, progress: Progress) -> str:
        if not self.token:
            raise Rejected(self.token_problem)
        parts = split_message(html_lines(entry.notification))
        last: dict[str, Any] = {}
        for index in range(entry.parts_sent, len(parts)):
            last = await self.send_text(parts[index])
            progress(index + 1)
        msg_id = last.get("message_id", "?") if isinstance(last, dict) else "?"
        count = len(parts)
        return f"sent as {count} message{'s' if count != 1 else ''}, last message_id {msg_id}"

    async def send_text(self, text: str) -> dict[str, Any]:
        """One sendMessage; HTML first, plain text if Telegram cannot parse the HTML."""
        try:
            return await self._post(text, html_mode=True)
        except Refused:
            return await self._post(as_plain(text), html_mode=False)

    async def _post(self, text: str, *, html_mode: bool) -> dict[str, Any]:
        await self._pace()
        payload: dict[str, Any] = {
            "chat_id": self.cfg.chat_id,
            "text": text,
            "disable_web_page_preview": True,
        }
        if html_mode:
            payload["parse_mode"] = "HTML"
        if self.cfg.message_thread_id is not None:
            payload["message_thread_id"] = self.cfg.message_thread_id
        url = f"{self.cfg.api_base.rstrip('/')}/bot{self.token}/sendMessage"
        try:
            answer = await self.request("POST", url, payload)
        finally:
            self._last_sent = time.monotonic()
        try:
            return self._answer(*answer)
        except SinkError:
            raise
        except Exception as exc:  # noqa: BLE001 - an answer too odd to read is an error of it
            raise http.unreadable(self.server, exc, self.scrub) from None

    def _answer(
        self, status: int, reason: str, headers: httpx.Headers, raw: bytes
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        shape = ""
        try:
            parsed = json.loads(raw)
        except (ValueError, RecursionError):
            # Not JSON, not UTF-8, nested past what the parser takes, or a number too long.
            kind = headers.get("content-type", "").split(";")[0].strip()
            shape = f"not JSON ({self.scrub(kind[:40]) or 'no content type'})"
        else:
            if isinstance(parsed, dict):
                body = parsed
            else:
                shape = f"a JSON {type(parsed).__name__}, not an object"
        desc = self.server_line(str(body.get("description") or reason or ""))
        if status == 200 and body.get("ok") is True:
            result = body.get("result")
            if isinstance(result, dict) and isinstance(result.get("message_id"), int):
                return result
            raise Retry("200 ok but no message in the answer (not a Bot API server?)")
        if 200 <= status < 300:
            ok = http.one_line(str(body.get("ok")))
            what = shape or f"ok: {ok}" + (f", {desc}" if desc else "")
            raise Retry(f"{status} but the answer is {what}")
        if status == 429:
            after_s = retry_after(body.get("parameters"))
            raise Retry(f"429 {desc or 'Too Many Requests'}", after_s=after_s)
        if status >= 500:
            raise Retry(f"{status} {desc or 'server error'}")
        if 300 <= status < 400:
            where = self.server_line(headers.get("location", "?"))
            raise Rejected(f"{status} redirect to {where}: set api_base to the final URL")
        if status == 400 and "parse" in desc.lower():
            raise Refused(f"{status} {desc}")  # the HTML: sent again as plain text
        if status in (400, 401, 403, 404):
            # Bad token, bot not in the chat, chat or topic not found: the config is wrong
            # for every message, not this one.
            raise Rejected(
                f"{status} {desc}: check the bot token ({self.token_source}), "
                f"chat_id {self.cfg.chat_id} and message_thread_id"
            )
        if status < 200:
            raise Retry(f"{status} {desc or 'informational answer'}")
        raise Refused(f"{status} {desc}")
