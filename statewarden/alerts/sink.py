"""What every sink is and answers: delivered, try again later, or refused.

A sink delivers one outbox entry at a time. It returns a one-line answer ("sent as 2
messages, last message_id 812") or raises:

- :class:`Retry`: a passing failure (timeout, 5xx, no network, 429, an odd answer); the
  entry stays first in line and is tried again after ``after_s`` (429's ``retry_after``,
  at most ``alerts.retry_max``) or the backoff;
- :class:`Rejected`: a configuration problem (401 bad token, 403 bot not in the chat, no
  token at all); the sink pauses, its entries are kept until the config changes;
- :class:`Refused`: this entry can never be delivered (400 on a message that is still
  bad as plain text); it is set aside, the ones behind it go on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from statewarden.alerts.outbox import Entry
from statewarden.errors import Refused, Rejected, Retry, SinkError
from statewarden.redact import Scrubber

# The answers are errors.py's (under the one root); they are named here too, with the
# protocol that raises them.
__all__ = [
    "Progress",
    "Refused",
    "Rejected",
    "Retry",
    "Scrubbed",
    "Sink",
    "SinkError",
    "scrubber_of",
]


Progress = Callable[[int], None]  # parts of the entry sent so far


class Sink(Protocol):
    name: str

    async def deliver(self, entry: Entry, progress: Progress) -> str: ...

    async def close(self) -> None: ...


class Scrubbed:
    """A sink (or the heartbeat) that holds secrets: a token, URLs with keys in them.
    Every text about it goes through :meth:`scrub` (:func:`scrubber_of`)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._scrubber = Scrubber(*(s for s in secrets if s))

    def scrub(self, text: str) -> str:
        """``text`` without the secrets in any encoding (every error, log and state text)."""
        return self._scrubber(text)


def scrubber_of(sink: Sink) -> Callable[[str], str]:
    """The sink's own scrubber (a sink that holds a secret has one, ``sink.scrub``: a
    :class:`~statewarden.redact.Scrubber`); a sink without secrets has none to take out.
    Every text about a sink (its errors, logged, stored in the outbox, shown by
    ``statewardenctl alerts``) goes through it."""
    scrub = getattr(sink, "scrub", None)
    return scrub if callable(scrub) else _nothing_secret


def _nothing_secret(text: str) -> str:
    return text
