"""Secrets taken out of text before statewarden stores or shows it.

Hermes keeps its home private (0700) and its log lines can carry what must stay there:
Telegram bot tokens, ``api_key=...``, ``Authorization:`` headers and bearer values,
``sk-...``-style provider keys. Evidence lines, summaries and timeline text pass
through :func:`redact_text` before they reach the incident book, the timeline, the
control socket or the journal; the value is replaced by :data:`REDACTED`, the name
of what it was is kept.
"""

from __future__ import annotations

import re

from statewarden.config import REDACTED

# Telegram bot tokens look like 123456789:AAH...
BOT_TOKEN_RE = re.compile(r"(?<!\d)\d{6,12}:[A-Za-z0-9_-]{30,}")
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (BOT_TOKEN_RE, REDACTED),
    # Authorization: Bearer x / Basic x / a bare value
    (
        re.compile(
            r"(?i)\b(authorization[\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|token)\s+)?[^\s\"',;]+"
        ),
        rf"\1\2 {REDACTED}",
    ),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\1{REDACTED}"),
    # key=value / key: value / "key": "value" for secret-looking names
    (
        re.compile(
            r"(?i)\b((?:[a-z0-9]+[_-])*(?:api[_-]?key|apikey|token|secret|password|passwd|pwd)"
            r"[\"']?\s*[:=]\s*[\"']?)(?!\*\*\*)[^\s\"'&,;]+"
        ),
        rf"\1{REDACTED}",
    ),
    # Provider keys with a recognisable shape.
    (re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), REDACTED),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), REDACTED),
)
# Cheap first look: text with none of these cannot match any pattern above.
_MAYBE_RE = re.compile(
    r"(?i)\d{6}:|auth|bearer|key|token|secret|pass|pwd|sk-|rk-|pk-|gh[pousr]_|xox|AIza"
)


def redact_text(text: str) -> str:
    """``text`` with every secret-looking value replaced by :data:`REDACTED`."""
    if not _MAYBE_RE.search(text):
        return text
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text.replace(f"  {REDACTED}", f" {REDACTED}")
