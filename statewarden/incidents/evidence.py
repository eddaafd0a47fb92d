"""Where evidence enters: every text a watcher reports is capped and redacted here, once.

A :class:`~statewarden.incidents.signals.Signal` cleans its evidence lines (secrets
redacted, then cut to :data:`EVIDENCE_LINE_MAX_CHARS`: :func:`clean`) and scrubs its
summary (secrets redacted: :func:`scrub`) as it is made, an
:class:`~statewarden.incidents.signals.Observation` scrubs its text and text fields, and
the incident book scrubs a resolution as it takes it. So the book, the timeline, the
alert outbox and every sink only ever see capped, scrubbed evidence (secrets replaced
by ``REDACTED``, ``redact.py``).

Secrets are taken out before the text is cut, so a secret that crosses the cut is
never kept in part. Only the part that can be kept is looked at (twice the cap: a
redaction makes the text shorter, never longer than the secret it replaces allows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from statewarden.redact import redact_text

__all__ = [
    "EVIDENCE_LINE_MAX_CHARS",
    "cap_evidence",
    "clean",
    "clean_lines",
    "scrub",
    "scrub_fields",
]

# Evidence lines are cut to this many characters (the note saying so included).
EVIDENCE_LINE_MAX_CHARS = 4000


def _cut(text: str, total: int) -> str:
    """``text`` (the first characters of one of ``total``) cut to the cap, with a note."""
    # The note is no longer than one that counts every character as cut.
    keep = EVIDENCE_LINE_MAX_CHARS - len(f"\n…[{total} chars cut]")
    return text[:keep] + f"\n…[{total - keep} chars cut]"


def cap_evidence(text: str) -> str:
    """``text`` cut to ``EVIDENCE_LINE_MAX_CHARS``, ending with a note of what was cut."""
    if len(text) <= EVIDENCE_LINE_MAX_CHARS:
        return text
    return _cut(text, len(text))


def clean(text: str) -> str:
    """``text`` with its secrets redacted, then capped: what a store may keep."""
    if len(text) <= EVIDENCE_LINE_MAX_CHARS:
        return redact_text(text)
    head = redact_text(text[: 2 * EVIDENCE_LINE_MAX_CHARS])
    if len(head) <= EVIDENCE_LINE_MAX_CHARS and len(text) <= 2 * EVIDENCE_LINE_MAX_CHARS:
        return head  # the redactions made it short enough
    # The cut characters are counted in the text as written (the redactions shorten it).
    return _cut(head, max(len(text), len(head)))


def clean_lines(lines: Iterable[str]) -> tuple[str, ...]:
    """Each line cleaned (:func:`clean`)."""
    return tuple(clean(line) for line in lines)


def scrub(text: str) -> str:
    """``text`` with its secrets redacted, not cut: a summary, a resolution, a timeline
    entry's one line."""
    return redact_text(text)


def scrub_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with each text value scrubbed (:func:`scrub`); other values as they are."""
    return {k: redact_text(v) if isinstance(v, str) else v for k, v in fields.items()}
