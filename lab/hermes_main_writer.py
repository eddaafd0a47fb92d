"""A writer of the databases current Hermes (git main, schema_version 30) leaves behind,
run as a subprocess: ``python lab/hermes_main_writer.py build ...``.

Hermes main is not on PyPI, so this script lays down the shapes its ``SessionDB``
creates, object for object, with the standard-library ``sqlite3`` (as Hermes does; never
apsw: docs/safety.md rule 6), from the facts listed in README "Hermes versions
supported":

- the tables of ``SCHEMA_SQL`` at version 30 (``system_prompts`` referenced by
  ``sessions.system_prompt_hash``, ``messages.active`` and the display columns,
  ``gateway_heartbeats``, ``conversation_generations``, ``session_turn_leases``,
  ``gateway_hygiene_state``, ``state_meta``, ...), its indexes, the deferred indexes and
  the four non-FTS ``messages_display_*`` triggers;
- ``--layout external``: a database born on main: external-content FTS5 over the views
  ``messages_fts_src`` (tool rows cut to their first 8192 characters) and
  ``messages_fts_trigram_src`` (no tool rows, no cron or subagent sessions), with
  ``state_meta.fts_storage_version = 3``;
- ``--layout legacy --from DB``: a database written by an older Hermes (0.19.0 or
  earlier, inline-content FTS) opened once by main: missing tables created, missing
  columns added with ``ALTER TABLE ... ADD COLUMN``, the broad FTS update triggers
  replaced by ``AFTER UPDATE OF`` ones, ``fts_optimize_available = 1``, the v25 prompt
  dedupe run (``--dedupe-stops-after N`` stops it after N prompts, as a contended open
  does: the rest keep their inline ``system_prompt``), schema_version 30, and no
  ``fts_storage_version`` (the layout waits for ``hermes sessions optimize-storage``);
- ``--cjk``: the optional ``messages_fts_cjk`` table (external content over
  ``messages_fts_cjk_src``, ``tokenize='cjk_unicode61'``) and its three triggers. That
  tokenizer is a loadable extension statewarden does not have; the table is written
  with ``unicode61`` (which emits the same tokens for text without CJK characters, and
  this writer writes none) and its stored ``CREATE`` statement then names
  ``cjk_unicode61`` through ``PRAGMA writable_schema``: the file is byte for byte what a
  Hermes with the extension writes for this text.

Then sessions and messages are written as Hermes writes them (one transaction per write,
every insert through the triggers), a few tool results longer than 8 KiB (one of them
rewritten afterwards, through the update triggers), some messages soft-deleted
(``active = 0``: they stay in every FTS index, since neither the views nor the triggers
look at ``active``), heartbeats, leases and generations. The result is closed with a
TRUNCATE checkpoint (no ``-wal`` left), journal mode WAL.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lab.hermes_writer import WORDS, _text

SCHEMA_VERSION = 30
FTS_STORAGE_VERSION = 3
TOOL_PREFIX = 8192

TABLES = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, created_source TEXT, user_id TEXT,
    session_key TEXT, chat_id TEXT, chat_type TEXT, thread_id TEXT, display_name TEXT,
    origin_json TEXT, expiry_finalized INTEGER DEFAULT 0, model TEXT, model_config TEXT,
    system_prompt TEXT, system_prompt_hash TEXT, parent_session_id TEXT,
    started_at REAL NOT NULL, ended_at REAL, end_reason TEXT,
    message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0, cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0, cwd TEXT, git_branch TEXT, git_repo_root TEXT,
    git_metadata_generation INTEGER NOT NULL DEFAULT 0, billing_provider TEXT,
    billing_base_url TEXT, billing_mode TEXT, estimated_cost_usd REAL, actual_cost_usd REAL,
    cost_status TEXT, cost_source TEXT, pricing_version TEXT, title TEXT, title_source TEXT,
    last_activity_at REAL, last_activity_description TEXT, last_activity_provenance TEXT,
    api_call_count INTEGER DEFAULT 0, handoff_state TEXT, handoff_platform TEXT,
    handoff_error TEXT, compression_failure_cooldown_until REAL,
    compression_failure_error TEXT, compression_fallback_streak INTEGER NOT NULL DEFAULT 0,
    compression_ineffective_count INTEGER NOT NULL DEFAULT 0,
    compression_recovery_deadline REAL, compression_overload_streak INTEGER NOT NULL DEFAULT 0,
    profile_name TEXT, transport_profile TEXT, rewind_count INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0, pinned INTEGER NOT NULL DEFAULT 0,
    hidden INTEGER NOT NULL DEFAULT 0, last_read_at REAL, tool_names TEXT,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id),
    FOREIGN KEY (system_prompt_hash) REFERENCES system_prompts(hash)
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    effect_disposition TEXT, timestamp REAL NOT NULL, token_count INTEGER,
    finish_reason TEXT, reasoning TEXT, reasoning_content TEXT, reasoning_details TEXT,
    codex_reasoning_items TEXT, codex_message_items TEXT, platform_message_id TEXT,
    observed INTEGER DEFAULT 0, _compressed_summary INTEGER NOT NULL DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1, compacted INTEGER NOT NULL DEFAULT 0,
    api_content TEXT, display_kind TEXT, display_metadata TEXT, display_identity BLOB,
    display_order INTEGER
);
CREATE TABLE IF NOT EXISTS session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '', billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '', task TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0, actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT, cost_source TEXT, first_seen REAL, last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task)
);
CREATE TABLE IF NOT EXISTS state_meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS gateway_routing (
    scope TEXT NOT NULL DEFAULT '', session_key TEXT NOT NULL, entry_json TEXT NOT NULL,
    updated_at REAL NOT NULL, PRIMARY KEY (scope, session_key)
);
CREATE TABLE IF NOT EXISTS gateway_hygiene_state (
    session_key TEXT PRIMARY KEY, failure_streak INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS conversation_generations (
    source TEXT NOT NULL, session_key TEXT NOT NULL, generation INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (source, session_key)
);
CREATE TABLE IF NOT EXISTS gateway_heartbeats (
    backend_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, started_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL, profile TEXT NOT NULL DEFAULT '',
    host TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS compression_locks (
    session_id TEXT PRIMARY KEY, holder TEXT NOT NULL, acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS session_turn_leases (
    conversation_id TEXT PRIMARY KEY, holder TEXT NOT NULL, acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS async_delegations (
    delegation_id TEXT PRIMARY KEY, origin_session TEXT NOT NULL,
    origin_ui_session_id TEXT NOT NULL DEFAULT '', parent_session_id TEXT,
    state TEXT NOT NULL, dispatched_at REAL NOT NULL, completed_at REAL,
    updated_at REAL NOT NULL, event_json TEXT, result_json TEXT,
    delivery_state TEXT NOT NULL DEFAULT 'pending', delivery_attempts INTEGER NOT NULL DEFAULT 0,
    delivered_at REAL, owner_pid INTEGER, owner_started_at INTEGER, task_json TEXT,
    delivery_claim TEXT, delivery_claimed_at REAL, origin_session_id TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source);
CREATE INDEX IF NOT EXISTS idx_sessions_source_id ON sessions(source, id);
CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC);
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp);
CREATE INDEX IF NOT EXISTS idx_messages_session_id ON messages(session_id, id);
CREATE INDEX IF NOT EXISTS idx_messages_assistant_calls_by_session ON messages(session_id)
    WHERE role = 'assistant' AND tool_calls IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_compression_locks_expires ON compression_locks(expires_at);
CREATE INDEX IF NOT EXISTS idx_session_turn_leases_expires ON session_turn_leases(expires_at);
CREATE INDEX IF NOT EXISTS idx_session_model_usage_session ON session_model_usage(session_id);
CREATE INDEX IF NOT EXISTS idx_session_model_usage_model ON session_model_usage(model);
CREATE INDEX IF NOT EXISTS idx_async_delegations_delivery
    ON async_delegations(delivery_state, completed_at);
"""

