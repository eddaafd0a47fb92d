"""structlog set-up: where statewarden's own log events go and how they look.

- On a TTY: structlog's console renderer.
- Under systemd (``$JOURNAL_STREAM`` or ``$INVOCATION_ID`` set): each event is one
  journald entry sent by the native protocol, with ``PRIORITY``,
  ``SYSLOG_IDENTIFIER=statewarden`` and every other field as ``STATEWARDEN_<NAME>``, so
  ``journalctl -p warning`` and field matches work. Never a ``MESSAGE_ID``: those are
  the alerts', one entry per incident change from the journald sink. With no journal
  socket, lines go to stderr with ``<N>`` prefixes, which journald's stream reader
  turns back into priorities.
- Otherwise: ``key=value`` lines (or JSON with ``logging.format: json``) on stderr.

Secrets (tokens, passwords) are redacted before any renderer sees them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO

from statewarden.config import REDACTED
from statewarden.journald import JournalSender, field_name, priority_of
from statewarden.redact import redact_text

# structlog's package imports its dev module, which imports rich (and rich.traceback,
# pygments) when installed, only to render exceptions on a console; statewarden logs no
# exception through structlog, and the daemon never has a console. Hidden while
# structlog loads, rich costs the daemon ~3 MiB less; commands that draw a progress bar
# still import it themselves (an import after this one finds it as usual).
_RICH_HIDDEN = "rich" not in sys.modules
if _RICH_HIDDEN:
    sys.modules["rich"] = None  # type: ignore[assignment]  # import rich -> ImportError
try:
    import structlog
finally:
    if _RICH_HIDDEN:
        del sys.modules["rich"]

IDENTIFIER = "statewarden"
_SECRET_KEY_RE = re.compile(r"(token|secret|password|passwd|api_key|apikey)", re.IGNORECASE)


def redact_secrets(
    _logger: object, _name: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: hide values of secret-looking keys, and secrets in text."""
    for key, value in list(event.items()):
        if _SECRET_KEY_RE.search(key) and value not in (None, ""):
            event[key] = REDACTED
        elif isinstance(value, str):
            event[key] = redact_text(value)
    return event


def under_systemd(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("JOURNAL_STREAM") or env.get("INVOCATION_ID"))


def journal_fields(event: Mapping[str, Any]) -> dict[str, object]:
    """The journald entry for one structlog event."""
    fields: dict[str, object] = {
        "MESSAGE": str(event.get("event", "")),
        "PRIORITY": priority_of(str(event.get("level", "info"))),
        "SYSLOG_IDENTIFIER": IDENTIFIER,
    }
    for key, value in event.items():
        if key in ("event", "level", "timestamp"):
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        fields["STATEWARDEN_" + field_name(key)] = text
    return fields


def _logfmt(event: Mapping[str, Any]) -> str:
    parts = [str(event.get("event", ""))]
    for key, value in event.items():
        if key in ("event", "level", "timestamp"):
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        if not text or any(c in text for c in ' "='):
            text = json.dumps(text)
        parts.append(f"{key}={text}")
    return " ".join(parts)


class _JournalRenderer:
    """Final processor: send to journald, or render a ``<N>``-prefixed line for stderr."""

    def __init__(self, sender: JournalSender) -> None:
        self.sender = sender

    def __call__(self, _logger: object, _name: str, event: MutableMapping[str, Any]) -> str:
        try:
            self.sender.send(journal_fields(event))
        except OSError:
            return _prefixed(event)
        raise structlog.DropEvent


def _prefixed(event: Mapping[str, Any]) -> str:
    priority = priority_of(str(event.get("level", "info")))
    return f"<{priority}>{_logfmt(event)}"


def _plain(_logger: object, _name: str, event: MutableMapping[str, Any]) -> str:
    return f"{event.get('level', 'info')}: {_logfmt(event)}"


def _prefixed_renderer(_logger: object, _name: str, event: MutableMapping[str, Any]) -> str:
    return _prefixed(event)


def colour_wanted(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """Colour only on a terminal, and never when ``NO_COLOR`` is set to anything but "".

    See no-color.org: any non-empty ``NO_COLOR`` turns colour off, whatever else says.
    """
    environ = os.environ if env is None else env
    if environ.get("NO_COLOR", ""):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


def choose_format(requested: str, stream: TextIO, env: Mapping[str, str] | None = None) -> str:
    """Resolve ``auto`` to ``journald``, ``console`` or ``plain``."""
    if requested != "auto":
        return requested
    if under_systemd(env):
        return "journald"
    if stream.isatty():
        return "console"
    return "plain"


def configure(
    level: str = "info",
    fmt: str = "auto",
    *,
    stream: TextIO | None = None,
    journal: JournalSender | None = None,
) -> str:
    """Configure structlog for this process; return the format chosen."""
    stream = stream or sys.stderr
    chosen = choose_format(fmt, stream)
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        redact_secrets,
    ]
    if chosen == "console":
        processors += [
            structlog.processors.TimeStamper(fmt="%H:%M:%S", utc=False),
            structlog.dev.ConsoleRenderer(colors=colour_wanted(stream)),
        ]
    elif chosen == "json":
        processors += [
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(default=str),
        ]
    elif chosen == "journald":
        sender = journal or JournalSender()
        processors.append(_JournalRenderer(sender) if sender.available else _prefixed_renderer)
    else:
        processors.append(_plain)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    return chosen


def get_logger(**initial: Any) -> Any:
    return structlog.get_logger(**initial)
