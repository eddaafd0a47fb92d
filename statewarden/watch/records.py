"""Hermes log records: one record is a log line plus the traceback lines after it.

Hermes formats every log line as ``%(asctime)s %(levelname)s%(session_tag)s %(name)s:
%(message)s`` (``hermes_logging.py``); a traceback follows its line without a stamp of
its own. ``starts_record`` tells the line that begins a record, ``parse_record`` reads
one record's text, and ``journal_record`` reads the record carried by a journald JSON
entry of a Hermes unit. Pure functions, no I/O, never raising: the log tailer
(``watch/logtail.py``) and the journal follower feed them, and the rules
(``watch/rules.py``) read what they give.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_STAMP = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}"
RECORD_START_RE = re.compile(_STAMP + " ")
# Where a text of whole lines is cut into records: before each line that starts one.
RECORD_SPLIT_RE = re.compile(r"\n(?=" + _STAMP + " )")
_LINE_RE = re.compile(
    r"(?P<stamp>" + _STAMP + r") (?P<level>[A-Z]+|Level \d+)"
    r"(?: \[(?P<session>[^\]\s]+)\])? (?P<logger>[^\s:]+(?::[^\s:]+)*): (?P<message>.*)",
    re.DOTALL,
)


@dataclass(slots=True)  # not frozen: a frozen __init__ is the slowest part of a flood
class LogRecord:
    """One Hermes log record: its first line, parsed, plus any traceback lines."""

    path: str  # the file it was read from ("" when unknown), or "journal:<unit>"
    at: dt.datetime | None  # Hermes' asctime (naive local time); None for a line without one
    level: str  # "ERROR", ...; "" when the line is not in Hermes' format
    session: str | None  # the [session_tag], if any
    logger: str  # logger name; "" when the line is not in Hermes' format
    message: str  # the message part of the first line
    text: str  # the whole record: first line and traceback lines, joined by "\n"
    truncated: bool = False  # a line or the record was cut to the tailer's bound

    @property
    def timestamp(self) -> float | None:
        """Seconds since the epoch, reading ``at`` as local time (as Hermes wrote it)."""
        return None if self.at is None else self.at.timestamp()


def starts_record(line: str) -> bool:
    """True when ``line`` begins a new record (it starts with Hermes' asctime)."""
    return RECORD_START_RE.match(line) is not None


def parse_record(text: str, path: str = "", *, truncated: bool = False) -> LogRecord:
    """Parse one record (first line + traceback lines); never raises.

    A first line not in Hermes' format gives a record with ``level == logger == ""``
    and the whole first line as ``message``, so rules can still read it.
    """
    first, _, _rest = text.partition("\n")
    m = _LINE_RE.match(first)
    if m is None:
        return LogRecord(path, None, "", None, "", first, text, truncated)
    try:
        # fromisoformat is C code, many times faster than strptime on a flood.
        at: dt.datetime | None = dt.datetime.fromisoformat(m["stamp"].replace(",", "."))
    except ValueError:  # 2026-13-45: the shape matched, the calendar did not
        at = None
    return LogRecord(path, at, m["level"], m["session"], m["logger"], m["message"], text, truncated)


def _journal_text(value: object) -> str:
    # journalctl -o json gives a field that is not valid UTF-8 as a list of byte values.
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", errors="replace")
    return "" if value is None else str(value)


def journal_record(entry: Mapping[str, Any]) -> LogRecord:
    """The log record carried by one journald JSON entry of a Hermes unit."""
    unit = _journal_text(
        entry.get("_SYSTEMD_USER_UNIT")
        or entry.get("USER_UNIT")
        or entry.get("_SYSTEMD_UNIT")
        or entry.get("UNIT")
        or "hermes"
    )
    message = _journal_text(entry.get("MESSAGE")).replace("\x00", "")
    record = parse_record(message, f"journal:{unit}")
    if record.at is None:
        try:
            usec = int(_journal_text(entry.get("__REALTIME_TIMESTAMP")))
            at = dt.datetime.fromtimestamp(usec / 1e6)  # naive local, like Hermes' own lines
        except (ValueError, OverflowError, OSError):
            at = None
        record = LogRecord(
            record.path,
            at,
            record.level,
            record.session,
            record.logger,
            record.message,
            record.text,
            record.truncated,
        )
    return record
