"""The rules about holders and locks: a process holding a replaced state.db or a deleted
-wal/-shm, writers waiting for the write lock (and who holds it), duplicate writers in
one process, and Hermes' WAL lock guard."""

from __future__ import annotations

import re
from typing import Any

from statewarden.watch.rule import is_target_db, rule

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


DB_REPLACED = rule(
    "db_replaced",
    r"FATAL: state\.db was replaced underneath the gateway",
    "stale_holder",
    "critical",
    "state.db was replaced while the gateway had it open; it stopped writing",
    key="db_replaced",
)

# DeletedWalGenerationError (hermes_state_errors._DELETED_WAL_GENERATION_MSG, both
# wordings Hermes has shipped, and the exception's name in a traceback).
DELETED_SIDECAR = rule(
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
)

WRITE_LOCK_HOLDERS = rule(
    "write_lock_holders",
    r"state\.db write lock unavailable for (?P<waited>[\d.]+)s \([^)]*\): (?P<holders>.*)",
    "write_failures",
    "warning",
    "a Hermes writer waited {waited}s for the state.db write lock: {holders}",
    key="write_lock",
    more_fields=_lock_holder_fields,
)

DUPLICATE_WRITERS = rule(
    "duplicate_writers",
    r"(?P<count>\d+) live SessionDB handles on (?P<label>\S+) in this process",
    "duplicate_writers",
    "warning",
    "one Hermes process holds {count} writer connections on {label}: duplicate writers "
    "in one process come before lock storms and WAL damage",
    key="handles",
    applies=is_target_db,
)

JOURNAL_PROBE_LOCKED = rule(
    "journal_probe_locked",
    r"(?P<label>\S+): could not verify the on-disk journal mode \(database is locked",
    "write_failures",
    "warning",
    "a Hermes process found {label} locked as it opened it (another connection holds it) "
    "and left its journal mode as it was",
    key="locked",
    applies=is_target_db,
)

# hermes_state_lockguard: the OFD-lock guard on SQLite's own descriptors.
LOCK_GUARD_REFUSED = rule(
    "lock_guard_refused",
    r"WAL lock guard could not arm (?P<missing>\d+) of "
    r"(?P<ranges>\d+) ranges for (?P<label>\S+) — refusing to run",
    "lock_guard",
    "error",
    "a Hermes writer refused to run: its WAL lock guard could not arm {missing} of "
    "{ranges} ranges on {label} (WalGuardArmedIncompleteError)",
    key="refused",
    applies=is_target_db,
    anywhere=True,
)

LOCK_GUARD_INCOMPLETE = rule(
    "lock_guard_incomplete",
    r"WAL lock guard incomplete for (?P<label>\S+): "
    r"(?P<missing>\d+) of (?P<ranges>\d+) guard range",
    "lock_guard",
    "warning",
    "a Hermes writer left {missing} of {ranges} WAL lock-guard ranges on {label} unarmed "
    "(a foreign EXCLUSIVE holder or a lock failure): its WAL generation is partly "
    "unguarded",
    key="incomplete",
    applies=is_target_db,
)

LOCK_GUARD_FAILED = rule(
    "lock_guard_failed",
    r"WAL lock guard failed to arm for (?P<label>\S+) \(OSError",
    "lock_guard",
    "warning",
    "a Hermes writer could not arm its WAL lock guard on {label} (OSError while "
    "locking): its WAL generation may be unguarded",
    key="failed",
    applies=is_target_db,
)
