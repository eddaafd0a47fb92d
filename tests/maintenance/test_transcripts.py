"""Diverted transcripts imported into a repaired state.db (maintenance/transcripts.py).

The database is a real Hermes file (``hermes_state.SessionDB`` of 0.19.0); the diverted
lines have the two shapes Hermes since 0.20 writes (docs/hermes.md): the agent's rows
(17 keys, often without a timestamp) and the gateway's message dicts with a
``session_meta`` header and a copy in the ``pending_messages/`` spool. What was imported
is read back by Hermes' own ``SessionDB.get_messages`` in a Hermes process.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab.corruption import phantom_row
from lab.hermes_fixtures import MAIN_EXTERNAL, TINY, hermes_python, make_home, writer_env
from statewarden.maintenance import transcripts
from statewarden.maintenance.transcripts import import_diverted
from tests.support.maintenance import ctl, maintenance_config, report_of, session_ids
from tests.support.transcripts import NEW, write_jsonl

EXISTING = "20260829_104000_2265b1"  # a session of the TINY fixture


def agent_row(role: str, content: Any, **extra: Any) -> dict[str, Any]:
    """A line in the agent's divert shape (key order as Hermes writes it)."""
    row: dict[str, Any] = {
        "role": role,
        "content": content,
        "tool_name": None,
        "tool_calls": None,
        "tool_call_id": None,
        "finish_reason": None,
        "reasoning": None,
        "reasoning_content": None,
        "reasoning_details": None,
        "codex_reasoning_items": None,
        "codex_message_items": None,
        "_compressed_summary": False,
        "timestamp": None,
        "api_content": None,
        "display_kind": None,
        "display_metadata": None,
        "platform_message_id": None,
    }
    row.update(extra)
    return row


CALLS = [
    {
        "id": "call_9",
        "type": "function",
        "function": {"name": "terminal", "arguments": '{"cmd": "ls"}'},
    }
]


def spool(home: Path, name: str, sid: str, message: dict[str, Any], ts: int = 1796160000) -> None:
    folder = home / "pending_messages"
    folder.mkdir(exist_ok=True)
    entry = {
        "session_key": sid,
        "reason": "transcript_cap_drop",
        "ts": ts,
        "seq": 0,
        "data": {"session_id": sid, "message": message},
    }
    (folder / f"pending-{name}.json").write_text(json.dumps(entry))


def count(db: Path, sql: str, *args: Any) -> int:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        value = conn.execute(sql, args).fetchall()[0][0]
        assert isinstance(value, int)
        return value
    finally:
        conn.close()


def hermes_messages(home: Path, sid: str) -> list[dict[str, Any]]:
    """The session as Hermes' own SessionDB reads it."""
    code = (
        "import json, sys; from hermes_state import SessionDB;"
        " print(json.dumps(SessionDB().get_messages(sys.argv[1]), default=str))"
    )
    out = subprocess.run(
        [hermes_python(), "-c", code, sid],
        env=writer_env(home),
        capture_output=True,
        text=True,
        check=True,
    )
    return list(json.loads(out.stdout))


@pytest.fixture
def diverted(hermes_home: Path) -> Path:
    """Both shapes: agent rows for an existing session, gateway rows (and the spool's
    copies of them) for a session the file does not have."""
    write_jsonl(
        hermes_home / "sessions" / f"{EXISTING}.jsonl",
        [
            agent_row("user", "what is in the folder?"),
            agent_row("assistant", "", tool_calls=CALLS, reasoning="look first"),
            agent_row("tool", "a.txt b.txt", tool_name="terminal", tool_call_id="call_9"),
            agent_row("assistant", "two files", timestamp=1796159000.5, platform_message_id="77"),
        ],
    )
    meta = {
        "role": "session_meta",
        "tools": [],
        "model": "m",
        "platform": "telegram",
        "timestamp": 1796160000.0,
    }
    user = {
        "role": "user",
        "content": "hello again",
        "timestamp": 1796160001.0,
        "message_id": "501",
    }
    reply = {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "timestamp": 1796160002.0,
    }
    write_jsonl(hermes_home / "sessions" / f"{NEW}.jsonl", [meta, user, reply])
    spool(hermes_home, "a1", NEW, user)
    spool(hermes_home, "a2", NEW, reply)
    return hermes_home


