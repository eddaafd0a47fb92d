"""The rules about damage: Hermes finding state.db corrupt (structurally, after a crash,
in its full-text index) and starting over on a fresh, empty one."""

from __future__ import annotations

import re
from typing import Any

from statewarden.watch.rule import rule


def _moved_aside_fields(m: re.Match[str]) -> dict[str, Any]:
    """Where Hermes moved the damaged state.db (absent: it was left in place)."""
    moved = m["moved"]
    return {"moved_aside": moved} if moved else {"moved_aside": None}


FATAL_CORRUPTION = rule(
    "fatal_corruption",
    r"FATAL: state\.db reported structural corruption",
    "corruption",
    "critical",
    "Hermes stopped: state.db reported structural corruption",
    corruption=True,
)

SESSIONS_VANISHED = rule(
    "sessions_vanished",
    r"state\.db was empty or damaged \((?P<size>-?\d+) bytes\) and has been "
    r"(?P<where>moved aside to (?P<moved>.+?)|left in place[^;]*);",
    "sessions_vanished",
    "critical",
    "Hermes found state.db empty or damaged ({size} bytes) and started a fresh, empty "
    "session database: every session has vanished from Hermes; the old file was {where}",
    key="fresh_db",
    more_fields=_moved_aside_fields,
)

CORRUPT_LATCH = rule(
    "corrupt_latch",
    r"is structurally corrupt \((?P<error>.*?)\); session storage is reported as corrupt",
    "corruption",
    "critical",
    "Hermes marked state.db structurally corrupt ({error}); session storage reports corrupt "
    "until Hermes restarts on a recovered file",
    corruption=True,
)

STRUCTURAL_CORRUPTION = rule(
    "structural_corruption",
    r"reported structural corruption outside the FTS",
    "corruption",
    "critical",
    "a Hermes handle found structural corruption in state.db outside the full-text "
    "indexes and stopped writing: {rest}",
    corruption=True,
)

INTEGRITY_AFTER_CRASH = rule(
    "integrity_after_crash",
    r"FAILED integrity check after an unclean (?:\w+ )?exit: (?!check-failed)(?P<error>.*?)"
    r"(?: — |$)",
    "corruption",
    "critical",
    "state.db failed its integrity check after the gateway died ({error}): sessions may "
    "read as missing",
    corruption=True,
)

FTS_INVALID_UTF8 = rule(
    "fts_invalid_utf8",
    r"probe encountered invalid UTF-8 in FTS content",
    "corruption",
    "error",
    "state.db's full-text index holds bytes that are not UTF-8 (Hermes writes none): "
    "damage; search may miss rows",
    corruption=True,
)
