"""Matching: which signals one Hermes record gives, not built yet, and the order the
rules are tried in.

1. **Specific rules** (``RULES``, first match wins): each message text Hermes writes
   when its storage is in trouble (docs/hermes.md, "Messages worth a signal"), with the
   kind, severity and fingerprint key it maps to (the ``rules_*`` modules, by what they
   are about).
2. **Corruption** (any record from state.db code whose text says ``database disk
   image is malformed``, ``malformed database schema``, ``disk I/O error`` or ``file
   is not a database``), unless a specific rule already reported corruption.
3. **Locked** (``database is locked`` from state.db code) when no specific rule matched.

"State.db code" is decided by ``is_state_db_record``: a Hermes logger that only
touches state.db (``hermes_state`` and every ``hermes_state_*`` module, ``gateway.session``,
``run_agent``), a message naming state.db or the session store, or a traceback
through ``hermes_state*.py`` -- and never a record that only names another database
(``kanban.db``, ``response_store.db``), since those share Hermes' SQLite helpers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from re import _constants as _sre_constants  # type: ignore[attr-defined]
from re import _parser as _sre_parser  # type: ignore[attr-defined]

from statewarden.incidents import Signal
from statewarden.kinds import Severity
from statewarden.targets import Target
from statewarden.watch import (
    rules_corruption,
    rules_delivery,
    rules_holders,
    rules_repair,
    rules_wal,
)
from statewarden.watch.record_signals import (
    SUMMARY_ERROR_MAX_CHARS,
    TRANSCRIPT_FAILURES_ERROR,
    apply_rule,
    clip,
    make_signal,
)
from statewarden.watch.records import LogRecord
from statewarden.watch.rule import Rule

_CORRUPTION_RE = re.compile(
    r"database disk image is malformed|malformed database schema|disk I/O error"
    r"|file is not a database",
    re.IGNORECASE,
)
_CANONICAL = {
    t.lower(): t
    for t in (
        "database disk image is malformed",
        "malformed database schema",
        "disk I/O error",
        "file is not a database",
    )
}
_LOCKED_RE = re.compile(r"database is locked", re.IGNORECASE)
# Loggers of Hermes modules whose only database is state.db; by prefix, the state layer's
# own too (hermes_state_health, hermes_state_repair, ...: ``getLogger(__name__)``).
_STATE_LOGGERS = ("hermes_state", "gateway.session", "run_agent")
_STATE_LOGGER_PREFIX = "hermes_state_"
_STATE_TEXT_RE = re.compile(
    r"state\.db|Session ?DB|session store|session storage|routing (?:save|load)", re.IGNORECASE
)
_STATE_FRAME_RE = re.compile(r'File "[^"]*hermes_state\w*\.py"')
# Another database named in the text (kanban.db, response_store.db, ...).
_OTHER_DB_RE = re.compile(r"\b(?!state\.db\b)[\w-]+\.db\b")


def is_state_db_record(record: LogRecord, lowered: str | None = None) -> bool:
    """True when the record comes from code working on state.db (see module doc).

    ``lowered``: the record's text in lower case when it is all ASCII (the caller has it
    already), so case-insensitive texts are found with ``in`` instead of a search.
    """
    text = record.text
    if lowered is not None:
        named_state = (
            "state.db" in lowered
            or "session db" in lowered
            or "sessiondb" in lowered
            or "session store" in lowered
            or "routing save" in lowered
            or "routing load" in lowered
        )
    else:
        named_state = _STATE_TEXT_RE.search(text) is not None
    if not named_state and _OTHER_DB_RE.search(text):
        return False
    if named_state or _STATE_FRAME_RE.search(text):
        return True
    return record.logger.startswith(_STATE_LOGGER_PREFIX) or any(
        record.logger == name or record.logger.startswith(name + ".") for name in _STATE_LOGGERS
    )


# First match wins; the order puts the narrower text first.
RULES: tuple[Rule, ...] = (
    # newer: FATAL lines.
    rules_holders.DB_REPLACED,
    rules_corruption.FATAL_CORRUPTION,
    rules_holders.DELETED_SIDECAR,
    rules_delivery.FATAL_OTHER,
    rules_delivery.JSONL_DIVERT_FAILED,
    rules_delivery.TURN_STOPPED,
    rules_wal.CROSS_VM_WAL,
    # Hermes 0.22 (schema 31). Matched by the stable part of each text: Hermes rewords
    # the rest every few weeks.
    rules_corruption.SESSIONS_VANISHED,
    rules_corruption.CORRUPT_LATCH,
    rules_corruption.STRUCTURAL_CORRUPTION,
    rules_corruption.INTEGRITY_AFTER_CRASH,
    rules_corruption.FTS_INVALID_UTF8,
    rules_wal.RETIRED_WAL_CAPTURED,
    rules_wal.RETIRED_WAL_LOST,
    rules_wal.RETIRED_WAL_CHECKPOINT_SKIPPED,
    rules_holders.WRITE_LOCK_HOLDERS,
    rules_holders.DUPLICATE_WRITERS,
    rules_repair.REPAIR_EXHAUSTED,
    rules_repair.REPAIR_BLOCKED_BY_WRITER,
    rules_repair.REPAIR_NOT_RUN,
    rules_repair.REPAIRED,
    rules_repair.BACKUP_REFUSED,
    rules_repair.FTS_BLOCKED,
    rules_repair.FTS_DETACH_FAILED,
    rules_repair.FTS_DETACHED,
    rules_repair.SESSION_FTS_REBUILT,
    rules_repair.SESSION_FTS_REBUILD_FAILED,
    rules_delivery.WRITES_REFUSED,
    rules_delivery.DIVERT_FAILED_REPLACED,
    rules_delivery.APPEND_REJECTED,
    rules_delivery.TRANSCRIPT_STALLED,
    rules_delivery.QUEUE_SPOOLED,
    rules_delivery.SPOOL_REJECTED,
    rules_delivery.SHUTDOWN_FLUSH,
    rules_delivery.STORE_UNAVAILABLE,
    rules_delivery.OPEN_FAILED,
    rules_delivery.SESSION_ROW_MISSING,
    rules_holders.JOURNAL_PROBE_LOCKED,
    # 0.19.0
    rules_delivery.QUEUE_FULL,
    rules_delivery.TRANSCRIPT_APPEND,
    rules_delivery.APPEND_MESSAGE,
    rules_delivery.ROUTING,
    rules_delivery.GAVE_UP,
    rules_delivery.TASK_DIED,
    rules_repair.SCHEMA_MALFORMED,
    rules_repair.SCHEMA_UNRECOVERABLE,
    rules_repair.FTS_CORRUPTION,
    rules_repair.FTS_REBUILD_FAILED,
    rules_wal.WAL_FALLBACK,
    rules_holders.LOCK_GUARD_REFUSED,
    rules_holders.LOCK_GUARD_INCOMPLETE,
    rules_holders.LOCK_GUARD_FAILED,
    rules_wal.WAL_RESET_KEPT_WAL,
    rules_wal.WAL_RESET_DELETE,
    rules_wal.WAL_RESET_OTHER,
    rules_wal.WAL_RESET_STARTUP,
    rules_wal.WAL_RESET_CLI,
    rules_delivery.TRANSCRIPT_LAG,
)

# Every rule's pattern contains one of these texts: a message with none of them is
# checked against no rule (one search instead of twenty on ordinary lines).
# ``tests/watch/test_rules.py`` proves it for every match of every rule.
_RULE_TRIGGER_RE = re.compile(
    r"FATAL: |JSONL divert failed|No reply: the turn|cross-VM filesystem|Session ?DB"
    r"|state\.db|Supervised task|In-place FTS rebuild|WAL journal_mode unsupported"
    r"|Persisted transcript lagged|DeletedWalGenerationError|WAL lock guard|WAL-reset"
    r"|structural|FAILED integrity|FTS|retired WAL|WAL/SHM|Refusing |back up malformed"
    r"|Spooled transcript|Shutdown transcript|SQLite session|on-disk journal mode"
)


def _needles(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Texts one of which every match of ``pattern`` contains, or None (no such texts of
    4 characters or more): a message with none of them needs no search.

    Per alternative of a pattern that is one alternation, else of the whole pattern: the
    longest run of plain characters among its top-level items (each is part of every
    match; a group, a repeat or a class ends a run)."""
    if pattern.flags & re.IGNORECASE:
        return None
    parsed = list(_sre_parser.parse(pattern.pattern, pattern.flags))
    if len(parsed) == 1 and parsed[0][0] is _sre_constants.BRANCH:
        branches = [list(b) for b in parsed[0][1][1]]
    else:
        branches = [parsed]
    out = []
    for items in branches:
        best = run = ""
        for op, arg in items:
            run = run + chr(arg) if op is _sre_constants.LITERAL else ""
            best = max(best, run, key=len)
        if len(best) < 4:
            return None
        out.append(best)
    return tuple(out)


