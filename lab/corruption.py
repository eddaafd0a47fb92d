"""The corruption lab: real byte damage to closed, Hermes-written databases, with ground truth.

Every case copies a cached fixture (written by Hermes 0.19.0 itself), reads what it needs
from the pristine file, edits bytes of the closed copy and records exactly what was
damaged: which rowids lived on a zeroed page, which row is now stored twice. The ground
truth comes from the small rowid-only b-tree walker in ``statewarden/demo/damage.py``
(shipped there because ``statewardenctl demo`` damages its database with it), which
shares no code with ``statewarden/recovery/decoding/pages.py``, so the tests compare two
independent readings of the file.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from lab.hermes_fixtures import SMALL, TINY, AnySpec, Spec, built_db, hermes_python
from statewarden.demo import damage
from statewarden.demo.damage import duplicate_cell, point_cells_at_first

# Shared with statewardenctl demo; the tests read files through these names here.
PristineFile = damage.PristineFile
schema_roots = damage.schema_roots
_varint = damage.varint
_write = damage.write_at


@dataclass
class Case:
    """A damaged copy and what is known to be true about it."""

    db: Path
    pristine: Path
    roots: dict[str, int]
    note: str = ""
    lost_rowids: dict[str, list[int]] = field(default_factory=dict)
    phantom: dict[str, int] = field(default_factory=dict)
    collision: dict[str, object] = field(default_factory=dict)
    damaged_pages: list[int] = field(default_factory=list)
    # rowids intact on disk that the b-tree no longer reaches (recoverable)
    unreached: dict[str, list[int]] = field(default_factory=dict)
    # rowids deleted before the damage whose cells are still whole on their page
    deleted: dict[str, list[int]] = field(default_factory=dict)

    def damaged(self, page: int, note: str) -> Case:
        """Name ``page`` as damaged and say what the damage was: the last step of most
        damages, which then hand the case back."""
        self.damaged_pages.append(page)
        self.note = note
        return self


def table_rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    """Rows of a query on a closed file (used on pristine copies and outputs)."""
    conn = apsw.Connection(
        f"file:{path}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def fresh_copy(dest_dir: Path, spec: AnySpec = SMALL, name: str = "state.db") -> Case:
    dest_dir.mkdir(parents=True, exist_ok=True)
    src = built_db(spec)
    db = dest_dir / name
    shutil.copyfile(src, db)
    return Case(db=db, pristine=src, roots=schema_roots(src))


def recount_messages(conn: apsw.Connection) -> None:
    """After deleting messages, set each session's message_count to the messages it
    has left, as Hermes does when it deletes a session's messages."""
    conn.execute(
        "UPDATE sessions SET message_count = (SELECT count(*) FROM messages m"
        " WHERE m.session_id = sessions.id AND m.active = 1)"
    )


def many_fts_levels(dest_dir: Path, levels: int = 700, spec: AnySpec = SMALL) -> Case:
    """No damage: each FTS5 index's structure record (``_data`` rowid 10) given
    ``levels`` more empty levels, two zero bytes each, as Hermes' own writes leave it on
    a large file (the 1.06 GB ``HUGE`` fixture has 323 levels: 637 zero bytes in a
    669-byte record, a whole 512-byte sector of them). FTS5's own check passes."""
    case = fresh_copy(dest_dir, spec)
    conn = apsw.Connection(str(case.db))
    try:
        for (fts,) in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%fts5%'"
        ).fetchall():
            row = conn.execute(f'SELECT block FROM "{fts}_data" WHERE id = 10').fetchone()
            assert row is not None
            block = row[0]
            n, pos = _varint(block, 4)
            grown = block[:4] + _encode_varint(n + levels) + block[pos:] + bytes(2 * levels)
            conn.execute(f'UPDATE "{fts}_data" SET block = ? WHERE id = 10', (grown,))
    finally:
        conn.close()
    return case


def zero_page(case: Case, page: int) -> None:
    pf = PristineFile(case.db)
    _write(case.db, (page - 1) * pf.page_size, b"\x00" * pf.page_size)
    case.damaged_pages.append(page)


def view_first_in_hash(db: Path) -> str:
    """Add to the closed file ``db`` a view whose name puts it first in SQLite's schema
    hash (the order ``PRAGMA table_list`` gives): SQLite's integrity check of such a
    file skips its page accounting (no "Page N: never used" line). Returns its name."""
    conn = apsw.Connection(str(db))
    try:
        for i in range(5000):
            name = f"v{i}"
            conn.execute(f"CREATE VIEW {name} AS SELECT 1")
            first = conn.execute("PRAGMA main.table_list").fetchone()
            if first is not None and first[1] == name:
                return name
            conn.execute(f"DROP VIEW {name}")
    finally:
        conn.close()
    raise LookupError(f"{db}: no view name comes first in the schema hash")


def lost_last_leaf(dest_dir: Path, table: str, *, view_first: bool, spec: Spec = SMALL) -> Case:
    """The last interior page of ``table`` forgets its rightmost child, as an older
    image of that page would: one cell fewer, the right pointer now the child of the
    cell dropped. Every link left is valid and in order, so the integrity check runs to
    its end; the leaf left out is reached by nothing ("never used"), its rows intact
    (``unreached``). ``view_first``: a view first in the schema hash
    (``view_first_in_hash``), so that SQLite's check does not say so."""
    case = fresh_copy(dest_dir, spec)
    if view_first:
        view_first_in_hash(case.db)
    pf = PristineFile(case.db)
    interior, _ = pf.tree_pages(case.roots[table])
    target = interior[-1]
    page = bytearray(pf.page(target))
    h = 100 if target == 1 else 0
    n = struct.unpack(">H", page[h + 3 : h + 5])[0]
    last_cell = struct.unpack(">H", page[h + 12 + 2 * (n - 1) : h + 14 + 2 * (n - 1)])[0]
    left_out = struct.unpack(">I", page[h + 8 : h + 12])[0]
    page[h + 3 : h + 5] = struct.pack(">H", n - 1)
    page[h + 8 : h + 12] = page[last_cell : last_cell + 4]
    _write(case.db, (target - 1) * pf.page_size, bytes(page))
    case.damaged_pages.append(target)
    case.unreached = {table: sorted(pf.leaf_rowids(left_out))}
    case.note = f"{table} interior page {target} forgot its right child, leaf {left_out}"
    return case


def zero_middle_leaf(db: Path, table: str = "messages") -> list[int]:
    """Zero the middle leaf of ``table`` in the closed file ``db`` (any file, not only a
    fixture copy); the rowids that lived on it, ascending."""
    pf, leaf = _middle_leaf(db, table)
    rowids = sorted(pf.leaf_rowids(leaf))
    _write(db, (leaf - 1) * pf.page_size, bytes(pf.page_size))
    return rowids


def zero_middle_leaf_page(db: Path, table: str) -> int:
    """Zero the middle leaf of the b-tree of ``table`` (a table, an index, or a WITHOUT
    ROWID table's index b-tree) in the closed file ``db``; its page number."""
    pf, leaf = _middle_leaf(db, table)
    _write(db, (leaf - 1) * pf.page_size, bytes(pf.page_size))
    return leaf


