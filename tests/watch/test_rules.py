"""Rules: every Hermes message worth a signal, in Hermes' real line format, and the
lines that must not become signals."""

from __future__ import annotations

import ast
import datetime as dt
import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.hermes_fixtures import log_line
from statewarden.incidents.book import EVIDENCE_KEEP, IncidentBook
from statewarden.incidents.signals import EVIDENCE_LINE_MAX_CHARS, Found, Observation, Signal
from statewarden.targets import Target
from statewarden.watch.records import LogRecord, journal_record, parse_record, starts_record
from statewarden.watch.rules import (
    _RULE_TRIGGER_RE,
    MERGED_EVIDENCE_RECORDS,
    RULES,
    CronSessions,
    Rule,
    SignalBatch,
    _needles,
    cron_sessions,
    is_state_db_record,
    signals_from_journal,
    signals_from_log,
    signals_from_record,
)

WHEN = dt.datetime(2026, 9, 7, 17, 5, 28, 701000)
TARGET = Target(
    name="default",
    home=Path("/home/u/.hermes"),
    db=Path("/home/u/.hermes/state.db"),
    logs_dir=Path("/home/u/.hermes/logs"),
    gateway_unit="hermes-gateway.service",
)
DB = "/home/u/.hermes/state.db"
AGENT_LOG = "/home/u/.hermes/logs/agent.log"
SID = "20260907_170401_a1b2c3"


def traceback(error: str, frame: str = "/opt/hermes/hermes_state.py") -> str:
    return (
        "Traceback (most recent call last):\n"
        f'  File "{frame}", line 1402, in append_message\n'
        "    cur.execute(sql, params)\n"
        f"{error}"
    )


def record(
    level: str, logger: str, message: str, session: str | None = None, tb: str = ""
) -> LogRecord:
    text = log_line(WHEN, level, logger, message, session)
    if tb:
        text += "\n" + tb
    return parse_record(text, AGENT_LOG)


def signals(
    level: str, logger: str, message: str, session: str | None = None, tb: str = ""
) -> list[Signal]:
    out = signals_from_log(record(level, logger, message, session, tb), TARGET)
    assert all(isinstance(s, Signal) for s in out)
    return [s for s in out if isinstance(s, Signal)]


def kinds(out: list[Signal]) -> list[tuple[str, str, str]]:
    """(kind, key, effective severity) of each signal."""
    return [(s.kind, s.key, s.effective_severity) for s in out]


class TestParseRecord:
    def test_hermes_line(self) -> None:
        """Every field of Hermes' format is read, time as naive local time."""
        r = record("WARNING", "run_agent", "Session DB append_message failed: x", SID)
        assert r == LogRecord(
            path=AGENT_LOG,
            at=WHEN,
            level="WARNING",
            session=SID,
            logger="run_agent",
            message="Session DB append_message failed: x",
            text=f"2026-09-07 17:05:28,701 WARNING [{SID}] run_agent: Session DB append_message failed: x",
        )
        assert r.timestamp == WHEN.timestamp()

    def test_without_session_tag(self) -> None:
        """No session tag: session is None and the logger is the next word."""
        r = record("INFO", "gateway.run", "Gateway started")
        assert (r.session, r.logger, r.message) == (None, "gateway.run", "Gateway started")

    def test_message_with_colons_and_traceback(self) -> None:
        """The message is the first line after 'logger: '; the text keeps the traceback."""
        r = record(
            "WARNING",
            "gateway.session",
            "gateway.session: state.db routing save failed: x: y",
            tb=traceback("sqlite3.OperationalError: y"),
        )
        assert r.logger == "gateway.session"
        assert r.message == "gateway.session: state.db routing save failed: x: y"
        assert r.text.endswith("sqlite3.OperationalError: y")

    def test_line_not_in_hermes_format(self) -> None:
        """A line without Hermes' prefix is kept whole as the message, with no time."""
        r = parse_record('  File "/x.py", line 3\nmore', "f")
        assert (r.at, r.level, r.logger, r.message) == (None, "", "", '  File "/x.py", line 3')

    def test_impossible_date(self) -> None:
        """A timestamp of the right shape but no real date parses with at=None."""
        r = parse_record("2026-13-45 25:61:00,000 ERROR x: y")
        assert (r.at, r.level, r.logger, r.message) == (None, "ERROR", "x", "y")

    def test_starts_record(self) -> None:
        """Only a line starting with Hermes' asctime starts a record."""
        assert starts_record(log_line(WHEN, "INFO", "x", "y"))
        assert not starts_record("Traceback (most recent call last):")
        assert not starts_record("2026-09-07 17:05:28 INFO x: y")