# Indexes and triggers on columns an older file only gets from ALTER TABLE.
VISIBLE = "(active = 1 OR compacted = 1)"
DEFERRED = f"""
CREATE INDEX IF NOT EXISTS idx_messages_platform_msg_id
    ON messages(session_id, platform_message_id) WHERE platform_message_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_messages_session_active ON messages(session_id, active, timestamp);
CREATE INDEX IF NOT EXISTS idx_messages_display_page
    ON messages(session_id, display_order, active DESC, id DESC) WHERE {VISIBLE};
CREATE INDEX IF NOT EXISTS idx_messages_display_backfill ON messages(session_id)
    WHERE (display_order IS NULL OR display_identity IS NULL) AND {VISIBLE};
CREATE INDEX IF NOT EXISTS idx_messages_display_identity
    ON messages(session_id, display_identity, display_order)
    WHERE display_identity IS NOT NULL AND {VISIBLE};
CREATE TRIGGER IF NOT EXISTS messages_display_order_insert
AFTER INSERT ON messages WHEN new.display_order IS NULL
BEGIN
    UPDATE messages SET display_order = COALESCE((
        SELECT display_order FROM messages
        WHERE session_id = new.session_id AND id <> new.id AND {VISIBLE}
          AND display_identity = new.display_identity AND display_order IS NOT NULL
        ORDER BY display_order LIMIT 1), new.id) WHERE id = new.id;
END;
CREATE TRIGGER IF NOT EXISTS messages_display_visibility_update
AFTER UPDATE OF active, compacted ON messages
WHEN (new.active = 1 OR new.compacted = 1) <> (old.active = 1 OR old.compacted = 1)
BEGIN
    UPDATE messages SET display_order = MIN(new.id, COALESCE((
        SELECT display_order FROM messages
        WHERE session_id = new.session_id AND id <> new.id AND {VISIBLE}
          AND display_identity = new.display_identity AND display_order IS NOT NULL
        ORDER BY display_order LIMIT 1), new.id))
    WHERE id = new.id AND (new.active = 1 OR new.compacted = 1);
    UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE id = new.id)
    WHERE session_id = new.session_id AND id <> new.id AND {VISIBLE}
      AND display_identity = new.display_identity AND (new.active = 1 OR new.compacted = 1);
    UPDATE messages SET display_order = (
        SELECT MIN(peer.id) FROM messages AS peer
        WHERE peer.session_id = old.session_id AND (peer.active = 1 OR peer.compacted = 1)
          AND peer.display_identity = old.display_identity)
    WHERE session_id = old.session_id AND {VISIBLE}
      AND display_identity = old.display_identity AND NOT (new.active = 1 OR new.compacted = 1);
END;
CREATE TRIGGER IF NOT EXISTS messages_display_identity_update
AFTER UPDATE OF role, content, timestamp, tool_call_id, tool_calls, tool_name, display_kind
ON messages
WHEN new.role IS NOT old.role OR new.content IS NOT old.content
  OR new.timestamp IS NOT old.timestamp OR new.tool_call_id IS NOT old.tool_call_id
  OR new.tool_calls IS NOT old.tool_calls OR new.tool_name IS NOT old.tool_name
  OR new.display_kind IS NOT old.display_kind
BEGIN
    UPDATE messages SET display_identity = NULL, display_order = NULL
    WHERE id = new.id OR (session_id = old.session_id
        AND display_identity = old.display_identity AND {VISIBLE});
END;
CREATE TRIGGER IF NOT EXISTS messages_display_identity_delete
AFTER DELETE ON messages WHEN old.active = 1 OR old.compacted = 1
BEGIN
    UPDATE messages SET display_order = (
        SELECT MIN(peer.id) FROM messages AS peer
        WHERE peer.session_id = old.session_id AND (peer.active = 1 OR peer.compacted = 1)
          AND peer.display_identity = old.display_identity)
    WHERE session_id = old.session_id AND {VISIBLE} AND display_identity = old.display_identity;
END;
CREATE INDEX IF NOT EXISTS idx_messages_active_null ON messages(active) WHERE active IS NULL;
CREATE INDEX IF NOT EXISTS idx_sessions_session_key ON sessions(session_key, started_at DESC);
CREATE INDEX IF NOT EXISTS idx_sessions_gateway_peer
    ON sessions(source, user_id, chat_id, chat_type, thread_id, started_at DESC);
CREATE INDEX IF NOT EXISTS idx_sessions_handoff_state ON sessions(handoff_state, started_at);
CREATE INDEX IF NOT EXISTS idx_sessions_system_prompt_hash ON sessions(system_prompt_hash);
CREATE INDEX IF NOT EXISTS idx_sessions_tool_names ON sessions(tool_names);
CREATE INDEX IF NOT EXISTS idx_sessions_effective_activity
    ON sessions(COALESCE(last_activity_at, started_at) DESC, started_at DESC);
CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique ON sessions(title)
    WHERE title IS NOT NULL;
"""