def _middle_leaf(db: Path, table: str) -> tuple[PristineFile, int]:
    conn = apsw.Connection(str(db))
    try:
        root = int(conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,)).get)
    finally:
        conn.close()
    pf = PristineFile(db)
    _, leaves = pf.tree_pages(root)
    return pf, leaves[len(leaves) // 2]


def phantom_row(dest_dir: Path, spec: AnySpec = SMALL, cell: int = 5) -> Case:
    """Duplicate one cell pointer in a ``sessions`` leaf: the same row stored twice.

    The pointer array gets one more entry (a copy of pointer ``cell``, placed right after
    it) and the cell count goes up by one; the cell content is not touched. Every index
    still holds the row once, exactly like the file in docs/stories.md story 3.
    """
    case = fresh_copy(dest_dir, spec)
    leaf, rowid = duplicate_cell(case.db, "sessions", cell)
    case.phantom = {"sessions": rowid}
    return case.damaged(leaf, f"sessions leaf {leaf}: cell {cell} (rowid {rowid}) stored twice")


def zeroed_leaf(
    dest_dir: Path, table: str = "messages", which: int = 3, spec: Spec = SMALL
) -> Case:
    """Zero one leaf page of ``table``; the rowids that lived on it are lost for good."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots[table])
    leaf = leaves[which]
    case.lost_rowids = {table: pf.leaf_rowids(leaf)}
    zero_page(case, leaf)
    case.note = f"{table} leaf page {leaf} zeroed"
    return case


def zeroed_interior(dest_dir: Path, table: str = "messages", spec: Spec = SMALL) -> Case:
    """Zero an interior page of ``table``: every leaf below it is orphaned, not lost.

    The deepest interior page that is not the root is chosen when the tree has three
    levels; in a two-level tree the root itself is the only interior page.
    """
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    root = case.roots[table]
    interior, _ = pf.tree_pages(root)
    target = interior[-1] if len(interior) > 1 else root
    case.lost_rowids = {table: []}
    zero_page(case, target)
    case.note = f"{table} interior page {target} zeroed"
    return case


def zeroed_sessions_root(dest_dir: Path, spec: Spec = SMALL) -> Case:
    """Zero the root page of ``sessions`` (an interior page: SMALL's ``sessions`` tree
    has two levels). No row is reached any more, every leaf is intact, and the intact
    unique index on ``id`` lists exactly those rows: a recovery can bring back every
    row, identical. ``unreached['sessions']`` lists all of them; nothing is lost."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    root = case.roots["sessions"]
    interior, leaves = pf.tree_pages(root)
    assert interior == [root], f"sessions is not a two-level tree (interior pages {interior})"
    case.unreached = {"sessions": sorted(r for leaf in leaves for r in pf.leaf_rowids(leaf))}
    case.lost_rowids = {"sessions": []}
    zero_page(case, root)
    case.note = f"sessions root page {root} zeroed ({len(leaves)} intact leaves)"
    return case


def scribbled_trees(dest_dir: Path, trees: dict[str, int], spec: Spec = SMALL) -> Case:
    """Zero the first ``n`` leaf pages of each named b-tree (FTS shadow tables, indexes)."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    for name, n in trees.items():
        _, leaves = pf.tree_pages(case.roots[name])
        for leaf in leaves[:n]:
            zero_page(case, leaf)
    case.note = "zeroed leaves of " + ", ".join(trees)
    return case


def capped_check_trap(dest_dir: Path, spec: Spec = SMALL) -> Case:
    """Enough FTS damage that a check capped at 100 errors never reaches ``sessions``.

    SQLite checks ``messages_fts_trigram_docsize`` before ``sessions`` (the order of its
    schema hash), so one of its leaves with every cell pointer aimed at the first cell
    (hundreds of "out of order" errors) fills the default cap of 100 before the phantom
    row in ``sessions`` is reached, as in docs/stories.md story 2.
    """
    case = phantom_row(dest_dir, spec)
    leaf, n = point_cells_at_first(case.db, "messages_fts_trigram_docsize", 1)
    case.damaged_pages.append(leaf)
    case.note += f"; messages_fts_trigram_docsize leaf {leaf}: {n} pointers to one cell"
    return case


def truncate(case: Case, size: int) -> None:
    with open(case.db, "r+b") as f:
        f.truncate(size)


def foreign_wal(dest_dir: Path, spec: Spec = SMALL) -> Case:
    """A Hermes database next to a ``-wal`` written for a different (small) database."""
    case = fresh_copy(dest_dir, spec)
    other = dest_dir / "other" / "other.db"
    other.parent.mkdir()
    conn = apsw.Connection(str(other))
    conn.execute("PRAGMA journal_mode=wal")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes(body) VALUES ('not hermes')")
    shutil.copyfile(f"{other}-wal", f"{case.db}-wal")
    conn.close()
    case.note = "a -wal from another database"
    return case


def _cell_span(pf: PristineFile, leaf: int, rowid: int) -> tuple[int, int]:
    """(start, end) byte offsets in the file of the payload of ``rowid``'s cell."""
    pg = pf.page(leaf)
    for off in pf.cell_offsets(leaf):
        size, pos = _varint(pg, off)
        rid, pos = _varint(pg, pos)
        if rid == rowid:
            base = (leaf - 1) * pf.page_size
            return base + pos, base + pos + size
    raise LookupError(f"rowid {rowid} not on page {leaf}")


def _leaf_of(pf: PristineFile, root: int, rowid: int) -> int:
    _, leaves = pf.tree_pages(root)
    return next(leaf for leaf in leaves if rowid in pf.leaf_rowids(leaf))


def _replace_in_row(case: Case, table: str, rowid: int, old: str, new: str) -> None:
    assert len(old.encode()) == len(new.encode())
    pf = PristineFile(case.db)
    leaf = _leaf_of(pf, case.roots[table], rowid)
    start, end = _cell_span(pf, leaf, rowid)
    at = pf.data.find(old.encode(), start, end)
    assert at != -1, f"{old!r} not in the cell of rowid {rowid}"
    _write(case.db, at, new.encode())
    case.damaged_pages.append(leaf)


def _two_sessions(path: Path, column: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """Two sessions (rowid, value) whose ``column`` values have the same length."""
    rows = table_rows(
        path, f"SELECT rowid, {column} FROM sessions WHERE {column} IS NOT NULL ORDER BY rowid"
    )
    for i, (ra, va) in enumerate(rows):
        for rb, vb in rows[i + 1 :]:
            if len(str(va).encode()) == len(str(vb).encode()) and va != vb:
                return (int(ra), str(va)), (int(rb), str(vb))  # type: ignore[call-overload]
    raise LookupError(f"no two sessions with {column} of equal length")


def _later_takes_earlier(
    dest_dir: Path, spec: Spec, column: str
) -> tuple[Case, tuple[int, str], tuple[int, str]]:
    """Of two sessions whose ``column`` values have one length, the later one's value
    overwritten with the earlier one's, recorded as the collision; returns the case and
    the (rowid, value) of the earlier and the later session as they were."""
    case = fresh_copy(dest_dir, spec)
    (ra, a), (rb, b) = _two_sessions(case.db, column)
    _replace_in_row(case, "sessions", rb, b, a)
    case.collision = {"rowid": rb, "key": a, "old_key": b, "kept_rowid": ra}
    return case, (ra, a), (rb, b)


def duplicate_key(dest_dir: Path, spec: Spec = SMALL) -> Case:
    """A later session's id overwritten with an earlier session's id: two different rows
    claim one primary key (the unique index still lists the old id)."""
    case, (ra, id_a), (rb, id_b) = _later_takes_earlier(dest_dir, spec, "id")
    case.note = f"sessions rowid {rb}: id {id_b} overwritten with {id_a} (held by rowid {ra})"
    return case


def duplicate_title(dest_dir: Path, spec: Spec = SMALL) -> Case:
    """A later session's title overwritten with an earlier session's title: two different
    rows claim one value of the UNIQUE title index."""
    case, (ra, t_a), (rb, t_b) = _later_takes_earlier(dest_dir, spec, "title")
    case.note = f"sessions rowid {rb}: title {t_b!r} overwritten with {t_a!r} (rowid {ra})"
    return case


def truncated(dest_dir: Path, keep_pages: int, spec: Spec = SMALL) -> Case:
    """The file cut after ``keep_pages`` pages; lost = rows on messages leaves past the cut
    (SMALL's messages fit in their cells: no overflow pages to lose)."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots["messages"])
    case.lost_rowids = {
        "messages": sorted(r for leaf in leaves if leaf > keep_pages for r in pf.leaf_rowids(leaf))
    }
    truncate(case, keep_pages * pf.page_size)
    case.note = f"truncated to {keep_pages} of {len(pf.data) // pf.page_size} pages"
    return case


EXTERNAL_CONTENT_SCHEMA = """
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
    content TEXT, tool_name TEXT);
CREATE INDEX idx_messages_session ON messages(session_id, id);
CREATE VIEW messages_fts_source AS
    SELECT id, COALESCE(content, '') || ' ' || COALESCE(tool_name, '') AS body FROM messages;
CREATE VIRTUAL TABLE messages_fts USING fts5(body, content='messages_fts_source', content_rowid='id');
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, body)
    VALUES (new.id, COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, ''));