class TestCorruption:
    @pytest.mark.parametrize(
        "error",
        [
            "database disk image is malformed",
            "disk I/O error",
            "file is not a database",
            "malformed database schema (messages_fts) - invalid rootpage",
        ],
    )
    def test_routing_save_failed(self, error: str) -> None:
        """The docs/hermes.md example line: a write failure and corruption, both."""
        out = signals(
            "WARNING", "gateway.session", f"gateway.session: state.db routing save failed: {error}"
        )
        assert kinds(out) == [
            ("write_failures", "routing_save", "warning"),
            ("corruption", "", "critical"),
        ]
        c = out[1]
        assert c.db == DB
        assert c.source == "log:agent.log"
        assert c.at == WHEN.timestamp()
        assert c.fields["error"] == error.split(" (", maxsplit=1)[0]
        assert c.summary == (
            f"state.db corruption: gateway.session reported '{c.fields['error']}': "
            f"gateway.session: state.db routing save failed: {error}"
        )

    def test_append_message_malformed(self) -> None:
        """run_agent's append failure saying malformed is corruption too."""
        out = signals(
            "WARNING",
            "run_agent",
            "Session DB append_message failed: database disk image is malformed",
            SID,
        )
        assert kinds(out) == [
            ("write_failures", "append_message", "warning"),
            ("corruption", "", "critical"),
        ]
        assert out[1].fields["session"] == SID

    def test_traceback_through_hermes_state(self) -> None:
        """A traceback through hermes_state.py ending in 'disk I/O error' is corruption,
        whatever the logger; the summary quotes the traceback line."""
        out = signals(
            "ERROR",
            "tools.memory",
            "memory flush failed",
            tb=traceback("sqlite3.OperationalError: disk I/O error"),
        )
        assert kinds(out) == [("corruption", "", "critical")]
        assert out[0].summary == (
            "state.db corruption: tools.memory reported 'disk I/O error': "
            "sqlite3.OperationalError: disk I/O error"
        )

    def test_newer_hermes_state_module(self) -> None:
        """Newer builds split hermes_state into hermes_state_*.py: still state.db code."""
        out = signals(
            "ERROR",
            "x",
            "failed",
            tb=traceback(
                "sqlite3.DatabaseError: file is not a database",
                "/opt/hermes/hermes_state_repair.py",
            ),
        )
        assert kinds(out) == [("corruption", "", "critical")]

    def test_state_logger_alone(self) -> None:
        """A hermes_state logger line saying malformed is corruption."""
        out = signals(
            "ERROR", "hermes_state", "checkpoint failed: database disk image is malformed"
        )
        assert kinds(out) == [("corruption", "", "critical")]

    def test_other_database_is_not_state_db(self) -> None:
        """kanban.db corruption (same SQLite helpers) is not state.db corruption."""
        assert (
            signals(
                "WARNING",
                "hermes_cli.kanban_db",
                "kanban.db write failed: database disk image is malformed",
            )
            == []
        )
        assert signals("ERROR", "hermes_state", "response_store.db: disk I/O error") == []

    def test_unrelated_logger(self) -> None:
        """'disk I/O error' from code that never touches state.db is not a signal."""
        assert signals("ERROR", "tools.browser", "screenshot failed: disk I/O error") == []

    def test_evidence_is_bounded(self) -> None:
        """A huge traceback is kept to EVIDENCE_LINE_MAX_CHARS, note of what was cut included."""
        tb = (
            traceback("sqlite3.DatabaseError: database disk image is malformed")
            + "\n"
            + "x" * 20000
        )
        [c] = signals("ERROR", "hermes_state", "open failed", tb=tb)
        [ev] = c.evidence
        assert ev.startswith("2026-09-07 17:05:28,701 ERROR hermes_state: open failed\nTraceback")
        full = len(log_line(WHEN, "ERROR", "hermes_state", "open failed")) + 1 + len(tb)
        kept = ev.rpartition("\n…[")[0]
        assert ev.endswith(f"\n…[{full - len(kept)} chars cut]")
        assert len(ev) <= EVIDENCE_LINE_MAX_CHARS
        assert len(ev) > EVIDENCE_LINE_MAX_CHARS - 40


class TestWriteFailures:
    def test_append_message_locked(self) -> None:
        """The docs/hermes.md example: append_message failed with database is locked."""
        [s] = signals(
            "WARNING", "run_agent", "Session DB append_message failed: database is locked", SID
        )
        assert kinds([s]) == [("write_failures", "append_message", "warning")]
        assert s.summary == "writing a message to state.db failed: database is locked"
        assert s.fields == {
            "rule": "append_message",
            "error": "database is locked",
            "logger": "run_agent",
            "session": SID,
        }

    def test_routing_load_failed(self) -> None:
        """routing load failed has its own key."""
        out = signals(
            "WARNING",
            "gateway.session",
            "gateway.session: state.db routing load failed: database is locked",
        )
        assert kinds(out) == [("write_failures", "routing_load", "warning")]

    def test_transcript_append_failed(self) -> None:
        """failure_count and pending are read as numbers."""
        [s] = signals(
            "WARNING",
            "gateway.session",
            f"Session DB transcript append failed for {SID} (failure_count=3, "
            "pending=4); will retry: database is locked",
        )
        assert kinds([s]) == [("write_failures", "transcript_append", "warning")]
        assert (s.fields["failure_count"], s.fields["pending"], s.fields["session"]) == (3, 4, SID)
        assert s.summary == (
            f"transcript append to state.db failed (session {SID}, 3 failures, 4 pending): "
            "database is locked"
        )

    def test_transcript_append_failing_long_is_an_error(self) -> None:
        """Ten failures in a row raise the severity to error."""
        [s] = signals(
            "WARNING",
            "gateway.session",
            f"Session DB transcript append failed for {SID} (failure_count=10, "
            "pending=12); will retry: database is locked",
        )
        assert s.effective_severity == "error"

    def test_locked_from_state_db_code(self) -> None:
        """A bare 'database is locked' from state.db code is a write failure."""
        out = signals("WARNING", "hermes_state", "checkpoint failed: database is locked")
        assert kinds(out) == [("write_failures", "locked", "warning")]

    def test_locked_elsewhere_is_not_a_signal(self) -> None:
        """'database is locked' from another database's code is none of ours."""
        assert signals("WARNING", "hermes_cli.kanban_db", "kanban.db: database is locked") == []
        assert signals("WARNING", "tools.browser", "cookie store: database is locked") == []

    def test_transcript_lagged(self) -> None:
        """Persisted transcript lagging memory: writes are not reaching state.db."""
        [s] = signals(
            "WARNING",
            "gateway.run",
            "Persisted transcript lagged live cached history for session "
            "agent:main:telegram:dm:42 (disk=10, memory=14); preserving live "
            "conversation context (possible FTS write corruption)",
        )
        assert kinds([s]) == [("write_failures", "transcript_lag", "error")]
        assert (s.fields["disk"], s.fields["memory"]) == (10, 14)

    def test_turn_stopped(self) -> None:
        """newer: 'No reply: the turn was stopped ...' is a critical write failure."""
        out = signals(
            "ERROR",
            "gateway.run",
            "No reply: the turn was stopped because session storage could not be "
            "written (state.db is read-only)",
        )
        assert kinds(out) == [("write_failures", "turn_stopped", "critical")]


