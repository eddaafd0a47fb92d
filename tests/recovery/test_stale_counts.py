"""A session row older than its messages (a lost write on a ``sessions`` leaf): its
``message_count`` is stale. ``recover`` names it per table (``tables.sessions.stale``)
and in ``count_mismatches``; where every message of the session came back and all are
active, the true count is known (Hermes counts each message it stores into its session
in the same transaction), so it is written and the entry says so (``proven``). Any
other disagreeing count is written as the messages recovered, so that the output
passes ``check``, the count the file held kept in the entry. The row's other columns
may be as old: still a loss, never "no loss".
"""

from __future__ import annotations

from pathlib import Path

from lab import corruption, lost_writes
from lab.corruption import table_rows as rows
from statewarden.recovery.check import check_database
from tests.support.recovery import but_the_count, recover_json


def test_a_stale_count_is_written_true_when_every_message_came_back(tmp_path: Path) -> None:
    """Hermes appends six messages to its busiest session; the sessions leaf that
    changed goes back to its image from before. The output holds the count Hermes
    wrote, the entry says it was written, the sessions table counts one stale row.
    (The row was written with the old count, unflagged, and the table said 0.)"""
    case = lost_writes.reverted(tmp_path / "db", "append", ("sessions",))
    (rowid,) = case.unreached["sessions"]
    [(stored,)] = rows(case.db, f"SELECT message_count FROM sessions WHERE rowid = {rowid}")
    [(true,)] = rows(case.pristine, f"SELECT message_count FROM sessions WHERE rowid = {rowid}")
    assert int(str(true)) == int(str(stored)) + 6
    code, rep, out = recover_json(case, tmp_path)
    assert (code, rep["loss_detected"]) == (3, True)
    (m,) = rep["count_mismatches"]
    assert (m["table"], m["rowid"], m["what"]) == ("sessions", rowid, "stale")
    assert (m["message_count"], m["messages"], m["written"], m["proven"]) == (
        stored,
        true,
        true,
        True,
    )
    assert rep["tables"]["sessions"]["stale"] == 1
    assert rep["tables"]["messages"]["stale"] == 0
    sql = f"SELECT rowid, * FROM sessions WHERE rowid = {rowid}"
    assert rows(out, sql) == rows(case.pristine, sql)
    assert rep["verification"]["ok"] is True


def test_a_stale_count_is_kept_when_messages_are_lost_too(tmp_path: Path) -> None:
    """The same, with the messages leaves back as well: six messages are gone, so the
    count the recovered messages give is no proof of the true one. The row is kept as
    stored but for its count, named stale; the count written is the messages recovered,
    not proven, and the output passes check."""
    case = lost_writes.reverted(tmp_path / "db", "append", ("sessions", "messages"))
    (rowid,) = case.unreached["sessions"]
    code, rep, out = recover_json(case, tmp_path)
    assert (code, rep["loss_detected"]) == (3, True)
    sql = f"SELECT rowid, * FROM sessions WHERE rowid = {rowid}"
    assert but_the_count(out, sql) == but_the_count(case.db, sql)
    for m in rep["count_mismatches"]:
        assert (m["written"], m["proven"]) == (m["messages"], False)
    assert check_database(out, tmp_path).damage == "none"
    assert rep["tables"]["sessions"]["stale"] == len(
        [m for m in rep["count_mismatches"] if m["what"] == "stale"]
    )


def test_a_stale_row_that_is_another_session_is_never_given_a_count(tmp_path: Path) -> None:
    """The reused rowid of ``test_lost_writes``: the row is the deleted session while
    the indexes hold the new one. Its count is not written from anyone's messages."""
    case = lost_writes.reverted(tmp_path / "db", "reuse", ("sessions",))
    (rowid,) = case.unreached["sessions"]
    code, rep, out = recover_json(case, tmp_path)
    assert (code, rep["loss_detected"]) == (3, True)
    sql = f"SELECT rowid, * FROM sessions WHERE rowid = {rowid}"
    assert but_the_count(out, sql) == but_the_count(case.db, sql)
    assert [m["proven"] for m in rep["count_mismatches"]] == [False]
    assert rep["tables"]["sessions"]["stale"] == 1


def test_the_output_passes_check_when_messages_are_lost(tmp_path: Path) -> None:
    """A zeroed messages leaf: the sessions whose messages it held count more than the
    output holds. Each count is written as the messages recovered, so the output passes
    check (it called recover's own output base damage); the report keeps the counts the
    file held, and the loss."""
    case = corruption.zeroed_leaf(tmp_path / "db")
    code, rep, out = recover_json(case, tmp_path)
    assert (code, rep["loss_detected"]) == (3, True)
    missing = [m for m in rep["count_mismatches"] if m["what"] == "messages missing"]
    assert missing
    for m in missing:
        assert m["message_count"] > m["messages"] == m["written"]
        assert not m["proven"]
    assert check_database(out, tmp_path).damage == "none"
