"""The full scans' facts of a diagnosis: each table's counts, phantom rows and duplicate
keys, and the rowids its indexes or FTS copies hold that it lacks (``table_facts``);
rows whose parent row is missing (``orphan_rows``); Hermes' sessions whose message
count no honest history explains (``counts_disagree``). Counts come from full scans
(``NOT INDEXED``, docs/safety.md rule 7) next to what the planner answers, because an
index may be the broken part (docs/stories.md story 3)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from typing import Any

import apsw

from statewarden.progress import ProgressFn
from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.scan import ScanResult, keyed_scan, rowid_word, scan_table
from statewarden.recovery.decoding.schema import Schema, SchemaObject
from statewarden.recovery.diagnosis import TableFacts
from statewarden.recovery.evidence.copies import CopyCheck, compare, feeds, fts_rowids
from statewarden.recovery.evidence.foreign_cells import OwnRows, Records
from statewarden.recovery.evidence.lost_writes import sequence_of
from statewarden.sqlite import quote_ident, raise_if_interrupted


def _scan_facts(
    conn: apsw.Connection,
    schema: Schema,
    progress: ProgressFn | None,
    foreign: dict[str, Records],
    *,
    indexes_agree: bool = False,
) -> tuple[list[TableFacts], dict[str, int], list[str], list[CopyCheck]]:
    """The full scans' facts: each base table's (``table_facts``), the orphans per table
    and the tables whose foreign keys could not be checked (``foreign_key_orphans``),
    the FTS copies compared (``compare``); ``foreign``: other tables' cells each
    table's b-tree reaches (``foreign_cells.py``), which are no rows of it;
    ``indexes_agree``: see ``table_facts``."""
    base = schema.base_tables()
    tables = []
    for i, obj in enumerate(base):
        if progress:
            progress("scan tables", i, len(base))
        facts = table_facts(
            conn, obj, schema, foreign=foreign.get(obj.name, {}), indexes_agree=indexes_agree
        )
        tables.append(facts)
    if progress:
        progress("scan tables", len(base), len(base))
    proved = frozenset(o.name for o in schema.tables() if o.rowid_table and indexes_agree)
    orphans, fk_errors = foreign_key_orphans(conn, base, foreign, proved=proved)
    if progress:
        progress("compare FTS copies", 0, 1)
    copies = compare(conn, schema, foreign)
    return tables, orphans, fk_errors, copies


def table_facts(
    conn: apsw.Connection,
    obj: SchemaObject,
    schema: Schema,
    *,
    foreign: Records | None = None,
    indexes_agree: bool = False,
) -> TableFacts:
    """Planner count, full-scan count, distinct keys and phantom duplicates of one table;
    the rowids its indexes or FTS copies hold that the table lacks.
    ``foreign``: other tables' cells its b-tree reaches, which are no rows of it.
    ``indexes_agree``: SQLite's integrity check of the b-trees found nothing (no line,
    not stopped), so each full index lists exactly the table's rowids (every row has
    its entry, and no index more entries than the table rows): the rowids the indexes
    list are then the rowids the scan reads, and are not read from them again; and a
    rowid table's rows are counted, not scanned (``_proved_facts``)."""
    key = obj.key_columns
    key_cols = obj.key_names
    if obj.rowid_name is None:
        return _keyed_facts(conn, obj, schema)
    if indexes_agree and not key_cols and not foreign and obj.rowid_table:
        proved = _proved_facts(conn, obj, schema)
        if proved is not None:
            return proved
    rowids = KeySet()  # rowids read (a KeySet: a million rows cost no 100 MiB)
    again: Counter[int] = Counter()  # rowid -> times read after the first
    keys: dict[Any, int] = {}  # key columns -> the first rowid read with them
    duplicate_keys: set[Any] = set()

    def on_row(row: tuple[Any, ...]) -> None:
        rowid = int(row[0])
        if not rowids.add_new(rowid):
            again[rowid] += 1
        if key_cols:
            k = tuple(row[1:])
            prev = keys.setdefault(k, rowid)
            if prev != rowid:
                duplicate_keys.add(k)

    # Agreeing indexes tell the scan nothing: its rows come in order, all listed, and
    # none is listed that it lacks (``_rows_elsewhere``'s second list stays empty).
    hints = KeySet() if indexes_agree else _index_rowids(conn, schema, obj)
    own = OwnRows(obj, foreign or {})
    result: ScanResult = scan_table(
        conn, obj.name, own.columns(key_cols), own.keep(key_cols, on_row), hints=hints
    )
    result.rows_read -= len(own.left_out)
    planner, planner_error = _planner_count(conn, obj.name)
    missing: list[int] = []
    stale: list[int] = []
    copies: KeySet | None = None
    witnessed = bool(schema.full_indexes(obj.name))
    if key == ["rowid"]:
        copies = fts_rowids(conn, schema, obj.name)
        missing, stale = _rows_elsewhere(conn, obj, rowids, hints, copies)
    return TableFacts(
        name=obj.name,
        key=key,
        planner_rows=planner,
        scan_rows=result.rows_read,
        distinct_keys=len(keys) if key_cols else len(rowids),
        duplicate_rowids={r: n + 1 for r, n in again.items()},
        duplicate_keys=len(duplicate_keys),
        unreadable_rows=result.unreadable_rows,
        unreadable_ranges=result.unreadable_ranges,
        planner_error=planner_error,
        text_repaired=len(result.text_repaired),
        missing_rows=missing,
        stale_index_entries=stale,
        witnessed=witnessed,
        fts_copies=copies,
        fts_copies_read=key == ["rowid"],
    )


