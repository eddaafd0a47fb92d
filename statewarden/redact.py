"""Secrets taken out of text before statewarden stores or shows it.

Hermes keeps its home private (0700) and its log lines can carry what must stay there:
Telegram bot tokens, ``api_key=...``, ``Authorization:`` headers and bearer values,
``sk-...``-style provider keys. Evidence lines, summaries and timeline text pass
through :func:`redact_text` once, where they enter (``incidents/evidence.py``), before
they reach the incident book, the timeline, the control socket or the journal; the
value is replaced by :data:`REDACTED`, the name of what it was is kept.

A secret statewarden itself holds (the Telegram bot token) is known exactly: a
:class:`Scrubber` made with it takes it out in every encoding a server's answer, a URL
or an exception text could carry it in. Every text an alert sink logs, stores or shows
goes through its sink's scrubber.
"""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, quote_plus

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


# _MAYBE_RE's texts in lower case, looked for with ``in`` in ASCII text (where nothing
# but these letters folds to them), and its one pattern.
_MAYBE_TEXTS = (
    "auth",
    "bearer",
    "key",
    "token",
    "secret",
    "pass",
    "pwd",
    "sk-",
    "rk-",
    "pk-",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "xox",
    "aiza",
)
_MAYBE_DIGITS_RE = re.compile(r"[0-9]{6}:")


def _maybe_secret(text: str) -> bool:
    """False when no pattern can match ``text`` (one cheap pass; see ``_MAYBE_RE``)."""
    if not text.isascii():
        return _MAYBE_RE.search(text) is not None
    lowered = text.lower()
    for t in _MAYBE_TEXTS:
        if t in lowered:
            return True
    return ":" in text and _MAYBE_DIGITS_RE.search(text) is not None


def redact_text(text: str) -> str:
    """``text`` with every secret-looking value replaced by :data:`REDACTED`."""
    if not _maybe_secret(text):
        return text
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text.replace(f"  {REDACTED}", f" {REDACTED}")


def encodings_of(secret: str) -> set[str]:
    """Every spelling of ``secret`` that an error text, a URL or a JSON body could carry.

    Raw; percent-encoded (upper- and lower-case hex, once and twice, spaces as ``%20`` or
    ``+``); JSON-escaped (``\\uXXXX`` for each character too); base64 (standard and
    URL-safe, at each of the three alignments it can have inside a longer encoded text,
    so a ``user:token`` Basic value is caught as well).
    """
    if not secret:
        return set()
    out = {secret}
    for safe in ("", "/"):
        for quoted in (quote(secret, safe=safe), quote_plus(secret, safe=safe)):
            out.update((quoted, quote(quoted, safe="")))
    escaped = json.dumps(secret)[1:-1]
    out.update((escaped, json.dumps(secret, ensure_ascii=False)[1:-1]))
    out.add("".join(f"\\u{ord(c):04x}" for c in secret))
    out.add("".join(f"\\u{ord(c):04X}" for c in secret))
    raw = secret.encode()
    for shift in range(3):
        piece = raw[shift:]
        piece = piece[: len(piece) - len(piece) % 3]
        if len(piece) >= 6:  # shorter pieces would match unrelated base64
            for enc in (base64.b64encode(piece), base64.urlsafe_b64encode(piece)):
                out.add(enc.decode().rstrip("="))
    return {e for e in out if e}


def _pattern(spelling: str) -> str:
    """``spelling`` as a regex in which each ``%XX`` matches in either case of hex."""
    return "".join(
        f"%(?i:{part[1:]})" if _PERCENT_RE.fullmatch(part) else re.escape(part)
        for part in _PERCENT_RE.split(spelling)
        if part
    )


_PERCENT_RE = re.compile(r"(%[0-9A-Fa-f]{2})")
# The last base64 characters of a secret's encoding, with their padding.
_B64_TAIL_RE = re.compile(re.escape(REDACTED) + r"[A-Za-z0-9+/_-]{1,3}={1,2}")


class Scrubber:
    """The one place a known secret is taken out of text before it is logged, stored
    or shown: every encoding of each secret (:func:`encodings_of`) becomes
    :data:`REDACTED`. (Text from elsewhere, whose secrets are not known, goes through
    :func:`redact_text` instead.)"""

    def __init__(self, *secrets: str) -> None:
        spellings: set[str] = set()
        for secret in secrets:
            spellings |= encodings_of(secret)
        # Longest first, so a spelling inside a longer one does not leave the rest.
        ordered = sorted(spellings, key=len, reverse=True)
        self._re = re.compile("|".join(map(_pattern, ordered))) if ordered else None

    def __call__(self, text: str) -> str:
        if self._re is not None:
            text = _B64_TAIL_RE.sub(REDACTED, self._re.sub(REDACTED, text))
        return text
