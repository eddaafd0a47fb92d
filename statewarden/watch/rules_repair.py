"""The rules about Hermes repairing state.db itself: repairs run, refused, given up or
blocked, backups it could not take, its full-text index detached or rebuilt, its schema
repaired."""

from __future__ import annotations

from statewarden.watch.rule import rule

REPAIR_EXHAUSTED = rule(
    "repair_exhausted",
    r"state\.db repair skipped: automatic repair has already failed (?P<times>\d+) times",
    "self_repair",
    "critical",
    "Hermes gave up repairing state.db: its automatic repair already failed {times} times "
    "on this file; manual recovery is needed",
    key="repair_exhausted",
)

REPAIR_BLOCKED_BY_WRITER = rule(
    "repair_blocked_by_writer",
    r"state\.db repair skipped: a live writer still holds state\.db",
    "self_repair",
    "error",
    "Hermes skipped repairing damaged state.db: a live writer still holds it "
    "(statewardenctl holders names it)",
    key="repair_skipped",
)

REPAIR_NOT_RUN = rule(
    "repair_not_run",
    r"state\.db repair (?P<verb>skipped|aborted): (?P<error>.*)",
    "self_repair",
    "error",
    "Hermes' repair of damaged state.db was {verb}: {error}",
    key=lambda m: f"repair_{m['verb']}",
)

REPAIRED = rule(
    "repaired",
    r"state\.db repaired via '(?P<strategy>[^']*)' and promoted"
    r"|state\.db (?:FTS indexes rebuilt in place \(schema preserved\)|schema repaired by"
    r"|B-tree indexes rebuilt via REINDEX)",
    "self_repair",
    "error",
    "Hermes repaired state.db itself ({rest}); rows it could not read may be gone",
    key="repaired",
)

BACKUP_REFUSED = rule(
    "backup_refused",
    r"Refusing (?:forensic backup of|to raw-copy \S+ for backup)"
    r"|Could not back up malformed DB",
    "self_repair",
    "error",
    "Hermes could not back up damaged state.db before repairing it: {rest}",
    key="backup_failed",
)

FTS_BLOCKED = rule(
    "fts_blocked",
    r"FTS repair (?:has been|remains) blocked",
    "self_repair",
    "error",
    "Hermes' rebuild of the state.db full-text index is blocked by other holders of the "
    "file: {rest}",
    key="fts_repair_blocked",
)

FTS_DETACH_FAILED = rule(
    "fts_detach_failed",
    r"Could not detach corrupt FTS indexes|FTS rebuild failed with a corruption-class error",
    "self_repair",
    "critical",
    "Hermes could not get past a corrupt state.db full-text index: {rest}",
    key="fts_rebuild_failed",
)

FTS_DETACHED = rule(
    "fts_detached",
    r"FTS indexes remain corrupt|FTS search hit a corruption error",
    "self_repair",
    "error",
    "state.db's full-text index is corrupt; Hermes detached it (search falls back to "
    "LIKE) until it is rebuilt",
    key="fts_detached",
)

SESSION_FTS_REBUILT = rule(
    "session_fts_rebuilt",
    r"Rebuilt (?P<count>\d+) Session DB FTS index\(es\) after append corruption",
    "self_repair",
    "warning",
    "a transcript append hit a corrupt full-text index; Hermes rebuilt {count} of them",
    key="fts_rebuild",
)

SESSION_FTS_REBUILD_FAILED = rule(
    "session_fts_rebuild_failed",
    r"Session DB FTS rebuild failed: (?P<error>.*)",
    "self_repair",
    "error",
    "Hermes' rebuild of a corrupt state.db full-text index failed: {error}",
    key="fts_rebuild_failed",
)

SCHEMA_MALFORMED = rule(
    "schema_malformed",
    r"state\.db schema is malformed \((?P<error>.*?)\) — attempting "
    r"automatic repair",
    "self_repair",
    "error",
    "state.db schema is malformed; Hermes is repairing it in place ({error})",
    key="schema_repair",
)

SCHEMA_UNRECOVERABLE = rule(
    "schema_unrecoverable",
    r"state\.db schema repair could not recover",
    "self_repair",
    "critical",
    "Hermes could not repair the state.db schema; manual repair needed",
    key="schema_repair_failed",
)

FTS_CORRUPTION = rule(
    "fts_corruption",
    r"state\.db write failed with an FTS-corruption error "
    r"\((?P<error>.*?)\) — ",
    "self_repair",
    "error",
    "state.db full-text index is corrupt; Hermes is rebuilding it in place ({error})",
    key="fts_rebuild",
)

FTS_REBUILD_FAILED = rule(
    "fts_rebuild_failed",
    r"In-place FTS rebuild (?P<how>failed|made no progress)",
    "self_repair",
    "critical",
    "Hermes' in-place rebuild of the state.db full-text index {how}; offline repair needed",
    key="fts_rebuild_failed",
)