def _indexed(alias: str) -> str:
    """The text the base index holds for a row: a tool row's first 8192 characters."""
    return (
        f"CASE WHEN {alias}.role = 'tool' THEN substr(COALESCE({alias}.content, ''), 1,"
        f" {TOOL_PREFIX}) ELSE {alias}.content END"
    )


def _gate(alias: str, prefix: str = "fts") -> str:
    """The deferred-backfill gate: a row is indexed unless its id is in (progress, high water]."""
    meta = "(SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = '{}')"
    return (
        f"({alias}.id > COALESCE({meta.format(prefix + '_rebuild_high_water')}, -1)"
        f" OR {alias}.id <= COALESCE({meta.format(prefix + '_rebuild_progress')}, -1))"
    )


TRIGRAM_SESSIONS = (
    "{q}source NOT IN ('cron', 'subagent') AND json_extract(CASE WHEN"
    " json_valid({q}model_config) THEN {q}model_config ELSE json_object() END,"
    " '$._delegate_from') IS NULL"
)


def _trigram_sessions(alias: str = "") -> str:
    return TRIGRAM_SESSIONS.format(q=f"{alias}." if alias else "")


EXTERNAL_FTS = f"""
CREATE VIEW IF NOT EXISTS messages_fts_src AS
    SELECT id, {_indexed("messages").replace("messages.", "")} AS content, tool_name, tool_calls
    FROM messages;
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, tool_name, tool_calls, content='messages_fts_src', content_rowid='id');
CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages
WHEN {_gate("new")}
BEGIN
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id, {_indexed("new")}, new.tool_name, new.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages
WHEN {_gate("old")}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, {_indexed("old")}, old.tool_name, old.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_update
AFTER UPDATE OF content, tool_name, tool_calls, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
    OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role) AND {_gate("old")}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, {_indexed("old")}, old.tool_name, old.tool_calls);
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id, {_indexed("new")}, new.tool_name, new.tool_calls);
END;
CREATE VIEW IF NOT EXISTS messages_fts_trigram_src AS
    SELECT m.id, m.role, m.content, m.tool_name
    FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
    WHERE m.role <> 'tool' AND {_trigram_sessions("s")};
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(
    content, tool_name, content='messages_fts_trigram_src', content_rowid='id',
    tokenize='trigram');
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages
WHEN new.role <> 'tool'
   AND EXISTS (SELECT 1 FROM sessions WHERE id = new.session_id AND {_trigram_sessions()})
   AND {_gate("new")}
BEGIN
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    VALUES (new.id, new.content, new.tool_name);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages
WHEN old.role <> 'tool'
   AND EXISTS (SELECT 1 FROM sessions WHERE id = old.session_id AND {_trigram_sessions()})
   AND {_gate("old")}
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    VALUES ('delete', old.id, old.content, old.tool_name);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_update
AFTER UPDATE OF content, tool_name, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
    OR old.role IS NOT new.role) AND {_gate("old")}
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', old.id, old.content, old.tool_name WHERE old.role <> 'tool'
      AND EXISTS (SELECT 1 FROM sessions WHERE id = old.session_id AND {_trigram_sessions()});
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    SELECT new.id, new.content, new.tool_name WHERE new.role <> 'tool'
      AND EXISTS (SELECT 1 FROM sessions WHERE id = new.session_id AND {_trigram_sessions()});
END;
"""