END;
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version VALUES (40);
"""


def external_content_db(dest_dir: Path, messages: int = 3000) -> Case:
    """A database shaped like newer Hermes builds: external-content FTS5 over a view.

    Written here with apsw (no newer Hermes is installable); it exists to show that
    repair follows the file's own schema, not 0.19.0's.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    db = dest_dir / "state.db"
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA journal_mode=WAL")
    with conn:
        conn.execute(EXTERNAL_CONTENT_SCHEMA)
        words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
        conn.executemany(
            "INSERT INTO messages(session_id, content, tool_name) VALUES (?, ?, ?)",
            [
                (f"s{i % 17}", " ".join(words[(i + k) % 8] for k in range(30)), f"tool{i % 5}")
                for i in range(messages)
            ],
        )
    conn.close()
    pristine = dest_dir / "pristine.db"
    shutil.copyfile(db, pristine)
    return Case(db=db, pristine=pristine, roots=schema_roots(db), note="external-content FTS")


HOT_JOURNAL_WRITER = """
import os, sys
import apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("PRAGMA journal_mode=DELETE")
conn.execute("PRAGMA cache_size=8")  # small cache: changed pages spill into the file
conn.execute("BEGIN IMMEDIATE")
conn.execute("DELETE FROM messages")
conn.execute("UPDATE sessions SET title = NULL")
os._exit(0)  # a crash in the middle of the transaction: the -journal stays hot
"""


def crash_mid_transaction(case: Case) -> None:
    """Switch the copy to rollback mode and kill a writer in the middle of a big
    transaction (in a subprocess): the file is half-written and the -journal is hot."""
    subprocess.run([sys.executable, "-c", HOT_JOURNAL_WRITER, str(case.db)], check=True)
    case.note = "a writer died mid-transaction; hot -journal"


def invalid_utf8(dest_dir: Path, rowid: int = 7, spec: Spec = SMALL) -> Case:
    """One byte of a message's text replaced by 0xFF: the row is readable but its text
    is no longer valid UTF-8 (the record itself stays well formed)."""
    case = fresh_copy(dest_dir, spec)
    content = str(table_rows(case.db, f"SELECT content FROM messages WHERE rowid = {rowid}")[0][0])
    word = content.split()[1]
    pf = PristineFile(case.db)
    leaf = _leaf_of(pf, case.roots["messages"], rowid)
    start, end = _cell_span(pf, leaf, rowid)
    at = pf.data.find(word.encode(), start, end)
    _write(case.db, at, b"\xff")
    case.phantom = {"messages": rowid}
    case.note = f"messages rowid {rowid}: one byte of its text set to 0xFF"
    return case


def _interior_cell_pointer(pf: PristineFile, page: int, i: int) -> int:
    """File offset of the child pointer of cell ``i`` of an interior page."""
    return (page - 1) * pf.page_size + pf.cell_offsets(page)[i]


def flipped_child_pointer(
    dest_dir: Path, table: str = "messages", which: int = 20, spec: Spec = SMALL
) -> Case:
    """One bit flipped in a child pointer of ``table``'s interior page, so that it points
    at another leaf of the same tree: no read fails, but the leaf it pointed at is no
    longer reached (its rows are intact on disk) and the other leaf is reached twice.

    ``unreached`` lists the rowids on the leaf no longer reached.
    """
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    interior, leaves = pf.tree_pages(case.roots[table])
    page = interior[-1]
    kids = pf.children(page)[:-1]
    for i in [*range(which, len(kids)), *range(which)]:
        child = kids[i]
        for other in leaves:
            x = child ^ other
            if other != child and x & (x - 1) == 0:
                break
        else:
            continue
        break
    else:  # pragma: no cover - SMALL and TALL always have such a pair
        raise RuntimeError("no child pointer one bit away from another leaf")
    at = _interior_cell_pointer(pf, page, i)
    _write(case.db, at, struct.pack(">I", other))
    case.unreached = {table: pf.leaf_rowids(child)}
    case.damaged_pages.append(page)
    case.note = (
        f"{table} interior page {page}: child pointer {i} flipped from leaf {child} to {other}"
    )
    return case


def _messages_deleted(
    case: Case,
    dest_dir: Path,
    where: str,
    args: tuple[int, ...] = (),
    *,
    secure_delete_off: bool = False,
) -> PristineFile:
    """Delete the messages ``where`` names as Hermes does (the sessions' counts follow),
    in rollback mode, with SQLite's ``secure_delete`` off if asked (freed pages keep
    their cells); the file after the delete is the case's truth (``pristine.db`` in
    ``dest_dir``). Returns the file as it now is."""
    conn = apsw.Connection(str(case.db))
    if secure_delete_off:
        conn.execute("PRAGMA secure_delete=OFF")
    with conn:
        conn.execute(f"DELETE FROM messages WHERE {where}", args)
        recount_messages(conn)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    case.pristine = dest_dir / "pristine.db"
    shutil.copyfile(case.db, case.pristine)
    return PristineFile(case.db)


def lost_freelist(dest_dir: Path, first: int = 400, last: int = 700, spec: Spec = SMALL) -> Case:
    """Messages ``first``..``last`` deleted (as Hermes' ``DELETE``, FTS triggers and
    all), then the freelist's first trunk pointer in the header zeroed: the freed
    leaves, which still hold the deleted rows, are reached by nothing.

    ``lost_rowids`` lists the deleted rowids: they must never come back.
    """
    case = fresh_copy(dest_dir, spec)
    pf = _messages_deleted(
        case, dest_dir, "id BETWEEN ? AND ?", (first, last), secure_delete_off=True
    )
    (trunk,) = struct.unpack(">I", pf.data[32:36])
    assert trunk, "the delete freed no page"
    _write(case.db, 32, b"\x00\x00\x00\x00")
    case.lost_rowids = {"messages": list(range(first, last + 1))}
    case.note = f"messages {first}..{last} deleted, then the freelist trunk pointer zeroed"
    return case


CRASHING_APPENDER = """
import os, sys
os.environ["HERMES_HOME"] = sys.argv[1]
from hermes_state import SessionDB
db = SessionDB()
db.create_session("after_the_bad_frame", "cli", model="hermes-4-70b")
for i in range(int(sys.argv[2])):
    db.append_message("after_the_bad_frame", "user", f"message {i} written after the checkpoint")
os._exit(0)  # killed: no checkpoint on close, every commit stays in the -wal
"""


def fold_copy(db: Path, dest: Path) -> None:
    """A self-contained copy of ``db`` with its ``-wal`` replayed (what SQLite reads)."""
    shutil.copyfile(db, dest)
    if Path(f"{db}-wal").exists():
        shutil.copyfile(f"{db}-wal", f"{dest}-wal")
    conn = apsw.Connection(str(dest))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()