def _proved_facts(conn: apsw.Connection, obj: SchemaObject, schema: Schema) -> TableFacts | None:
    """``table_facts`` of a rowid table (``SchemaObject.rowid_table``) in a file whose
    b-trees SQLite's complete integrity check found nothing wrong in, without a scan:
    the check proved that its rowids rise (each stored once, none unreadable) and that
    each full index lists exactly its rows, so the planner's count is the scan's, every
    rowid distinct; the rowids its FTS copies hold that it lacks are looked up in it by
    SQL (FTS5's own ``_content`` tables, whose ids are their rowids, rising too). The
    facts a full scan gives (tests/recovery/test_proved_facts.py holds both to the same
    answers). None when the count fails or a copy is not in a table of FTS5's shape:
    the scan then reads them."""
    t = quote_ident(obj.name)
    rows, _failed = _planner_count(conn, obj.name)
    if rows is None:
        return None
    seq = sequence_of(conn, obj.name)
    # AUTOINCREMENT never gave out a rowid above the sequence (``_rows_elsewhere``).
    cap = "" if seq is None else f" AND id <= {int(seq)}"
    missing: set[int] = set()
    for f in feeds(schema):
        if f.table != obj.name:
            continue
        content = schema.by_name(f.fts + "_content")
        if content is None:
            continue  # no copy to read (nor does the scan's query find one)
        if not (content.rowid_table and content.rowid_alias == "id"):
            return None  # not FTS5's own table: its ids need not rise; the scan reads them
        sql = (
            f"SELECT id FROM {quote_ident(f.fts + '_content')} NOT INDEXED"
            f" WHERE typeof(id) = 'integer'{cap} AND id NOT IN (SELECT rowid FROM {t})"
        )
        try:
            missing.update(int(r[0]) for r in conn.execute(sql))
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_interrupted(exc)
            continue  # a damaged copy vouches for nothing
    return TableFacts(
        name=obj.name,
        key=obj.key_columns,
        planner_rows=rows,
        scan_rows=rows,
        distinct_keys=rows,
        duplicate_rowids={},
        duplicate_keys=0,
        unreadable_rows=0,
        unreadable_ranges=[],
        missing_rows=sorted(missing),
        witnessed=bool(schema.full_indexes(obj.name)),
    )


def _planner_count(conn: apsw.Connection, table: str) -> tuple[int | None, str | None]:
    """(the rows the query planner counts in ``table``, or None; why it failed, or None)."""
    try:
        row = conn.execute(f"SELECT count(*) FROM {quote_ident(table)}").fetchone()
    except apsw.Error as exc:
        return None, str(exc).split("\n", 1)[0]
    return (int(row[0]) if row else None), None


def _keyed_facts(conn: apsw.Connection, obj: SchemaObject, schema: Schema) -> TableFacts:
    """``table_facts`` of a table no name reaches by rowid (``keyed_scan``): a WITHOUT
    ROWID table, whose rows are the b-tree of its primary key, or one whose columns
    take ``rowid``, ``_rowid_`` and ``oid`` (keyed by its declared primary key, else
    counted: nothing names its rows). The rows the planner counts past what the scans
    read are unreadable (the integrity check names the damaged pages)."""
    planner, planner_error = _planner_count(conn, obj.name)
    key = obj.key_names
    keys: set[tuple[Any, ...]] = set()
    twice: set[tuple[Any, ...]] = set()

    def on_row(row: tuple[Any, ...]) -> None:
        k = row[1:] if key else (len(keys),)
        if k in keys:
            twice.add(k)
        keys.add(k)

    result = keyed_scan(conn, obj.name, key, on_row, key=key)
    read = result.rows_read
    unreadable = len(result.unreadable_keys)
    if result.stretch_unread:
        unreadable = max(unreadable + 1, (planner or 0) - read)
    return TableFacts(
        name=obj.name,
        key=obj.key_columns,
        planner_rows=planner,
        scan_rows=read,
        distinct_keys=len(keys),
        duplicate_rowids={},
        duplicate_keys=len(twice),
        unreadable_rows=unreadable,
        unreadable_ranges=[],
        planner_error=planner_error,
        witnessed=bool(schema.full_indexes(obj.name)),
    )