class TestMessagesDropped:
    def test_pending_queue_full(self) -> None:
        """The pending queue overflowing means messages are lost."""
        [s] = signals(
            "WARNING",
            "gateway.session",
            f"Session DB transcript pending queue full for {SID} (cap=200); "
            "dropping oldest message to make room",
        )
        assert kinds([s]) == [("messages_dropped", "", "critical")]
        assert s.summary == (
            f"messages are being lost: the transcript queue of session {SID} is full "
            "(cap 200), oldest dropped"
        )
        assert s.fields["cap"] == 200

    def test_pending_queue_spooled_to_disk_is_no_loss(self) -> None:
        """0.22 spools the oldest message to disk when the queue is full: a write failure
        naming the spool, not messages being lost."""
        [s] = signals(
            "WARNING",
            "gateway.session",
            f"Session DB transcript pending queue full for {SID} (cap=200); spooled oldest "
            "message to /h/pending_messages/pending-1.json for replay after DB recovery",
        )
        assert kinds([s]) == [("write_failures", "queue_spooled", "error")]
        assert s.fields["spool"] == "/h/pending_messages/pending-1.json"

    def test_jsonl_divert_failed(self) -> None:
        """newer: the JSONL divert failing too loses the message."""
        [s] = signals(
            "ERROR",
            "gateway.session",
            f"JSONL divert failed after state.db write failure for {SID}: "
            "[Errno 28] No space left on device",
        )
        assert kinds([s]) == [("messages_dropped", "", "critical")]
        assert s.summary == (
            "messages are being lost: state.db write failure and the JSONL divert failed too "
            f"(session {SID})"
        )


class TestSelfRepair:
    def test_schema_malformed(self) -> None:
        """The automatic schema repair starting is self_repair (corruption is implied by
        the error only when it says so)."""
        out = signals(
            "ERROR",
            "hermes_state",
            "state.db schema is malformed (malformed database schema (messages_fts) "
            "- orphan index) — attempting automatic repair (a backup copy is made "
            "first).",
        )
        assert kinds(out) == [
            ("self_repair", "schema_repair", "error"),
            ("corruption", "", "critical"),
        ]

    def test_fts_corruption(self) -> None:
        """The FTS-corruption rebuild starting."""
        out = signals(
            "WARNING",
            "hermes_state",
            "state.db write failed with an FTS-corruption error (vtable constructor "
            "failed: messages_fts) — attempting one-shot in-place FTS rebuild; "
            "canonical message rows are preserved.",
        )
        assert kinds(out) == [("self_repair", "fts_rebuild", "error")]
        assert out[0].fields["error"] == "vtable constructor failed: messages_fts"

    @pytest.mark.parametrize(
        "message",
        [
            "In-place FTS rebuild failed (database is locked); the database needs the full "
            "offline repair path (repair_state_db_schema).",
            "In-place FTS rebuild made no progress; the database needs the full offline repair "
            "path (repair_state_db_schema).",
        ],
    )
    def test_fts_rebuild_failed(self, message: str) -> None:
        """The in-place rebuild failing is critical and not a lock problem."""
        assert kinds(signals("ERROR", "hermes_state", message)) == [
            ("self_repair", "fts_rebuild_failed", "critical")
        ]

    def test_schema_repair_could_not_recover(self) -> None:
        """Hermes giving up on the schema repair."""
        out = signals(
            "ERROR",
            "hermes_state",
            "state.db schema repair could not recover /h/state.db automatically "
            "(backup: /h/state.db.malformed-backup-20260907_170528); manual restore "
            "from backup may be required.",
        )
        assert kinds(out) == [("self_repair", "schema_repair_failed", "critical")]


class TestTaskDied:
    def test_task_died(self) -> None:
        """The task name is the fingerprint key; the traceback stays in the evidence."""
        tb = traceback("RuntimeError: boom", "/opt/hermes/gateway/run.py")
        [s] = signals(
            "ERROR", "gateway.run", "Supervised task cron_ticker died: RuntimeError('boom')", tb=tb
        )
        assert kinds([s]) == [("task_died", "cron_ticker", "error")]
        assert s.summary == "gateway task cron_ticker died: RuntimeError('boom')"
        assert s.evidence[0].endswith("RuntimeError: boom")

    def test_gave_up(self) -> None:
        """The 'giving up restarts' form is critical, same key."""
        [s] = signals(
            "ERROR",
            "gateway.run",
            "Supervised task session_expiry died 5 times in rapid succession (each "
            "within 60s of restart) — giving up restarts",
        )
        assert kinds([s]) == [("task_died", "session_expiry", "critical")]
        assert s.fields["times"] == 5

    def test_task_died_of_corruption(self) -> None:
        """A task dying in hermes_state with malformed is task_died and corruption."""
        tb = traceback("sqlite3.DatabaseError: database disk image is malformed")
        out = signals(
            "ERROR", "gateway.run", "Supervised task flush died: DatabaseError(...)", tb=tb
        )
        assert kinds(out) == [("task_died", "flush", "error"), ("corruption", "", "critical")]