# Each rule with the first of its texts and the others (one ``in`` each, kept cheap).
_RULES_WITH_NEEDLES = tuple(
    (rule, None, ()) if (n := _needles(rule.pattern)) is None else (rule, n[0], n[1:])
    for rule in RULES
)
# What the ``anywhere`` rules look for in a traceback.
_ANYWHERE_TRIGGER_RE = re.compile(r"DeletedWalGenerationError|WAL lock guard could not arm")
_ANYWHERE_RULES = tuple(rule for rule in RULES if rule.anywhere)
_TEXT_TRIGGER_RE = re.compile(
    _CORRUPTION_RE.pattern + "|" + _LOCKED_RE.pattern + "|" + _ANYWHERE_TRIGGER_RE.pattern,
    re.IGNORECASE,
)


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start:] if end < 0 else text[start:end]


def _corruption_signal(record: LogRecord, target: Target, now: float | None) -> Signal:
    m = _CORRUPTION_RE.search(record.message)
    where = record.message
    if m is None:
        # Said only in the traceback: quote the line that says it.
        m = _CORRUPTION_RE.search(record.text)
        assert m is not None
        where = _line_at(record.text, m.start())
    what = _CANONICAL.get(m.group(0).lower(), m.group(0))
    who = record.logger or "Hermes"
    quoted = clip(where, SUMMARY_ERROR_MAX_CHARS)
    summary = f"state.db corruption: {who} reported '{what}': {quoted}"
    return make_signal(
        record,
        target,
        "corruption",
        summary,
        key="",
        severity=None,
        now=now,
        rule="corruption",
        error=what,
    )


