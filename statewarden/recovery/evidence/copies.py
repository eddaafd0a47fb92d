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
import itertools
import re
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw

from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.scan import scan_table
from statewarden.recovery.decoding.schema import Schema, SchemaObject
from statewarden.recovery.evidence.foreign_cells import OwnRows, Records
from statewarden.sqlite import quote_ident, raise_if_interrupted

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
    # Rows some of whose columns SQLite cannot read (their record or overflow chain is
    # damaged), found when the comparison itself stopped on damage: held against no
    # copy, but SQLite, and so Hermes, reads them wrong or not at all.
    rows_unreadable: list[int] = field(default_factory=list)
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
        if self.rows_unreadable:
            n = len(self.rows_unreadable)
            out.append(
                f"{self.table}: {n} row{'s' if n != 1 else ''} with columns that cannot be"
                f" read ({rowids_shown(self.rows_unreadable)})"
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


def split_outside(s: str, sep: str) -> list[str]:
    """Split at ``sep`` outside parentheses and quotes, each part stripped."""
    parts: list[str] = []
    cur: list[str] = []
    depth, quote, i = 0, "", 0
    while i < len(s):
        ch = s[i]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            parts.append("".join(cur).strip())
            cur = []
            i += len(sep)
            continue
        cur.append(ch)
        i += 1
    parts.append("".join(cur).strip())
    return parts


def _mapping(fts: SchemaObject, cols: str, values: str) -> tuple[str, dict[str, str]] | None:
    """(rowid expression, FTS content column -> expression) of one ``INSERT INTO fts``."""
    names = [c.strip().strip('"`[]').lower() for c in cols.split(",")]
    exprs = [_NEW_RE.sub("b.", e) for e in split_outside(values, ",")]
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
            raise_if_interrupted(exc)
            check.error = str(exc).split("\n", 1)[0]
            # No vote without the copies (one malformed copy, or a row that cannot be
            # read, stops the comparison as a whole): text that is not UTF-8, or columns
            # that do not read, still say a row changed on disk (a full read of the
            # table past damage, on damage only).
            _scan_rows(conn, check, obj, records)
        out.append(check)
    return out


def _compare(
    conn: apsw.Connection, check: CopyCheck, fs: list[Feed], own: OwnRows | None = None
) -> None:
    differs = _differing(conn, fs, own)
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


def _differing(conn: apsw.Connection, fs: list[Feed], own: OwnRows | None) -> dict[str, set[int]]:
    """Per FTS table, the rowids of the base rows (of one table) its copy differs from
    (a row with no copy there differs from none), those read from other tables' cells
    (``own``) left out. One pass over the base table for all its copies: each row's
    text is read once, not once a copy."""
    cols = own.columns([]) if own is not None else []
    width = 1 + len(cols)
    joins = "".join(
        f" LEFT JOIN {quote_ident(f'{f.fts}_content')} AS c{i} ON c{i}.id = ({f.rowid_expr})"
        for i, f in enumerate(fs)
    )
    flags = [f"(c{i}.id IS NOT NULL AND NOT {f.copy_matches(f'c{i}')})" for i, f in enumerate(fs)]
    sql = (
        f"SELECT b.rowid{''.join(f', b.{quote_ident(c)}' for c in cols)}, {', '.join(flags)}"
        f" FROM {quote_ident(fs[0].table)} AS b NOT INDEXED{joins} WHERE {' OR '.join(flags)}"
    )
    found: list[set[int]] = [set() for _ in fs]
    passed: list[tuple[Any, ...]] = []
    keep = own.keep([], passed.append) if own is not None else passed.append
    for r in conn.execute(sql):
        keep(tuple(r[:width]))
        if passed:
            passed.clear()
            rowid = int(r[0])
            for got, flag in zip(found, r[width:], strict=True):
                if flag:
                    got.add(rowid)
    return {f.fts: got for f, got in zip(fs, found, strict=True)}


def _scan_rows(
    conn: apsw.Connection, check: CopyCheck, obj: SchemaObject | None, records: Records | None
) -> None:
    """The rows of ``check``'s table with a text value that is not valid UTF-8
    (``rows_bad_text``) or a column that cannot be read (``rows_unreadable``), read past
    damaged stretches and rows (``scan.py``); ``records``: other tables' cells its
    b-tree reaches, which are no rows of it."""
    if obj is None or obj.without_rowid:
        return
    own = OwnRows(obj, records or {})
    cols = [c.name for c in obj.stored_columns]
    bad: dict[int, list[str]] = {}
    unread: dict[int, list[str]] = {}
    scan_table(
        conn,
        obj.name,
        own.columns(cols),
        own.keep(cols, lambda row: None),
        on_partial=unread.__setitem__,
        on_bad_text=bad.__setitem__,
    )
    foreign = set(own.left_out)
    check.rows_bad_text = sorted(r for r in bad if r not in foreign)
    check.rows_unreadable = sorted(r for r in unread if r not in foreign)


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
            raise_if_interrupted(exc)
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
            raise_if_interrupted(exc)
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
            raise_if_interrupted(exc)
            return None
        if got is None:
            continue
        if not got[0]:
            return False
        seen = True
    return True if seen else None