class TestMountAndFatal:
    def test_wal_fallback_for_state_db(self) -> None:
        """WAL unsupported on state.db's filesystem is an unsafe mount."""
        out = signals(
            "WARNING",
            "hermes_state",
            "state.db: WAL journal_mode unsupported on this filesystem (locking "
            "protocol) — falling back to journal_mode=DELETE (slower rollback-journal "
            "mode; reduces concurrency but works on NFS/SMB/FUSE).",
        )
        assert kinds(out) == [("unsafe_mount", "wal_fallback", "warning")]

    def test_wal_fallback_for_kanban_is_not_ours(self) -> None:
        """The same message about kanban.db is about another database."""
        assert (
            signals(
                "WARNING",
                "hermes_state",
                "kanban.db: WAL journal_mode unsupported on this filesystem (locking "
                "protocol) — falling back to journal_mode=DELETE (slower).",
            )
            == []
        )

    def test_cross_vm(self) -> None:
        """newer: an existing WAL database on a cross-VM filesystem."""
        out = signals(
            "ERROR",
            "hermes_state",
            "existing WAL-mode database is on a cross-VM filesystem (virtiofs); "
            "set database.journal_mode: delete",
        )
        assert kinds(out) == [("unsafe_mount", "cross_vm", "error")]

    @pytest.mark.parametrize(
        ("message", "expected"),
        [
            (
                "FATAL: state.db was replaced underneath the gateway (inode 12 -> 13); stopping "
                "writes",
                ("stale_holder", "db_replaced", "critical"),
            ),
            (
                "FATAL: state.db reported structural corruption (database disk image is "
                "malformed); stopping writes",
                ("corruption", "", "critical"),
            ),
            (
                "FATAL: session storage stopped writing because another Hermes process still "
                "holds a deleted state.db-wal or state.db-shm inode (pid 4242)",
                ("stale_holder", "deleted_sidecar", "critical"),
            ),
            ("FATAL: session storage is read-only", ("write_failures", "fatal", "critical")),
        ],
    )
    def test_fatal_lines(self, message: str, expected: tuple[str, str, str]) -> None:
        """newer FATAL lines: one signal each (structural corruption is not doubled)."""
        assert kinds(signals("CRITICAL", "gateway.session", message)) == [expected]