# What main puts in place of 0.19.0's broad ``AFTER UPDATE ON messages`` FTS triggers.
_LEGACY_TEXT = (
    f"COALESCE({_indexed('new')}, '') || ' ' || COALESCE(new.tool_name, '')"
    " || ' ' || COALESCE(new.tool_calls, '')"
)
LEGACY_UPDATE_TRIGGERS = "".join(
    f"""
CREATE TRIGGER IF NOT EXISTS {fts}_update
AFTER UPDATE OF content, tool_name, tool_calls, role ON messages BEGIN
    DELETE FROM {fts} WHERE rowid = old.id;
    INSERT INTO {fts}(rowid, content) VALUES (new.id, {_LEGACY_TEXT});
END;
"""
    for fts in ("messages_fts", "messages_fts_trigram")
)

CJK_TOKENIZER = "cjk_unicode61"
CJK_TABLE = """
CREATE VIEW IF NOT EXISTS messages_fts_cjk_src AS
    SELECT id, role, content, tool_name, tool_calls FROM messages WHERE role <> 'tool';
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_cjk USING fts5(
    content, tool_name, tool_calls, content='messages_fts_cjk_src', content_rowid='id',
    tokenize='{tokenizer}');
"""
CJK_TRIGGERS = f"""
CREATE TRIGGER IF NOT EXISTS messages_fts_cjk_insert AFTER INSERT ON messages
WHEN new.role <> 'tool' AND {_gate("new", "fts_cjk")}
BEGIN
    INSERT INTO messages_fts_cjk(rowid, content, tool_name, tool_calls)
    VALUES (new.id, new.content, new.tool_name, new.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_cjk_delete AFTER DELETE ON messages
WHEN old.role <> 'tool' AND {_gate("old", "fts_cjk")}
BEGIN
    INSERT INTO messages_fts_cjk(messages_fts_cjk, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_cjk_update
AFTER UPDATE OF content, tool_name, tool_calls, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
    OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role)
   AND {_gate("old", "fts_cjk")}
BEGIN
    INSERT INTO messages_fts_cjk(messages_fts_cjk, rowid, content, tool_name, tool_calls)
    SELECT 'delete', old.id, old.content, old.tool_name, old.tool_calls WHERE old.role <> 'tool';
    INSERT INTO messages_fts_cjk(rowid, content, tool_name, tool_calls)
    SELECT new.id, new.content, new.tool_name, new.tool_calls WHERE new.role <> 'tool';
END;
"""


