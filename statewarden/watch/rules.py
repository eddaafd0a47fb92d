"""Rules: Hermes log records and journal entries -> signals and observations.

Pure functions, no I/O. The log tailer (``watch/logtail.py``) cuts files into
records (``watch/records.py``); the journal follower hands over journald JSON entries;
both end here.

How a record becomes signals:

1. **Specific rules** (``RULES``, first match wins): each message text Hermes writes
   when its storage is in trouble (docs/hermes.md, "Messages worth a signal"), with the
   kind, severity and fingerprint key it maps to.
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
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from re import _constants as _sre_constants  # type: ignore[attr-defined]
from re import _parser as _sre_parser  # type: ignore[attr-defined]
from typing import Any

from statewarden.incidents.signals import Found, Observation, Signal
from statewarden.kinds import Severity
from statewarden.targets import Target
from statewarden.watch.records import LogRecord, journal_record, parse_record

# The error part quoted in a one-line summary is cut to this many characters.
SUMMARY_ERROR_MAX_CHARS = 160
# A transcript append failing this many times in a row is an error, not a warning.
TRANSCRIPT_FAILURES_ERROR = 10
# Records whose evidence a merged signal carries from the start and from the end of its
# batch (``SignalBatch``): at least what an incident keeps (the book's EVIDENCE_KEEP).
MERGED_EVIDENCE_RECORDS = 10
# Cron session ids remembered by ``CronSessions`` (oldest forgotten first).
CRON_SESSIONS_REMEMBERED = 4096

_CRON_RE = re.compile(r"\bcron_(?P<job>[0-9A-Za-z-]+(?:_[0-9A-Za-z-]+)*?)_(?P<stamp>\d{8}_\d{6})\b")

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


def _is_target_db(m: re.Match[str], target: Target) -> bool:
    label = Path(m["label"]).name
    return label in ("state.db", target.db.name)


def _rule(
    name: str,
    pattern: str,
    kind: str,
    severity: Severity | None,
    summary: str,
    *,
    key: str | Callable[[re.Match[str]], str] = "",
    **kw: Any,
) -> Rule:
    if callable(key):
        key_fn = key
    else:
        fixed = key

        def key_fn(_m: re.Match[str]) -> str:
            return fixed

    return Rule(name, re.compile(pattern, re.DOTALL), kind, severity, summary, key_fn, **kw)


# One holder in the write-lock line of hermes_state_lockowners: "PID 123 (hermes gateway
# run) holds WAL write lock on state.db-shm" (the command line is cut to 80 characters and
# may itself hold parentheses: the last ") holds" ends it).
_LOCK_HOLDER_RE = re.compile(
    r"PID (?P<pid>\d+) \((?P<argv>.*)\) holds (?P<lock>.+?) lock on (?P<file>\S+)"
)


def _lock_holder_fields(m: re.Match[str]) -> dict[str, Any]:
    """The holders the write-lock line names: the first one's pid, command line and lock,
    and every pid (Hermes joins several with " | ")."""
    found = [h for part in m["holders"].split(" | ") if (h := _LOCK_HOLDER_RE.match(part.strip()))]
    if not found:
        return {}
    first = found[0]
    return {
        "holder_pid": int(first["pid"]),
        "holder_argv": first["argv"],
        "holder_lock": first["lock"],
        "holder_pids": [int(h["pid"]) for h in found],
    }


def _moved_aside_fields(m: re.Match[str]) -> dict[str, Any]:
    """Where Hermes moved the damaged state.db (absent: it was left in place)."""
    moved = m["moved"]
    return {"moved_aside": moved} if moved else {"moved_aside": None}


# First match wins; the order puts the narrower text first.
RULES: tuple[Rule, ...] = (
    # newer: FATAL lines.
    _rule(
        "db_replaced",
        r"FATAL: state\.db was replaced underneath the gateway",
        "stale_holder",
        "critical",
        "state.db was replaced while the gateway had it open; it stopped writing",
        key="db_replaced",
    ),
    _rule(
        "fatal_corruption",
        r"FATAL: state\.db reported structural corruption",
        "corruption",
        "critical",
        "Hermes stopped: state.db reported structural corruption",
        corruption=True,
    ),
    # DeletedWalGenerationError (hermes_state_errors._DELETED_WAL_GENERATION_MSG, both
    # wordings Hermes has shipped, and the exception's name in a traceback).
    _rule(
        "deleted_sidecar",
        r"FATAL: (?:session storage stopped writing because another Hermes "
        r"process still holds|a live process holds) a deleted state\.db-(?:wal|shm)"
        r"|\bDeletedWalGenerationError\b",
        "stale_holder",
        "critical",
        "Hermes halted writes (DeletedWalGenerationError): a process still holds a deleted "
        "state.db-wal/-shm generation; a second WAL would split the database",
        key="deleted_sidecar",
        anywhere=True,
    ),
    _rule(
        "fatal_other",
        r"FATAL: .*(?:state\.db|session storage)",
        "write_failures",
        "critical",
        "Hermes stopped writing session storage: {rest}",
        key="fatal",
    ),
    _rule(
        "jsonl_divert_failed",
        r"JSONL divert failed after state\.db (?P<cause>.+?) for "
        r"(?P<session>[^\s:]+)",
        "messages_dropped",
        "critical",
        "messages are being lost: state.db {cause} and the JSONL divert failed too "
        "(session {session})",
    ),
    _rule(
        "turn_stopped",
        r"No reply: the turn was stopped because session storage could not "
        r"be written",
        "write_failures",
        "critical",
        "a turn got no reply because session storage could not be written",
        key="turn_stopped",
    ),
    _rule(
        "cross_vm_wal",
        r"existing WAL-mode database is on a cross-VM filesystem",
        "unsafe_mount",
        "error",
        "state.db is a WAL database on a cross-VM filesystem (locks are not coherent there)",
        key="cross_vm",
    ),
    # Hermes 0.22 (schema 31). Matched by the stable part of each text: Hermes rewords
    # the rest every few weeks.
    _rule(
        "sessions_vanished",
        r"state\.db was empty or damaged \((?P<size>-?\d+) bytes\) and has been "
        r"(?P<where>moved aside to (?P<moved>.+?)|left in place[^;]*);",
        "sessions_vanished",
        "critical",
        "Hermes found state.db empty or damaged ({size} bytes) and started a fresh, empty "
        "session database: every session has vanished from Hermes; the old file was {where}",
        key="fresh_db",
        more_fields=_moved_aside_fields,
    ),
    _rule(
        "corrupt_latch",
        r"is structurally corrupt \((?P<error>.*?)\); session storage is reported as corrupt",
        "corruption",
        "critical",
        "Hermes marked state.db structurally corrupt ({error}); session storage reports corrupt "
        "until Hermes restarts on a recovered file",
        corruption=True,
    ),
    _rule(
        "structural_corruption",
        r"reported structural corruption outside the FTS",
        "corruption",
        "critical",
        "a Hermes handle found structural corruption in state.db outside the full-text "
        "indexes and stopped writing: {rest}",
        corruption=True,
    ),
    _rule(
        "integrity_after_crash",
        r"FAILED integrity check after an unclean (?:\w+ )?exit: (?!check-failed)(?P<error>.*?)"
        r"(?: — |$)",
        "corruption",
        "critical",
        "state.db failed its integrity check after the gateway died ({error}): sessions may "
        "read as missing",
        corruption=True,
    ),
    _rule(
        "fts_invalid_utf8",
        r"probe encountered invalid UTF-8 in FTS content",
        "corruption",
        "error",
        "state.db's full-text index holds bytes that are not UTF-8 (Hermes writes none): "
        "damage; search may miss rows",
        corruption=True,
    ),
    _rule(
        "retired_wal_captured",
        r"Captured the retired WAL generation of (?P<label>\S+) at (?P<trigger>\w+) to "
        r"(?P<capture>.+?); ",
        "stale_holder",
        "error",
        "a Hermes handle's WAL generation was deleted or replaced under it; its frames were "
        "captured to {capture} and are not in state.db (read its manifest.json)",
        key="deleted_sidecar",
    ),
    _rule(
        "retired_wal_lost",
        r"Could not capture the retired WAL generation of (?P<label>\S+) at (?P<trigger>\w+)"
        r"|SessionDB for (?P<other>\S+) did not settle at close",
        "stale_holder",
        "critical",
        "a Hermes handle's WAL generation was deleted or replaced and Hermes could not "
        "capture its frames: those writes are not preserved yet ({rest})",
        key="deleted_sidecar",
    ),
    _rule(
        "retired_wal_checkpoint_skipped",
        r"WAL/SHM generation was deleted or replaced; the retired generation is captured at "
        r"(?P<capture>.+?)\. ",
        "stale_holder",
        "error",
        "a Hermes handle's WAL generation was deleted or replaced; it skipped its close-time "
        "checkpoint, the frames are captured at {capture}",
        key="deleted_sidecar",
    ),
    _rule(
        "write_lock_holders",
        r"state\.db write lock unavailable for (?P<waited>[\d.]+)s \([^)]*\): (?P<holders>.*)",
        "write_failures",
        "warning",
        "a Hermes writer waited {waited}s for the state.db write lock: {holders}",
        key="write_lock",
        more_fields=_lock_holder_fields,
    ),
    _rule(
        "duplicate_writers",
        r"(?P<count>\d+) live SessionDB handles on (?P<label>\S+) in this process",
        "duplicate_writers",
        "warning",
        "one Hermes process holds {count} writer connections on {label}: duplicate writers "
        "in one process come before lock storms and WAL damage",
        key="handles",
        applies=_is_target_db,
    ),
    _rule(
        "repair_exhausted",
        r"state\.db repair skipped: automatic repair has already failed (?P<times>\d+) times",
        "self_repair",
        "critical",
        "Hermes gave up repairing state.db: its automatic repair already failed {times} times "
        "on this file; manual recovery is needed",
        key="repair_exhausted",
    ),
    _rule(
        "repair_blocked_by_writer",
        r"state\.db repair skipped: a live writer still holds state\.db",
        "self_repair",
        "error",
        "Hermes skipped repairing damaged state.db: a live writer still holds it "
        "(statewardenctl holders names it)",
        key="repair_skipped",
    ),
    _rule(
        "repair_not_run",
        r"state\.db repair (?P<verb>skipped|aborted): (?P<error>.*)",
        "self_repair",
        "error",
        "Hermes' repair of damaged state.db was {verb}: {error}",
        key=lambda m: f"repair_{m['verb']}",
    ),
    _rule(
        "repaired",
        r"state\.db repaired via '(?P<strategy>[^']*)' and promoted"
        r"|state\.db (?:FTS indexes rebuilt in place \(schema preserved\)|schema repaired by"
        r"|B-tree indexes rebuilt via REINDEX)",
        "self_repair",
        "error",
        "Hermes repaired state.db itself ({rest}); rows it could not read may be gone",
        key="repaired",
    ),
    _rule(
        "backup_refused",
        r"Refusing (?:forensic backup of|to raw-copy \S+ for backup)"
        r"|Could not back up malformed DB",
        "self_repair",
        "error",
        "Hermes could not back up damaged state.db before repairing it: {rest}",
        key="backup_failed",
    ),
    _rule(
        "fts_blocked",
        r"FTS repair (?:has been|remains) blocked",
        "self_repair",
        "error",
        "Hermes' rebuild of the state.db full-text index is blocked by other holders of the "
        "file: {rest}",
        key="fts_repair_blocked",
    ),
    _rule(
        "fts_detach_failed",
        r"Could not detach corrupt FTS indexes|FTS rebuild failed with a corruption-class error",
        "self_repair",
        "critical",
        "Hermes could not get past a corrupt state.db full-text index: {rest}",
        key="fts_rebuild_failed",
    ),
    _rule(
        "fts_detached",
        r"FTS indexes remain corrupt|FTS search hit a corruption error",
        "self_repair",
        "error",
        "state.db's full-text index is corrupt; Hermes detached it (search falls back to "
        "LIKE) until it is rebuilt",
        key="fts_detached",
    ),
    _rule(
        "session_fts_rebuilt",
        r"Rebuilt (?P<count>\d+) Session DB FTS index\(es\) after append corruption",
        "self_repair",
        "warning",
        "a transcript append hit a corrupt full-text index; Hermes rebuilt {count} of them",
        key="fts_rebuild",
    ),
    _rule(
        "session_fts_rebuild_failed",
        r"Session DB FTS rebuild failed: (?P<error>.*)",
        "self_repair",
        "error",
        "Hermes' rebuild of a corrupt state.db full-text index failed: {error}",
        key="fts_rebuild_failed",
    ),
    _rule(
        "writes_refused",
        r"Session DB refused further writes on this handle for (?P<session>\S+) "
        r"\((?P<error>[^)]*)\)",
        "jsonl_fallback",
        "critical",
        "Hermes stopped writing session {session} to state.db ({error}) and diverts its "
        "transcript to the on-disk fallback",
        key="refused",
    ),
    _rule(
        "divert_failed_replaced",
        r"(?P<what>pending fallback|JSONL divert) failed for replaced state\.db transcript "
        r"on (?P<session>\S+)",
        "write_failures",
        "error",
        "the {what} of session {session} failed after state.db was replaced: its messages "
        "may be only in memory",
        key="divert_failed",
    ),
    _rule(
        "append_rejected",
        r"Session DB transcript append rejected for (?P<why>.+?) (?P<session>\S+) with no "
        r"unique live child; not retrying",
        "messages_dropped",
        "error",
        "a message of session {session} was dropped: state.db refused its transcript append "
        "({why}) and Hermes does not retry",
        key="rejected",
    ),
    _rule(
        "transcript_stalled",
        r"Session DB transcript append failed for (?P<session>\S+) \(failure_count="
        r"(?P<failure_count>\d+), pending=(?P<pending>\d+), spooled_to_disk=\d+\); session "
        r"is stalled",
        "write_failures",
        "critical",
        "session {session} is stalled: its transcript append to state.db failed "
        "{failure_count} times ({pending} pending); Hermes needs an operator",
        key="transcript_append",
    ),
    _rule(
        "queue_spooled",
        r"Session DB transcript pending queue full for (?P<session>\S+) \(cap=(?P<cap>\d+)\)"
        r"; spooled oldest message to (?P<spool>\S+)",
        "write_failures",
        "error",
        "the transcript queue of session {session} is full (cap {cap}): state.db is not "
        "taking writes; Hermes spools the oldest to {spool} for replay",
        key="queue_spooled",
    ),
    _rule(
        "spool_rejected",
        r"Spooled transcript row for (?P<session>\S+) (?:in \S+ )?was rejected by the database",
        "write_failures",
        "error",
        "state.db rejected a spooled message of session {session} on replay: {rest}",
        key="spool_rejected",
    ),
    _rule(
        "shutdown_flush",
        r"Shutdown transcript flush failed|Preserved (?P<count>\d+) in-memory message\(s\) for "
        r"session (?P<session>\S+) \(possible FTS corruption",
        "write_failures",
        "error",
        "messages did not reach state.db at shutdown; Hermes kept them in a recovery file: {rest}",
        key="shutdown_flush",
    ),
    _rule(
        "store_unavailable",
        r"SQLite session store not available: (?P<error>.*)"
        r"|Broadcasting state\.db failure warning to home channels: (?P<told>.*)",
        "write_failures",
        "error",
        "the gateway has no working state.db: {rest}",
        key="store_unavailable",
    ),
    _rule(
        "open_failed",
        r"Session DB creation failed \(will retry next turn\): (?P<error>.*)"
        r"|Failed to create SQLite session: (?P<other>.*)",
        "write_failures",
        None,
        "a Hermes agent could not open state.db: {rest}",
        key="open_failed",
    ),
    _rule(
        "session_row_missing",
        r"Session DB row for (?P<session>\S+) is missing and could not be recreated",
        "write_failures",
        None,
        "session {session} has no row in state.db and Hermes could not recreate it: its "
        "messages wait in memory",
        key="session_row",
    ),
    _rule(
        "journal_probe_locked",
        r"(?P<label>\S+): could not verify the on-disk journal mode \(database is locked",
        "write_failures",
        "warning",
        "a Hermes process found {label} locked as it opened it (another connection holds it) "
        "and left its journal mode as it was",
        key="locked",
        applies=_is_target_db,
    ),
    # 0.19.0
    _rule(
        "queue_full",
        r"Session DB transcript pending queue full for (?P<session>\S+) "
        r"\(cap=(?P<cap>\d+)\); dropping oldest",
        "messages_dropped",
        "critical",
        "messages are being lost: the transcript queue of session {session} is full "
        "(cap {cap}), oldest dropped",
    ),
    _rule(
        "transcript_append",
        r"Session DB transcript append failed for (?P<session>\S+) "
        r"\(failure_count=(?P<failure_count>\d+), pending=(?P<pending>\d+)\); will retry: "
        r"(?P<error>.*)",
        "write_failures",
        None,
        "transcript append to state.db failed (session {session}, {failure_count} failures, "
        "{pending} pending): {error}",
        key="transcript_append",
    ),
    _rule(
        "append_message",
        r"Session DB append_message failed: (?P<error>.*)",
        "write_failures",
        None,
        "writing a message to state.db failed: {error}",
        key="append_message",
    ),
    _rule(
        "routing",
        r"state\.db routing (?P<op>save|load) failed: (?P<error>.*)",
        "write_failures",
        None,
        "state.db routing {op} failed: {error}",
        key=lambda m: f"routing_{m['op']}",
    ),
    _rule(
        "gave_up",
        r"Supervised task (?P<task>.+?) died (?P<times>\d+) times in rapid "
        r"succession.*giving up restarts",
        "task_died",
        "critical",
        "gateway task {task} died {times} times in a row; Hermes gave up restarting it",
        key=lambda m: m["task"],
    ),
    _rule(
        "task_died",
        r"Supervised task (?P<task>.+?) died: (?P<error>.*)",
        "task_died",
        None,
        "gateway task {task} died: {error}",
        key=lambda m: m["task"],
    ),
    _rule(
        "schema_malformed",
        r"state\.db schema is malformed \((?P<error>.*?)\) — attempting "
        r"automatic repair",
        "self_repair",
        "error",
        "state.db schema is malformed; Hermes is repairing it in place ({error})",
        key="schema_repair",
    ),
    _rule(
        "schema_unrecoverable",
        r"state\.db schema repair could not recover",
        "self_repair",
        "critical",
        "Hermes could not repair the state.db schema; manual repair needed",
        key="schema_repair_failed",
    ),
    _rule(
        "fts_corruption",
        r"state\.db write failed with an FTS-corruption error "
        r"\((?P<error>.*?)\) — ",
        "self_repair",
        "error",
        "state.db full-text index is corrupt; Hermes is rebuilding it in place ({error})",
        key="fts_rebuild",
    ),
    _rule(
        "fts_rebuild_failed",
        r"In-place FTS rebuild (?P<how>failed|made no progress)",
        "self_repair",
        "critical",
        "Hermes' in-place rebuild of the state.db full-text index {how}; offline repair needed",
        key="fts_rebuild_failed",
    ),
    _rule(
        "wal_fallback",
        r"(?P<label>\S+): WAL journal_mode unsupported on this filesystem "
        r"\((?P<error>.*?)\) — falling back to journal_mode=DELETE",
        "unsafe_mount",
        "warning",
        "state.db's filesystem does not support WAL; Hermes fell back to journal_mode=DELETE",
        key="wal_fallback",
        applies=_is_target_db,
    ),
    # hermes_state_lockguard: the OFD-lock guard on SQLite's own descriptors.
    _rule(
        "lock_guard_refused",
        r"WAL lock guard could not arm (?P<missing>\d+) of "
        r"(?P<ranges>\d+) ranges for (?P<label>\S+) — refusing to run",
        "lock_guard",
        "error",
        "a Hermes writer refused to run: its WAL lock guard could not arm {missing} of "
        "{ranges} ranges on {label} (WalGuardArmedIncompleteError)",
        key="refused",
        applies=_is_target_db,
        anywhere=True,
    ),
    _rule(
        "lock_guard_incomplete",
        r"WAL lock guard incomplete for (?P<label>\S+): "
        r"(?P<missing>\d+) of (?P<ranges>\d+) guard range",
        "lock_guard",
        "warning",
        "a Hermes writer left {missing} of {ranges} WAL lock-guard ranges on {label} unarmed "
        "(a foreign EXCLUSIVE holder or a lock failure): its WAL generation is partly "
        "unguarded",
        key="incomplete",
        applies=_is_target_db,
    ),
    _rule(
        "lock_guard_failed",
        r"WAL lock guard failed to arm for (?P<label>\S+) \(OSError",
        "lock_guard",
        "warning",
        "a Hermes writer could not arm its WAL lock guard on {label} (OSError while "
        "locking): its WAL generation may be unguarded",
        key="failed",
        applies=_is_target_db,
    ),
    # The WAL-reset bug gate (SQLite 3.7.0 .. 3.51.2; fixed 3.51.3, backports 3.50.7, 3.44.6):
    # hermes_state's _log_wal_reset_bug_once, the CLI's startup check (stderr, so the unit's
    # journal) and the salvage lane's sqlite3 shell gate.
    # The stable part is "<label>: linked SQLite <version> ... is vulnerable to the WAL-reset
    # corruption bug"; 0.22 puts "(interpreter <path>)" between the two.
    _rule(
        "wal_reset_kept_wal",
        r"(?P<label>\S+): linked SQLite (?P<version>\S+)\b[^—]*?is vulnerable "
        r"to the WAL-reset corruption bug.*?is already in WAL mode",
        "wal_reset_bug",
        "error",
        "Hermes' SQLite {version} has the WAL-reset bug and {label} stays in WAL mode: "
        "concurrent writers can corrupt it; upgrade to SQLite 3.51.3+ (or 3.50.7 / 3.44.6)",
        key="library",
        applies=_is_target_db,
    ),
    _rule(
        "wal_reset_delete",
        r"(?P<label>\S+): linked SQLite (?P<version>\S+)\b[^—]*?is vulnerable to "
        r"the WAL-reset corruption bug.*?using journal_mode=DELETE",
        "wal_reset_bug",
        "warning",
        "Hermes' SQLite {version} has the WAL-reset bug; {label} uses journal_mode=DELETE "
        "instead of WAL; upgrade to SQLite 3.51.3+ (or 3.50.7 / 3.44.6)",
        key="library",
        applies=_is_target_db,
    ),
    _rule(
        "wal_reset_other",
        r"(?P<label>\S+): linked SQLite (?P<version>\S+)\b[^—]*?is vulnerable to "
        r"the WAL-reset corruption bug",
        "wal_reset_bug",
        "warning",
        "Hermes' SQLite {version} has the WAL-reset bug ({label}: {rest}); upgrade to SQLite "
        "3.51.3+ (or 3.50.7 / 3.44.6)",
        key="library",
        applies=_is_target_db,
    ),
    _rule(
        "wal_reset_startup",
        r"SQLite (?P<version>\S+) has the WAL-reset bug "
        r"\(https://sqlite\.org/wal\.html",
        "wal_reset_bug",
        "warning",
        "Hermes runs on SQLite {version}, which has the WAL-reset bug: existing WAL "
        "databases it opens are at risk; upgrade to SQLite 3.51.3+ (or 3.50.7 / 3.44.6)",
        key="library",
    ),
    _rule(
        "wal_reset_cli",
        r"sqlite3 CLI (?P<binary>\S+) reports version (?P<version>\S+), "
        r"which still carries the WAL-reset opener bug",
        "wal_reset_bug",
        "warning",
        "the sqlite3 shell {binary} ({version}) has the WAL-reset bug: Hermes refused it for "
        "salvage, and opening state.db with it while Hermes runs can split the WAL; install "
        "sqlite3 3.51.3+",
        key="cli",
    ),
    _rule(
        "transcript_lag",
        r"Persisted transcript lagged live cached history for session "
        r"(?P<session>\S+) \(disk=(?P<disk>\d+), memory=(?P<memory>\d+)\)",
        "write_failures",
        "error",
        "session {session}: state.db holds {disk} messages, memory {memory} "
        "(writes are not reaching state.db; possible FTS corruption)",
        key="transcript_lag",
    ),
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

_JSONL_FALLBACK_RE = re.compile(
    r"SQLite session store unavailable, falling back to JSONL: (?P<error>.*)", re.DOTALL
)


def _clip(text: str, limit: int) -> str:
    # Only the head is ever kept: squeeze at most a bit more than that.
    head = text[: limit * 4]
    squeezed = " ".join(head.split())
    if len(squeezed) <= limit and len(head) == len(text):
        return squeezed
    return squeezed[: limit - 1] + "…"


def _evidence(record: LogRecord) -> tuple[str, ...]:
    """The record as evidence: the signal redacts and caps it (``incidents/evidence.py``)."""
    return (record.text,)


def _source(record: LogRecord) -> str:
    if record.path.startswith("journal:"):
        return record.path
    # rpartition, not Path(): this runs for every signal of a flood.
    return "log:" + record.path.rpartition("/")[2] if record.path else "log"


def _signal(
    record: LogRecord,
    target: Target,
    kind: str,
    summary: str,
    *,
    key: str,
    severity: Severity | None,
    now: float | None,
    **fields: Any,
) -> Signal:
    at = record.timestamp
    if at is None:
        at = time.time() if now is None else now
    if record.logger:
        fields.setdefault("logger", record.logger)
    if record.session:
        fields.setdefault("session", record.session)
    return Signal(
        kind=kind,
        db=str(target.db),
        summary=_clip(summary, 300),
        at=at,
        key=key,
        evidence=_evidence(record),
        source=_source(record),
        severity=severity,
        fields=fields,
    )


# The named groups of the rules kept as the signal's fields, as numbers or as text.
_INT_FIELDS = frozenset(
    {"failure_count", "pending", "cap", "times", "disk", "memory", "count", "size"}
)
_TEXT_FIELDS = frozenset(
    {"session", "task", "op", "version", "binary", "label", "strategy", "capture", "spool"}
)


def _apply_rule(
    rule: Rule, m: re.Match[str], record: LogRecord, target: Target, now: float | None
) -> Signal:
    groups = {k: (v or "") for k, v in m.groupdict().items()}
    values = {k: _clip(v, SUMMARY_ERROR_MAX_CHARS) for k, v in groups.items()}
    values["rest"] = _clip(record.message[m.start() :], SUMMARY_ERROR_MAX_CHARS)
    severity = rule.severity
    fields: dict[str, Any] = {"rule": rule.name}
    for name, value in groups.items():
        if m.group(name) is None:
            continue  # a group of the alternative that did not match
        if name in _INT_FIELDS:
            fields[name] = int(value)
        elif name in _TEXT_FIELDS:
            fields[name] = value
        elif name == "error":
            fields["error"] = _clip(value, SUMMARY_ERROR_MAX_CHARS)
    if rule.more_fields is not None:
        fields.update(rule.more_fields(m))
    failures = int(groups.get("failure_count") or 0)
    if rule.name == "transcript_append" and failures >= TRANSCRIPT_FAILURES_ERROR:
        severity = "error"
    return _signal(
        record,
        target,
        rule.kind,
        rule.summary.format(**values),
        key=rule.key(m),
        severity=severity,
        now=now,
        **fields,
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
    quoted = _clip(where, SUMMARY_ERROR_MAX_CHARS)
    summary = f"state.db corruption: {who} reported '{what}': {quoted}"
    return _signal(
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
class _Hit:
    """One signal a record gives, classified but not built yet (building it is most of
    the cost, and a batch builds one per fingerprint)."""

    kind: str
    key: str
    severity: Severity | None
    rule: Rule | None  # None: the generic corruption or locked signal
    match: re.Match[str] | None


def _rule_hit(rule: Rule, m: re.Match[str]) -> _Hit:
    severity = rule.severity
    if rule.name == "transcript_append" and int(m["failure_count"]) >= TRANSCRIPT_FAILURES_ERROR:
        severity = "error"
    return _Hit(rule.kind, rule.key(m), severity, rule, m)


def _classify(record: LogRecord, target: Target) -> list[_Hit]:
    """The signals ``record`` gives, in order, not built yet (see module doc)."""
    out: list[_Hit] = []
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
            out.append(_Hit("corruption", "", None, None, None))
    if matched is None and locked:
        if state_db is None:
            state_db = is_state_db_record(record, lowered)
        if state_db:
            out.append(_Hit("write_failures", "locked", None, None, None))
    return out


def _build(hit: _Hit, record: LogRecord, target: Target, now: float | None) -> Signal:
    if hit.rule is not None:
        assert hit.match is not None
        return _apply_rule(hit.rule, hit.match, record, target, now)
    if hit.kind == "corruption":
        return _corruption_signal(record, target, now)
    summary = f"state.db is locked: {record.logger or 'Hermes'} could not write: " + (
        _clip(record.message, SUMMARY_ERROR_MAX_CHARS)
    )
    return _signal(
        record,
        target,
        "write_failures",
        summary,
        key="locked",
        severity=None,
        now=now,
        rule="locked",
    )


def signals_from_record(
    record: LogRecord,
    target: Target,
    *,
    cron: CronSessions | None = None,
    now: float | None = None,
) -> list[Found]:
    """Every signal (and cron observation) one log record gives. Never raises.

    ``cron``, when given, remembers the cron session ids seen so far; a new one gives
    an ``Observation(what="cron_started")``. ``now`` stamps records without a time.
    """
    out: list[Found] = []
    if cron is not None:
        out.extend(cron.observe(record, target, now))
    out.extend(_build(hit, record, target, now) for hit in _classify(record, target))
    return out


@dataclass(slots=True)
class _Group:
    """The signals of one fingerprint and severity in a batch, built once at its end."""

    first: _Hit
    first_record: LogRecord
    last: _Hit
    last_record: LogRecord
    count: int = 1
    head: list[LogRecord] = field(default_factory=list)  # the first MERGED_EVIDENCE_RECORDS records
    tail: deque[LogRecord] = field(default_factory=lambda: deque(maxlen=MERGED_EVIDENCE_RECORDS))


class SignalBatch:
    """The signals of many records (one poll's), those that share a fingerprint and a
    severity merged into one that counts them.

    A flood of one error is then one signal per batch for the incident book, the
    timeline and the alerts, not one per line: the merged signal is the first one, with
    ``count`` the number merged, ``last_at`` the time of the last, the fields of the first
    updated with those of the last, and the evidence of the first and the last
    ``MERGED_EVIDENCE_RECORDS`` records (all an incident keeps). Building a signal
    (summary, clipping, fields) is done once per merged signal, not once per record.
    Observations (a cron session seen) are kept one by one, in order.
    """

    def __init__(
        self, target: Target, *, cron: CronSessions | None = None, now: float | None = None
    ) -> None:
        self.target = target
        self.cron = cron
        self.now = now
        self.records = 0
        self._out: list[Found | _Group] = []
        self._groups: dict[tuple[str, str, Severity | None], _Group] = {}

    def add(self, record: LogRecord) -> None:
        """Classify one record (in the order the records were written)."""
        self.records += 1
        if self.cron is not None and (
            "cron_" in record.message or (record.session or "").startswith("cron_")
        ):
            self._out.extend(self.cron.observe(record, self.target, self.now))
        for hit in _classify(record, self.target):
            key = (hit.kind, hit.key, hit.severity)
            group = self._groups.get(key)
            if group is None:
                group = _Group(hit, record, hit, record)
                group.head.append(record)
                self._groups[key] = group
                self._out.append(group)
                continue
            group.count += 1
            group.last, group.last_record = hit, record
            if len(group.head) < MERGED_EVIDENCE_RECORDS:
                group.head.append(record)
            else:
                group.tail.append(record)

    def signals(self) -> list[Found]:
        """What the batch gives, in the order first seen."""
        return [self._merged(g) if isinstance(g, _Group) else g for g in self._out]

    def _merged(self, group: _Group) -> Signal:
        first = _build(group.first, group.first_record, self.target, self.now)
        if group.count == 1:
            return first
        last = _build(group.last, group.last_record, self.target, self.now)
        return replace(
            first,
            count=group.count,
            last_at=max(first.at, last.at),
            evidence=tuple(_evidence(r)[0] for r in [*group.head, *group.tail]),
            fields={**first.fields, **last.fields},
        )


def signals_from_log(
    record: LogRecord | str,
    target: Target,
    *,
    cron: CronSessions | None = None,
    now: float | None = None,
) -> list[Found]:
    """``signals_from_record`` for a record, or for raw record text (parsed first)."""
    if isinstance(record, str):
        record = parse_record(record)
    return signals_from_record(record, target, cron=cron, now=now)


def signals_from_journal(
    entry: Mapping[str, Any],
    target: Target,
    *,
    cron: CronSessions | None = None,
    now: float | None = None,
) -> list[Found]:
    """Signals from one journald JSON entry (``journalctl -o json``) of a Hermes unit.

    The gateway prints ``[gateway] Warning: SQLite session store unavailable, falling
    back to JSONL: <error>`` to stdout, so only its unit's journal has it: that is
    ``jsonl_fallback``. Every log-file rule applies to the message as well (the gateway
    also logs to stderr). Never raises.
    """
    record = journal_record(entry)
    out: list[Found] = []
    m = _JSONL_FALLBACK_RE.search(record.message)
    if m is not None:
        error = _clip(m["error"], SUMMARY_ERROR_MAX_CHARS)
        out.append(
            _signal(
                record,
                target,
                "jsonl_fallback",
                f"the gateway cannot use state.db and writes sessions to JSONL: {error}",
                key="",
                severity=None,
                now=now,
                rule="jsonl_fallback",
                error=error,
            )
        )
    for item in signals_from_record(record, target, cron=cron, now=now):
        # The fallback line already says the store failed; "locked" in it is its cause.
        if m is not None and isinstance(item, Signal) and item.fields.get("rule") == "locked":
            continue
        out.append(item)
    return out


def cron_sessions(record: LogRecord) -> list[str]:
    """The cron session ids (``cron_<job>_<YYYYmmdd_HHMMSS>``) a record names, in order."""
    found: list[str] = []
    if "cron_" not in record.message and not (record.session or "").startswith("cron_"):
        return found
    for text in (record.session or "", record.message):
        for m in _CRON_RE.finditer(text):
            if m.group(0) not in found:
                found.append(m.group(0))
    return found


class CronSessions:
    """Which cron session ids were seen already (bounded; oldest forgotten first)."""

    def __init__(self, remember: int = CRON_SESSIONS_REMEMBERED) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._remember = remember

    def __contains__(self, session: object) -> bool:
        return session in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def observe(
        self, record: LogRecord, target: Target, now: float | None = None
    ) -> list[Observation]:
        """A ``cron_started`` observation per cron session id not seen before."""
        out = []
        for session in cron_sessions(record):
            if session in self._seen:
                self._seen.move_to_end(session)
                continue
            self._seen[session] = None
            while len(self._seen) > self._remember:
                self._seen.popitem(last=False)
            m = _CRON_RE.fullmatch(session)
            job = m["job"] if m else session
            at = record.timestamp
            if at is None:
                at = time.time() if now is None else now
            out.append(
                Observation(
                    what="cron_started",
                    db=str(target.db),
                    text=f"cron job {job} started (session {session})",
                    at=at,
                    fields={"session": session, "job": job, "source": _source(record)},
                )
            )
        return out