class TestNewerHermesGuards:
    """Hermes git main's write guards, in the exact words Hermes logs (hermes_state_errors
    ``_DELETED_WAL_GENERATION_MSG`` in both wordings shipped, hermes_state_lockguard,
    hermes_state ``_log_wal_reset_bug_once``, the CLI's startup check and the salvage
    lane's sqlite3 shell gate)."""

    DELETED_NEW = (
        "FATAL: session storage stopped writing because another Hermes process still holds a "
        "deleted state.db-wal or state.db-shm inode (an old copy of the write-ahead log). "
        "Nothing is lost: quit every Hermes process on this profile (Desktop app, gateway, "
        "dashboard, cron), run `hermes doctor` (it names the processes still holding the log), "
        "then start Hermes again. Do not delete the WAL yourself and do not run `hermes doctor "
        "--fix` while they are running. Guide: https://hermes-agent.nousresearch.com/docs/"
        "user-guide/session-storage-recovery Detail: the path names a different (or missing) "
        "generation than the one this process holds open; opening or writing through it would "
        "mint a second WAL (split-brain). database.journal_mode: delete is operator "
        "containment, not a new default."
    )
    DELETED_OLD = (
        "FATAL: a live process holds a deleted state.db-wal or state.db-shm inode while the "
        "path names a different (or missing) generation. Refusing to open or write so a "
        "second WAL cannot be minted. Stop the gateway, dashboard, and cron writers that hold "
        "the deleted sidecar, then reopen. Do not delete the WAL yourself. "
        "database.journal_mode: delete is operator containment, not a new default."
    )
    DELETED = ("stale_holder", "deleted_sidecar", "critical")

    @pytest.mark.parametrize("message", [DELETED_NEW, DELETED_OLD])
    def test_deleted_wal_generation_message(self, message: str) -> None:
        """refuse_deleted_wal_generation logs the message at ERROR before raising."""
        out = signals("ERROR", "hermes_state_dbfile", message)
        assert kinds(out) == [self.DELETED]
        assert out[0].summary.startswith("Hermes halted writes (DeletedWalGenerationError)")

    def test_deleted_wal_generation_only_in_the_traceback(self) -> None:
        """A DeletedWalGenerationError seen only in a turn failure's traceback is still a critical
        stale_holder (deleted_sidecar) signal."""
        tb = traceback(
            "hermes_state_errors.DeletedWalGenerationError: " + self.DELETED_OLD[:60],
            frame="/opt/hermes/hermes_state_dbfile.py",
        )
        out = signals("ERROR", "gateway.run", "Turn 20260907_170401 failed", tb=tb)
        assert kinds(out) == [self.DELETED]

    def test_append_failure_caused_by_it_is_both(self) -> None:
        """A failed append whose cause is the deleted generation: the write failure and
        the stale holder."""
        tb = traceback("hermes_state.DeletedWalGenerationError: FATAL: ...")
        out = signals("WARNING", "run_agent", "Session DB append_message failed: FATAL: ...", tb=tb)
        assert kinds(out) == [("write_failures", "append_message", "warning"), self.DELETED]

    def test_lock_guard_incomplete(self) -> None:
        """Hermes' "WAL lock guard incomplete" for state.db is a lock_guard incomplete warning
        labelled with the database path."""
        out = signals(
            "WARNING",
            "hermes_state",
            "WAL lock guard incomplete for /home/u/.hermes/state.db: 1 of 2 guard range(s) not "
            "armed (foreign EXCLUSIVE holder or lock failure) — the WAL generation is "
            "partially unguarded",
        )
        assert kinds(out) == [("lock_guard", "incomplete", "warning")]
        assert out[0].fields["label"] == "/home/u/.hermes/state.db"

    def test_lock_guard_failed_to_arm(self) -> None:
        """Hermes' "WAL lock guard failed to arm" for state.db, with its traceback, is a lock_guard
        failed warning."""
        out = signals(
            "WARNING",
            "hermes_state",
            "WAL lock guard failed to arm for /home/u/.hermes/state.db (OSError while locking; "
            "guard ranges below may be unarmed)",
            tb=traceback(
                "PermissionError: [Errno 13] Permission denied",
                frame="/opt/hermes/hermes_state_lockguard.py",
            ),
        )
        assert kinds(out) == [("lock_guard", "failed", "warning")]

    def test_lock_guard_refusal_in_a_traceback(self) -> None:
        """hold(strict=True) raises WalGuardArmedIncompleteError: the writer refuses to run."""
        tb = traceback(
            "hermes_state_lockguard.WalGuardArmedIncompleteError: WAL lock guard could not arm "
            "1 of 2 ranges for /home/u/.hermes/state.db — refusing to run an unguarded state "
            "writer on a runtime that supports OFD locks (set HERMES_STATE_WAL_GUARD_BYPASS=1 "
            "to proceed degraded)",
            frame="/opt/hermes/hermes_state_lockguard.py",
        )
        out = signals("ERROR", "gateway.run", "Session store unavailable", tb=tb)
        assert kinds(out) == [("lock_guard", "refused", "error")]

    def test_lock_guard_of_another_database_is_not_ours(self) -> None:
        """A lock guard message about another Hermes database (kanban.db) is no signal."""
        assert (
            signals(
                "WARNING",
                "hermes_state",
                "WAL lock guard incomplete for /home/u/.hermes/kanban.db: 1 of 2 guard range(s) not "
                "armed (foreign EXCLUSIVE holder or lock failure) — the WAL generation is "
                "partially unguarded",
            )
            == []
        )

    @pytest.mark.parametrize(
        ("action", "expected"),
        [
            (
                "is already in WAL mode — leaving WAL in place (no live downgrade under "
                "concurrent openers)",
                ("wal_reset_bug", "library", "error"),
            ),
            (
                "using journal_mode=DELETE instead of enabling WAL",
                ("wal_reset_bug", "library", "warning"),
            ),
        ],
    )
    @pytest.mark.parametrize("between", ["", " (interpreter /opt/hermes/venv/bin/python3.11)"])
    def test_wal_reset_bug_of_the_linked_sqlite(
        self, action: str, expected: tuple[str, str, str], between: str
    ) -> None:
        """The linked SQLite's WAL-reset bug warning is a wal_reset_bug (library) signal: an error
        when WAL is left in place, a warning when Hermes falls back to DELETE; the version is
        kept. Matched by its stable parts, so 0.22's "(interpreter PATH)" after the version
        changes nothing."""
        out = signals(
            "WARNING",
            "hermes_state",
            f"state.db: linked SQLite 3.45.1{between} is vulnerable to the WAL-reset corruption "
            f"bug (https://sqlite.org/wal.html#walresetbug) — {action}. Upgrade to SQLite 3.51.3+ "
            "(or backports 3.50.7 / 3.44.6).",
        )
        assert kinds(out) == [expected]
        assert out[0].fields["version"] == "3.45.1"

    def test_wal_reset_bug_with_the_mode_left_alone(self) -> None:
        """0.22's third action (the journal mode could not be verified, left untouched) is a
        wal_reset_bug warning that does not claim DELETE mode."""
        [s] = signals(
            "WARNING",
            "hermes_state",
            "state.db: linked SQLite 3.40.1 (interpreter /usr/bin/python3) is vulnerable to the "
            "WAL-reset corruption bug (https://sqlite.org/wal.html#walresetbug) — journal mode "
            "could not be verified or exclusively switched; leaving the journal mode untouched. "
            "Upgrade to SQLite 3.51.3+.",
        )
        assert (s.kind, s.fields["rule"], s.effective_severity) == (
            "wal_reset_bug",
            "wal_reset_other",
            "warning",
        )
        assert "DELETE" not in s.summary

    def test_wal_reset_bug_of_another_database_is_not_ours(self) -> None:
        """The WAL-reset bug warning about another database (kanban.db) is no signal."""
        assert (
            signals(
                "WARNING",
                "hermes_state",
                "kanban.db: linked SQLite 3.45.1 is vulnerable to the WAL-reset corruption bug "
                "(https://sqlite.org/wal.html#walresetbug) — using journal_mode=DELETE instead of "
                "enabling WAL. Upgrade to SQLite 3.51.3+ (or backports 3.50.7 / 3.44.6).",
            )
            == []
        )

    def test_wal_reset_bug_printed_at_startup_reaches_the_journal(self) -> None:
        """hermes_cli's runtime check prints to stderr: only the unit's journal has it."""
        entry = {
            "MESSAGE": "[hermes] WARNING: SQLite 3.40.1 has the WAL-reset bug "
            "(https://sqlite.org/wal.html#walresetbug).",
            "_SYSTEMD_USER_UNIT": "hermes-gateway.service",
            "__REALTIME_TIMESTAMP": "1757257528701000",
        }
        (s,) = signals_from_journal(entry, TARGET)
        assert isinstance(s, Signal)
        assert (s.kind, s.key, s.effective_severity) == ("wal_reset_bug", "library", "warning")
        assert s.source == "journal:hermes-gateway.service"

    def test_sqlite3_shell_refused_for_salvage(self) -> None:
        """Hermes refusing a sqlite3 shell with the WAL-reset bug for salvage is a wal_reset_bug
        (cli) warning carrying the binary and its version."""
        out = signals(
            "WARNING",
            "hermes_cli.session_lost_and_found",
            "sqlite3 CLI /usr/bin/sqlite3 reports version 3.40.1, which still carries the "
            "WAL-reset opener bug; refusing to use it for salvage",
        )
        assert kinds(out) == [("wal_reset_bug", "cli", "warning")]
        assert (out[0].fields["binary"], out[0].fields["version"]) == ("/usr/bin/sqlite3", "3.40.1")