class TestImport:
    def test_both_shapes_in_hermes_row_shape(self, diverted: Path) -> None:
        """Diverted JSONL transcripts and the pending_messages spool are imported in Hermes' row
        shape (an existing session and a new one), the spool's copies found already present, the
        sources unchanged, and Hermes reads the rows back as it wrote them."""
        db = diverted / "state.db"
        before = count(db, "SELECT count(*) FROM messages WHERE session_id = ?", EXISTING)
        counted = count(db, "SELECT message_count FROM sessions WHERE id = ?", EXISTING)
        sources = {p: p.read_bytes() for p in transcripts.pending_sources(diverted)}
        result = import_diverted(db, diverted)
        assert result.error is None
        assert result.imported == 6
        by_sid = {f.session_id: f for f in result.files if f.path.endswith(".jsonl")}
        assert by_sid[EXISTING].imported == 4
        assert by_sid[NEW].imported == 2
        assert by_sid[NEW].new_session is True
        assert by_sid[NEW].skipped == {"session header (no message)": 1}
        (spooled,) = [f for f in result.files if f.path.endswith("pending_messages")]
        assert (spooled.imported, spooled.already_present) == (0, 2)  # copies of the JSONL
        assert {p: p.read_bytes() for p in sources} == sources  # never changed
        assert (
            count(db, "SELECT count(*) FROM messages WHERE session_id = ?", EXISTING) == before + 4
        )
        assert count(db, "SELECT message_count FROM sessions WHERE id = ?", EXISTING) == counted + 4
        # Hermes reads them back as it wrote them.
        rows = hermes_messages(diverted, EXISTING)[-4:]
        assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]
        assert rows[1]["tool_calls"] == CALLS
        assert rows[1]["reasoning"] == "look first"
        assert rows[2]["tool_call_id"] == "call_9"
        assert rows[3]["timestamp"] == 1796159000.5
        assert rows[3]["platform_message_id"] == "77"
        assert [r["timestamp"] for r in rows[:3]] == sorted(r["timestamp"] for r in rows[:3])
        new = hermes_messages(diverted, NEW)
        assert [(r["role"], r["content"]) for r in new] == [
            ("user", "hello again"),
            ("assistant", [{"type": "text", "text": "hi"}]),
        ]
        assert new[0]["platform_message_id"] == "501"
        # The schema's own triggers kept the full-text copies.
        assert count(db, "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'folder'") == 1

    def test_a_second_import_adds_nothing(self, diverted: Path) -> None:
        """A second import adds no row: every message is found already present."""
        db = diverted / "state.db"
        assert import_diverted(db, diverted).imported == 6
        total = count(db, "SELECT count(*) FROM messages")
        again = import_diverted(db, diverted)
        assert again.error is None
        assert again.imported == 0
        assert sum(f.already_present for f in again.files) == 8  # 6 + the spool's 2 copies
        assert count(db, "SELECT count(*) FROM messages") == total

    def test_rows_the_file_already_holds_are_not_imported_twice(self, hermes_home: Path) -> None:
        """A line whose message is in the file (same role, content, tools, time) is skipped;
        a message said twice in the transcript but stored once is imported once."""
        db = hermes_home / "state.db"
        conn = apsw.Connection(str(db))
        (ts, content) = conn.execute(
            "SELECT timestamp, content FROM messages WHERE session_id = ? AND role = 'user'"
            " ORDER BY id LIMIT 1",
            (EXISTING,),
        ).fetchall()[0]
        conn.close()
        write_jsonl(
            hermes_home / "sessions" / f"{EXISTING}.jsonl",
            [
                {"role": "user", "content": content, "timestamp": ts},  # stored already
                {"role": "user", "content": "ok"},
                {"role": "user", "content": "ok"},
            ],
        )
        result = import_diverted(db, hermes_home)
        (f,) = result.files
        assert (f.imported, f.already_present) == (2, 1)

    def test_odd_lines_are_skipped_and_counted(self, hermes_home: Path) -> None:
        """Lines that are not JSON objects, have no role, or no content and no tool call are skipped
        and counted by reason; the good line is imported."""
        write_jsonl(
            hermes_home / "sessions" / f"{EXISTING}.jsonl",
            [
                "not json at all",
                "[1, 2]",
                {"content": "no role"},
                {"role": ""},
                {"role": "assistant", "content": None},
                "[" * 100_000,
                {"role": "user", "content": "kept", "timestamp": "2026-11-30T22:00:00"},
            ],
        )
        result = import_diverted(hermes_home / "state.db", hermes_home)
        (f,) = result.files
        assert f.imported == 1
        assert f.skipped == {"not a JSON object": 3, "no role": 2, "no content and no tool call": 1}

    def test_a_line_the_file_refuses_is_skipped_alone(self, diverted: Path) -> None:
        """A row the file refuses (here a trigger aborts it) is skipped and counted; the
        other lines go in, and the session's counts match what went in."""
        db = diverted / "state.db"
        conn = apsw.Connection(str(db))
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN new.content = 'hello again'"
            " BEGIN SELECT RAISE(ABORT, 'refused by the file'); END"
        )
        conn.close()
        total = count(db, "SELECT count(*) FROM messages")
        result = import_diverted(db, diverted)
        assert result.error is None
        assert result.imported == 5
        by_sid = {f.session_id: f for f in result.files if f.path.endswith(".jsonl")}
        assert by_sid[NEW].skipped == {
            "session header (no message)": 1,
            "refused by the file (a constraint or trigger)": 1,
        }
        assert count(db, "SELECT count(*) FROM messages") == total + 5
        assert count(db, "SELECT message_count FROM sessions WHERE id = ?", NEW) == 1

    def test_planted_and_odd_files_are_left_alone(self, hermes_home: Path) -> None:
        """A symlink is not followed, a FIFO is not opened for reading (no hang), a file
        over the size limit is not read; each is named in the report."""
        sessions = hermes_home / "sessions"
        sessions.mkdir()
        secret = hermes_home / "secret.txt"
        secret.write_text(json.dumps({"role": "user", "content": "secret"}) + "\n")
        (sessions / "planted.jsonl").symlink_to(secret)
        os.mkfifo(sessions / "fifo.jsonl")
        write_jsonl(sessions / "big.jsonl", [{"role": "user", "content": "x" * 200}])
        limits = transcripts.ImportLimits(max_file_bytes=100)
        result = import_diverted(hermes_home / "state.db", hermes_home, limits)
        assert result.imported == 0
        notes = sorted(result.not_imported)
        assert notes[0].endswith("big.jsonl: 232 bytes, over the 100-byte limit")
        assert notes[1].endswith("fifo.jsonl: not a regular file")
        assert "planted.jsonl: Too many levels of symbolic links" in notes[2]

    def test_nothing_to_import(self, hermes_home: Path) -> None:
        """With nothing diverted, the import reports no files, no error and nothing imported."""
        result = import_diverted(hermes_home / "state.db", hermes_home)
        assert (result.files, result.error, result.imported) == ([], None, 0)