def _meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO state_meta(key, value) VALUES (?, ?)"
        " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def _declared_columns() -> dict[str, list[tuple[str, str]]]:
    """(column, type for ADD COLUMN) per table of TABLES, as SQLite itself parses them."""
    ref = sqlite3.connect(":memory:")
    try:
        ref.executescript(TABLES)
        out: dict[str, list[tuple[str, str]]] = {}
        for (name,) in ref.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ):
            cols = []
            for _cid, col, ctype, notnull, default, pk in ref.execute(
                f'PRAGMA table_info("{name}")'
            ):
                parts = [ctype] if ctype else []
                if notnull and not pk:
                    parts.append("NOT NULL")
                if default is not None:
                    parts.append(f"DEFAULT {default}")
                cols.append((col, " ".join(parts)))
            out[name] = cols
        return out
    finally:
        ref.close()


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()


def _store_prompt(conn: sqlite3.Connection, prompt: str) -> str:
    h = prompt_hash(prompt)
    conn.execute("INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)", (h, prompt))
    return h


def upgrade_legacy(conn: sqlite3.Connection, dedupe_stops_after: int | None) -> None:
    """What one writable open by main does to a file of an older Hermes."""
    conn.executescript(TABLES)
    for table, cols in _declared_columns().items():
        live = {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}
        for col, ctype in cols:
            if col not in live:
                conn.execute(f'ALTER TABLE "{table}" ADD COLUMN "{col}" {ctype}')
    conn.executescript(DEFERRED)
    conn.execute("UPDATE messages SET active = 1 WHERE active IS NULL")
    (version,) = conn.execute("SELECT version FROM schema_version").fetchone()
    for fts in ("messages_fts", "messages_fts_trigram"):
        row = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", (f"{fts}_update",)
        ).fetchone()
        if row and "AFTER UPDATE OF" not in " ".join(row[0].split()).upper():
            conn.execute(f"DROP TRIGGER {fts}_update")
    conn.executescript(LEGACY_UPDATE_TRIGGERS)
    if version < 23:
        _meta(conn, "fts_optimize_available", "1")
    if version < 25:
        rows = conn.execute(
            "SELECT id, system_prompt FROM sessions WHERE system_prompt IS NOT NULL ORDER BY rowid"
        ).fetchall()
        for n, (sid, prompt) in enumerate(rows):
            if dedupe_stops_after is not None and n >= dedupe_stops_after:
                break  # "v25 prompt dedupe paused after contention"
            h = _store_prompt(conn, prompt)
            conn.execute(
                "UPDATE sessions SET system_prompt_hash = ?, system_prompt = NULL WHERE id = ?",
                (h, sid),
            )
    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))