class TestNotSignals:
    @pytest.mark.parametrize(
        "text",
        [
            "",
            "\n\n",
            "garbage",
            "\x00\x00\x00",
            "Traceback (most recent call last):",
            log_line(WHEN, "INFO", "gateway.run", "Gateway started, 3 platforms"),
            log_line(WHEN, "INFO", "hermes_state", "state.db opened in WAL mode"),
            log_line(WHEN, "WARNING", "gateway.session", "Skipping invalid routing entry 'x': bad"),
            log_line(WHEN, "INFO", "run_agent", "user asked: why is the database locked?"),
        ],
    )
    def test_ordinary_lines(self, text: str) -> None:
        """Ordinary and garbage lines give nothing."""
        assert signals_from_log(parse_record(text), TARGET) == []

    @settings(max_examples=300, deadline=None)
    @given(st.text())
    def test_arbitrary_text_never_raises(self, text: str) -> None:
        """Any text, as a record or as a journal MESSAGE, is handled without raising."""
        for s in signals_from_log(text, TARGET, cron=CronSessions()):
            assert s.db == DB
        signals_from_journal({"MESSAGE": text}, TARGET)

    @settings(max_examples=200, deadline=None)
    @given(st.sampled_from(["WARNING", "ERROR"]), st.text(), st.text())
    def test_arbitrary_hermes_lines_never_raise(self, level: str, logger: str, msg: str) -> None:
        """Hermes-shaped lines with arbitrary logger and message never raise."""
        signals_from_log(log_line(WHEN, level, logger or "x", msg), TARGET)


class TestCron:
    def test_new_cron_session_is_observed_once(self) -> None:
        """A cron session id seen for the first time is a cron_started observation; the
        same id again is not."""
        cron = CronSessions()
        sid = "cron_d0aa05fd7f4a_20260910_100200"
        r = parse_record(log_line(WHEN, "INFO", "cron.scheduler", "running job", sid), AGENT_LOG)
        [obs] = signals_from_log(r, TARGET, cron=cron)
        assert obs == Observation(
            what="cron_started",
            db=DB,
            text=f"cron job d0aa05fd7f4a started (session {sid})",
            at=WHEN.timestamp(),
            fields={"session": sid, "job": "d0aa05fd7f4a", "source": "log:agent.log"},
        )
        assert signals_from_log(r, TARGET, cron=cron) == []

    def test_cron_session_in_message(self) -> None:
        """A cron id in the message counts too, next to the signal the line gives."""
        cron = CronSessions()
        sid = "cron_backup_nightly_20260910_030000"
        out = signals_from_log(
            record(
                "WARNING",
                "gateway.session",
                f"Session DB transcript append failed for {sid} (failure_count=1, "
                "pending=1); will retry: database is locked",
            ),
            TARGET,
            cron=cron,
        )
        assert [type(o).__name__ for o in out] == ["Observation", "Signal"]
        assert isinstance(out[0], Observation)
        assert out[0].fields["job"] == "backup_nightly"

    def test_no_cron_tracker_no_observation(self) -> None:
        """Without a tracker, cron ids give nothing (the function stays pure)."""
        r = record("INFO", "cron.scheduler", "x", "cron_a1_20260910_100200")
        assert signals_from_log(r, TARGET) == []
        assert cron_sessions(r) == ["cron_a1_20260910_100200"]

    def test_memory_is_bounded(self) -> None:
        """The tracker forgets the oldest ids beyond its bound."""
        cron = CronSessions(remember=2)
        for i in range(3):
            cron.observe(record("INFO", "c", "x", f"cron_j{i}_20260910_10020{i}"), TARGET)
        assert len(cron) == 2
        assert "cron_j0_20260910_100200" not in cron


class TestJournal:
    FALLBACK = (
        "[gateway] Warning: SQLite session store unavailable, falling back to JSONL: "
        "database is locked"
    )

    def entry(self, message: object) -> dict[str, object]:
        return {
            "MESSAGE": message,
            "_SYSTEMD_USER_UNIT": "hermes-gateway.service",
            "__REALTIME_TIMESTAMP": "1788793528000000",
            "__CURSOR": "s=1;i=2",
        }

    def test_jsonl_fallback(self) -> None:
        """The gateway's stdout fallback line is jsonl_fallback, from the unit's journal."""
        [s] = signals_from_journal(self.entry(self.FALLBACK), TARGET)
        assert isinstance(s, Signal)
        assert kinds([s]) == [("jsonl_fallback", "", "critical")]
        assert s.source == "journal:hermes-gateway.service"
        assert s.at == 1788793528.0
        assert s.summary == (
            "the gateway cannot use state.db and writes sessions to JSONL: database is locked"
        )

    def test_jsonl_fallback_with_corruption(self) -> None:
        """The fallback because state.db is malformed is corruption as well."""
        out = signals_from_journal(
            self.entry(self.FALLBACK.replace("database is locked", "file is not a database")),
            TARGET,
        )
        assert [s.kind for s in out if isinstance(s, Signal)] == ["jsonl_fallback", "corruption"]

    def test_message_as_bytes(self) -> None:
        """journalctl gives a non-UTF-8 MESSAGE as a list of byte values."""
        raw = [*self.FALLBACK.encode(), 0xFF]
        [s] = signals_from_journal(self.entry(raw), TARGET)
        assert isinstance(s, Signal)
        assert s.evidence == (self.FALLBACK + "\ufffd",)

    def test_hermes_log_line_in_journal(self) -> None:
        """A Hermes log line printed to stderr goes through the log rules, keeping its time."""
        line = log_line(WHEN, "ERROR", "gateway.run", "Supervised task x died: E()")
        [s] = signals_from_journal(self.entry(line), TARGET)
        assert isinstance(s, Signal)
        assert (s.kind, s.key, s.at) == ("task_died", "x", WHEN.timestamp())
        assert journal_record(self.entry(line)).logger == "gateway.run"

    def test_missing_fields(self) -> None:
        """An entry with no MESSAGE or timestamp gives nothing and does not raise."""
        assert signals_from_journal({}, TARGET) == []
        assert signals_from_journal({"MESSAGE": None, "__REALTIME_TIMESTAMP": "x"}, TARGET) == []