def wal_commits(dest_dir: Path, messages: int = 60, spec: Spec = SMALL) -> Case:
    """Hermes appends ``messages`` messages (one transaction each) to a copy of the
    fixture and is killed: every commit is still in the ``-wal``. ``pristine`` is the
    copy with that WAL replayed; ``unreached['messages']`` the appended rowids."""
    case = fresh_copy(dest_dir, spec)

    subprocess.run(
        [hermes_python(), "-c", CRASHING_APPENDER, str(dest_dir), str(messages)], check=True
    )
    Path(f"{case.db}-shm").unlink(missing_ok=True)
    case.pristine = dest_dir / "pristine" / "state.db"
    case.pristine.parent.mkdir()
    fold_copy(case.db, case.pristine)
    before = {r for (r,) in table_rows(built_db(spec), "SELECT rowid FROM messages")}
    after = {r for (r,) in table_rows(case.pristine, "SELECT rowid FROM messages")}
    case.unreached = {"messages": sorted(int(str(r)) for r in after - before)}
    case.note = f"{messages} Hermes commits in the -wal"
    return case


def wal_frames(path: Path) -> list[tuple[int, int, int]]:
    """(offset of the frame, page number, commit size) of every frame of the WAL's
    current generation (frames whose salts are the header's)."""
    data = Path(path).read_bytes()
    (page_size,) = struct.unpack(">I", data[8:12])
    salts = data[16:24]
    out = []
    offset = 32
    while offset + 24 + page_size <= len(data):
        page, commit = struct.unpack(">II", data[offset : offset + 8])
        if data[offset + 8 : offset + 16] != salts:
            break
        out.append((offset, page, commit))
        offset += 24 + page_size
    return out