def create_fresh(conn: sqlite3.Connection) -> None:
    conn.executescript(TABLES)
    conn.executescript(DEFERRED)
    conn.executescript(EXTERNAL_FTS)
    conn.execute("INSERT INTO schema_version(version) VALUES (?)", (SCHEMA_VERSION,))
    _meta(conn, "fts_storage_version", str(FTS_STORAGE_VERSION))


def add_cjk(conn: sqlite3.Connection) -> None:
    conn.executescript(CJK_TABLE.format(tokenizer="unicode61") + CJK_TRIGGERS)


def name_cjk_tokenizer(conn: sqlite3.Connection) -> None:
    """Make the stored CREATE of messages_fts_cjk name cjk_unicode61 (see module doc)."""
    (sql,) = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts_cjk'"
    ).fetchone()
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'messages_fts_cjk'",
        (sql.replace("tokenize='unicode61'", f"tokenize='{CJK_TOKENIZER}'"),),
    )
    conn.execute("PRAGMA writable_schema=OFF")


def write_rows(conn: sqlite3.Connection, args: argparse.Namespace, clock: float) -> None:
    """Sessions and messages as main's SessionDB writes them, plus its bookkeeping rows."""
    rng = random.Random(args.seed)
    tick = [clock]

    def now() -> float:
        tick[0] += 0.001
        return round(tick[0], 3)

    prompts = [
        " ".join(f"rule {i}: {rng.choice(WORDS)} {rng.choice(WORDS)}" for i in range(40))
        for _ in range(3)
    ]
    sids: list[str] = []
    for i in range(args.sessions):
        stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(int(clock) + i * 3607))
        if i % 7 == 3:
            sid, source = f"cron_{rng.getrandbits(48):012x}_{stamp}", "cron"
        elif i % 11 == 5:
            sid, source = f"{stamp}_{rng.getrandbits(24):06x}", "subagent"
        else:
            sid = f"{stamp}_{rng.getrandbits(24):06x}"
            source = rng.choice(["telegram", "cli", "desktop", "api"])
        h = _store_prompt(conn, prompts[i % len(prompts)])
        title = f"{rng.choice(WORDS)} {rng.choice(WORDS)} #m{i}" if i % 5 != 4 else None
        key = f"agent:main:{source}:dm:{2000 + i}"
        conn.execute(
            "INSERT INTO sessions(id, source, created_source, user_id, session_key, model,"
            " model_config, system_prompt_hash, started_at, cwd, title, title_source,"
            " input_tokens, output_tokens, api_call_count, last_activity_at)"
            " VALUES (?, ?, ?, 'u1', ?, 'hermes-4-70b', ?, ?, ?, '/home/u', ?, ?, ?, ?, 1, ?)",
            (
                sid,
                source,
                source,
                key,
                json.dumps({"temperature": 0.3}),
                h,
                now(),
                title,
                "user" if title else None,
                rng.randint(10, 5000),
                rng.randint(10, 2000),
                now(),
            ),
        )
        conn.execute(
            "INSERT INTO session_model_usage(session_id, model, api_call_count, input_tokens,"
            " output_tokens, first_seen, last_seen) VALUES (?, 'hermes-4-70b', 1, ?, ?, ?, ?)",
            (sid, rng.randint(10, 5000), rng.randint(10, 2000), now(), now()),
        )
        conn.execute(
            "INSERT INTO conversation_generations(source, session_key, generation)"
            " VALUES (?, ?, ?)",
            (source, key, 1 + i % 3),
        )
        sids.append(sid)
    for j in range(args.messages):
        sid = sids[j * len(sids) // max(args.messages, 1)]
        kind = j % 4
        size = max(16, int(rng.expovariate(1 / args.text_bytes)))
        role, tool_calls, tool_name, call_id = "user", None, None, None
        if kind == 1:
            role = "assistant"
            tool_calls = json.dumps(
                [
                    {
                        "id": f"call_{j}",
                        "type": "function",
                        "function": {"name": "terminal", "arguments": "{}"},
                    }
                ]
            )
        elif kind == 2:
            role, tool_name, call_id = "tool", "terminal", f"call_{j - 1}"
            if j % 40 == 2:
                size = TOOL_PREFIX + 4000  # a tool result longer than the indexed prefix
        elif kind == 3:
            role = "assistant"
        content = _text(rng, size)
        ident = hashlib.sha256(f"{role}\0{content}".encode()).digest()[:16]
        conn.execute(
            "INSERT INTO messages(session_id, role, content, tool_call_id, tool_calls,"
            " tool_name, timestamp, active, display_identity) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)",
            (sid, role, content, call_id, tool_calls, tool_name, now(), ident),
        )
    # Soft deletes (a rewind): the rows stay, hidden from transcripts, still in FTS.
    conn.execute(
        "UPDATE messages SET active = 0 WHERE id IN"
        " (SELECT id FROM messages WHERE session_id = ? ORDER BY id DESC LIMIT 3)",
        (sids[1],),
    )
    conn.execute("UPDATE sessions SET rewind_count = 1 WHERE id = ?", (sids[1],))
    # A long tool result rewritten after it was stored: the update triggers index it
    # again (on a legacy file main's trigger copies only its first 8192 characters).
    conn.execute(
        "UPDATE messages SET content = content || ' (edited)' WHERE id = (SELECT id FROM"
        " messages WHERE role = 'tool' AND length(content) > ? ORDER BY id LIMIT 1)",
        (TOOL_PREFIX,),
    )
    conn.execute(
        "UPDATE sessions SET message_count = (SELECT COUNT(*) FROM messages m"
        " WHERE m.session_id = sessions.id AND m.active = 1)"
    )
    for k in range(2):
        conn.execute(
            "INSERT INTO gateway_heartbeats(backend_id, pid, started_at, last_heartbeat,"
            " profile, host) VALUES (?, ?, ?, ?, '', 'host-a')",
            (f"serve-{k}", 4000 + k, now(), now()),
        )
    conn.execute(
        "INSERT INTO session_turn_leases(conversation_id, holder, acquired_at, expires_at)"
        " VALUES (?, 'pid=4000:serve-0', ?, ?)",
        (sids[0], now(), clock + 600),
    )
    for k in range(min(3, len(sids))):
        conn.execute(
            "INSERT OR REPLACE INTO gateway_routing(scope, session_key, entry_json, updated_at)"
            " VALUES ('', ?, ?, ?)",
            (f"telegram:dm:{3000 + k}", json.dumps({"session_id": sids[k]}), now()),
        )


def _legacy_prompts(home: str, count: int) -> None:
    """Sessions with an inline system prompt, written by the installed (older) Hermes
    itself before main first opens the file."""
    os.environ["HERMES_HOME"] = home
    from hermes_state import SessionDB

    db = SessionDB()
    for i in range(count):
        db.create_session(
            f"legacy_prompt_{i}",
            "cli",
            model="hermes-4-70b",
            system_prompt=f"legacy prompt {i % 2}: answer briefly",
        )
        db.append_message(f"legacy_prompt_{i}", "user", f"a question {i}")
    db.close()


def build(args: argparse.Namespace) -> None:
    os.makedirs(args.home, exist_ok=True)
    db = os.path.join(args.home, "state.db")
    if args.layout == "legacy":
        if not args.source or args.cjk:
            raise SystemExit("--layout legacy needs --from DB and has no CJK table")
        shutil.copyfile(args.source, db)
        _legacy_prompts(args.home, args.legacy_prompts)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA foreign_keys=ON")
    if args.layout == "legacy":
        upgrade_legacy(conn, args.dedupe_stops_after)
    else:
        create_fresh(conn)
    if args.cjk:
        add_cjk(conn)
    write_rows(conn, args, 1_790_000_000.0)  # one transaction per write, as Hermes commits
    if args.cjk:
        name_cjk_tokenizer(conn)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    print(json.dumps({"layout": args.layout, "cjk": args.cjk}))


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--home", required=True)
    b.add_argument("--layout", choices=["external", "legacy"], default="external")
    b.add_argument("--from", dest="source", default=None, help="older Hermes db (legacy)")
    b.add_argument("--legacy-prompts", type=int, default=4)
    b.add_argument("--dedupe-stops-after", type=int, default=None)
    b.add_argument("--cjk", action="store_true")
    b.add_argument("--sessions", type=int, default=12)
    b.add_argument("--messages", type=int, default=60)
    b.add_argument("--text-bytes", type=int, default=200)
    b.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    build(args)


if __name__ == "__main__":
    main()
