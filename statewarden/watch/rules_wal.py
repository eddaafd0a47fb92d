"""The rules about WAL and the journal mode: a filesystem WAL is unsafe or unsupported
on, Hermes' SQLite with the WAL-reset bug, and WAL generations deleted or replaced under
a Hermes handle (its frames captured, or lost)."""

from __future__ import annotations

from statewarden.watch.rule import is_target_db, rule

CROSS_VM_WAL = rule(
    "cross_vm_wal",
    r"existing WAL-mode database is on a cross-VM filesystem",
    "unsafe_mount",
    "error",
    "state.db is a WAL database on a cross-VM filesystem (locks are not coherent there)",
    key="cross_vm",
)

RETIRED_WAL_CAPTURED = rule(
    "retired_wal_captured",
    r"Captured the retired WAL generation of (?P<label>\S+) at (?P<trigger>\w+) to "
    r"(?P<capture>.+?); ",
    "stale_holder",
    "error",
    "a Hermes handle's WAL generation was deleted or replaced under it; its frames were "
    "captured to {capture} and are not in state.db (read its manifest.json)",
    key="deleted_sidecar",
)

RETIRED_WAL_LOST = rule(
    "retired_wal_lost",
    r"Could not capture the retired WAL generation of (?P<label>\S+) at (?P<trigger>\w+)"
    r"|SessionDB for (?P<other>\S+) did not settle at close",
    "stale_holder",
    "critical",
    "a Hermes handle's WAL generation was deleted or replaced and Hermes could not "
    "capture its frames: those writes are not preserved yet ({rest})",
    key="deleted_sidecar",
)

RETIRED_WAL_CHECKPOINT_SKIPPED = rule(
    "retired_wal_checkpoint_skipped",
    r"WAL/SHM generation was deleted or replaced; the retired generation is captured at "
    r"(?P<capture>.+?)\. ",
    "stale_holder",
    "error",
    "a Hermes handle's WAL generation was deleted or replaced; it skipped its close-time "
    "checkpoint, the frames are captured at {capture}",
    key="deleted_sidecar",
)

WAL_FALLBACK = rule(
    "wal_fallback",
    r"(?P<label>\S+): WAL journal_mode unsupported on this filesystem "
    r"\((?P<error>.*?)\) — falling back to journal_mode=DELETE",
    "unsafe_mount",
    "warning",
    "state.db's filesystem does not support WAL; Hermes fell back to journal_mode=DELETE",
    key="wal_fallback",
    applies=is_target_db,
)

# The WAL-reset bug gate (SQLite 3.7.0 .. 3.51.2; fixed 3.51.3, backports 3.50.7, 3.44.6):
# hermes_state's _log_wal_reset_bug_once, the CLI's startup check (stderr, so the unit's
# journal) and the salvage lane's sqlite3 shell gate.
# The stable part is "<label>: linked SQLite <version> ... is vulnerable to the WAL-reset
# corruption bug"; 0.22 puts "(interpreter <path>)" between the two.
WAL_RESET_KEPT_WAL = rule(
    "wal_reset_kept_wal",
    r"(?P<label>\S+): linked SQLite (?P<version>\S+)\b[^—]*?is vulnerable "
    r"to the WAL-reset corruption bug.*?is already in WAL mode",
    "wal_reset_bug",
    "error",
    "Hermes' SQLite {version} has the WAL-reset bug and {label} stays in WAL mode: "
    "concurrent writers can corrupt it; upgrade to SQLite 3.51.3+ (or 3.50.7 / 3.44.6)",
    key="library",
    applies=is_target_db,
)

WAL_RESET_DELETE = rule(
    "wal_reset_delete",
    r"(?P<label>\S+): linked SQLite (?P<version>\S+)\b[^—]*?is vulnerable to "
    r"the WAL-reset corruption bug.*?using journal_mode=DELETE",
    "wal_reset_bug",
    "warning",
    "Hermes' SQLite {version} has the WAL-reset bug; {label} uses journal_mode=DELETE "
    "instead of WAL; upgrade to SQLite 3.51.3+ (or 3.50.7 / 3.44.6)",
    key="library",
    applies=is_target_db,
)

WAL_RESET_OTHER = rule(
    "wal_reset_other",
    r"(?P<label>\S+): linked SQLite (?P<version>\S+)\b[^—]*?is vulnerable to "
    r"the WAL-reset corruption bug",
    "wal_reset_bug",
    "warning",
    "Hermes' SQLite {version} has the WAL-reset bug ({label}: {rest}); upgrade to SQLite "
    "3.51.3+ (or 3.50.7 / 3.44.6)",
    key="library",
    applies=is_target_db,
)

WAL_RESET_STARTUP = rule(
    "wal_reset_startup",
    r"SQLite (?P<version>\S+) has the WAL-reset bug "
    r"\(https://sqlite\.org/wal\.html",
    "wal_reset_bug",
    "warning",
    "Hermes runs on SQLite {version}, which has the WAL-reset bug: existing WAL "
    "databases it opens are at risk; upgrade to SQLite 3.51.3+ (or 3.50.7 / 3.44.6)",
    key="library",
)

WAL_RESET_CLI = rule(
    "wal_reset_cli",
    r"sqlite3 CLI (?P<binary>\S+) reports version (?P<version>\S+), "
    r"which still carries the WAL-reset opener bug",
    "wal_reset_bug",
    "warning",
    "the sqlite3 shell {binary} ({version}) has the WAL-reset bug: Hermes refused it for "
    "salvage, and opening state.db with it while Hermes runs can split the WAL; install "
    "sqlite3 3.51.3+",
    key="cli",
)
