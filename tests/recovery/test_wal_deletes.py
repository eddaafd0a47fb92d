"""Committed ``-wal`` transactions SQLite does not replay, read as whole transactions:
what they deleted stays deleted, what they added comes back.

Hermes deletes a session (and its messages) between appends and is killed with every
commit in the ``-wal``; one bit of a frame's page image is then flipped, so SQLite
drops that commit and every later one. Ground truth: the same ``-wal`` undamaged,
replayed by SQLite.
"""

from __future__ import annotations

from pathlib import Path

from lab import corruption
from lab.corruption import table_rows, wal_frames
from lab.hermes_fixtures import SMALL, built_db
from lab.wal_damage import set_frame_bit, table_leaves, wal_with_delete
from tests.support.recovery import ordered_rows as table
from tests.support.recovery import recover_quietly as recover

TABLES = ("sessions", "messages")


def test_a_deleted_session_stays_deleted(tmp_path: Path) -> None:
    """The first frame is damaged, so SQLite drops every commit, the delete among them.
    The output holds exactly the rows Hermes' commits left: the deleted session and its
    messages are not brought back from the file, the 8 appended messages are there; no
    loss (exit 0)."""
    case, gone = wal_with_delete(tmp_path / "home")
    set_frame_bit(Path(f"{case.db}-wal"), 0)
    code, report, out = recover(case.db, tmp_path)
    assert code == 0, report
    assert report["loss_detected"] is False
    for name in TABLES:
        assert table(out, name) == table(case.pristine, name), name
    held = corruption.table_rows(out, f"SELECT count(*) FROM messages WHERE session_id = '{gone}'")
    assert held == [(0,)]
    # The report names every row left out for it: those the file's own pages still hold.
    base = tmp_path / "base.db"
    base.write_bytes(case.db.read_bytes())  # the file alone, without its -wal
    deleted = {
        "sessions": [
            r for (r,) in table_rows(base, f"SELECT rowid FROM sessions WHERE id = '{gone}'")
        ],
        "messages": [
            r
            for (r,) in table_rows(base, f"SELECT rowid FROM messages WHERE session_id = '{gone}'")
        ],
    }
    assert deleted["sessions"]
    assert deleted["messages"]
    for name in TABLES:
        assert report["tables"][name]["deleted_by_wal"] == deleted[name], name


def test_a_delete_behind_a_damaged_page_image_is_not_taken_as_good(tmp_path: Path) -> None:
    """The damaged frame is the last image, among the dropped commits, of a
    ``messages`` leaf that held the deleted session's messages: what the commits left
    there is unknown. Those messages are not written as good rows without a word: each
    one the output holds is listed as unverified, and loss is reported (exit 3)."""
    case, gone = wal_with_delete(tmp_path / "home")
    sql = f"SELECT rowid FROM messages WHERE session_id = '{gone}'"
    deleted = {int(str(r)) for (r,) in corruption.table_rows(built_db(SMALL), sql)}
    before = table_leaves(case.db, case.roots["messages"])
    after = table_leaves(case.pristine, case.roots["messages"])
    # a leaf that held deleted messages and is still a leaf of the tree Hermes left
    leaves = {n for n, rowids in before.items() if rowids & deleted and n in after}
    wal = Path(f"{case.db}-wal")
    last = {page: i for i, (_, page, _) in enumerate(wal_frames(wal))}
    victim = max(i for page, i in last.items() if page in leaves)
    set_frame_bit(wal, victim)
    code, report, out = recover(case.db, tmp_path)
    entries = [u for u in report["unverified_rows"] if u["table"] == "messages"]
    listed = {u["rowid"] for u in entries}
    assert all("session_id" in u["columns"] for u in entries)
    back = {int(str(r)) for (r,) in corruption.table_rows(out, sql)}
    assert back, "the damaged leaf's deleted messages should be in doubt here"
    assert back <= listed
    assert code == 3
    assert report["loss_detected"] is True
