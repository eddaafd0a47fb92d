"""One bounded HTTP request, as the heartbeat and the Alertmanager sink make them.

Bounded as the Telegram sink's are: each step (connect, each read) within ``timeout``,
the whole exchange within ``deadline`` however slowly the answer trickles in, at most
:data:`MAX_ANSWER_BYTES` of the answer read (streaming; never decompressed), redirects
not followed. Every failure is a :class:`~statewarden.alerts.sink.Retry` whose text went
through ``scrub`` (the URL may be a secret).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from statewarden.alerts.sink import Retry

MAX_ANSWER_BYTES = 64 * 1024
ERROR_CHARS = 200


def one_line(text: str) -> str:
    """A server's text as one short printable line."""
    return "".join(c if c.isprintable() else " " for c in text[:ERROR_CHARS]).strip()


class _TooLarge(Exception):
    pass


async def _exchange(
    client: httpx.AsyncClient, method: str, url: str, payload: Any
) -> tuple[int, str, bytes]:
    headers = {"Accept-Encoding": "identity"}
    kwargs: dict[str, Any] = {"headers": headers}
    if payload is not None:
        kwargs["json"] = payload
    async with client.stream(method, url, **kwargs) as response:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
            raise _TooLarge(f"{response.status_code} answer of {int(declared)} bytes")
        encoding = response.headers.get("content-encoding", "identity").lower()
        if encoding not in ("", "identity"):
            raise _TooLarge(f"{response.status_code} answer compressed ({encoding})")
        body = bytearray()
        async for chunk in response.aiter_raw():
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                raise _TooLarge(f"{response.status_code} answer over the limit")
        return response.status_code, response.reason_phrase, bytes(body)


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
) -> tuple[int, str, bytes]:
    """``(status, reason, body)``; a transport failure, a timeout, an answer too large or
    too slow is a :class:`Retry` naming ``server`` (never the secret URL)."""
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
        raise Retry(f"{exc}, over the {MAX_ANSWER_BYTES // 1024} KiB limit: not read") from None
    except Exception as exc:  # noqa: BLE001 - whatever a server does must not end the caller
        why = scrub(f"{type(exc).__name__}: {exc}")[:ERROR_CHARS]
        raise Retry(f"unreadable answer from {server}: {why}") from None
