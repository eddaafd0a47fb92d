"""The Telegram sink: Bot API ``sendMessage`` over HTTPS with httpx.

The bot token is never in the config file. It is read, first found wins, from
``alerts.telegram.token_file``, from the systemd credential ``alerts.telegram.credential``
(``$CREDENTIALS_DIRECTORY/<name>``, set by ``LoadCredential=``), or from the environment
variable ``alerts.telegram.token_env``. It is never logged: every error text that could
hold it (httpx puts the URL, ``/bot<token>/``, in its messages) is scrubbed first.

Sending: HTML (``parse_mode=HTML``, text escaped); a text over 4,096 characters is split
between lines into several messages, and the parts already sent are recorded in the outbox
entry so a retry does not send them again. At most one message per ``min_interval`` (1 s)
to the chat. Answers:

- 200 ``ok``: delivered;
- 429: :class:`Retry` after the answer's ``parameters.retry_after``;
- 5xx, timeouts, refused connections: :class:`Retry` (the delivery loop backs off);
- 400 "can't parse entities": sent again as plain text, then :class:`Refused`;
- other 400 (chat or topic not found), 401, 403, 404: :class:`Rejected`, a configuration
  problem (token, chat, topic), reported once; the entries wait for a fixed config;
- any other 4xx: :class:`Refused` (this entry is set aside).
"""

from __future__ import annotations

import asyncio
import html
import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from statewarden.alerts.message import html_lines
from statewarden.alerts.outbox import Entry
from statewarden.alerts.sink import Progress, Refused, Rejected, Retry
from statewarden.config import REDACTED, TelegramConfig

MAX_MESSAGE_CHARS = 4096  # Bot API limit for sendMessage text
_TAG_RE = re.compile(r"<[^>]+>")
_TOKEN_OK = re.compile(r"^[A-Za-z0-9:_-]+$")

# httpx logs each request's URL (with the token) at INFO; never let that through.
logging.getLogger("httpx").setLevel(logging.WARNING)
logging.getLogger("httpcore").setLevel(logging.WARNING)


class TokenMissing(Exception):
    """No usable bot token was found; the message says where it was looked for."""


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


class TelegramSink:
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
        self._client = client
        self._last_sent = 0.0

    def scrub(self, text: str) -> str:
        return text.replace(self.token, REDACTED) if self.token else text

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.cfg.timeout, follow_redirects=False)
        return self._client

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
            response = await self._http().post(url, json=payload)
        except httpx.TimeoutException:
            raise Retry(f"no answer from {self.cfg.api_base} in {self.cfg.timeout:g} s") from None
        except httpx.HTTPError as exc:
            why = self.scrub(str(exc)) or type(exc).__name__
            raise Retry(f"cannot reach {self.cfg.api_base}: {why}") from None
        finally:
            self._last_sent = time.monotonic()
        return self._answer(response)

    def _answer(self, response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        status = response.status_code
        desc = self.scrub(str(body.get("description") or response.reason_phrase or ""))
        if status == 200 and body.get("ok"):
            result = body.get("result")
            return result if isinstance(result, dict) else {}
        if status == 429:
            params = body.get("parameters") if isinstance(body.get("parameters"), dict) else {}
            after = params.get("retry_after") if isinstance(params, dict) else None
            after_s = float(after) if isinstance(after, int | float) else None
            raise Retry(f"429 {desc or 'Too Many Requests'}", after_s=after_s)
        if status >= 500 or status == 200:
            raise Retry(f"{status} {desc or 'server error'}")
        if 300 <= status < 400:
            where = self.scrub(response.headers.get("location", "?"))
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
        raise Refused(f"{status} {desc}")

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
