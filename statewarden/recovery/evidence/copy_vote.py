"""The rows of a table, as the output holds them, held against their two FTS copies in
the work copy: for a table whose copies could not be compared in the file itself (a
read error ended the diagnosis's comparison, ``CopyCheck.error``), so that a row
changed on disk is not passed as good because another page of the table is damaged.

One join in SQLite when the work copy is attached to the output's connection and its
copies read through; else three sorted streams merged by rowid here: the output's rows
(what each feeding trigger would write for them) and the two copies' content tables, a
copy table a read error ends vouching for nothing past it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apsw

from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.schema import Schema
from statewarden.recovery.evidence.copies import CopyCheck, Feed, feeds
from statewarden.sqlite import quote_ident, raise_if_interrupted

_END = (float("inf"), ())


def _stream(conn: apsw.Connection, sql: str) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """(rowid, values) of ``sql``'s rows in order, until the end or a read error."""
    try:
        for row in conn.execute(sql):
            yield int(row[0]), tuple(row[1:])
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_interrupted(exc)
    yield _END


def _output_sql(table: str, fs: list[Feed]) -> tuple[str, list[list[str]]]:
    """The output's rows with each trigger variant's values for each copy, and per copy
    the positions' FTS column names variant by variant."""
    exprs: list[str] = []
    layout: list[list[str]] = []
    for f in fs:
        for variant in [f.columns, *f.also]:
            layout.append(list(variant))
            exprs.extend(variant.values())
    sql = f"SELECT b.rowid, {', '.join(exprs)} FROM main.{quote_ident(table)} AS b ORDER BY b.rowid"
    return sql, layout


def rows_differing_from_copies(
    src: apsw.Connection,
    dst: apsw.Connection,
    schema: Schema,
    check: CopyCheck,
    read: KeySet,
    *,
    attached: bool,
) -> list[int]:
    """Rowids of the rows of ``check.table`` in the output (``dst``) read through the
    table's b-tree (``read``) that differ from both FTS copies in the work copy
    (``src``; attached to ``dst`` as ``src`` when ``attached``), which agree with each
    other: changed on disk. One join in SQLite when the work copy is attached and its
    copies read through; else the streams merged here."""
    fs = [f for f in feeds(schema) if f.table == check.table and f.fts in check.copies][:2]
    if len(fs) < 2 or set(fs[0].columns) != set(fs[1].columns):
        return []
    if attached:
        try:
            return [r for r in _joined(dst, check.table, fs) if r in read]
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_interrupted(exc)
    return _merged(src, dst, check.table, fs, read)


def _joined(dst: apsw.Connection, table: str, fs: list[Feed]) -> list[int]:
    """The rows differing from both agreeing copies, by one join in the output's
    connection with the work copy attached as ``src``."""
    a, b = fs
    ca, cb = quote_ident(f"{a.fts}_content"), quote_ident(f"{b.fts}_content")
    same = " AND ".join(f"x.{c} IS y.{c}" for c in a.columns)
    sql = (
        f"SELECT b.rowid FROM main.{quote_ident(table)} AS b"
        f" JOIN src.{ca} AS x ON x.id = ({a.rowid_expr}) JOIN src.{cb} AS y ON y.id = x.id"
        f" WHERE {same} AND NOT {a.copy_matches('x')} AND NOT {b.copy_matches('y')}"
    )
    return [int(r[0]) for r in dst.execute(sql)]


def _merged(
    src: apsw.Connection, dst: apsw.Connection, table: str, fs: list[Feed], read: KeySet
) -> list[int]:
    """``rows_differing_from_copies`` by three sorted streams merged by rowid."""
    cols = sorted(fs[0].columns)
    copies = [
        _stream(
            src,
            f"SELECT id, {', '.join(cols)} FROM {quote_ident(f'{f.fts}_content')} ORDER BY id",
        )
        for f in fs
    ]
    sql, layout = _output_sql(table, fs)
    heads = [next(c) for c in copies]
    out = []
    for rowid, values in _stream(dst, sql):
        if rowid == _END[0]:
            break
        for i, c in enumerate(copies):
            while heads[i][0] < rowid:
                heads[i] = next(c)
        if rowid not in read or any(h[0] != rowid for h in heads):
            continue
        if heads[0][1] != heads[1][1]:
            continue  # the copies disagree: nothing tells which is right
        copy = dict(zip(cols, heads[0][1], strict=True))
        pos, matched = 0, False
        for names in layout:
            got = values[pos : pos + len(names)]
            pos += len(names)
            matched = matched or all(copy.get(n) == v for n, v in zip(names, got, strict=True))
        if not matched:
            out.append(rowid)
    return out
