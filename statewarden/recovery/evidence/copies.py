"""Second copies of a table's text: the own-content FTS tables its triggers feed.

Hermes 0.19.0 writes each message's text again into ``messages_fts`` and
``messages_fts_trigram``, by ``AFTER INSERT`` triggers of the form
``INSERT INTO fts(rowid, col) VALUES (new.id, <expression of new.*>)``; the FTS table
keeps that value in its ``<fts>_content`` shadow table (columns ``c0, c1, ...``) under
the same rowid. Reading the trigger from the file's own schema gives, per FTS table,
the expression to recompute from the base row, so each row can be compared with its
copies without knowing Hermes' columns.

Two copies and the row itself make a vote: a row that differs from copies that agree
with each other has rotted (base damage); a copy that differs from the row and from
the other copy has rotted (derived damage, rebuilt from the row).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import json
import re
from array import array
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import apsw

from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.scan import MAX_ROWID, MIN_ROWID
from statewarden.recovery.decoding.schema import Schema, SchemaObject
from statewarden.recovery.evidence.foreign_cells import OwnRows, Records
from statewarden.sqlite import quote_ident

_INSERT_RE = re.compile(
    r"\bAFTER\s+INSERT\s+ON\s+[\"`\[]?(\w+)[\"`\]]?\s.*?\bBEGIN\s+INSERT\s+INTO\s+"
    r"[\"`\[]?(\w+)[\"`\]]?\s*\(([^)]*)\)\s*VALUES\s*\((.*)\)\s*;\s*END\s*;?\s*$",
    re.I | re.S,
)
_UPDATE_RE = re.compile(
    r"\bAFTER\s+UPDATE\b.*?\bON\s+[\"`\[]?(\w+)[\"`\]]?\s.*\bINSERT\s+INTO\s+"
    r"[\"`\[]?(\w+)[\"`\]]?\s*\(([^)]*)\)\s*VALUES\s*\((.*)\)\s*;\s*END\s*;?\s*$",
    re.I | re.S,
)
_NEW_RE = re.compile(r"\bnew\.", re.I)
# At most this many rowids are listed per finding.
SAMPLE_ROWIDS = 20


@dataclass
class Feed:
    """How one FTS table is fed from its base table."""

    fts: str
    table: str
    rowid_expr: str  # over the base row, aliased ``b``
    columns: dict[str, str]  # FTS content column (c0, ...) -> expression over ``b``
    # The same mapping for each ``AFTER UPDATE`` trigger that writes other values: Hermes
    # main's update triggers on a legacy file index a tool row's first 8192 characters
    # while 0.19.0's insert trigger indexed all of it. A copy equal to any of these is
    # what a trigger wrote: a prefix is evidence for the prefix, not a changed row.
    also: list[dict[str, str]] = field(default_factory=list)

    def copy_matches(self, c: str = "c") -> str:
        """SQL true when the copy (aliased ``c``) is what one of the triggers wrote."""
        variants = [self.columns, *self.also]
        return (
            "("
            + " OR ".join(
                "(" + " AND ".join(f"{c}.{col} IS ({expr})" for col, expr in v.items()) + ")"
                for v in variants
            )
            + ")"
        )


@dataclass
class CopyCheck:
    """Rows of one base table compared with their FTS copies."""

    table: str
    copies: list[str]
    rows_rotted: list[int] = field(default_factory=list)  # the copies agree, the row not
    # Rows that differ from copies that disagree with each other, whose text is not
    # UTF-8 (Hermes writes none): the row changed on disk, whatever the copies did.
    rows_bad_text: list[int] = field(default_factory=list)
    copies_rotted: dict[str, list[int]] = field(default_factory=dict)  # fts -> rowids
    missing_from_copies: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    def findings(self) -> list[str]:
        out = []
        if self.rows_bad_text:
            n = len(self.rows_bad_text)
            out.append(
                f"{self.table}: {n} row{'s' if n != 1 else ''} whose text is not valid"
                f" UTF-8 (changed on disk; {rowids_shown(self.rows_bad_text)})"
            )
        if self.rows_rotted:
            n = len(self.rows_rotted)
            rows = "1 row differs from its" if n == 1 else f"{n} rows differ from their"
            out.append(
                f"{self.table}: {rows} search-index copies ({', '.join(self.copies)}),"
                " which agree with each other: changed on disk"
                f" ({rowids_shown(self.rows_rotted)})"
            )
        for fts, rowids in self.copies_rotted.items():
            n = len(rowids)
            texts = "text differs from its" if n == 1 else "texts differ from their"
            out.append(f"{fts}: {n} copied {texts} {self.table} row ({rowids_shown(rowids)})")
        if self.error:
            out.append(f"{self.table}: its search-index copies could not be compared: {self.error}")
        return out


def sample(rowids: list[int], n: int = SAMPLE_ROWIDS) -> str:
    """The first ``n`` of ``rowids``, then ", ..." when there are more."""
    return ", ".join(str(r) for r in rowids[:n]) + (", ..." if len(rowids) > n else "")


def rowids_shown(rowids: list[int]) -> str:
    """``rowids`` as a finding names them: "rowid 7", "rowids 3, 9, ..."."""
    return f"rowid{'s' if len(rowids) != 1 else ''} {sample(rowids)}"


def _split_top(s: str) -> list[str]:
    """Split at commas outside parentheses and quotes."""
    parts, depth, cur, quote = [], 0, [], ""
    for ch in s:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def _mapping(fts: SchemaObject, cols: str, values: str) -> tuple[str, dict[str, str]] | None:
    """(rowid expression, FTS content column -> expression) of one ``INSERT INTO fts``."""
    names = [c.strip().strip('"`[]').lower() for c in cols.split(",")]
    exprs = [_NEW_RE.sub("b.", e) for e in _split_top(values)]
    fts_cols = [c.name.lower() for c in fts.columns if not c.hidden]
    if len(names) != len(exprs) or "rowid" not in names:
        return None
    mapping = {}
    for name, expr in zip(names, exprs, strict=True):
        if name in fts_cols:
            mapping[f"c{fts_cols.index(name)}"] = expr
    return (exprs[names.index("rowid")], mapping) if mapping else None


def feeds(schema: Schema) -> list[Feed]:
    """Every own-content FTS table fed by an ``AFTER INSERT`` trigger of a base table
    (with what its ``AFTER UPDATE`` triggers write, when that differs)."""
    out = []
    for trig in schema.objects:
        if trig.type != "trigger" or not trig.sql:
            continue
        m = _INSERT_RE.search(trig.sql)
        if m is None:
            continue
        table, fts_name, cols, values = m.groups()
        fts = schema.by_name(fts_name)
        if fts is None or fts.module != "fts5" or fts.fts_content is not None:
            continue
        found = _mapping(fts, cols, values)
        if found is None:
            continue
        feed = Feed(fts_name, table, found[0], found[1])
        for other in schema.objects:
            u = _UPDATE_RE.search(other.sql or "") if other.type == "trigger" else None
            if u is None or u.group(1) != table or u.group(2) != fts_name:
                continue
            alt = _mapping(fts, u.group(3), u.group(4))
            if alt is not None and alt[0] == feed.rowid_expr and alt[1] != feed.columns:
                feed.also.append(alt[1])
        out.append(feed)
    return out


def compare(
    conn: apsw.Connection, schema: Schema, foreign: Mapping[str, Records] | None = None
) -> list[CopyCheck]:
    """Each base table with FTS copies: which rows or copies differ. ``foreign``: per
    table, other tables' cells its b-tree reaches (``foreign_cells.py``): no rows of
    it, they are held against no copy."""
    by_table: dict[str, list[Feed]] = {}
    for f in feeds(schema):
        by_table.setdefault(f.table, []).append(f)
    out = []
    for table, fs in by_table.items():
        check = CopyCheck(table, [f.fts for f in fs])
        obj = schema.by_name(table)
        records = (foreign or {}).get(table)
        try:
            _compare(conn, check, fs, OwnRows(obj, records) if obj and records else None)
        except (apsw.Error, UnicodeDecodeError) as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
            check.error = str(exc).split("\n", 1)[0]
            # No vote without the copies: text that is not UTF-8 still says a row
            # changed on disk (a full read of the table, on damage only).
            check.rows_bad_text = _scan_bad_text(conn, schema, table)
        out.append(check)
    return out


def _compare(
    conn: apsw.Connection, check: CopyCheck, fs: list[Feed], own: OwnRows | None = None
) -> None:
    differs: dict[str, set[int]] = {}
    for f in fs:
        content = quote_ident(f"{f.fts}_content")
        cols = own.columns([]) if own is not None else []
        sql = (
            f"SELECT b.rowid{''.join(f', b.{quote_ident(c)}' for c in cols)}"
            f" FROM {quote_ident(f.table)} AS b NOT INDEXED"
            f" JOIN {content} AS c ON c.id = ({f.rowid_expr}) WHERE NOT {f.copy_matches()}"
        )
        differs[f.fts] = _own_rowids(conn, sql, own)
    if len(fs) >= 2:
        a, b = fs[0], fs[1]
        both = differs[a.fts] & differs[b.fts]
        # Both copies differ from the row: the row changed unless the copies also
        # differ from each other (then nothing can tell which is right).
        same = _copies_agree(conn, a, b, both)
        check.rows_rotted = sorted(same)
        check.rows_bad_text = _bad_text(conn, check.table, both - same)
        for f in fs:
            only = sorted(differs[f.fts] - same)
            if only:
                check.copies_rotted[f.fts] = only
    else:
        for f in fs:
            if differs[f.fts]:
                check.copies_rotted[f.fts] = sorted(differs[f.fts])


def _own_rowids(conn: apsw.Connection, sql: str, own: OwnRows | None) -> set[int]:
    """The rowids of the rows ``sql`` selects (rowid, then ``own``'s columns), those
    read from other tables' cells left out."""
    found: set[int] = set()
    keep = own.keep([], lambda row: found.add(int(row[0]))) if own else None
    for r in conn.execute(sql):
        if keep is None:
            found.add(int(r[0]))
        else:
            keep(tuple(r))
    return found


def _scan_bad_text(conn: apsw.Connection, schema: Schema, table: str) -> list[int]:
    """Rowids of ``table`` with a text value that is not valid UTF-8, read as bytes
    past damaged stretches (a read error ends the search, keeping what it found)."""
    obj = schema.by_name(table)
    if obj is None or obj.without_rowid:
        return []
    try:
        row = conn.execute("PRAGMA encoding").fetchone()
    except apsw.Error:
        return []
    if row is None or str(row[0]).upper() != "UTF-8":
        return []  # the bytes are UTF-16: SQLite converts them, never invalid here
    cols = ", ".join(
        f"CASE WHEN typeof({q}) = 'text' THEN CAST({q} AS BLOB) END"
        for q in (quote_ident(c.name) for c in obj.stored_columns)
    )
    out = []
    try:
        for row in conn.execute(f"SELECT rowid, {cols} FROM {quote_ident(table)} NOT INDEXED"):
            for v in row[1:]:
                if isinstance(v, bytes):
                    try:
                        v.decode("utf-8")
                    except UnicodeDecodeError:
                        out.append(int(row[0]))
                        break
    except apsw.Error as exc:
        if isinstance(exc, apsw.InterruptError):
            raise
    return out


def _bad_text(conn: apsw.Connection, table: str, rowids: set[int]) -> list[int]:
    """Those of ``rowids`` with a text value that is not valid UTF-8."""
    out = []
    t = quote_ident(table)
    for rowid in sorted(rowids):
        try:
            conn.execute(f"SELECT * FROM {t} NOT INDEXED WHERE rowid = ?", (rowid,)).fetchall()
        except UnicodeDecodeError:
            out.append(rowid)
        except apsw.Error as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
    return out


def _copies_agree(conn: apsw.Connection, a: Feed, b: Feed, rowids: set[int]) -> set[int]:
    if not rowids or set(a.columns) != set(b.columns):
        return set()
    ca, cb = quote_ident(f"{a.fts}_content"), quote_ident(f"{b.fts}_content")
    same = " AND ".join(f"x.{c} IS y.{c}" for c in a.columns)
    out = set()
    for rowid in rowids:
        row = conn.execute(
            f"SELECT 1 FROM {ca} AS x JOIN {cb} AS y ON y.id = x.id WHERE x.id = ? AND {same}",
            (rowid,),
        ).fetchone()
        if row is not None:
            out.add(rowid)
    return out


def fts_rowids(conn: apsw.Connection, schema: Schema, table: str) -> KeySet | None:
    """Rowids held by the own-content FTS copies of ``table`` (each FTS table's
    ``_content`` shadow table, under the row's rowid), or None if it has none that can
    be read. A rowid here is a row that existed and was not deleted: Hermes' delete
    triggers remove the copies with the row. Read as a stream into 8 bytes a rowid
    (a million messages are no million Python tuples)."""
    out: KeySet | None = None
    for f in feeds(schema):
        if f.table != table:
            continue
        sql = f"SELECT id FROM {quote_ident(f.fts + '_content')} NOT INDEXED"
        try:
            kept = _rowids_read(conn, sql)
        except (apsw.Error, UnicodeDecodeError) as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
            continue  # a damaged copy vouches for nothing
        if out is None:
            out = kept
        else:
            out |= kept
    return out


def _rowids_read(conn: apsw.Connection, sql: str) -> KeySet:
    """The rowids ``sql`` reads in b-tree order that keep their place (``in_order``).
    Straight into a KeySet while they rise, as they do in any b-tree but a garbled
    one; read again into an array (8 bytes a rowid) only when one does not."""
    kept = KeySet()
    prev: int | None = None
    for (rowid,) in conn.execute(sql):
        if not isinstance(rowid, int):
            continue
        if prev is not None and rowid <= prev:
            ids = array("q")
            for (again,) in conn.execute(sql):
                if isinstance(again, int):
                    ids.append(again)
            return in_order(ids)
        kept.add(rowid)
        prev = rowid
    return kept


def in_order(rowids: Sequence[int]) -> KeySet:
    """The rowids of a table scan (b-tree order) that keep their place: the longest
    strictly increasing run through them. A b-tree holds its rowids in increasing
    order, so one out of order is a garbled cell (a zeroed cell header reads as rowid
    0), not a row that existed."""
    if all(a < b for a, b in itertools.pairwise(rowids)):
        return KeySet(rowids)
    tails: list[int] = []  # tails[k]: index of the smallest last rowid of a run of k+1
    values: list[int] = []  # rowids[tails[k]]
    prev = array("q", bytes(8 * len(rowids)))
    for i, r in enumerate(rowids):
        k = bisect.bisect_left(values, r)
        prev[i] = tails[k - 1] if k else -1
        if k == len(tails):
            tails.append(i)
            values.append(r)
        else:
            tails[k] = i
            values[k] = r
    out = KeySet()
    i = tails[-1] if tails else -1
    while i >= 0:
        out.add(rowids[i])
        i = prev[i]
    return out


REBUILT_TABLE_PREFIX = "statewarden_rebuilt_"
REBUILT_RULE = (
    "A row lost from a table whose text survives in its FTS copies is rebuilt into the"
    " side table statewarden_rebuilt_<table>, never into the table itself: source_rowid"
    " is its rowid; each column an intact index of the table still holds for that rowid"
    " (for Hermes' messages: session_id, timestamp, active) is copied exactly; search_text"
    " is the text the FTS copies hold (for Hermes: content, tool name and tool calls"
    " joined by spaces, which cannot be split back into columns); rebuilt_from names the"
    " copy each value came from. Columns with no surviving copy (the role) are not"
    " invented."
)


@dataclass
class RebuiltRow:
    rowid: int
    values: dict[str, Any]  # table column -> value, from an index entry of this rowid
    sources: dict[str, str]  # column (or search_text) -> the copy it came from
    search_text: str | None


def rebuild_from_copies(
    conn: apsw.Connection,
    schema: Schema,
    table: str,
    rowids: AbstractSet[int],
    *,
    broken_roots: set[int],
) -> list[RebuiltRow]:
    """Rows ``rowids`` of ``table`` (lost from the table itself) as far as the intact
    indexes (read as covering indexes: the table is not touched) and FTS copies still
    hold them. Indexes whose own b-tree is damaged are not read."""
    if not rowids:
        return []
    out = {r: RebuiltRow(r, {}, {}, None) for r in sorted(rowids)}
    for idx in schema.objects:
        if idx.type != "index" or idx.tbl_name != table or idx.rootpage in broken_roots:
            continue
        try:
            cols = [r[2] for r in conn.execute(f"PRAGMA index_info({quote_ident(idx.name)})")]
            if not cols or any(c is None for c in cols):
                continue
            sel = ", ".join(quote_ident(str(c)) for c in cols)
            sql = (
                f"SELECT rowid, {sel} FROM {quote_ident(table)} INDEXED BY {quote_ident(idx.name)}"
            )
            for row in conn.execute(sql):
                got = out.get(int(row[0]))
                if got is None:
                    continue
                for c, v in zip(cols, row[1:], strict=True):
                    if str(c) not in got.values:
                        got.values[str(c)] = v
                        got.sources[str(c)] = f"index {idx.name}"
        except (apsw.Error, UnicodeDecodeError) as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
            continue
    for f in feeds(schema):
        if f.table != table or "c0" not in f.columns:
            continue
        content = quote_ident(f"{f.fts}_content")
        for r in out.values():
            if r.search_text is not None:
                continue
            try:
                row = conn.execute(f"SELECT c0 FROM {content} WHERE id = ?", (r.rowid,)).fetchone()
            except (apsw.Error, UnicodeDecodeError) as exc:
                if isinstance(exc, apsw.InterruptError):
                    raise
                break
            if row is not None and isinstance(row[0], str):
                r.search_text = row[0]
                r.sources["search_text"] = f"FTS copy {f.fts}"
    return [r for r in out.values() if r.values or r.search_text is not None]


def write_rebuilt(dst: apsw.Connection, table: str, rows: list[RebuiltRow]) -> str:
    """Create the side table for ``table`` in ``dst`` and put ``rows`` in it; its name."""
    name = f"{REBUILT_TABLE_PREFIX}{table}"
    cols = list(dict.fromkeys(c for r in rows for c in r.values))
    defs = "".join(f", {quote_ident(c)}" for c in cols)
    dst.execute(
        f"CREATE TABLE main.{quote_ident(name)}(source_rowid INTEGER PRIMARY KEY{defs},"
        " search_text TEXT, rebuilt_from TEXT NOT NULL)"
    )
    names = ", ".join(
        ["source_rowid", *(quote_ident(c) for c in cols), "search_text", "rebuilt_from"]
    )
    marks = ", ".join("?" for _ in range(len(cols) + 3))
    dst.executemany(
        f"INSERT INTO main.{quote_ident(name)}({names}) VALUES ({marks})",
        [
            (r.rowid, *(r.values.get(c) for c in cols), r.search_text, json.dumps(r.sources))
            for r in rows
        ],
    )
    return name


_COLUMN_PART_RE = re.compile(
    r"^(?:COALESCE\(\s*b\.[\"`\[]?(\w+)[\"`\]]?\s*,\s*''\s*\)|b\.[\"`\[]?(\w+)[\"`\]]?)$", re.I
)
_LITERAL_PART_RE = re.compile(r"^'((?:[^']|'')*)'$")


def _parts(expr: str) -> list[tuple[str, str]] | None:
    """An expression ``a || ' ' || COALESCE(b.x, '')`` as [("text", " "), ("column",
    "x"), ...]; None for any other shape (it cannot be solved for a column)."""
    out: list[tuple[str, str]] = []
    for raw in _split_concat(expr):
        part = raw.strip()
        if m := _LITERAL_PART_RE.match(part):
            out.append(("text", m.group(1).replace("''", "'")))
        elif m := _COLUMN_PART_RE.match(part):
            out.append(("column", m.group(1) or m.group(2)))
        else:
            return None
    return out


def _split_concat(s: str) -> list[str]:
    """Split at ``||`` outside parentheses and quotes."""
    parts, depth, cur, quote, i = [], 0, [], "", 0
    while i < len(s):
        ch = s[i]
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch == "(":
            depth += 1
            cur.append(ch)
        elif ch == ")":
            depth -= 1
            cur.append(ch)
        elif s.startswith("||", i) and depth == 0:
            parts.append("".join(cur))
            cur = []
            i += 2
            continue
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def solve_for_one_column(expr: str, row: dict[str, Any], copy: str) -> dict[str, str]:
    """Each column whose value, put in place of the stored one with every other column
    as stored, makes ``expr`` (the trigger's expression) give exactly ``copy``: the
    column -> that value. Only TEXT values are solved for."""
    parts = _parts(expr)
    if parts is None:
        return {}
    names = [v for k, v in parts if k == "column"]

    def text(k: str, v: str) -> str:
        if k == "text":
            return v
        value = row.get(v)
        return "" if value is None else str(value)

    out: dict[str, str] = {}
    for i, (kind, col) in enumerate(parts):
        if kind != "column" or names.count(col) != 1:
            continue
        head = "".join(text(k, v) for k, v in parts[:i])
        tail = "".join(text(k, v) for k, v in parts[i + 1 :])
        if len(copy) < len(head) + len(tail) or not copy.startswith(head):
            continue
        if tail and not copy.endswith(tail):
            continue
        value = copy[len(head) : len(copy) - len(tail)]
        if value == "" and row.get(col) is None:
            continue  # COALESCE(NULL, ''): the copy agrees with the stored NULL
        if value != row.get(col) and isinstance(row.get(col), str | None):
            out[col] = value
    return out


@dataclass
class Restored:
    table: str
    rowid: int
    column: str
    stored: Any  # what the file held
    value: str  # what the copies say it was
    copies: list[str]


def restore_from_copies(
    src: apsw.Connection,
    dst: apsw.Connection,
    schema: Schema,
    check: CopyCheck,
    also: set[int] = frozenset(),  # type: ignore[assignment]
) -> list[Restored]:
    """Rows of ``check.table`` that differ from two FTS copies that agree with each
    other (``rows_rotted``), and the rows ``also`` (known changed on disk: text that
    is not UTF-8, zeroed bytes) whose copies agree, restored in ``dst`` from the
    copies: when exactly one column, changed alone, makes the row give the copies'
    text again, that column is set to it. A row for which no such column, or more
    than one, exists is left as it is (returned nowhere)."""
    fs = [f for f in feeds(schema) if f.table == check.table and f.fts in check.copies]
    agreed = set(also)
    if len(fs) >= 2 and agreed:
        try:
            agreed = _copies_agree(src, fs[0], fs[1], agreed)
        except (apsw.Error, UnicodeDecodeError) as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
            agreed = set()
    rowids = sorted(set(check.rows_rotted) | agreed)
    if not fs or not rowids:
        return []
    feed = fs[0]
    if list(feed.columns) != ["c0"]:
        return []
    obj = schema.by_name(check.table)
    if obj is None:
        return []
    names = [c.name for c in obj.stored_columns]
    t = quote_ident(check.table)
    # Text that is not UTF-8 (changed bytes) is read as bytes and decoded leniently.
    sel = ", ".join(
        f"CASE WHEN typeof({q}) = 'text' THEN CAST({q} AS BLOB) ELSE {q} END"
        for q in (quote_ident(c) for c in names)
    )
    content = quote_ident(f"{feed.fts}_content")
    out = []
    for rowid in rowids:
        try:
            got = src.execute(f"SELECT c0 FROM {content} WHERE id = ?", (rowid,)).fetchone()
            values = dst.execute(f"SELECT {sel} FROM main.{t} WHERE rowid = ?", (rowid,)).fetchone()
        except (apsw.Error, UnicodeDecodeError) as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
            continue
        if got is None or values is None or not isinstance(got[0], str):
            continue
        row = {
            c: v.decode("utf-8", "replace") if isinstance(v, bytes) else v
            for c, v in zip(names, values, strict=True)
        }
        solved = solve_for_one_column(feed.columns["c0"], row, got[0])
        if len(solved) != 1:
            continue
        ((col, value),) = solved.items()
        dst.execute(f"UPDATE main.{t} SET {quote_ident(col)} = ? WHERE rowid = ?", (value, rowid))
        out.append(Restored(check.table, rowid, col, row[col], value, list(check.copies)))
    return out


def indexed_values(
    conn: apsw.Connection,
    schema: Schema,
    table: str,
    rowids: set[int] | None,
    *,
    broken_roots: set[int],
) -> dict[int, dict[str, list[tuple[Any, str]]]]:
    """For each of ``rowids`` (None: every rowid), the column values the intact
    indexes of ``table`` hold for it (column -> [(value, index name), ...], one per
    index that holds the column), read from the indexes alone (covering reads: the
    table is not touched). A partial index vouches for the rows it lists; indexes on
    expressions are left out, and so is an index whose own b-tree is damaged."""
    out: dict[int, dict[str, list[tuple[Any, str]]]] = {}
    for reading in index_readings(conn, schema, table, broken_roots=broken_roots):
        try:
            for row in conn.execute(reading.sql):
                if rowids is not None and int(row[0]) not in rowids:
                    continue
                got = out.setdefault(int(row[0]), {})
                for c, v in zip(reading.columns, row[1:], strict=True):
                    got.setdefault(c, []).append((v, reading.name))
        except (apsw.Error, UnicodeDecodeError) as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
            continue
    return out


Witnesses = dict[str, list[tuple[Any, str]]]
# Errors of the machine, not of the file read: they end the run, never a reading.
MACHINE_ERRORS = (
    apsw.InterruptError,
    apsw.FullError,
    apsw.IOError,
    apsw.CantOpenError,
    apsw.NoMemError,
)


@dataclass(frozen=True)
class IndexReading:
    """How one index of a table is read for its entries: covering, in the index's
    order (``sql``); ``condition``: a partial index's own, without which the planner
    does not use it."""

    name: str
    columns: list[str]
    select: str  # the covering SELECT, without the condition
    condition: str | None = None

    @property
    def sql(self) -> str:
        return f"{self.select} WHERE {self.condition}" if self.condition else self.select

    def where(self, term: str) -> str:
        """Its covering SELECT of the entries that meet ``term`` too (its own condition,
        parenthesised: one with an OR must not take ``term`` into one of its sides)."""
        own = f"({self.condition}) AND " if self.condition else ""
        return f"{self.select} WHERE {own}{term}"

    def between(self) -> str:
        """Its entries with a rowid from ``?`` to ``?`` (inclusive), sorted by rowid."""
        return self.where("rowid BETWEEN ? AND ?") + " ORDER BY rowid"


def index_readings(
    conn: apsw.Connection, schema: Schema, table: str, *, broken_roots: set[int]
) -> list[IndexReading]:
    """The indexes of ``table`` that can witness its rows (as ``indexed_values`` picks
    them: plain columns, an intact b-tree), each with the query that reads its entries
    (in the index's order; ``indexed_values_in_order`` sorts it by rowid)."""
    out = []
    for idx in schema.objects:
        if idx.type != "index" or idx.tbl_name != table or idx.rootpage in broken_roots:
            continue
        try:
            cols = [r[2] for r in conn.execute(f"PRAGMA index_info({quote_ident(idx.name)})")]
        except (apsw.Error, UnicodeDecodeError) as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
            continue
        if not cols or any(c is None for c in cols):
            continue
        sel = ", ".join(quote_ident(str(c)) for c in cols)
        sql = f"SELECT rowid, {sel} FROM {quote_ident(table)} INDEXED BY {quote_ident(idx.name)}"
        partial = re.search(r"\bWHERE\b(.*)$", idx.sql or "", re.I | re.S)
        condition = partial.group(1).strip() if partial else None
        out.append(IndexReading(idx.name, [str(c) for c in cols], sql, condition or None))
    return out


def indexed_values_in_order(
    conn: apsw.Connection,
    readings: list[IndexReading],
    *,
    misshapen: Mapping[str, set[int] | None] | None = None,
    windows: Sequence[int] = (),
) -> Iterator[tuple[int, Witnesses]]:
    """What ``indexed_values`` holds for every rowid, one rowid at a time in ascending
    order, without holding the whole table's entries: each index of ``readings`` is
    read sorted by rowid, and the readers are merged (entries of one rowid in the order
    of ``readings``). The entries of the indexes in ``misshapen`` for the rows named
    there (every row, when None) are left out, as ``lost_writes.drop_misshapen`` leaves
    them out. An index that fails part way has said what it read before, and says
    nothing more.

    ``windows``: rowids (ascending) at which a new stretch of rowids starts. SQLite
    sorts each stretch's entries alone, in memory, so a sort holds one stretch's
    entries, not a million rows' (about 57 MiB an index); each stretch reads the whole
    index again, which costs far less than its sort."""
    misshapen = misshapen or {}
    starts = [MIN_ROWID, *(w for w in windows if w > MIN_ROWID)]
    failed: set[str] = set()
    current: int | None = None
    got: Witnesses = {}
    for lo, after in itertools.zip_longest(starts, starts[1:]):
        hi = MAX_ROWID if after is None else after - 1
        readers = [_index_reader(conn, r, lo, hi, failed) for r in readings if r.name not in failed]
        for rowid, name, values in heapq.merge(*readers, key=lambda e: e[0]):
            if name in misshapen and ((bad := misshapen[name]) is None or rowid in bad):
                continue
            if rowid != current:
                if current is not None and got:
                    yield current, got
                current, got = rowid, {}
            for c, v in values:
                got.setdefault(c, []).append((v, name))
    if current is not None and got:
        yield current, got


def _index_reader(
    conn: apsw.Connection, reading: IndexReading, lo: int, hi: int, failed: set[str]
) -> Iterator[tuple[int, str, list[tuple[str, Any]]]]:
    """One index's entries with a rowid from ``lo`` to ``hi``, (rowid, index name,
    [(column, value), ...]), until the end or the first error (damage met part way:
    what was read stands, and the index's name goes in ``failed``)."""
    name, cols = reading.name, reading.columns
    try:
        for row in conn.execute(reading.between(), (lo, hi)):
            yield int(row[0]), name, list(zip(cols, row[1:], strict=True))
    except (apsw.Error, UnicodeDecodeError) as exc:
        # The sort by rowid may spill to a temporary file: no room for it is no
        # verdict on the index, and must not quietly take a witness away.
        if isinstance(exc, MACHINE_ERRORS):
            raise
        failed.add(name)
        return


# Rowids bound into one ``rowid IN (...)``.
_IN_CHUNK = 500


def indexed_values_of(
    conn: apsw.Connection, readings: list[IndexReading], rowids: Sequence[int]
) -> dict[int, Witnesses]:
    """What ``indexed_values_in_order`` holds for just ``rowids``, read with SQLite
    picking them out of each index (``rowid IN (...)``). An index that fails part way
    says nothing, as a sorted reading that fails says nothing."""
    out: dict[int, Witnesses] = {}
    for reading in readings:
        got: list[tuple[Any, ...]] = []
        try:
            for at in range(0, len(rowids), _IN_CHUNK):
                chunk = rowids[at : at + _IN_CHUNK]
                sql = reading.where(f"rowid IN ({', '.join('?' for _ in chunk)})")
                got.extend(tuple(row) for row in conn.execute(sql, tuple(chunk)))
        except (apsw.Error, UnicodeDecodeError) as exc:
            if isinstance(exc, MACHINE_ERRORS):
                raise
            continue
        for row in got:
            held = out.setdefault(int(row[0]), {})
            for c, v in zip(reading.columns, row[1:], strict=True):
                held.setdefault(c, []).append((v, reading.name))
    return out


def agrees_with_copies(
    conn: apsw.Connection, schema: Schema, table: str, rowid: int, under: int | None = None
) -> bool | None:
    """Does row ``rowid`` of ``table``, as ``conn`` reads it, give exactly the text its
    FTS copies hold (every copy that has it), under its own id or the rowid ``under``?
    None when no copy holds it or it cannot be read."""
    t = quote_ident(table)
    seen = False
    for f in feeds(schema):
        if f.table != table:
            continue
        content = quote_ident(f"{f.fts}_content")
        on = f"({f.rowid_expr})" if under is None else "?"
        try:
            got = conn.execute(
                f"SELECT {f.copy_matches()} FROM {t} AS b NOT INDEXED JOIN {content} AS c"
                f" ON c.id = {on} WHERE b.rowid = ?",
                (rowid,) if under is None else (under, rowid),
            ).fetchone()
        except (apsw.Error, UnicodeDecodeError) as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
            return None
        if got is None:
            continue
        if not got[0]:
            return False
        seen = True
    return True if seen else None