class TestStateDbRecord:
    def test_session_db_mention(self) -> None:
        """A message naming the Session DB is state.db code."""
        assert is_state_db_record(
            record("WARNING", "gateway.run", "Session DB flush: disk I/O error")
        )

    def test_plain_line_is_not(self) -> None:
        """A line with no state.db sign is not."""
        assert not is_state_db_record(record("WARNING", "gateway.run", "disk I/O error"))

    @pytest.mark.parametrize(
        "logger", ["hermes_state_health", "hermes_state_repair", "hermes_state_registry"]
    )
    def test_state_layer_modules_are_state_db_code(self, logger: str) -> None:
        """0.22's state layer logs under each module's own name (hermes_state_health, ...):
        a corruption error from it is a state.db corruption signal."""
        out = signals("ERROR", logger, "close failed: database disk image is malformed")
        assert kinds(out) == [("corruption", "", "critical")]

    def test_a_module_merely_starting_alike_is_not(self) -> None:
        """A logger named like the state layer without its underscore is not taken for it."""
        assert not is_state_db_record(record("WARNING", "hermes_statex", "disk I/O error"))


def _hermes_source(relpath: str) -> str:
    """Source of an installed hermes-agent module, read without importing it."""
    spec = importlib.util.find_spec("hermes_state")
    assert spec is not None, "hermes-agent is not installed"
    assert spec.origin is not None
    return (Path(spec.origin).parent / relpath).read_text(encoding="utf-8")


def _format_strings(source: str) -> list[str]:
    """Every logging / print format string in ``source``; f-string fields become %s."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            out.append(first.value)
        elif isinstance(first, ast.JoinedStr):
            out.append(
                "".join(str(v.value) if isinstance(v, ast.Constant) else "%s" for v in first.values)
            )
    return out


class TestRealHermesTexts:
    """The rules against the message texts in the installed hermes-agent 0.19.0 source,
    filled in the way Hermes fills them, so a transcription slip cannot hide."""

    @pytest.mark.parametrize(
        ("module", "phrase", "args", "logger", "expected"),
        [
            (
                "gateway/session.py",
                "routing save failed",
                ("database disk image is malformed",),
                "gateway.session",
                [("write_failures", "routing_save"), ("corruption", "")],
            ),
            (
                "gateway/session.py",
                "routing load failed",
                ("database is locked",),
                "gateway.session",
                [("write_failures", "routing_load")],
            ),
            (
                "run_agent.py",
                "append_message failed",
                ("database is locked",),
                "run_agent",
                [("write_failures", "append_message")],
            ),
            (
                "gateway/session.py",
                "transcript append failed",
                (SID, 3, 2, "disk I/O error"),
                "gateway.session",
                [("write_failures", "transcript_append"), ("corruption", "")],
            ),
            (
                "gateway/session.py",
                "pending queue full",
                (SID, 200),
                "gateway.session",
                [("messages_dropped", "")],
            ),
            (
                "gateway/run.py",
                "Supervised task %s died: %r",
                ("cron", ValueError("x")),
                "gateway.run",
                [("task_died", "cron")],
            ),
            (
                "gateway/run.py",
                "giving up restarts",
                ("cron", 5, 60),
                "gateway.run",
                [("task_died", "cron")],
            ),
            (
                "gateway/run.py",
                "Persisted transcript lagged",
                ("agent:main:cli", 3, 5),
                "gateway.run",
                [("write_failures", "transcript_lag")],
            ),
            (
                "hermes_state.py",
                "schema is malformed",
                ("malformed database schema (x)",),
                "hermes_state",
                [("self_repair", "schema_repair"), ("corruption", "")],
            ),
            (
                "hermes_state.py",
                "FTS-corruption error",
                ("vtable constructor failed",),
                "hermes_state",
                [("self_repair", "fts_rebuild")],
            ),
            (
                "hermes_state.py",
                "In-place FTS rebuild failed",
                ("database is locked",),
                "hermes_state",
                [("self_repair", "fts_rebuild_failed")],
            ),
            (
                "hermes_state.py",
                "In-place FTS rebuild made no progress",
                (),
                "hermes_state",
                [("self_repair", "fts_rebuild_failed")],
            ),
            (
                "hermes_state.py",
                "schema repair could not recover",
                ("/h/state.db", "/h/b"),
                "hermes_state",
                [("self_repair", "schema_repair_failed")],
            ),
            (
                "hermes_state.py",
                "WAL journal_mode unsupported",
                ("state.db", "locking protocol"),
                "hermes_state",
                [("unsafe_mount", "wal_fallback")],
            ),
        ],
    )
    def test_log_message(
        self,
        module: str,
        phrase: str,
        args: tuple[object, ...],
        logger: str,
        expected: list[tuple[str, str]],
    ) -> None:
        """Each 0.19.0 log text, formatted with Hermes' own format string, gives its signals."""
        [fmt] = {f for f in _format_strings(_hermes_source(module)) if phrase in f}
        out = signals("WARNING", logger, fmt % args)
        assert [(s.kind, s.key) for s in out] == expected

    def test_journal_fallback_print(self) -> None:
        """The gateway's own print() of the JSONL fallback gives jsonl_fallback."""
        [fmt] = {
            f
            for f in _format_strings(_hermes_source("gateway/session.py"))
            if "falling back to JSONL" in f
        }
        out = signals_from_journal({"MESSAGE": fmt % ("database is locked",)}, TARGET)
        assert [s.kind for s in out if isinstance(s, Signal)] == ["jsonl_fallback"]