def _index_rowids(conn: apsw.Connection, schema: Schema, obj: SchemaObject) -> KeySet:
    """Rowids the table's readable full indexes list: where a damaged scan can resume,
    and what tells a garbled cell (a rowid out of order that no index lists) from a
    row (``scan.py``)."""
    out = KeySet()
    if obj.rowid_name is None:
        return out
    for idx in schema.full_indexes(obj.name):
        try:
            t, i = quote_ident(obj.name), quote_ident(idx.name)
            sql = f"SELECT {obj.rowid_name} FROM {t} INDEXED BY {i}"
            out.update(r[0] for r in conn.execute(sql))
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_interrupted(exc)
            continue
    return out


def _rows_elsewhere(
    conn: apsw.Connection,
    obj: SchemaObject,
    rowids: KeySet,
    listed: KeySet,
    copies: KeySet | None,
) -> tuple[list[int], list[int]]:
    """(rowids the FTS copies hold that the table lacks, rowids only an index lists);
    ``listed``: the rowids its readable full indexes list (``_index_rowids``);
    ``copies``: those its FTS copies hold (``copies.fts_rowids``).

    Without an FTS copy nothing tells a lost row from an entry a delete left behind,
    so both lists stay empty; the planner's count still shows the mismatch."""
    if copies is None:
        return [], []
    seq = sequence_of(conn, obj.name)
    if seq is not None:
        # AUTOINCREMENT never gave out a rowid above the sequence: a copy naming one
        # holds a garbled cell, not a row that existed.
        copies = copies.up_to(seq)
    return sorted(copies - rowids), sorted(listed - rowids - copies)


def counts_disagree(conn: apsw.Connection, db_name: str = "main") -> list[tuple[int, int, int]]:
    """Hermes' sessions whose ``message_count`` no honest history explains: (rowid,
    message_count, messages counted), from full scans.

    Hermes counts each message into its session in the same transaction that stores
    it; a compaction sets the count to the active messages, and a rewind marks
    messages inactive (``active = 0``) and leaves the count as it was. So in an
    intact file the count lies between the session's active messages and all of its
    messages. A session counting fewer than its active messages is older than its
    messages (its page went back to an older image: a lost write; the active ones are
    the count given); one counting more than all of its messages has lost messages
    (all of them are the count given). Empty when the file has no such tables, or
    when either cannot be read whole."""
    d = quote_ident(db_name)
    try:
        cols = {str(r[1]) for r in conn.execute(f"PRAGMA {d}.table_info(messages)")}
        scols = {str(r[1]) for r in conn.execute(f"PRAGMA {d}.table_info(sessions)")}
        if not {"session_id"} <= cols or not {"id", "message_count"} <= scols:
            return []
        active = "coalesce(active, 1) = 1" if "active" in cols else "1"
        counted: dict[Any, tuple[int, int]] = {
            r[0]: (int(r[1]), int(r[2]))
            for r in conn.execute(
                f"SELECT session_id, sum({active}), count(*) FROM {d}.messages NOT INDEXED"
                " GROUP BY session_id"
            )
        }
        out = []
        for rowid, sid, n in conn.execute(
            f"SELECT rowid, id, message_count FROM {d}.sessions NOT INDEXED"
        ):
            live, every = counted.get(sid, (0, 0))
            if isinstance(n, int) and n < live:
                out.append((int(rowid), n, live))
            elif isinstance(n, int) and n > every:
                out.append((int(rowid), n, every))
        return out
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_interrupted(exc)
        return []