@pytest.fixture
def maint_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


class TestMaintenanceImports:
    """A real maintenance run on a phantom row: the import happens once Hermes runs
    again, after the restart and the post-check, and is in the run's report."""

    def _diverted_phantom(self, tmp_path: Path) -> Path:
        case = phantom_row(tmp_path / "home", TINY)
        sid = session_ids(case.db)[0]
        write_jsonl(
            case.db.parent / "sessions" / f"{sid}.jsonl",
            [
                agent_row("user", "written while the file was unusable", timestamp=1796160100.0),
                agent_row("assistant", "and kept in the JSONL", timestamp=1796160101.0),
            ],
        )
        return case.db

    def test_repair_imports_what_was_diverted(self, maint_config: Path, tmp_path: Path) -> None:
        """A repair imports the diverted transcripts once, as one import step, and a later run on
        the healthy file imports nothing twice."""
        db = self._diverted_phantom(tmp_path)
        proc = ctl("--db", str(db), "--yes", "--json")
        assert proc.returncode == 0, proc.stderr
        rep = report_of(proc)
        assert rep["outcome"] == "repaired"
        assert rep["imported"]["imported"] == 2
        assert rep["imported"]["error"] is None
        assert [s["step"] for s in rep["steps"]].count("import") == 1
        assert (
            count(
                db,
                "SELECT count(*) FROM messages WHERE content = ?",
                "written while the file was unusable",
            )
            == 1
        )
        text = ctl("--db", str(db), "--yes")  # healthy now: nothing swapped, nothing imported
        assert text.returncode == 0, text.stderr
        assert (
            count(db, "SELECT count(*) FROM messages WHERE content = ?", "and kept in the JSONL")
            == 1
        )

    def test_no_import_keeps_them_out(self, maint_config: Path, tmp_path: Path) -> None:
        """--no-import repairs without importing, and the report's notes say so."""
        db = self._diverted_phantom(tmp_path)
        proc = ctl("--db", str(db), "--yes", "--json", "--no-import")
        assert proc.returncode == 0, proc.stderr
        rep = report_of(proc)
        assert rep["imported"] is None
        assert "diverted transcripts not imported (--no-import)" in rep["notes"]
        assert (
            count(db, "SELECT count(*) FROM messages WHERE content = ?", "and kept in the JSONL")
            == 0
        )