def wal_bad_frame(dest_dir: Path, messages: int = 60, spec: Spec = SMALL) -> Case:
    """``wal_commits``, then one byte flipped in the page image of a frame a quarter of
    the way in: SQLite's replay stops at that frame, dropping every later commit."""
    case = wal_commits(dest_dir, messages, spec)
    frames = wal_frames(Path(f"{case.db}-wal"))
    offset, page, _ = frames[len(frames) // 4]
    with open(f"{case.db}-wal", "r+b") as f:
        f.seek(offset + 24 + 2000)
        b = f.read(1)
        f.seek(offset + 24 + 2000)
        f.write(bytes([b[0] ^ 0x01]))
    case.note += f"; frame {len(frames) // 4 + 1} of {len(frames)} (page {page}): one bit flipped"
    return case


def wal_header_damage(dest_dir: Path, how: str, spec: Spec = SMALL) -> Case:
    """``wal_commits`` with the WAL header damaged: ``zeroed`` (the whole file),
    ``magic`` (its magic number zeroed) or ``page-size`` (one bit of it flipped)."""
    case = wal_commits(dest_dir, 20, spec)
    wal = Path(f"{case.db}-wal")
    if how == "zeroed":
        wal.write_bytes(b"\x00" * wal.stat().st_size)
    elif how == "magic":
        _write(wal, 0, b"\x00\x00\x00\x00")
    elif how == "page-size":
        data = wal.read_bytes()
        _write(wal, 10, bytes([data[10] ^ 0x01]))
    else:  # pragma: no cover - a typo in a test
        raise ValueError(how)
    case.note += f"; WAL header damaged ({how})"
    return case


def _same_length_change(text: bytes) -> tuple[int, bytes]:
    """(offset, replacement) of one lowercase letter in ``text`` changed to another."""
    for i, ch in enumerate(text):
        if ord("a") <= ch <= ord("y"):
            return i, bytes([ch + 1])
    raise LookupError("no lowercase letter to change")


def bit_rot(dest_dir: Path, where: str, rowid: int = 50, spec: Spec = SMALL) -> Case:
    """One letter of message ``rowid``'s text changed on disk, the record still well
    formed: in the ``messages`` row itself (``row``) or in its copy in
    ``messages_fts_content`` (``fts``). No page is malformed; only a comparison of the
    row with its search-index copies can tell."""
    case = fresh_copy(dest_dir, spec)
    table = {"row": "messages", "fts": "messages_fts_content"}[where]
    pf = PristineFile(case.db)
    leaf = _leaf_of(pf, case.roots[table], rowid)
    start, end = _cell_span(pf, leaf, rowid)
    content = str(table_rows(case.db, f"SELECT content FROM messages WHERE rowid = {rowid}")[0][0])
    word = next(w for w in content.split() if len(w) >= 5 and w.isalpha())
    at = pf.data.find(word.encode(), start, end)
    assert at != -1
    i, new = _same_length_change(word.encode())
    _write(case.db, at + i, new)
    case.phantom = {table: rowid}
    return case.damaged(leaf, f"{table} rowid {rowid}: one letter of {word!r} changed")


LONG_PROMPT_WRITER = """
import os, sys
os.environ["HERMES_HOME"] = sys.argv[1]
from hermes_state import SessionDB
db = SessionDB()
prompt = " ".join(f"rule {i}: answer briefly and cite the source" for i in range(400))
db.create_session("long_prompt", "telegram", model="hermes-4-70b", system_prompt=prompt,
                  user_id="u1", cwd="/home/u")
db.set_session_title("long_prompt", "the session with a long system prompt")
db.update_token_counts("long_prompt", input_tokens=4321, output_tokens=1234,
                       model="hermes-4-70b", api_call_count=1)
for i in range(8):
    db.append_message("long_prompt", "user" if i % 2 == 0 else "assistant", f"turn {i}")
db.close()
"""


def broken_overflow(dest_dir: Path, spec: Spec = SMALL, *, whole_chain: bool = False) -> Case:
    """Hermes writes a session whose ``system_prompt`` (about 18 kB) spills onto
    overflow pages, with 8 messages; then the first overflow page of that row is
    zeroed. The row's columns stored in its cell (id, source, model, ...) are intact;
    ``system_prompt`` and every column after it are gone. ``phantom['sessions']`` is
    the row's rowid; ``pristine`` the file before the damage. ``whole_chain`` zeroes
    every overflow page of the row, so nothing past its cell survives."""
    case = fresh_copy(dest_dir, spec)

    subprocess.run([hermes_python(), "-c", LONG_PROMPT_WRITER, str(dest_dir)], check=True)
    for suffix in ("-wal", "-shm"):
        Path(f"{case.db}{suffix}").unlink(missing_ok=True)
    case.pristine = dest_dir / "pristine" / "state.db"
    case.pristine.parent.mkdir()
    shutil.copyfile(case.db, case.pristine)
    case.roots = schema_roots(case.db)
    [(rowid,)] = table_rows(case.db, "SELECT rowid FROM sessions WHERE id = 'long_prompt'")
    pf = PristineFile(case.db)
    leaf = _leaf_of(pf, case.roots["sessions"], int(rowid))  # type: ignore[call-overload]
    start, end = _cell_span(pf, leaf, int(rowid))  # type: ignore[call-overload]
    usable = pf.page_size - pf.data[20]
    size = end - start
    x = usable - 35
    m = ((usable - 12) * 32 // 255) - 23
    k = m + (size - m) % (usable - 4)
    local = k if k <= x else m
    (first_overflow,) = struct.unpack(">I", pf.data[start + local : start + local + 4])
    chain = [first_overflow]
    while whole_chain and (nxt := struct.unpack(">I", pf.page(chain[-1])[:4])[0]):
        chain.append(nxt)
    for page in chain:
        zero_page(case, page)
    case.phantom = {"sessions": int(rowid)}  # type: ignore[call-overload]
    case.note = f"sessions rowid {rowid}: first overflow page {first_overflow} zeroed"
    return case


def stale_index_entries(
    dest_dir: Path, rowids: tuple[int, ...] = (300, 301, 302, 303, 304), spec: Spec = SMALL
) -> Case:
    """Messages ``rowids`` deleted on purpose (FTS triggers and all), then the pages of
    ``idx_messages_session`` written back as they were before the delete (lost writes
    of that index): the index lists rows the table no longer has, and nothing else
    remembers them. ``lost_rowids`` lists the deleted rowids: they are not a loss."""
    case = fresh_copy(dest_dir, spec)
    before = PristineFile(case.db)
    _, idx_leaves = before.tree_pages(case.roots["idx_messages_session"])
    after = _messages_deleted(case, dest_dir, f"id IN ({', '.join(str(r) for r in rowids)})")
    for leaf in idx_leaves:
        if before.page(leaf) != after.page(leaf):
            _write(case.db, (leaf - 1) * before.page_size, before.page(leaf))
            case.damaged_pages.append(leaf)
    case.lost_rowids = {"messages": list(rowids)}
    case.note = f"messages {rowids} deleted; idx_messages_session pages written back stale"
    return case


def swapped_leaves(
    dest_dir: Path, table: str = "messages", which: int = 5, spec: Spec = SMALL
) -> Case:
    """The contents of two neighbouring leaves of ``table`` swapped (a misdirected
    write): every row is still on a page the b-tree reaches, in the wrong order."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots[table])
    a, b = leaves[which], leaves[which + 1]
    _write(case.db, (a - 1) * pf.page_size, pf.page(b))
    _write(case.db, (b - 1) * pf.page_size, pf.page(a))
    case.damaged_pages.extend([a, b])
    case.note = f"{table} leaves {a} and {b} swapped"
    return case


def freelist_lists_live_page(dest_dir: Path, spec: Spec = SMALL) -> Case:
    """Messages 400..700 deleted (so there is a freelist), then a live messages leaf
    added to the freelist trunk's list (and the header's free-page count): the page is
    both in use and "free". Every row is intact; ``pristine`` is the file after the
    delete."""
    case = fresh_copy(dest_dir, spec)
    pf = _messages_deleted(case, dest_dir, "id BETWEEN 400 AND 700")
    trunk, free = struct.unpack(">II", pf.data[32:40])
    _, leaves = pf.tree_pages(case.roots["messages"])
    live = leaves[2]
    _next, count = struct.unpack(">II", pf.page(trunk)[:8])
    base = (trunk - 1) * pf.page_size
    _write(case.db, base + 4, struct.pack(">I", count + 1))
    _write(case.db, base + 8 + 4 * count, struct.pack(">I", live))
    _write(case.db, 36, struct.pack(">I", free + 1))
    return case.damaged(trunk, f"messages leaf {live} also listed on the freelist (trunk {trunk})")


def _encode_varint(v: int) -> bytes:
    """SQLite's varint for 0 <= v < 2**56 (written here, not taken from recovery/)."""
    parts = [v & 0x7F]
    v >>= 7
    while v:
        parts.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(reversed(parts))


def flipped_cell_pointer(
    dest_dir: Path,
    spec: Spec = SMALL,
    *,
    table: str = "messages",
    cell: int = 3,
    bit: int = 5,
    delete_last: bool = False,
) -> Case:
    """One bit flipped in one entry of the cell-pointer array of a leaf of ``table``
    in its middle: the pointer now lands inside another cell (or free space), and the cell
    it named is whole on the page but no pointer reaches it. Nothing else changed: the
    row is intact on disk (``unreached``), its index entries and FTS copies too. With
    ``delete_last`` the leaf's last row is deleted first, as Hermes deletes (the count of
    its session follows): its cell, the lowest on the page, is left whole in the
    unallocated space (``deleted``; ``pristine`` is the file after the delete)."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots[table])
    # a leaf in the table's middle with a cell after the flipped one (two with delete_last)
    leaf = [n for n in leaves if len(pf.cell_offsets(n)) > cell + 1 + delete_last][len(leaves) // 4]
    if delete_last:
        gone = pf.leaf_rowids(leaf)[-1]
        conn = apsw.Connection(str(case.db))
        conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (gone,))
        if table == "messages":
            recount_messages(conn)  # as Hermes does when it deletes a session's messages
        conn.close()
        case.deleted = {table: [gone]}
        case.pristine = dest_dir / "after-delete.db"
        shutil.copyfile(case.db, case.pristine)
        pf = PristineFile(case.db)
    offsets = pf.cell_offsets(leaf)
    rowid = pf.leaf_rowids(leaf)[cell]
    at = (leaf - 1) * pf.page_size + 8 + 2 * cell  # a leaf's header is 8 bytes
    flipped = offsets[cell] ^ (1 << bit)
    assert flipped not in offsets, "the flipped pointer must not name another cell's start"
    _write(case.db, at, flipped.to_bytes(2, "big"))
    case.damaged_pages.append(leaf)
    case.unreached = {table: [rowid]}
    case.note = (
        f"{table} leaf {leaf}: cell pointer {cell} (rowid {rowid}) {offsets[cell]} -> {flipped}"
    )
    return case


def garbled_cell(
    dest_dir: Path,
    spec: Spec = SMALL,
    cell: int = 8,
    seed: int = 1,
    *,
    decodable: bool = False,
    size: int = 40,
) -> Case:
    """64 random bytes over one cell of the first ``sessions`` leaf, the cell's header
    made to read as rowid 95 with a short payload: in the middle of the leaf, SQLite's
    scan meets a rowid far above the ones that follow. With ``decodable`` the payload
    is a well-formed two-byte record (one NULL column), so SQLite reads a row 95 that
    never existed. ``size`` is the payload size the cell claims (past the page: its
    overflow pointer lies beyond the page's end). Only that cell's row is gone (the 64
    bytes lie inside it); ``lost_rowids`` is its real rowid."""
    import random

    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots["sessions"])
    leaf = leaves[0]
    offsets = pf.cell_offsets(leaf)
    start = offsets[cell]
    following = min((o for o in offsets if o > start), default=pf.page_size)
    assert following - start >= 64, "the 64 bytes must stay inside the cell"
    rowid = pf.leaf_rowids(leaf)[cell]
    # payload size, rowid 95 (one-byte varints) [, a record: header size 2, one NULL]
    head = bytes([2, 95, 2, 0]) if decodable else _encode_varint(size) + bytes([95])
    blob = head + random.Random(seed).randbytes(64 - len(head))
    _write(case.db, (leaf - 1) * pf.page_size + start, blob)
    case.lost_rowids = {"sessions": [rowid]}
    return case.damaged(
        leaf, f"sessions leaf {leaf}: cell {cell} (rowid {rowid}) garbled, read as rowid 95"
    )


def zeroed_shadow_root(dest_dir: Path, shadow: str, spec: AnySpec = SMALL) -> Case:
    """The root page of FTS shadow table ``shadow`` zeroed (every base table intact)."""
    case = fresh_copy(dest_dir, spec)
    zero_page(case, case.roots[shadow])
    case.note = f"{shadow} root page {case.roots[shadow]} zeroed"
    return case


def zeroed_fts_config(dest_dir: Path, fts: str = "messages_fts", spec: AnySpec = SMALL) -> Case:
    """The page of ``{fts}_config`` zeroed: FTS5 cannot open ``fts`` any more (its
    constructor reads the config), though every base table is intact."""
    case = fresh_copy(dest_dir, spec)
    zero_page(case, case.roots[f"{fts}_config"])
    case.note = f"{fts}_config page {case.roots[f'{fts}_config']} zeroed"
    return case


def zeroed_fts_structure(dest_dir: Path, fts: str = "messages_fts", spec: Spec = SMALL) -> Case:
    """The payload of the structure record of ``fts`` (``{fts}_data`` rowid 10, the map
    of its index segments) zeroed, record header included: FTS5 cannot open ``fts``
    (its constructor reads that record). Every base table is intact."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    table = f"{fts}_data"
    leaf = _leaf_of(pf, case.roots[table], 10)
    start, end = _cell_span(pf, leaf, 10)
    assert end - start < pf.page_size // 4, "the structure record fits in its cell"
    _write(case.db, start, b"\x00" * (end - start))
    return case.damaged(leaf, f"{table} rowid 10 (the structure record) zeroed on page {leaf}")


def zeroed_cell_header(
    dest_dir: Path, table: str = "messages_fts_content", cell: int = 3, spec: Spec = SMALL
) -> Case:
    """The first two bytes of one cell of the second leaf of ``table`` zeroed: the cell
    now reads as rowid 0 with an empty payload, a rowid that never existed. For an FTS
    shadow table, every base table is intact; ``lost_rowids`` is the row the cell held."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots[table])
    leaf = leaves[1]
    _write(case.db, (leaf - 1) * pf.page_size + pf.cell_offsets(leaf)[cell], b"\x00\x00")
    case.lost_rowids = {table: [pf.leaf_rowids(leaf)[cell]]}
    return case.damaged(leaf, f"{table} leaf {leaf}: cell {cell} header zeroed (reads as rowid 0)")


def gaps_then_zeroed_interior(dest_dir: Path, spec: Spec = SMALL) -> Case:
    """Messages 300..305 and 1200..1201 deleted (gaps in the rowids), then the interior
    page of ``messages`` zeroed: every remaining row is on an orphaned leaf, intact.
    ``pristine`` is the file after the delete; nothing is lost."""
    case = fresh_copy(dest_dir, spec)
    pf = _messages_deleted(case, dest_dir, "id BETWEEN 300 AND 305 OR id BETWEEN 1200 AND 1201")
    interior, _ = pf.tree_pages(case.roots["messages"])
    target = interior[-1]
    zero_page(case, target)
    case.lost_rowids = {"messages": []}
    case.note = f"messages 300..305, 1200..1201 deleted, then interior page {target} zeroed"
    return case


def wal_zeroed_frame_header(dest_dir: Path, messages: int = 60, spec: Spec = SMALL) -> Case:
    """``wal_commits``, then the 24-byte header of one frame a quarter of the way in
    zeroed (page number, commit size, salts and checksum): SQLite's replay stops there,
    and a reader that takes a salt mismatch for the end of the current generation
    drops every later commit. ``pristine`` holds every commit; ``unreached['messages']``
    the appended rowids."""
    case = wal_commits(dest_dir, messages, spec)
    frames = wal_frames(Path(f"{case.db}-wal"))
    i = len(frames) // 4
    offset, page, _ = frames[i]
    _write(Path(f"{case.db}-wal"), offset, b"\x00" * 24)
    case.note += f"; frame {i + 1} of {len(frames)} (page {page}): its header zeroed"
    return case


def flipped_payload_size(
    dest_dir: Path, rowid: int = 50, bit: int = 0x20, spec: Spec = SMALL
) -> Case:
    """One bit of the payload-size varint of message ``rowid``'s cell flipped (its last
    byte): the cell now claims a payload shorter (or longer) than the record it holds,
    but the record itself, header and body, is intact on the page."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    leaf = _leaf_of(pf, case.roots["messages"], rowid)
    base = (leaf - 1) * pf.page_size
    for off in pf.cell_offsets(leaf):
        pg = pf.page(leaf)
        size, pos = _varint(pg, off)
        rid, _ = _varint(pg, pos)
        if rid == rowid:
            last = pos - 1  # the varint's last byte
            _write(case.db, base + last, bytes([pg[last] ^ bit]))
            new, _ = _varint(PristineFile(case.db).page(leaf), off)
            case.note = f"messages rowid {rowid}: payload size {size} flipped to {new}"
            break
    else:  # pragma: no cover - a fixture without that row
        raise LookupError(rowid)
    case.damaged_pages.append(leaf)
    return case


def foreign_hermes_wal(dest_dir: Path, spec: Spec = SMALL, other: Spec = TINY) -> Case:
    """A Hermes database next to the ``-wal`` of another Hermes database (``other``,
    with 30 commits of Hermes in it): a valid WAL (header, salts, checksums, page size,
    schema cookie all fine) whose pages belong to a different file. Replaying it over
    this one scrambles it; the database file alone is intact (``pristine``)."""
    theirs = wal_commits(dest_dir / "other", 30, other)
    case = fresh_copy(dest_dir / "db", spec)
    shutil.copyfile(f"{theirs.db}-wal", f"{case.db}-wal")
    case.note = f"the -wal of another Hermes database ({theirs.note})"
    return case


def damaged_leaf_structure(
    dest_dir: Path, what: str, table: str = "messages", which: int = 5, spec: Spec = SMALL
) -> Case:
    """The page header (``header``: its 8 bytes) or the cell-pointer array
    (``pointers``) of one leaf of ``table`` zeroed: the b-tree still points to the page
    and every cell on it is intact, but no reader that trusts the page's structure can
    find them. ``unreached[table]`` is the page's rowids (recoverable); nothing is lost."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots[table])
    leaf = leaves[which]
    count = len(pf.cell_offsets(leaf))
    base = (leaf - 1) * pf.page_size
    if what == "header":
        _write(case.db, base, b"\x00" * 8)
    elif what == "pointers":
        _write(case.db, base + 8, b"\x00" * (2 * count))
    else:  # pragma: no cover - a typo in a test
        raise ValueError(what)
    case.unreached = {table: pf.leaf_rowids(leaf)}
    return case.damaged(leaf, f"{table} leaf {leaf}: its {what} zeroed ({count} cells)")


def random_bytes(dest_dir: Path, seed: int, spec: Spec = SMALL) -> Case:
    """64 random bytes written at a random offset of a random ``sessions`` or
    ``messages`` leaf (all drawn from ``seed``). ``lost_rowids`` are the rows whose
    cell the bytes touch (they may or may not survive); every other row is intact on
    disk and must come back exactly."""
    import random

    rnd = random.Random(seed)
    table = rnd.choice(["sessions", "messages"])
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots[table])
    leaf = rnd.choice(leaves)
    start = rnd.randrange(0, pf.page_size - 64)
    _write(case.db, (leaf - 1) * pf.page_size + start, rnd.randbytes(64))
    pg = pf.page(leaf)
    hit = []
    for off in pf.cell_offsets(leaf):
        size, pos = _varint(pg, off)
        rowid, pos = _varint(pg, pos)
        if start < pos + size and off < start + 64:
            hit.append(rowid)
    case.lost_rowids = {table: sorted(hit)}
    return case.damaged(
        leaf, f"{table} leaf {leaf}: 64 random bytes at offset {start} (seed {seed})"
    )


def zeroed_sector_in_cell(dest_dir: Path, rowid: int = 60, spec: Spec = SMALL) -> Case:
    """The 512-byte sector that holds the end of a message's record zeroed, as a disk
    that lost one sector: the cell's start (sizes, rowid, record header) is intact, so
    SQLite reads the row whole, with zeros for the tail of its text (and for any
    column after it). The first message from ``rowid`` on whose record crosses a
    sector boundary is taken. ``lost_rowids['messages']`` lists every row whose cell
    the sector touches: none may come back as a good row; ``phantom['messages']`` is
    the one whose record header survived."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    for rid in range(rowid, rowid + 200):
        leaf = _leaf_of(pf, case.roots["messages"], rid)
        start, end = _cell_span(pf, leaf, rid)
        sector = (end - 1) // 512 * 512
        page_end = leaf * pf.page_size
        if start + 8 < sector and end <= page_end:
            break
    else:  # pragma: no cover - a fixture without such a row
        raise LookupError("no record crosses a sector boundary")
    hit = []
    pg = pf.page(leaf)
    base = (leaf - 1) * pf.page_size
    for off in pf.cell_offsets(leaf):
        size, pos = _varint(pg, off)
        r, pos = _varint(pg, pos)
        if base + off < sector + 512 and sector < base + pos + size:
            hit.append(r)
    _write(case.db, sector, bytes(512))
    case.lost_rowids = {"messages": sorted(hit)}
    case.phantom = {"messages": rid}
    return case.damaged(
        leaf, f"messages leaf {leaf}: the sector at {sector} zeroed (rowid {rid}'s record tail)"
    )


def lost_writes(dest_dir: Path) -> Case:
    """Lost writes: the database after Hermes appended messages to three sessions and
    opened a new one (``lab.hermes_fixtures.later_db``), with the pages of ``sessions`` that
    those transactions changed back to their older images (the disk acknowledged the
    writes but kept the old sectors), while the messages, the indexes and the FTS
    copies kept theirs. ``phantom['sessions']`` is how many sessions are now stale
    (older than their messages); ``lost_rowids['sessions']`` the rowids gone from the
    table (the new session); ``pristine`` the file as written."""
    from lab.hermes_fixtures import FUZZ, later_db

    older = built_db(FUZZ)
    case = fresh_copy(dest_dir, FUZZ)
    shutil.copyfile(later_db(FUZZ), case.db)
    case.pristine = later_db(FUZZ)
    case.roots = schema_roots(case.pristine)
    new, old = PristineFile(case.pristine), PristineFile(older)
    _, leaves = new.tree_pages(case.roots["sessions"])
    for leaf in leaves:
        if new.page(leaf) != old.page(leaf) and old.page_type(leaf) == 0x0D:
            _write(case.db, (leaf - 1) * new.page_size, old.page(leaf))
            case.damaged_pages.append(leaf)
    sql = "SELECT rowid, * FROM sessions"
    now = {r[0]: r for r in table_rows(case.db, sql)}
    want = {r[0]: r for r in table_rows(case.pristine, sql)}
    case.phantom = {"sessions": sum(1 for r, v in want.items() if r in now and now[r] != v)}
    case.lost_rowids = {"sessions": sorted(int(str(r)) for r in set(want) - set(now))}
    case.note = f"sessions pages {case.damaged_pages} back to their older images"
    return case


def _overflow_pointer_at(pf: PristineFile, leaf: int, rowid: int) -> tuple[int, int]:
    """(file offset of the overflow pointer of ``rowid``'s cell, the page it names)."""
    start, end = _cell_span(pf, leaf, rowid)
    usable = pf.page_size - pf.data[20]
    size = end - start
    x = usable - 35
    m = ((usable - 12) * 32 // 255) - 23
    k = m + (size - m) % (usable - 4)
    local = k if k <= x else m
    assert local < size, f"rowid {rowid} has no overflow chain"
    (first,) = struct.unpack(">I", pf.data[start + local : start + local + 4])
    return start + local, first


def cross_linked_overflow(dest_dir: Path, spec: Spec = SMALL) -> Case:
    """Two messages whose text spills onto overflow pages; the second one's overflow
    pointer rewritten to name the first one's overflow page: both rows' chains now
    lead to the same page, and the second row's own overflow page is reached by
    nothing. SQLite reads the second message with the first one's text past its cell.
    ``phantom['messages']`` is the second message's rowid (its own chain is intact,
    only unattached); ``unreached['messages']`` is [first, second]."""
    case = fresh_copy(dest_dir, spec)
    long = [
        int(str(r))
        for (r,) in table_rows(
            case.db, "SELECT rowid FROM messages WHERE length(content) > 4100 ORDER BY rowid"
        )
    ]
    a, b = long[0], long[1]
    pf = PristineFile(case.db)
    _, first_a = _overflow_pointer_at(pf, _leaf_of(pf, case.roots["messages"], a), a)
    at_b, first_b = _overflow_pointer_at(pf, _leaf_of(pf, case.roots["messages"], b), b)
    _write(case.db, at_b, struct.pack(">I", first_a))
    case.phantom = {"messages": b}
    case.unreached = {"messages": [a, b]}
    case.damaged_pages.append(at_b // pf.page_size + 1)
    case.note = (
        f"messages rowid {b}: overflow pointer {first_b} rewritten to {first_a},"
        f" rowid {a}'s first overflow page"
    )
    return case


def zeroed_page1(
    dest_dir: Path, spec: AnySpec = SMALL, *, schema_leaves: bool = False, keep_header: bool = False
) -> Case:
    """Page 1 zeroed whole, the 100-byte header included (``keep_header``: all but the
    header); with ``schema_leaves`` every other page of ``sqlite_schema``'s b-tree too,
    so no page names a table any more.

    Every row of every table is intact on its own pages (``unreached`` lists them all:
    nothing but page 1 and the schema leaves was written), so a recovery that infers
    the page size and takes Hermes' known schema for the version loses none.
    """
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.pristine)
    interior, leaves = pf.tree_pages(1)
    destroyed = [1] + (sorted(set(interior + leaves) - {1}) if schema_leaves else [])
    for n in destroyed:
        skip = 100 if n == 1 and keep_header else 0
        _write(case.db, (n - 1) * pf.page_size + skip, b"\x00" * (pf.page_size - skip))
    case.damaged_pages.extend(destroyed)
    for table in ("sessions", "messages"):
        rows = table_rows(case.pristine, f"SELECT rowid FROM {table}")
        case.unreached[table] = [int(str(r)) for (r,) in rows]
    what = "page 1 and every sqlite_schema page" if schema_leaves else "page 1"
    what += " (header kept)" if keep_header else " (header included)"
    case.note = f"{what} zeroed: pages {destroyed}"
    return case


def page1_and_leaf_pointers(
    dest_dir: Path, spec: AnySpec = SMALL, which: int = 3, *, delete_newest: bool = False
) -> Case:
    """Page 1 and every ``sqlite_schema`` page zeroed, and with them the header and
    cell-pointer array of the ``which``-th ``messages`` leaf: no page names a table,
    and that leaf's cells are whole but only found by carving. ``pristine`` is the file
    just before the damage.

    ``delete_newest``: first the message whose cell lies at the start of that leaf's
    content area is deleted (through SQLite, its FTS copies and message_count with it).
    SQLite frees a cell there by moving the content area's start past it, so its bytes
    stay whole in the page's free space: a deleted row that carving finds (``deleted``).
    """
    case = fresh_copy(dest_dir, spec)
    pristine = dest_dir / "pristine.db"
    root = case.roots["messages"]
    leaf = PristineFile(case.db).tree_pages(root)[1][which]
    if delete_newest:
        before = PristineFile(case.db)
        start = min(before.cell_offsets(leaf))
        _, pos = _varint(before.page(leaf), start)
        rowid, _ = _varint(before.page(leaf), pos)
        conn = apsw.Connection(str(case.db))
        with conn:
            conn.execute("DELETE FROM messages WHERE id = ?", (rowid,))
            recount_messages(conn)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        conn.close()
        after = PristineFile(case.db)
        ps = before.page_size
        cell = slice((leaf - 1) * ps + start, leaf * ps)
        if after.data[cell][:64] != before.data[cell][:64] or start in after.cell_offsets(leaf):
            raise RuntimeError(f"leaf {leaf}: the deleted cell was not left whole")
        case.deleted = {"messages": [rowid]}
    shutil.copyfile(case.db, pristine)
    case.pristine = pristine
    pf = PristineFile(case.db)
    interior, leaves = pf.tree_pages(1)
    for n in sorted(set(interior + leaves)):
        _write(case.db, (n - 1) * pf.page_size, b"\x00" * pf.page_size)
    (count,) = struct.unpack(">H", pf.page(leaf)[3:5])
    _write(case.db, (leaf - 1) * pf.page_size, b"\x00" * (8 + 2 * count))
    case.damaged_pages.extend([*sorted(set(interior + leaves)), leaf])
    case.unreached = {"messages": pf.leaf_rowids(leaf)}
    case.note = (
        f"page 1 and the sqlite_schema pages zeroed, and the header and cell pointers of"
        f" messages leaf {leaf}"
    )
    return case


def flipped_serial_type(
    dest_dir: Path, rowid: int, column: str, mask: int, spec: Spec = SMALL
) -> Case:
    """One bit (``mask``) of the serial type of ``column`` flipped in the record header of
    message ``rowid``, as a flipped bit on disk does: every page still parses and SQLite
    reads the row without complaint, as another type (``compacted`` 0, type 8, read as an
    empty blob with mask 4), another length of text (the columns after it then read from
    the wrong bytes: a timestamp of 3.55e161), or a blob of the same length (mask 1 on a
    text). ``phantom`` names the row changed. Raises LookupError when the flipped type is
    one SQLite refuses (10, 11) or needs more bytes than the payload holds."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    leaf = _leaf_of(pf, case.roots["messages"], rowid)
    start, end = _cell_span(pf, leaf, rowid)
    names = [str(r[1]) for r in table_rows(case.db, "PRAGMA table_info(messages)")]
    data = pf.data
    hsize, pos = _varint(data, start)
    sizes = []
    last, old = 0, 0
    for name in names:
        t, pos = _varint(data, pos)
        sizes.append(_serial_width(t))
        if name == column:
            last, old = pos - 1, t  # the low 7 bits are the varint's last byte
    assert mask < 128, "a varint's last byte holds 7 bits"
    assert last, f"{column} is no column of messages"
    new = old ^ mask
    grown = _serial_width(new) - _serial_width(old)
    if new in (10, 11) or grown + sum(sizes) > end - start - hsize:
        raise LookupError(f"serial type {old} ^ {mask} = {new} cannot be read")
    _write(case.db, last, bytes([data[last] ^ mask]))
    case.phantom = {"messages": rowid}
    return case.damaged(leaf, f"messages rowid {rowid}: {column}'s serial type {old} read as {new}")


def _serial_width(t: int) -> int:
    """Bytes of the value a record's serial type ``t`` names."""
    if t >= 12:
        return (t - 12) // 2
    return (0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0)[t]


def zeroed_run_of_leaves(
    dest_dir: Path,
    table: str = "messages",
    first: int = 2,
    count: int = 150,
    spec: Spec = SMALL,
    *,
    witnesses: bool = True,
) -> Case:
    """Zero ``count`` consecutive leaves of ``table`` from its ``first``: hundreds of rows
    lost for good at once (``lost_rowids``), in one stretch of rowids. Without
    ``witnesses`` the leaves of every index of the table and of its FTS content tables
    are zeroed too: nothing names the rows lost, only the stretch says where they were."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots[table])
    gone = leaves[first : first + count]
    case.lost_rowids = {table: sorted(r for leaf in gone for r in pf.leaf_rowids(leaf))}
    for leaf in gone:
        zero_page(case, leaf)
    if not witnesses:
        _zero_witnesses(case, pf, table)
    case.note = f"{table}: {len(gone)} leaves zeroed ({len(case.lost_rowids[table])} rows)"
    return case


def _zero_witnesses(case: Case, pf: PristineFile, table: str) -> None:
    """Zero the leaves of every index of ``table`` and of its FTS content tables: nothing
    is left to name a row of it the table's own pages lost."""
    names = [
        str(r[0])
        for r in table_rows(
            case.pristine,
            "SELECT name FROM sqlite_schema WHERE rootpage > 0 AND ((type = 'index'"
            f" AND tbl_name = '{table}') OR name LIKE '{table}_fts%_content')",
        )
    ]
    for name in names:
        for leaf in pf.tree_pages(case.roots[name])[1]:
            zero_page(case, leaf)


def orphaned_split(dest_dir: Path, older: Path, newer: Path, table: str = "messages") -> Case:
    """A split half written back: a copy of ``newer`` (``older`` after more rows were
    appended: its last leaf filled and a new one opened beside it) whose parent page
    points at neither of the two new leaves (their cell dropped, the right-most pointer
    moved to an empty leaf appended to the file), and the old image of the leaf before
    the split (from ``older``) on another appended page. Three leaves no b-tree reaches,
    their rowid ranges overlapping; every cell of the two new leaves is intact, so each
    of their rows must come back (``unreached``)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    case = Case(db=dest_dir / "state.db", pristine=newer, roots=schema_roots(newer))
    shutil.copyfile(newer, case.db)
    new, old = PristineFile(newer), PristineFile(older)
    ps, parent = new.page_size, case.roots[table]
    kids = new.children(parent)
    before, after = kids[-2], kids[-1]  # the leaf that filled, the leaf opened beside it
    assert new.page_type(parent) == 0x05, "a root that is an interior page"
    assert new.page(before) != old.page(before), "the leaf filled between the two"
    assert min(new.leaf_rowids(before)) == min(old.leaf_rowids(before)), "not the same leaf"
    pg = bytearray(new.page(parent))
    h = 100 if parent == 1 else 0
    offsets = new.cell_offsets(parent)
    gone = offsets[-1]  # the cell whose child is ``before`` (child pointer, rowid varint)
    _, end = _varint(bytes(pg), gone + 4)
    pages = len(new.data) // ps
    empty_leaf, old_image = pages + 1, pages + 2
    pg[h + 3 : h + 5] = struct.pack(">H", len(offsets) - 1)
    pg[h + 7] += end - gone  # the dropped cell's bytes counted as fragments
    pg[h + 8 : h + 12] = struct.pack(">I", empty_leaf)
    _write(case.db, (parent - 1) * ps, bytes(pg))
    leaf = bytearray(ps)
    leaf[0] = 0x0D
    leaf[5:7] = struct.pack(">H", ps % 65536)
    with open(case.db, "ab") as f:
        f.write(bytes(leaf) + old.page(before))
    _write(case.db, 28, struct.pack(">I", pages + 2))
    case.unreached = {table: sorted(new.leaf_rowids(before) + new.leaf_rowids(after))}
    case.damaged_pages += [parent, empty_leaf, old_image]
    case.note = (
        f"{table}: page {parent} points at neither leaf {before} nor {after} (a split half"
        f" written back); the old image of {before} on page {old_image}"
    )
    return case


def zeroed_sector_at_cell_start(
    dest_dir: Path,
    table: str = "messages",
    cell: int = 2,
    spec: Spec = SMALL,
    *,
    witnesses: bool = True,
) -> Case:
    """The 512-byte sector that holds the start of one cell (its sizes, rowid and record
    header) of the table's second leaf zeroed: the cell now reads as rowid 0, its record
    from zeros, and no key of it survives. ``lost_rowids`` lists every row whose cell the
    sector touches (their number is the loss; no key of them can be read). Without
    ``witnesses`` the table's indexes and FTS copies are zeroed too (as when page 1 and
    the schema are lost and they are rebuilt from the table)."""
    case = fresh_copy(dest_dir, spec)
    pf = PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots[table])
    leaf = leaves[1] if len(leaves) > 1 else leaves[0]
    pg, base = pf.page(leaf), (leaf - 1) * pf.page_size
    sector = (base + pf.cell_offsets(leaf)[cell]) // 512 * 512
    hit = []
    for off in pf.cell_offsets(leaf):
        size, pos = _varint(pg, off)
        r, pos = _varint(pg, pos)
        if base + off < sector + 512 and sector < base + pos + size:
            hit.append(r)
    _write(case.db, sector, bytes(512))
    if not witnesses:
        _zero_witnesses(case, pf, table)
    case.lost_rowids = {table: sorted(hit)}
    return case.damaged(
        leaf, f"{table} leaf {leaf}: the sector at {sector} zeroed (cell {cell}'s start)"
    )


def lost_overflow_pointer(dest_dir: Path, which: int = 0, spec: Spec = SMALL) -> Case:
    """The 4-byte overflow pointer at the end of a long message's cell zeroed (the
    ``which``-th message whose text spills onto overflow pages): SQLite cannot read past
    the cell, and the row's own overflow pages, intact, are reached by nothing.
    ``phantom['messages']`` is the message."""
    case = fresh_copy(dest_dir, spec)
    long = [
        int(str(r))
        for (r,) in table_rows(
            case.db, "SELECT rowid FROM messages WHERE length(content) > 4100 ORDER BY rowid"
        )
    ]
    rowid = long[which]
    pf = PristineFile(case.db)
    at, first = _overflow_pointer_at(pf, _leaf_of(pf, case.roots["messages"], rowid), rowid)
    _write(case.db, at, bytes(4))
    case.phantom = {"messages": rowid}
    case.damaged_pages.append(at // pf.page_size + 1)
    case.note = f"messages rowid {rowid}: overflow pointer {first} zeroed"
    return case
