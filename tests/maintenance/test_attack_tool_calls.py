"""A message whose ``tool_calls`` is JSON nested deeper than Python's parser goes (a
hostile row), counted into its session by a merge and by --apply-captures. Real files:
Hermes 0.22's state.db moved aside by Hermes 0.22 itself, Hermes' own main image and
WAL for the capture."""

from __future__ import annotations

import shutil
from pathlib import Path

import apsw
import pytest

from lab.hermes_fixtures import NEWEST, TINY, built_db, make_home
from tests.support.captures import capture_of, image_and_wal
from tests.support.cli import run_ctl
from tests.support.maintenance import maintenance_config, rows, run_maintenance
from tests.support.merging import report_of
from tests.support.vanishing import damage, hermes_starts_fresh

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


def deep_tool_calls(db: Path) -> None:
    """Each session of ``db`` gets one more message whose tool_calls is ``DEEP`` (and
    its counts as Hermes keeps them: one message, one tool call more)."""
    conn = apsw.Connection(str(db))
    with conn:
        conn.execute(
            "INSERT INTO messages (session_id, role, content, tool_calls, timestamp)"
            " SELECT id, 'assistant', 'calling', ?, started_at + 1 FROM sessions",
            (DEEP,),
        )
        conn.execute(
            "UPDATE sessions SET message_count = message_count + 1,"
            " tool_call_count = tool_call_count + 1"
        )
    conn.close()


def test_a_merge_counts_a_deeply_nested_tool_calls_as_one(tmp_path: Path, config: Path) -> None:
    """Invariant: bad input is never a traceback. The old file's sessions Hermes carried
    on in the fresh one each get a message whose tool_calls nests 100 000 deep: the
    merge counted it with json.loads and ended in "unexpected RecursionError". Counted
    as one tool call now (set, not a list Python can read), merged, and check passes."""
    home = make_home(tmp_path / "hermes", NEWEST)
    db = home / "state.db"
    deep_tool_calls(db)
    damage(db, "zeroed")
    old = hermes_starts_fresh(home, sessions=5, messages=20, seed=1)  # 5 shared sessions
    proc = run_maintenance("--db", str(db), "--merge-from", str(old), "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    merge = report_of(proc)["merge"]
    assert merge["sessions_shared"] == 5
    assert len(rows(db, "SELECT id FROM messages WHERE tool_calls = ?", (DEEP,))) == 12
    assert run_ctl("check", "--db", str(db)).exit_code == 0


def test_apply_captures_counts_a_deeply_nested_tool_calls_as_one(
    tmp_path: Path, config: Path
) -> None:
    """The same row lost by the live file and held by a retired WAL capture: it comes
    back, counted into its session, instead of "unexpected RecursionError"."""
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    shutil.copyfile(built_db(TINY), db)
    deep_tool_calls(db)
    image, wal = image_and_wal(db, tmp_path, new_messages=1)  # a copy of the newest
    capture_of(home, image, wal)
    deep = len(rows(db, "SELECT id FROM messages WHERE tool_calls = ?", (DEEP,)))
    proc = run_maintenance("--db", str(db), "--apply-captures", "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["table"] for r in report_of(proc)["captures"]["rows"]] == ["messages"]
    assert len(rows(db, "SELECT id FROM messages WHERE tool_calls = ?", (DEEP,))) == deep + 1
    assert run_ctl("check", "--db", str(db)).exit_code == 0