@dataclass(slots=True)
class Hit:
    """One signal a record gives, classified but not built yet (building it is most of
    the cost, and a batch builds one per fingerprint)."""

    kind: str
    key: str
    severity: Severity | None
    rule: Rule | None  # None: the generic corruption or locked signal
    match: re.Match[str] | None


def _rule_hit(rule: Rule, m: re.Match[str]) -> Hit:
    severity = rule.severity
    if rule.name == "transcript_append" and int(m["failure_count"]) >= TRANSCRIPT_FAILURES_ERROR:
        severity = "error"
    return Hit(rule.kind, rule.key(m), severity, rule, m)


def classify(record: LogRecord, target: Target) -> list[Hit]:
    """The signals ``record`` gives, in order, not built yet (see module doc)."""
    out: list[Hit] = []
    matched: Rule | None = None
    message = record.message
    if _RULE_TRIGGER_RE.search(message):
        for rule, needle, others in _RULES_WITH_NEEDLES:
            if needle is not None and needle not in message:
                for other in others:
                    if other in message:
                        break
                else:
                    continue  # the pattern needs one of these texts: no search can match
            m = rule.pattern.search(message)
            if m is not None and rule.applies(m, target):
                matched = rule
                out.append(_rule_hit(rule, m))
                break
    text = record.text
    lowered: str | None = None
    if text.isascii():
        # One lower-cased copy instead of case-insensitive searches: for ASCII text
        # ``in`` on it finds exactly what those searches find.
        lowered = text.lower()
        corrupt = (
            "database disk image is malformed" in lowered
            or "malformed database schema" in lowered
            or "disk i/o error" in lowered
            or "file is not a database" in lowered
        )
        locked = "database is locked" in lowered
        anywhere = "DeletedWalGenerationError" in text or "WAL lock guard could not arm" in text
        if matched is None and not (corrupt or locked or anywhere):
            return out
    else:
        if matched is None and not _TEXT_TRIGGER_RE.search(text):
            return out
        corrupt = _CORRUPTION_RE.search(text) is not None
        locked = _LOCKED_RE.search(text) is not None
        anywhere = _ANYWHERE_TRIGGER_RE.search(text) is not None
    if (matched is None or not matched.anywhere) and anywhere:
        # Named only in the traceback (or behind another rule's message).
        for rule in _ANYWHERE_RULES:
            if matched is not None and rule.kind == matched.kind:
                continue
            m = rule.pattern.search(text)
            if m is not None and rule.applies(m, target):
                out.append(_rule_hit(rule, m))
                matched = matched or rule
                break
    state_db = None
    if (matched is None or not matched.corruption) and corrupt:
        state_db = is_state_db_record(record, lowered)
        if state_db:
            out.append(Hit("corruption", "", None, None, None))
    if matched is None and locked:
        if state_db is None:
            state_db = is_state_db_record(record, lowered)
        if state_db:
            out.append(Hit("write_failures", "locked", None, None, None))
    return out


def build_signal(hit: Hit, record: LogRecord, target: Target, now: float | None) -> Signal:
    """The signal ``hit`` stands for, built from its record."""
    if hit.rule is not None:
        assert hit.match is not None
        return apply_rule(hit.rule, hit.match, record, target, now)
    if hit.kind == "corruption":
        return _corruption_signal(record, target, now)
    summary = f"state.db is locked: {record.logger or 'Hermes'} could not write: " + (
        clip(record.message, SUMMARY_ERROR_MAX_CHARS)
    )
    return make_signal(
        record,
        target,
        "write_failures",
        summary,
        key="locked",
        severity=None,
        now=now,
        rule="locked",
    )