def orphan_rows(
    conn: apsw.Connection,
    table: str,
    foreign: OwnRows | None = None,
    *,
    proved: Collection[str] = (),
) -> int:
    """Rows of ``table`` whose parent row is missing, found by full scans of both
    tables that read past damage (``scan.py``). ``foreign_key_check`` looks parents up
    through the parent's index, which on a damaged file still lists parents whose rows
    are gone, and fails outright on an unreadable page. Each row counts once however
    many of its foreign keys fail; check and recover count orphans with this function.
    ``foreign`` leaves out other tables' cells the table's b-tree reaches; ``proved``:
    the tables read by a plain scan (``each_row``).
    """
    fks: dict[int, list[tuple[str, str, str | None]]] = {}
    for row in conn.execute(f"PRAGMA foreign_key_list({quote_ident(table)})"):
        fks.setdefault(int(row[0]), []).append((str(row[2]), str(row[3]), row[4]))
    if not fks:
        return 0
    rules: list[tuple[list[str], set[tuple[Any, ...]]]] = []
    for parts in fks.values():
        parent = parts[0][0]
        to = [p[2] for p in parts]
        if any(t is None for t in to):
            info = conn.execute(f"PRAGMA table_info({quote_ident(parent)})").fetchall()
            pk = sorted((int(r[5] or 0), str(r[1])) for r in info if r[5])
            to = [name for _, name in pk] or ["rowid"]
        keys = _key_values(conn, parent, [str(t) for t in to], proved=parent in proved)
        rules.append(([p[1] for p in parts], keys))
    columns = list(dict.fromkeys(c for cols, _ in rules for c in cols))
    at = {c: i + 1 for i, c in enumerate(columns)}
    # Each rule as (its columns' places in a row, the parent's keys), looked up once.
    places = [([at[c] for c in cols], keys) for cols, keys in rules]
    orphans = 0

    def on_row(row: tuple[Any, ...]) -> None:
        nonlocal orphans
        for where, keys in places:
            values = tuple([row[i] for i in where])
            if None not in values and values not in keys:
                orphans += 1
                return

    def start_over() -> None:
        nonlocal orphans
        orphans = 0

    if foreign is None:
        each_row(conn, table, columns, on_row, proved=table in proved, start_over=start_over)
    else:
        scan_table(conn, table, foreign.columns(columns), foreign.keep(columns, on_row))
    return orphans


def _key_values(
    conn: apsw.Connection, table: str, columns: list[str], *, proved: bool
) -> set[tuple[Any, ...]]:
    out: set[tuple[Any, ...]] = set()
    by_rowid = columns == ["rowid"]

    def add(row: tuple[Any, ...]) -> None:
        out.add((row[0],) if by_rowid else tuple(row[1:]))

    each_row(conn, table, [] if by_rowid else columns, add, proved=proved, start_over=out.clear)
    return out


def each_row(
    conn: apsw.Connection,
    table: str,
    columns: list[str],
    on_row: Callable[[tuple[Any, ...]], None],
    *,
    proved: bool = False,
    start_over: Callable[[], None] | None = None,
) -> None:
    """Each row of ``table`` (its rowid and ``columns``) to ``on_row``, as ``scan_table``
    delivers them. ``proved``: ``table`` is a rowid table (``SchemaObject.rowid_table``)
    in which SQLite's complete integrity check of the b-trees found nothing (every page
    reads, its rowids rise), so a plain full scan delivers the same rows in the same
    order, without the work ``scan.py`` does to read past damage; one that fails even so
    calls ``start_over`` (what ``on_row`` kept is to be forgotten) and the rows are read
    by ``scan_table``, as without the proof.
    (A virtual table or a view is no b-tree the check read: never ``proved``.) A table
    no name reaches by rowid (WITHOUT ROWID, or its columns take all three) is read by
    ``keyed_scan``, ``None`` in the rowid's place."""
    cols = "".join(", " + quote_ident(c) for c in columns)
    word = rowid_word(conn, table)
    if word is None:
        keyed_scan(conn, table, columns, on_row)
        return
    if proved:
        try:
            for row in conn.execute(
                f'SELECT {word}{cols} FROM "main".{quote_ident(table)} NOT INDEXED'
            ):
                on_row(row)
            return
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_interrupted(exc)
            if start_over is not None:
                start_over()
    scan_table(conn, table, columns, on_row)


def foreign_key_orphans(
    conn: apsw.Connection,
    tables: list[SchemaObject],
    foreign: dict[str, Records] | None = None,
    *,
    proved: Collection[str] = (),
) -> tuple[dict[str, int], list[str]]:
    """Rows per table whose parent row is missing (``foreign_key_check``), table by table
    so that one unreadable table does not hide the others; ``foreign``: other tables'
    cells each table's b-tree reaches (``foreign_cells.py``), which are no rows of it;
    ``proved``: the tables read by a plain scan (``each_row``)."""
    counts: dict[str, int] = {}
    errors = []
    for obj in tables:
        found = (foreign or {}).get(obj.name)
        try:
            n = orphan_rows(conn, obj.name, OwnRows(obj, found) if found else None, proved=proved)
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_interrupted(exc)
            errors.append(f"{obj.name}: {str(exc).split(chr(10), 1)[0]}")
            continue
        if n:
            counts[obj.name] = n
    return counts, errors