class TestRuleTexts:
    @pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
    @settings(max_examples=60, deadline=None)
    @given(data=st.data())
    def test_every_match_holds_one_of_the_rules_texts(
        self, rule: Rule, data: st.DataObject
    ) -> None:
        """A rule's pattern is searched only in messages holding one of the texts taken
        from it: every text its pattern matches holds one, so none is skipped wrongly."""
        needles = _needles(rule.pattern)
        if needles is None:
            return
        text = data.draw(st.from_regex(rule.pattern))
        assert any(n in text for n in needles), (rule.name, needles, text)

    @pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
    @settings(max_examples=60, deadline=None)
    @given(data=st.data())
    def test_every_match_is_found_by_the_trigger(self, rule: Rule, data: st.DataObject) -> None:
        """Only a message the trigger finds is checked against the rules: every text a
        rule's pattern matches holds a trigger text, or the rule would never be tried."""
        text = data.draw(st.from_regex(rule.pattern))
        assert _RULE_TRIGGER_RE.search(text), (rule.name, text)

    def test_non_ascii_records_give_what_ascii_ones_give(self) -> None:
        """Case-insensitive texts are found in a lower-cased copy only for ASCII text;
        a record with other characters takes the searches and gives the same signals."""
        for message in (
            "state.db routing save failed: Database Disk Image Is Malformed",
            "Session DB append_message failed: DATABASE IS LOCKED",
        ):
            plain = signals("WARNING", "gateway.session", message)
            accented = signals("WARNING", "gateway.session", message + " é")
            assert plain
            assert kinds(plain) == kinds(accented)


def _flood(n: int) -> list[LogRecord]:
    out = []
    for i in range(n):
        when = WHEN + dt.timedelta(milliseconds=i)
        if i % 3 == 0:
            text = log_line(
                when,
                "WARNING",
                "gateway.session",
                f"state.db routing save failed: database disk image is malformed #{i}",
            )
        elif i % 3 == 1:
            text = log_line(
                when, "INFO", "agent.loop", f"turn {i}", f"cron_job{i % 5}_20260907_170000"
            )
        else:
            count = i // 3
            text = log_line(
                when,
                "WARNING",
                "run_agent",
                f"Session DB transcript append failed for {SID} (failure_count={count}, "
                f"pending=3); will retry: database is locked",
            )
        out.append(parse_record(text, AGENT_LOG))
    return out


class TestSignalBatch:
    def test_merged_book_is_the_book_of_one_signal_at_a_time(self) -> None:
        """A batch merges the signals of one fingerprint and severity into one that
        counts them: the incident book it gives has the same incidents, counts, first
        and last times, severities, summaries and evidence as recording each signal of
        each record in turn; cron observations are all kept, in order."""
        records = _flood(300)
        one_by_one = IncidentBook(None)
        cron = CronSessions()
        singles: list[Found] = []
        for r in records:
            singles += signals_from_record(r, TARGET, cron=cron, now=1.0)
        for s in singles:
            if isinstance(s, Signal):
                one_by_one.record(s)
        batch = SignalBatch(TARGET, cron=CronSessions(), now=1.0)
        for r in records:
            batch.add(r)
        merged = batch.signals()
        book = IncidentBook(None)
        for s in merged:
            if isinstance(s, Signal):
                book.record(s)
        assert len(merged) < len(singles) / 10
        assert [o for o in merged if isinstance(o, Observation)] == [
            o for o in singles if isinstance(o, Observation)
        ]

        def view(b: IncidentBook) -> list[tuple[object, ...]]:
            return [
                (
                    i.kind,
                    i.key,
                    i.count,
                    i.first_seen,
                    i.last_seen,
                    i.severity,
                    i.summary,
                    i.evidence,
                    i.fields,
                )
                for i in b.incidents.values()
            ]

        assert view(book) == view(one_by_one)
        assert sum(i.count for i in book.incidents.values()) == 100 + 100 + 100

    def test_escalation_inside_one_batch(self) -> None:
        """Transcript appends failing 9 then 10+ times in one batch: two merged signals
        (warning, then error), and the incident escalates as one signal at a time does."""
        batch = SignalBatch(TARGET, now=1.0)
        for count in range(1, 13):
            batch.add(
                record(
                    "WARNING",
                    "run_agent",
                    f"Session DB transcript append failed for {SID} (failure_count="
                    f"{count}, pending=1); will retry: disk full",
                )
            )
        merged = [s for s in batch.signals() if isinstance(s, Signal)]
        assert [(s.effective_severity, s.count) for s in merged] == [("warning", 9), ("error", 3)]
        book = IncidentBook(None)
        changes = [u.change for s in merged if (u := book.record(s)) is not None]
        assert changes == ["opened", "escalated"]
        (inc,) = book.incidents.values()
        assert (inc.count, inc.severity) == (12, "error")


def test_a_merged_signal_carries_all_the_evidence_an_incident_keeps() -> None:
    """A merged signal keeps the evidence of as many first and last records as the
    incident book keeps lines, so merging never changes an incident's evidence."""
    assert MERGED_EVIDENCE_RECORDS >= EVIDENCE_KEEP
