"""The kinds of value a config key holds beyond plain ones: durations, sizes, maintenance
windows, secrets, identifiers, incident kinds; how each is written in the file, read
back and shown.

The markers (``_Duration``, ``_Bytes``, ...) go in a key's ``Annotated`` type; only the
config's own modules read them (validation, ``config show``), and ``docs/generate.py``
names a key's type by them. ``AtLeast`` is the floor of a duration, ``Fewest`` that of
a count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any


class _Duration:
    """Marker: a duration in seconds, written as ``30s``, ``5m``, ``1h``, ``250ms`` or a number."""


@dataclass(frozen=True)
class AtLeast:
    """Marker: the least a duration may be (seconds). Every duration of the config has
    one: an interval below it would make the daemon spin (a holder scan every
    millisecond costs half a core), a time limit below it could never be met."""

    seconds: float


@dataclass(frozen=True)
class Fewest:
    """Marker: the least a count may be. Every count of the config has one: keeping no
    snapshot or quarantined original at all would prune each as it is made."""

    count: int


Count = Annotated[int, Fewest(1)]  # a count of one or more
CountFromZero = Annotated[int, Fewest(0)]


class _Bytes:
    """Marker: a size in bytes, written as ``50MiB``, ``4KB``, ``1GiB`` or an integer."""


class _Window:
    """Marker: a maintenance window such as ``Sun 03:00-04:00`` or ``daily 04:30-05:00``."""


class _Secret:
    """Marker: a value redacted by ``config show`` and in logs."""


class _Id:
    """Marker: an identifier written as a number or a string (a Telegram chat id), kept as text."""


Duration = Annotated[float, _Duration]
ByteSize = Annotated[int, _Bytes]
Secret = Annotated[str, _Secret]
IdText = Annotated[str, _Id]
Window = Annotated[str, _Window]

REDACTED = "***redacted***"


class _Kind:
    """Marker: the name of an incident kind (``statewarden.kinds.KINDS``)."""


IncidentKind = Annotated[str, _Kind]


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_BYTES_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_BYTES_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_duration(value: object) -> float | None:
    """Seconds for ``30s`` / ``5m`` / ``1h`` / ``250ms`` / ``2d`` / a number; ``None`` if invalid.

    Every duration in the config is an interval or a time limit, so it must be above zero.
    """
    seconds: float | None = None
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        m = _DURATION_RE.match(value)
        if m:
            seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if seconds is None or not seconds > 0 or seconds == float("inf"):
        return None
    return seconds


_WINDOW_RE = re.compile(r"^\s*(\S+)\s+(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY_SETS = {"daily": range(7), "weekdays": range(5), "weekends": range(5, 7)}


def duration_floor(markers: tuple[Any, ...] | list[Any]) -> float | None:
    """The floor an ``AtLeast`` marker among ``markers`` sets, or None."""
    return next((m.seconds for m in markers if isinstance(m, AtLeast)), None)


def count_floor(markers: tuple[Any, ...] | list[Any]) -> int | None:
    """The floor a ``Fewest`` marker among ``markers`` sets, or None."""
    return next((m.count for m in markers if isinstance(m, Fewest)), None)


def parse_window(value: object) -> tuple[frozenset[int], int, int] | None:
    """``(weekdays 0=Mon, start minute, end minute)`` of ``Sun 03:00-04:00``; None if invalid.

    Days: ``daily``, ``weekdays``, ``weekends``, a day (``Sun``) or a list (``Sat,Sun``).
    An end at or before the start runs past midnight into the next day.
    """
    if not isinstance(value, str):
        return None
    m = _WINDOW_RE.match(value)
    if not m:
        return None
    days: set[int] = set()
    for part in m.group(1).lower().split(","):
        if part in _DAY_SETS:
            days.update(_DAY_SETS[part])
        elif part in WEEKDAYS or part in _WEEKDAY_NAMES:
            days.add(WEEKDAYS.index(part[:3]))
        else:
            return None
    h1, m1, h2, m2 = (int(g) for g in m.groups()[1:])
    if h1 > 23 or h2 > 24 or m1 > 59 or m2 > 59 or (h2 == 24 and m2):
        return None
    start, end = h1 * 60 + m1, h2 * 60 + m2
    if start == end:
        return None
    return frozenset(days), start, end


def parse_bytes(value: object) -> int | None:
    """Bytes for ``50MiB`` / ``4KB`` / an integer; ``None`` if invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str):
        m = _BYTES_RE.match(value)
        if m:
            unit = (m.group(2) or "B").lower()
            return int(float(m.group(1)) * _BYTES_UNITS[unit])
    return None


def format_duration(seconds: float) -> str:
    """``seconds`` as the config writes it, in the largest unit that keeps it whole:
    ``30s``, ``5m``, ``4h``, ``1d``, ``250ms``; :func:`parse_duration` reads it back."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    millis = f"{seconds * 1000:.6f}".rstrip("0").rstrip(".")  # never an exponent
    return f"{millis}ms"


def format_bytes(n: int) -> str:
    """``n`` bytes as the config writes it (``50MB``, ``16MiB``, ``4096``);
    :func:`parse_bytes` reads it back."""
    for unit, size in (
        ("GiB", 2**30),
        ("MiB", 2**20),
        ("KiB", 2**10),
        ("GB", 10**9),
        ("MB", 10**6),
    ):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)
