"""One rule: a message text Hermes writes when its storage is in trouble, and the signal
it becomes (kind, severity, summary, fingerprint key).

The rules themselves are in the ``rules_*`` modules, by what they are about;
``watch/matching.py`` tries them in order, first match wins.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewarden.kinds import Severity
from statewarden.targets import Target


@dataclass(frozen=True)
class Rule:
    """One message text Hermes writes, and the signal it becomes."""

    name: str
    pattern: re.Pattern[str]  # searched in the record's first-line message
    kind: str
    severity: Severity | None
    summary: str  # str.format over the match's named groups plus {logger}
    key: Callable[[re.Match[str]], str] = field(default=lambda _m: "")
    # Return False to let the record fall through to the next rules.
    applies: Callable[[re.Match[str], Target], bool] = field(default=lambda _m, _t: True)
    corruption: bool = False  # this rule itself reports corruption (skip the generic one)
    # Also searched in the traceback (the whole record) when the message matched no rule of
    # this kind: an exception Hermes raises is often only named in the traceback.
    anywhere: bool = False
    # More fields of the signal, read from the match (a holder's pid and command line).
    more_fields: Callable[[re.Match[str]], dict[str, Any]] | None = None


def is_target_db(m: re.Match[str], target: Target) -> bool:
    """The database the match's ``label`` names is the watched one (by its file name)."""
    label = Path(m["label"]).name
    return label in ("state.db", target.db.name)


def rule(
    name: str,
    pattern: str,
    kind: str,
    severity: Severity | None,
    summary: str,
    *,
    key: str | Callable[[re.Match[str]], str] = "",
    **kw: Any,
) -> Rule:
    """A :class:`Rule`, its pattern compiled (``.`` matches newlines too); ``key`` a fixed
    text or read from the match."""
    if callable(key):
        key_fn = key
    else:
        fixed = key

        def key_fn(_m: re.Match[str]) -> str:
            return fixed

    return Rule(name, re.compile(pattern, re.DOTALL), kind, severity, summary, key_fn, **kw)
