"""The lines Hermes logs about its database that are deliberately no signal, and why.

docs/safety.md rule 17: every line Hermes' state layer and gateway log about the
database is either turned into a signal by ``watch/rules.py`` or listed here with the
reason. ``tests/watch/test_hermes_lines.py`` reads the log and print texts of every
installed Hermes (0.19.0 and 0.22.2.post1) from its source and fails, naming the text,
its module and line, for one that is neither: a Hermes release that adds a line fails
that test until the line gets a rule or an entry here. It also fails for an entry a rule
matches (a contradiction) or no installed Hermes logs any more (a stale entry).

``IgnoredLine.text`` is a stable part of Hermes' format string (a plain substring of it,
``%s`` and f-string fields left as Hermes wrote them), never the whole sentence;
``modules`` are the files (relative to site-packages) that log it, in any installed
release. ``UnreadCall`` names a log call whose text the source does not tell (the text is
built elsewhere at run time), by its module and the source of its text argument.

Data only: nothing here is consulted while the daemon runs (a line no rule matches
simply gives no signal).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IgnoredLine:
    """A text Hermes logs about its database that is deliberately no signal."""

    text: str  # a stable part of the format string
    modules: tuple[str, ...]  # the Hermes modules that log it (relative to site-packages)
    reason: str


@dataclass(frozen=True)
class UnreadCall:
    """A Hermes log call whose text is not in its source, and why it is no signal."""

    module: str
    expression: str  # the source of the call's text argument
    reason: str


# Reasons shared by several lines.
QUOTES_ERROR = (
    "names the step that failed and quotes the error: a corruption, I/O or 'database is "
    "locked' error in it is a signal of the generic rules; the step failing alone loses no "
    "row"
)
WORKED = "a step that worked (or a note of routine housekeeping): nothing to report"
ROW_DECODE = (
    "one column of one row is not the JSON Hermes expects; Hermes reads the row with a "
    "default and loses nothing. Damage to stored bytes is found by statewarden's own "
    "verification (daemon/verify.py), not by this line"
)
NOT_STATE_DB = "about another file or lock than state.db"
COMPRESSION_LOCK = (
    "the compression lock is a row in state.db that serialises context compression of one "
    "session, not a SQLite lock; a SQLite error in the line is read by the generic rules"
)
FTS_DEFERRED = (
    "a stale (not corrupt) full-text index waits for its rebuild; writes and LIKE search go "
    "on and nothing is lost. When waiting becomes futile Hermes says 'FTS repair has been "
    "blocked' (a self_repair signal)"
)
REPAIR_STEP = (
    "one step of Hermes' escalating repair; its outcome ('repaired via ...', 'could not "
    "recover', 'repair skipped') is the signal"
)
REPAIR_LOCK = (
    "the repair it skips was announced by 'schema is malformed' (self_repair) and the damage "
    "by the corruption rules; another process holding the repair lock is doing the repair"
)
SEARCH_BUILD = (
    "the SQLite build lacks a search feature (FTS5, trigram, the CJK tokenizer): search is "
    "slower or narrower, state.db is unharmed"
)
FOLLOWS_QUARANTINE = (
    "follows the line that quarantined the handle (structural corruption, a replaced file or "
    "a deleted WAL generation), which is the signal"
)
CONFIG = "about Hermes' own configuration, not the database's state"
TRANSCRIPT_KEPT = (
    "Hermes keeps the stored transcript unchanged on purpose (a compression or hygiene step "
    "that did not apply): nothing is lost"
)
TRANSCRIPTION = "speech-to-text of voice messages ('transcript' in another sense)"
SPOOL_KEPT = (
    "the spooled messages stay in pending_messages/ for the next start, which the files "
    "watcher reports (recovery_files); nothing is dropped"
)
GATEWAY_ONE_PER_HOST = (
    "the gateway's host and runtime locks (one gateway per host), not a lock on state.db"
)
STATE_OF_THE_GATEWAY = (
    "the gateway's own status and settings files, not state.db: losing them loses no message"
)

_S = "hermes_state.py"

IGNORED_LINES: tuple[IgnoredLine, ...] = (
    # -- the state layer ------------------------------------------------------------------
    IgnoredLine("SQLite trigram tokenizer unavailable", (_S, "hermes_state_fts.py"), SEARCH_BUILD),
    IgnoredLine("SQLite FTS5 unavailable for", (_S, "hermes_state_fts.py"), SEARCH_BUILD),
    IgnoredLine("fts5_cjk extension load failed", ("hermes_state_fts.py",), SEARCH_BUILD),
    IgnoredLine("messages_fts_cjk presence check failed", ("hermes_state_fts.py",), SEARCH_BUILD),
    IgnoredLine("messages_fts_cjk ensure failed", ("hermes_state_fts.py",), SEARCH_BUILD),
    IgnoredLine(
        "the cjk_unicode61 tokenizer is unavailable", ("hermes_state_fts.py",), SEARCH_BUILD
    ),
    IgnoredLine(
        "CJK FTS UPDATE trigger missing or still broad", ("hermes_state_schema.py",), SEARCH_BUILD
    ),
    IgnoredLine(
        "CJK FTS re-ensure after UPDATE OF migration failed",
        ("hermes_state_schema.py",),
        SEARCH_BUILD,
    ),
    IgnoredLine(
        "FTS indexes rebuilt in place (%d); retrying the failed write",
        (_S,),
        "0.19.0's in-place FTS rebuild worked; it follows 'write failed with an FTS-corruption "
        "error', which is the self_repair signal",
    ),
    IgnoredLine("FTS in-place rebuild pass failed", (_S, "hermes_state_repair.py"), REPAIR_STEP),
    IgnoredLine("dedup repair pass failed", (_S, "hermes_state_repair.py"), REPAIR_STEP),
    IgnoredLine("REINDEX pass failed", ("hermes_state_repair.py",), REPAIR_STEP),
    IgnoredLine(
        "repair promotion failed",
        ("hermes_state_repair.py",),
        "always followed by 'schema repair could not recover', the self_repair signal",
    ),
    IgnoredLine(
        "WAL checkpoint (PASSIVE) failed",
        (_S,),
        QUOTES_ERROR + "; a WAL that keeps growing is the files watcher's wal_growth",
    ),
    IgnoredLine("_compression_failure_cooldown(%s) failed", (_S,), COMPRESSION_LOCK),
    IgnoredLine(
        "compression_lock(%s) failed", (_S, "hermes_state_compression.py"), COMPRESSION_LOCK
    ),
    IgnoredLine(
        "Reclaimed stale compression lock", ("hermes_state_compression.py",), COMPRESSION_LOCK
    ),
    IgnoredLine(
        "compression cooldown rollback session missing",
        ("hermes_state_compression.py",),
        COMPRESSION_LOCK,
    ),
    IgnoredLine(
        "carried a stale %r end stamp",
        ("hermes_state_compression.py",),
        "Hermes cleared a stale end stamp of one session row itself: " + WORKED,
    ),
    IgnoredLine(
        "message-alternation violation(s) while restoring session",
        (_S, "hermes_state_messages.py"),
        "Hermes kept a transcript whose roles do not alternate (INFO): " + WORKED,
    ),
    IgnoredLine("stale tool-call marker", (_S, "hermes_state_messages.py"), WORKED),
    IgnoredLine(
        "Backed up state.db to %s before clean-markers write", ("hermes_state_messages.py",), WORKED
    ),
    IgnoredLine(
        "FTS optimize before VACUUM failed", (_S, "hermes_state_maintenance.py"), QUOTES_ERROR
    ),
    IgnoredLine("state.db VACUUM failed", (_S, "hermes_state_maintenance.py"), QUOTES_ERROR),
    IgnoredLine("VACUUM after FTS optimize failed", ("hermes_state_search.py",), QUOTES_ERROR),
    IgnoredLine(
        "state.db auto-maintenance failed", (_S, "hermes_state_maintenance.py"), QUOTES_ERROR
    ),
    IgnoredLine("state.db auto-maintenance: ", (_S, "hermes_state_maintenance.py"), WORKED),
    IgnoredLine(
        "state.db auto-maintenance skipped: sessions.retention_days",
        ("hermes_state_maintenance.py",),
        CONFIG,
    ),
    IgnoredLine("state.db auto-archive: archived", ("hermes_state_sessions.py",), WORKED),
    IgnoredLine("state.db auto-archive failed", ("hermes_state_sessions.py",), QUOTES_ERROR),
    IgnoredLine(
        "Renamed duplicate user session title",
        ("hermes_state_schema.py",),
        "two sessions had the same title; Hermes renamed one title (no message is touched)",
    ),
    IgnoredLine(
        "Cleared duplicate %s session title",
        ("hermes_state_schema.py",),
        "two sessions had the same title; Hermes cleared one title (no message is touched)",
    ),
    IgnoredLine(
        "duplicate session title(s) while restoring",
        (_S,),
        "two sessions had the same title; Hermes renamed or cleared one title (no message is "
        "touched)",
    ),
    IgnoredLine(
        "Could not repair duplicate session titles",
        (_S, "hermes_state_schema.py"),
        "a unique index on session titles is not created: titles may repeat, no row is lost",
    ),
    IgnoredLine(
        "Failed to decode JSON-encoded message content", (_S, "hermes_state_common.py"), ROW_DECODE
    ),
    IgnoredLine("Failed to deserialize ", (_S, "hermes_state_common.py"), ROW_DECODE),
    IgnoredLine(
        "display metadata", ("hermes_state_common.py", "hermes_state_messages.py"), ROW_DECODE
    ),
    IgnoredLine(
        "Ignoring malformed codex_reasoning_items", ("hermes_state_common.py",), ROW_DECODE
    ),
    IgnoredLine("FTS optimize failed for", (_S, "hermes_state_search.py"), QUOTES_ERROR),
    IgnoredLine(
        "FTS rebuild failed for %s: %s",
        (_S, "hermes_state_search.py"),
        QUOTES_ERROR + "; a rebuild failing on corruption says 'corruption-class error' (a "
        "self_repair signal)",
    ),
    IgnoredLine(
        "was closed while a %s was still in flight",
        (_S,),
        "a teardown race Hermes handles by reopening: " + WORKED,
    ),
    IgnoredLine("Retaining the quarantined connection", (_S,), FOLLOWS_QUARANTINE),
    IgnoredLine("close-time checkpoint on the quarantined handle", (_S,), FOLLOWS_QUARANTINE),
    IgnoredLine("this handle observed %s", (_S,), FOLLOWS_QUARANTINE),
    IgnoredLine("%s close failed for %s", (_S,), QUOTES_ERROR),
    IgnoredLine(
        "startup quarantine lock for %s not acquired",
        (_S,),
        "Hermes goes on opening state.db; a file it finds invalid is then the "
        "'state.db was empty or damaged' signal",
    ),
    IgnoredLine(
        "FTS rebuild lock",
        ("hermes_state_common.py",),
        FTS_DEFERRED,
    ),
    IgnoredLine(
        "is held by an orphaned file descriptor",
        ("hermes_state_common.py",),
        "Hermes broke one of its own lock files left by a dead process and took it again: "
        + WORKED,
    ),
    IgnoredLine("deferring rather than waiting out", ("hermes_state_common.py",), FTS_DEFERRED),
    IgnoredLine("Could not break stale %s %s", ("hermes_state_common.py",), FTS_DEFERRED),
    IgnoredLine(
        "deleted-WAL holder scan timed out",
        ("hermes_state_dbfile.py",),
        "Hermes' own scan for holders of a deleted WAL gave up; statewarden's holder scan "
        "(stale_holder) does the same work completely",
    ),
    IgnoredLine(
        "quarantine_invalid_state_db: ",
        ("hermes_state_dbfile.py",),
        "another Hermes process moved the invalid file aside first; that process logs 'state.db "
        "was empty or damaged' (sessions_vanished)",
    ),
    IgnoredLine(
        "refusing to quarantine without the cross-process lock",
        ("hermes_state_dbfile.py",),
        "followed by 'state.db was empty or damaged ... left in place' (sessions_vanished)",
    ),
    IgnoredLine(
        "Failed to quarantine invalid",
        ("hermes_state_dbfile.py",),
        "followed by 'state.db was empty or damaged ... left in place' (sessions_vanished)",
    ),
    IgnoredLine(
        "Dropped orphan FTS5 shadow tables",
        ("hermes_state_fts.py",),
        "leftovers of a dropped full-text index, recreated from the messages: no user data",
    ),
    IgnoredLine(
        "reclaim_stale_running_handoffs failed",
        ("hermes_state_gateway.py",),
        "handoff rows between gateways stay as they were; no message is touched",
    ),
    IgnoredLine(
        "deferring structural maintenance",
        ("hermes_state_holders.py",),
        "Hermes puts off VACUUM or repair because it cannot prove it is alone; statewarden's "
        "holder scan says who holds the file",
    ),
    IgnoredLine(
        "adoption of %s did not complete",
        ("hermes_state_portability.py",),
        "importing another copy's sessions: the donor copy is kept as it was when the import "
        "does not complete",
    ),
    IgnoredLine(
        "adoption divergence",
        ("hermes_state_portability.py",),
        "importing another copy's sessions: a donor that differs is kept, not retired",
    ),
    IgnoredLine(
        "failed to retire donor segment",
        ("hermes_state_portability.py",),
        "the donor profile's copy is kept",
    ),
    IgnoredLine("auto-maintenance lock %s", ("hermes_state_repair.py",), REPAIR_LOCK),
    IgnoredLine("Could not open state.db repair lock", ("hermes_state_repair.py",), REPAIR_LOCK),
    IgnoredLine("Could not acquire state.db repair lock", ("hermes_state_repair.py",), REPAIR_LOCK),
    IgnoredLine("repair lock %s held by another process", ("hermes_state_repair.py",), REPAIR_LOCK),
    IgnoredLine("Could not bump state.db schema cookie", ("hermes_state_repair.py",), REPAIR_STEP),
    IgnoredLine(
        "Could not update state.db repair ledger",
        ("hermes_state_repair.py",),
        "the attempt count of Hermes' repair (state.db.repair-attempts.json) is not updated; "
        "the repair outcome is the signal",
    ),
    IgnoredLine(
        "preflight: repaired read-only",
        ("hermes_state_repair.py",),
        "Hermes made its own file writable again: " + WORKED,
    ),
    IgnoredLine("state.db repair changed journal_mode", ("hermes_state_repair.py",), REPAIR_STEP),
    IgnoredLine(
        "post-surgery journal-mode restore failed", ("hermes_state_repair.py",), REPAIR_STEP
    ),
    IgnoredLine(
        "Could not remove state.db repair snapshot", ("hermes_state_repair.py",), REPAIR_STEP
    ),
    IgnoredLine(
        "Could not prune stale DB backup",
        ("hermes_state_repair.py",),
        "an old state.db.malformed-backup-* stays on disk",
    ),
    IgnoredLine("Reusing existing forensic backup", ("hermes_state_repair.py",), REPAIR_STEP),
    IgnoredLine("Migrated %d broad FTS UPDATE trigger(s)", ("hermes_state_schema.py",), WORKED),
    IgnoredLine("Deferred stale state.db FTS rebuild", ("hermes_state_schema.py",), FTS_DEFERRED),
    IgnoredLine("Deferred startup FTS rebuild", ("hermes_state_schema.py",), FTS_DEFERRED),
    IgnoredLine("Deferred in-place FTS rebuild", ("hermes_state_search.py",), FTS_DEFERRED),
    IgnoredLine(
        "retry of the deferred stale state.db FTS rebuild failed",
        ("hermes_state_schema.py",),
        FTS_DEFERRED,
    ),
    IgnoredLine(
        "Automatic rebuild of stale FTS indexes failed", ("hermes_state_schema.py",), FTS_DEFERRED
    ),
    IgnoredLine("Rebuilt stale state.db FTS indexes", ("hermes_state_schema.py",), WORKED),
    IgnoredLine(
        "Reaped inactive orphan Desktop backend(s)",
        ("hermes_state_schema.py",),
        "Hermes stopped its own orphaned Desktop backends that held the file; the holder "
        "watcher sees them leave",
    ),
    IgnoredLine(
        "has legacy primary key", ("hermes_state_schema.py",), "a schema migration: " + WORKED
    ),
    IgnoredLine(
        "prompt dedupe paused after contention",
        ("hermes_state_schema.py",),
        "a schema migration paused for other writers; it resumes at the next open",
    ),
    IgnoredLine(
        "store remains behind SCHEMA_SQL",
        ("hermes_state_schema.py",),
        QUOTES_ERROR + "; the schema statewarden knows is read from the file itself",
    ),
    IgnoredLine("Deferred FTS rebuild complete", ("hermes_state_search.py",), WORKED),
    IgnoredLine("CJK FTS index backfill complete", ("hermes_state_search.py",), WORKED),
    IgnoredLine("FTS storage optimization complete", ("hermes_state_search.py",), WORKED),
    IgnoredLine("Old FTS shadow table %s torn down", ("hermes_state_search.py",), WORKED),
    IgnoredLine(
        "FTS storage optimization did not settle",
        ("hermes_state_search.py",),
        "hermes sessions optimize-storage left work for its next run; the index stays usable",
    ),
    IgnoredLine(
        "FTS storage optimization settle refused", ("hermes_state_search.py",), FTS_DEFERRED
    ),
    IgnoredLine(
        "FTS incremental merge failed after commit", ("hermes_state_search.py",), QUOTES_ERROR
    ),
    IgnoredLine(
        "slow session search", ("hermes_state_search.py",), "a slow search (timing), not a fault"
    ),
    IgnoredLine(
        "telegram topic tables are pre-v3",
        ("hermes_state_telegram.py",),
        "Telegram topic mapping reads as empty; no message is touched",
    ),
    IgnoredLine(
        "async token accounting",
        ("hermes_state_usage.py",),
        "token usage counters (session_model_usage), not messages: a lost delta is a count",
    ),
    IgnoredLine(
        "both WAL and DELETE journal_mode failed",
        ("hermes_state_wal.py",),
        "the connection keeps the file's journal mode and works; statewarden's status reads "
        "the journal mode from the file",
    ),
    IgnoredLine(
        "database directory is on a cross-VM filesystem",
        ("hermes_state_wal.py",),
        "a new database on virtiofs/9p is created in DELETE mode, which is safe there; an "
        "existing WAL one says 'existing WAL-mode database' (unsafe_mount)",
    ),
    IgnoredLine("database.journal_mode=delete is configured", ("hermes_state_wal.py",), CONFIG),
    IgnoredLine(
        "has been switched to WAL",
        ("hermes_state_wal.py",),
        "a DELETE-mode file became WAL on open, as configured; on a SQLite with the WAL-reset "
        "bug the gate says so itself (wal_reset_bug)",
    ),
    IgnoredLine("database.synchronous=", ("hermes_state_wal.py",), CONFIG),
    IgnoredLine("ignoring non-integer database.", ("hermes_state_wal.py",), CONFIG),
    # -- the gateway --------------------------------------------------------------------------
    IgnoredLine(
        "kanban dispatcher: ",
        ("gateway/kanban_watchers.py", "gateway/kanban_watchers_dispatcher.py"),
        NOT_STATE_DB + ": the kanban board's own database (kanban.db) and dispatcher lock",
    ),
    IgnoredLine(
        "[pairing] Platform {} locked out",
        ("gateway/pairing.py",),
        NOT_STATE_DB + ": chat pairing attempts",
    ),
    IgnoredLine(
        "Session storage: %s",
        ("gateway/run.py", "gateway/run_startup.py"),
        "names the sessions folder at start-up",
    ),
    IgnoredLine(
        "persisted /model override",
        ("gateway/run.py", "gateway/run_agent_cache.py"),
        STATE_OF_THE_GATEWAY,
    ),
    IgnoredLine("Gateway runtime lock is already held", ("gateway/run.py",), GATEWAY_ONE_PER_HOST),
    IgnoredLine("Host gateway lock could not be opened", ("gateway/run.py",), GATEWAY_ONE_PER_HOST),
    IgnoredLine("already owns this host", ("gateway/run.py",), GATEWAY_ONE_PER_HOST),
    IgnoredLine("Released %d stale scoped lock(s)", ("gateway/run.py",), GATEWAY_ONE_PER_HOST),
    IgnoredLine("SessionDB close done", ("gateway/run.py", "gateway/run_shutdown.py"), WORKED),
    IgnoredLine(
        "skipping the SessionDB close/checkpoint",
        ("gateway/run_shutdown.py",),
        "the gateway leaves its handles open for a live writer; SQLite recovers the WAL at the "
        "next open and nothing is lost",
    ),
    IgnoredLine("voice transcript", ("gateway/run.py", "gateway/run_voice.py"), TRANSCRIPTION),
    IgnoredLine(
        "transcription failed", ("gateway/run.py", "gateway/run_inbound.py"), TRANSCRIPTION
    ),
    IgnoredLine(
        "Voice transcription failed", ("gateway/run.py", "gateway/run_inbound.py"), TRANSCRIPTION
    ),
    IgnoredLine("Transcription error", ("gateway/run.py", "gateway/run_inbound.py"), TRANSCRIPTION),
    IgnoredLine("Transcription module unavailable", ("gateway/run_inbound.py",), TRANSCRIPTION),
    IgnoredLine("while reading lock holder for session", ("gateway/run.py",), COMPRESSION_LOCK),
    IgnoredLine(
        "the compression lock is held by a concurrent compressor",
        ("gateway/run_turn.py",),
        COMPRESSION_LOCK,
    ),
    IgnoredLine(
        "Process checkpoint recovery",
        ("gateway/run.py", "gateway/run_shutdown.py", "gateway/run_startup.py"),
        NOT_STATE_DB + ": background process checkpoints (processes.json)",
    ),
    IgnoredLine(
        "persisting gateway_state=running",
        ("gateway/run.py", "gateway/run_shutdown.py"),
        STATE_OF_THE_GATEWAY,
    ),
    IgnoredLine(
        "session lock released",
        ("gateway/run.py", "gateway/run_busy.py"),
        "a /stop released the session's in-memory turn lock",
    ),
    IgnoredLine(
        "Skipping transcript persistence for context-overflow failure",
        ("gateway/run.py", "gateway/run_turn.py"),
        "Hermes does not store a failed turn on purpose (to stop a growth loop)",
    ),
    IgnoredLine(
        "persisting user message so conversation context is preserved",
        ("gateway/run.py", "gateway/run_turn.py"),
        WORKED,
    ),
    IgnoredLine(
        "Failed to persist destructive_slash_confirm",
        ("gateway/run.py", "gateway/run_busy.py"),
        STATE_OF_THE_GATEWAY,
    ),
    IgnoredLine(
        "Could not persist destructive_slash_confirm",
        ("gateway/run_busy.py",),
        STATE_OF_THE_GATEWAY,
    ),
    IgnoredLine(
        "Failed to persist model switch",
        ("gateway/slash_commands.py", "gateway/slash_commands_model.py"),
        STATE_OF_THE_GATEWAY,
    ),
    IgnoredLine(
        "Failed to persist mcp_reload_confirm", ("gateway/slash_commands.py",), STATE_OF_THE_GATEWAY
    ),
    IgnoredLine(
        "legacy env persistence failed", ("gateway/slash_commands.py",), STATE_OF_THE_GATEWAY
    ),
    IgnoredLine(
        "Failed to clear persisted session model override",
        ("gateway/slash_commands_model.py",),
        STATE_OF_THE_GATEWAY,
    ),
    IgnoredLine(
        "Failed to clear persisted yolo", ("gateway/run_agent_cache.py",), STATE_OF_THE_GATEWAY
    ),
    IgnoredLine(
        "gateway runtime status",
        ("gateway/run_startup.py", "gateway/status.py"),
        STATE_OF_THE_GATEWAY,
    ),
    IgnoredLine(
        "Gateway runtime-status persistence recovered", ("gateway/status.py",), STATE_OF_THE_GATEWAY
    ),
    IgnoredLine("Planned-stop checkpoint skipped", ("gateway/status.py",), STATE_OF_THE_GATEWAY),
    IgnoredLine(
        "Could not persist active-turn marker", ("gateway/run_inbound.py",), STATE_OF_THE_GATEWAY
    ),
    IgnoredLine(
        "is ended in state.db",
        ("gateway/run.py", "gateway/run_turn_runner.py", "gateway/session.py"),
        "the gateway's routing pointed at a session state.db marks ended; it recovers the "
        "route itself",
    ),
    IgnoredLine(
        "is ended (reaped) in state.db",
        ("gateway/run_inbound.py",),
        "the gateway heals a route to an ended session itself",
    ),
    IgnoredLine(
        "Backup interrupt detected",
        ("gateway/run.py", "gateway/run_turn.py"),
        "an interrupted turn ('backup' monitor task), not a database backup",
    ),
    IgnoredLine(
        "preserving the original transcript instead of overwriting it",
        ("gateway/run.py", "gateway/run_turn.py"),
        TRANSCRIPT_KEPT,
    ),
    IgnoredLine(
        "preserving original transcript instead of overwriting",
        ("gateway/slash_commands.py", "gateway/slash_commands_session.py"),
        TRANSCRIPT_KEPT,
    ),
    IgnoredLine(
        "keeping the original transcript unchanged", ("gateway/run_turn.py",), TRANSCRIPT_KEPT
    ),
    IgnoredLine("the stored transcript is unchanged", ("gateway/run_turn.py",), TRANSCRIPT_KEPT),
    IgnoredLine(
        "failed to persist compressed transcript for rotated session",
        ("gateway/run_turn.py",),
        TRANSCRIPT_KEPT + " (the live entry stays on the original session)",
    ),
    IgnoredLine(
        "Gateway session DB recovery ignored",
        ("gateway/session.py", "gateway/session_recovery.py"),
        "a row of another profile is left alone, as configured",
    ),
    IgnoredLine(
        "imported %d legacy sessions.json",
        ("gateway/session.py", "gateway/session_persistence.py"),
        WORKED,
    ),
    IgnoredLine(
        "sessions.json mirror save failed after state.db commit",
        ("gateway/session_persistence.py",),
        "state.db has the routing; only its sessions.json mirror is behind",
    ),
    IgnoredLine(
        "turn lease",
        ("gateway/turn_lease.py",),
        "the gateway's in-memory turn serialisation of one session (a stuck turn), not a "
        "SQLite lock",
    ),
    IgnoredLine(
        "after turn-lease timeout; transcript load was not started",
        ("gateway/run_inbound.py",),
        "a turn refused because another turn of the session is stuck (the user resends): "
        "nothing reached or left state.db",
    ),
    IgnoredLine("SQLite session store recovered", ("gateway/run.py",), WORKED),
    IgnoredLine("Deferred state.db FTS rebuild completed in-process", ("gateway/run.py",), WORKED),
    IgnoredLine(
        "blocked on un-flushed persistence",
        ("gateway/run_agent_cache.py",),
        "memory pressure of the agent cache",
    ),
    IgnoredLine("session DB warm-up failed", ("gateway/run_goals.py",), QUOTES_ERROR),
    IgnoredLine(
        "Async delegation",
        ("gateway/run_notifications.py",),
        "delivery of a delegated task's result; " + QUOTES_ERROR,
    ),
    IgnoredLine("async delegation completion persisted", ("gateway/wake.py",), WORKED),
    IgnoredLine(
        "Async-delegation completion has no session database",
        ("gateway/run_notifications_ownership.py",),
        "follows the gateway's own 'SQLite session store not available' (a signal)",
    ),
    IgnoredLine(
        "state.db warning notification failed",
        ("gateway/run_notifications.py",),
        "the chat notice about a state.db failure could not be sent; the failure itself is "
        "the 'Broadcasting state.db failure warning' signal",
    ),
    IgnoredLine(
        "state.db recovered before the home-channel warning",
        ("gateway/run_notifications.py",),
        WORKED,
    ),
    IgnoredLine("scale-to-zero: ignoring malformed", ("gateway/scale_to_zero.py",), CONFIG),
    IgnoredLine(
        "Skipping Session DB FTS rebuild while foreign processes hold",
        ("gateway/session_transcript.py",),
        FTS_DEFERRED,
    ),
    IgnoredLine("Failed to drain transcript spool", ("gateway/session_transcript.py",), SPOOL_KEPT),
    IgnoredLine(
        "Held back %d spooled transcript file(s)", ("gateway/shutdown_flush.py",), SPOOL_KEPT
    ),
    IgnoredLine(
        "Cannot recover structurally invalid transcript spool file",
        ("gateway/shutdown_flush.py",),
        "a spool file Hermes cannot parse is kept for inspection (recovery_files)",
    ),
    IgnoredLine(
        "Removing structurally invalid transcript spool file",
        ("gateway/shutdown_flush.py",),
        "a spool file that holds no message Hermes can parse: no message it could write",
    ),
    IgnoredLine(
        "Replayed %d spooled transcript message(s)", ("gateway/shutdown_flush.py",), WORKED
    ),
    IgnoredLine(
        "could not be deleted (%s); delete it by hand",
        ("gateway/shutdown_flush.py",),
        "the row reached state.db; only its spool file stays behind (a later start writes "
        "the row again: a duplicate, not a loss)",
    ),
    IgnoredLine(
        "Transcript read failed for session",
        ("gateway/session_transcript.py",),
        QUOTES_ERROR + " (Hermes refuses to treat the session as empty)",
    ),
    # -- the agent's session writes ----------------------------------------------------------
    IgnoredLine(
        "was removed under the live agent; recreated it",
        ("agent/session_persistence.py",),
        "Hermes recreated the session row and replays its transcript: " + WORKED,
    ),
)

UNREAD_CALLS: tuple[UnreadCall, ...] = (
    UnreadCall(
        "hermes_state_compression.py",
        "'%s(%s) failed: %s'",
        COMPRESSION_LOCK + " (the text is only the method's name and the error)",
    ),
    UnreadCall(
        "gateway/config_env.py",
        "self.warn_missing[1]",
        CONFIG + ": a chat platform's missing credential",
    ),
    UnreadCall("gateway/run.py", "decision.message", GATEWAY_ONE_PER_HOST),
    UnreadCall("gateway/run.py", "f'Error: {exc}'", CONFIG + ": config.yaml cannot be parsed"),
    UnreadCall(
        "gateway/run.py",
        "problem",
        "the Python runtime of the install (venv sync), not the database",
    ),
    UnreadCall("gateway/run.py", "'curator: %s'", "the skills curator's summary"),
    UnreadCall(
        "gateway/run.py",
        "'%s'",
        "a line the gateway passes through (security advisories, tool call logs)",
    ),
    UnreadCall(
        "gateway/run.py", "'✗ %s error: %s'", "a chat platform adapter that failed to connect"
    ),
    UnreadCall(
        "gateway/run_startup.py",
        "_line",
        "unserved shared-ingress chat platforms (a config problem)",
    ),
    UnreadCall(
        "gateway/run_startup.py", "'%s'", "a security advisory of the install, passed through"
    ),
    UnreadCall(
        "gateway/run_startup.py",
        "'✗ %s error: %s'",
        "a chat platform adapter that failed to connect",
    ),
    UnreadCall(
        "gateway/run_startup.py", "'Profile %s: %s'", CONFIG + ": a retired session-reset policy"
    ),
    UnreadCall("gateway/run_turn.py", "*ok", "a delivery of a reply to a chat"),
    UnreadCall("gateway/run_turn.py", "'%s'", "the tool-call log of a turn, passed through"),
    UnreadCall(
        "gateway/wake.py",
        "'%s; attempt %d/%d'",
        "an HTTP 429 of the wake self-post, not the database",
    ),
)
