"""One bounded HTTP request, and :class:`HttpSender`, what every sender over HTTP is: the
Telegram sink, the heartbeat and the Alertmanager sink.

Each step (connect, each read) within ``timeout``, the whole exchange within ``deadline``
however slowly the answer trickles in, at most :data:`MAX_ANSWER_BYTES` of the answer
read (streaming; never decompressed: no decompression bomb), redirects not followed (the
caller's client). Every failure is a :class:`~statewarden.errors.Retry` whose text went
through ``scrub`` (the URL may hold a secret: a bot token, a push key).

An :class:`HttpSender` holds its secrets (every text about it goes through its
``scrub``), names its server by scheme, host and port only (:func:`server_of`), makes
one httpx client when it first needs one (redirects never followed: a secret would go
along), makes each request bounded with its ``timeout`` and ``deadline``, and closes
the client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httpx

from statewarden.alerts.sink import Scrubbed
from statewarden.errors import Retry

MAX_ANSWER_BYTES = 64 * 1024  # read of any answer; a real one is well under 1 KiB
ERROR_CHARS = 200  # of a server's text (a description, a Location) kept in an error


class Answer(NamedTuple):
    """What a server answered: at most :data:`MAX_ANSWER_BYTES` of body."""

    status: int
    reason: str
    headers: httpx.Headers
    body: bytes


def one_line(text: str) -> str:
    """A server's text as one short printable line."""
    return "".join(c if c.isprintable() else " " for c in text[:ERROR_CHARS]).strip()


class _TooLarge(Exception):
    """An answer over :data:`MAX_ANSWER_BYTES` (or compressed): cut, never read whole."""


async def _exchange(client: httpx.AsyncClient, method: str, url: str, payload: Any) -> Answer:
    headers = {"Accept-Encoding": "identity"}
    kwargs: dict[str, Any] = {"headers": headers}
    if payload is not None:
        kwargs["json"] = payload
    limit = f"over the {MAX_ANSWER_BYTES // 1024} KiB limit"
    async with client.stream(method, url, **kwargs) as response:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
            raise _TooLarge(f"{response.status_code} answer of {int(declared)} bytes, {limit}")
        encoding = response.headers.get("content-encoding", "identity").lower()
        if encoding not in ("", "identity"):
            raise _TooLarge(f"{response.status_code} answer compressed ({encoding})")
        body = bytearray()
        async for chunk in response.aiter_raw():
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                raise _TooLarge(f"{response.status_code} answer {limit}: cut")
        return Answer(response.status_code, response.reason_phrase, response.headers, bytes(body))


async def request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    server: str,
    deadline: float,
    timeout: float,
    scrub: Callable[[str], str],
    payload: Any = None,
) -> Answer:
    """The server's :class:`Answer`; a transport failure, a timeout, an answer too large
    or too slow is a :class:`Retry` naming ``server`` (never the secret URL)."""
    try:
        async with asyncio.timeout(deadline):
            return await _exchange(client, method, url, payload)
    except TimeoutError:
        raise Retry(
            f"no complete answer from {server} within the {deadline:g} s deadline"
        ) from None
    except httpx.TimeoutException:
        raise Retry(f"no answer from {server} in {timeout:g} s") from None
    except httpx.HTTPError as exc:
        why = scrub(one_line(str(exc))) or type(exc).__name__
        if isinstance(exc, httpx.ConnectError):
            raise Retry(f"cannot reach {server}: {why}") from None
        raise Retry(f"broken answer from {server}: {why}") from None
    except _TooLarge as exc:
        raise Retry(f"{exc}; not read") from None
    except Exception as exc:  # noqa: BLE001 - whatever a server does must not end the caller
        raise unreadable(server, exc, scrub) from None


def unreadable(server: str, exc: Exception, scrub: Callable[[str], str]) -> Retry:
    """The :class:`Retry` for an answer too odd to read: the exception named, scrubbed."""
    return Retry(f"unreadable answer from {server}: {failure(exc, scrub)}")


def failure(exc: BaseException, scrub: Callable[[str], str]) -> str:
    """What went wrong, as one scrubbed text of at most :data:`ERROR_CHARS`."""
    return scrub(f"{type(exc).__name__}: {exc}")[:ERROR_CHARS]


def server_of(url: str, *, path: bool = False) -> str:
    """How texts name the server of ``url``: scheme, host and port (and its path, for a
    URL that is no secret); "?" without a host."""
    parts = urlsplit(url)
    server = f"{parts.scheme}://{parts.hostname}" if parts.hostname else "?"
    if parts.port:
        server += f":{parts.port}"
    return server + (parts.path if path else "")


class HttpSender(Scrubbed):
    """A sender over HTTP: its secrets scrubbed, its server named, one httpx client,
    bounded requests (:func:`request`), and :meth:`close`."""

    def __init__(
        self,
        *,
        secrets: Iterable[str],
        server: str,
        timeout: float,
        deadline: float,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(secrets)
        self.server = server  # what texts name: never the secret URL
        self.timeout = timeout  # of each step: connect, each read
        self.deadline = deadline  # of the whole exchange
        self._client = client

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout, follow_redirects=False)
        return self._client

    async def request(self, method: str, url: str, payload: Any = None) -> Answer:
        """The server's bounded :class:`Answer`, or :class:`Retry` (:func:`request`)."""
        return await request(
            self._http(),
            method,
            url,
            server=self.server,
            deadline=self.deadline,
            timeout=self.timeout,
            scrub=self.scrub,
            payload=payload,
        )

    def server_line(self, text: str) -> str:
        """A server's text as one short printable line, scrubbed."""
        return self.scrub(one_line(text))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