class TestBadInput:
    """A bad line is skipped (or its time placed) alone; it never cancels the others."""

    def test_every_bad_line_is_counted_and_the_good_ones_go_in(
        self, hermes_home: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A year-1 timestamp, a lone surrogate, an integer over 2**63, bytes that are not
        UTF-8, an overlong line and content nested 990 deep (it parses, but Python's
        encoder fails on it: it once failed the whole import): each counted by reason,
        every good line imported."""
        monkeypatch.setattr(transcripts, "MAX_LINE_BYTES", 4096)
        path = hermes_home / "sessions" / f"{NEW}.jsonl"
        write_jsonl(
            path,
            [
                {"role": "user", "content": "hello", "timestamp": "0001-01-01T00:00:00"},
                '{"role": "user", "content": "\\ud83d"}',
                {"role": "user", "content": 2**63 + 1},
                {"role": "user", "content": "big", "timestamp": 10**400},
                {"role": "user", "content": "x" * 5000},
                '{"role": "user", "content": ' + "[" * 990 + "]" * 990 + "}",
                {"role": "assistant", "content": "kept", "timestamp": 1796160002.0},
            ],
        )
        with path.open("ab") as out:
            out.write(b'{"role": "user", "content": "\xff\xfe"}\n')
            out.write(json.dumps({"role": "user", "content": "last"}).encode() + b"\n")
        result = import_diverted(hermes_home / "state.db", hermes_home)
        assert result.error is None
        (f,) = result.files
        assert f.skipped == {
            "text that is not valid UTF-8 (a lone surrogate)": 1,
            "an integer outside SQLite's 64 bits": 1,
            "not a JSON object": 3,  # the overlong line, not UTF-8, nested too deep
        }
        assert f.odd_timestamps == 2
        assert f.imported == 4  # hello, big, kept, last
        got = hermes_messages(hermes_home, NEW)
        assert [r["content"] for r in got] == ["hello", "big", "kept", "last"]
        # The unusable times are placed after the row before (the session's newest).
        assert got[1]["timestamp"] > got[0]["timestamp"]

    def test_a_session_file_name_sqlite_cannot_store_is_named(self, hermes_home: Path) -> None:
        """A transcript whose file name is not UTF-8 is named and left alone."""
        folder = hermes_home / "sessions"
        folder.mkdir()
        with open(os.fsencode(folder) + b"/\xff.jsonl", "w") as f:
            f.write('{"role": "user", "content": "x"}\n')
        write_jsonl(folder / f"{NEW}.jsonl", [{"role": "user", "content": "fine"}])
        result = import_diverted(hermes_home / "state.db", hermes_home)
        assert result.imported == 1
        assert [n for n in result.not_imported if "no session id SQLite can store" in n]


class TestIds:
    """A message's id is what it is, not where its file sits or what sorts before it."""

    def test_a_moved_home_imports_nothing_twice(self, diverted: Path, tmp_path: Path) -> None:
        """The home imported, then moved (a new path): a second import adds nothing."""
        assert import_diverted(diverted / "state.db", diverted).imported == 6
        moved = tmp_path / "moved-home"
        os.rename(diverted, moved)
        total = count(moved / "state.db", "SELECT count(*) FROM messages")
        again = import_diverted(moved / "state.db", moved)
        assert (again.imported, again.error) == (0, None)
        assert count(moved / "state.db", "SELECT count(*) FROM messages") == total

    def test_a_spool_entry_that_sorts_first_changes_nothing(self, diverted: Path) -> None:
        """A new spool entry whose random name sorts before the others: only it goes in."""
        db = diverted / "state.db"
        assert import_diverted(db, diverted).imported == 6
        spool(diverted, "0000", NEW, {"role": "user", "content": "one more", "timestamp": 5.0})
        again = import_diverted(db, diverted)
        assert again.imported == 1
        assert count(db, "SELECT count(*) FROM messages WHERE content = 'one more'") == 1

    def test_ids_on_a_current_hermes_file(self, tmp_path: Path) -> None:
        """On a file with ``display_metadata`` (current Hermes): each row carries its id,
        a second import from a moved home adds nothing, and rows an older version wrote
        (its id key hashed the path) are matched by their content."""
        home = make_home(tmp_path / "main", MAIN_EXTERNAL)
        lines = [{"role": "user", "content": "said twice"}] * 2 + [
            {"role": "assistant", "content": "once", "timestamp": 1796160002.0}
        ]
        write_jsonl(home / "sessions" / f"{NEW}.jsonl", lines)
        assert import_diverted(home / "state.db", home).imported == 3
        ids = count(
            home / "state.db",
            "SELECT count(DISTINCT json_extract(display_metadata, '$.diverted_message_id'))"
            " FROM messages WHERE session_id = ?",
            NEW,
        )
        assert ids == 3
        moved = tmp_path / "moved"
        os.rename(home, moved)
        assert import_diverted(moved / "state.db", moved).imported == 0
        conn = apsw.Connection(str(moved / "state.db"))
        conn.execute(
            "UPDATE messages SET display_metadata = replace(display_metadata,"
            " 'diverted_message_id', 'diverted_recovery_id')"
        )
        conn.close()
        again = import_diverted(moved / "state.db", moved)
        assert (again.imported, again.error) == (0, None)
        assert again.files[0].already_present == 3

    def test_a_stopped_import_goes_on_where_it_stopped(
        self, hermes_home: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Small transactions and a time limit: each import gets a batch in, what is in
        stays in, and the next one goes on; no line twice."""
        monkeypatch.setattr(transcripts, "BATCH_LINES", 2)
        rows = [{"role": "user", "content": f"m{i}"} for i in range(5)]
        write_jsonl(hermes_home / "sessions" / f"{NEW}.jsonl", rows + rows[:1])
        db = hermes_home / "state.db"
        limits = transcripts.ImportLimits(time_limit_s=0)
        got = []
        for _ in range(5):
            result = import_diverted(db, hermes_home, limits)
            got.append(result.imported)
            if result.stopped is None:
                break
            assert "maintenance.import_time_limit" in result.stopped
        assert got == [2, 2, 2]
        assert count(db, "SELECT count(*) FROM messages WHERE session_id = ?", NEW) == 6
        assert count(db, "SELECT message_count FROM sessions WHERE id = ?", NEW) == 6


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: another user's files")
class TestAsRoot:
    """Root reads only what the database's owner could: no folder symlink, no file of
    another user."""

    def test_a_symlinked_sessions_folder_is_not_followed(self, hermes_home: Path) -> None:
        """``sessions`` is a symlink to a folder only root may read: nothing read from it."""
        private = hermes_home.parent / "root-only"
        write_jsonl(private / f"{NEW}.jsonl", [{"role": "user", "content": "secret"}])
        private.chmod(0o700)
        (hermes_home / "sessions").symlink_to(private)
        assert transcripts.pending_sources(hermes_home) == [hermes_home / "sessions"]
        result = import_diverted(hermes_home / "state.db", hermes_home)
        assert result.imported == 0
        (note,) = result.not_imported
        assert "not followed" in note
        assert (
            count(
                hermes_home / "state.db", "SELECT count(*) FROM messages WHERE content = 'secret'"
            )
            == 0
        )

    def test_a_file_of_another_user_is_not_read(self, hermes_home: Path) -> None:
        """A transcript owned by someone else than the database's owner is named, unread."""
        path = hermes_home / "sessions" / f"{NEW}.jsonl"
        write_jsonl(path, [{"role": "user", "content": "theirs"}])
        os.chown(path, 65534, 65534)
        result = import_diverted(hermes_home / "state.db", hermes_home)
        assert result.imported == 0
        (note,) = result.not_imported
        assert "owned by uid 65534, not by the database's owner (uid 0)" in note
