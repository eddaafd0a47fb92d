"""One bounded HTTP request, as the Telegram sink, the heartbeat and the Alertmanager
sink make them.

Each step (connect, each read) within ``timeout``, the whole exchange within ``deadline``
however slowly the answer trickles in, at most :data:`MAX_ANSWER_BYTES` of the answer
read (streaming; never decompressed: no decompression bomb), redirects not followed (the
caller's client). Every failure is a :class:`~statewarden.errors.Retry` whose text went
through ``scrub`` (the URL may hold a secret: a bot token, a push key).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, NamedTuple

import httpx

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
        why = scrub(f"{type(exc).__name__}: {exc}")[:ERROR_CHARS]
        raise Retry(f"unreadable answer from {server}: {why}") from None
