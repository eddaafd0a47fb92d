"""Salvage: rows decoded from the work copy's pages, around the build.

Before the build, ``decode_rows`` decodes (``carving.py``, ``wal_rows.py``) what
the b-tree cannot give: leaves no b-tree reaches and damaged leaves of the damaged tables, and the
page images of committed WAL transactions SQLite does not replay; the build adds them
where the dedupe and vouching rules allow (``rebuild.py``). After it,
``_complete_partial_rows`` completes the rows whose overflow chain broke from the rest
of the chain the file still holds, and ``_check_completed_against_copies`` holds each
row completed from an unattached chain against its FTS copies.

Every read here is a raw page read of the work copy, with no SQLite connection open to
it (docs/safety.md rule 2), except the FTS copies' content read read-only at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.recovery.building.build import (
    CROSS_LINKED,
    ZEROED_REASON,
    RebuildInputs,
    SalvagedRows,
    TableCopy,
)
from statewarden.recovery.bundle import WorkCopy
from statewarden.recovery.decoding.broken_cells import partial_columns, record_by_its_header
from statewarden.recovery.decoding.carving import carve_damaged_leaves, record_fits, salvage_rows
from statewarden.recovery.decoding.integrity import NEVER_USED_RE
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.schema import Schema, SchemaObject
from statewarden.recovery.decoding.wal_rows import WalRows, rows_from_images
from statewarden.recovery.diagnosis import Diagnosis
from statewarden.recovery.evidence.column_types import column_checks, misfit_columns
from statewarden.recovery.evidence.copies import feeds
from statewarden.recovery.evidence.foreign_cells import referenced_twice
from statewarden.recovery.evidence.old_indexes import IndexPage, index_pages, listed_by_old_indexes
from statewarden.recovery.report import Report
from statewarden.sqlite import quote_ident, uri_for


@dataclass
class DecodedRows:
    """Rows decoded from the work copy's pages before the build, by table."""

    salvaged: SalvagedRows = field(default_factory=dict)  # leaves no b-tree reaches
    carved: SalvagedRows = field(default_factory=dict)  # leaves whose structure is damaged
    wal_rows: WalRows = field(default_factory=WalRows)  # WAL commits SQLite drops
    # rowids of those rows the old indexes of a rebuilt schema list (``lost_schema``)
    listed_by_old_indexes: dict[str, set[int]] = field(default_factory=dict)
    # the index pages of the file, those of the old indexes among them: witnesses of
    # the rows read (``lost_schema``)
    index_pages: list[IndexPage] = field(default_factory=list)


def decode_rows(
    work: WorkCopy, diag: Diagnosis, schema: Schema, damaged: set[str], report: Report
) -> DecodedRows:
    """Rows decoded from the pages before the build: leaves no b-tree reaches and
    damaged leaves of the damaged tables, and committed WAL transactions SQLite does
    not replay (a table with such rows joins ``damaged``)."""
    decoded = DecodedRows()
    if work.wal is not None:
        report.notes.extend(work.wal.notes(work.wal_name))
    with report.timed("salvage"):
        if work.known_schema:
            decoded.index_pages = index_pages(work.db, schema)
        if damaged:
            # Evidence that rows may be missing (a read error, pages no b-tree reaches,
            # a count that differs from the planner's, a page reached twice): decode
            # every leaf no b-tree reaches, read errors or not. Raw page reads, with no
            # SQLite connection open to the copy (docs/safety.md rule 2).
            unused = never_used(diag.error_lines, complete=diag.pages_accounted)
            decoded.salvaged = salvage_rows(work.db, schema, sorted(damaged), unused)
            # With the freelist unknown (page 1 destroyed) its pages would pass for
            # unreached: only the leaves the b-trees reach are carved then.
            unreached = [] if work.freelist_unknown else unused
            decoded.carved = carve_damaged_leaves(
                work.db, schema, sorted(damaged), unreached=unreached
            )
            if work.known_schema:
                decoded.listed_by_old_indexes = listed_by_old_indexes(
                    decoded.index_pages, schema, _both(decoded.salvaged, decoded.carved)
                )
        if work.wal is not None and work.wal.dropped_commits:
            base_names = [o.name for o in schema.base_tables()]
            wal = decoded.wal_rows = rows_from_images(
                work.db, schema, base_names, work.wal.newest_images(), work.wal.unknown_pages()
            )
            damaged.update(n for n in base_names if any(d.get(n) for d in wal.changed()))
    return decoded


def _both(a: SalvagedRows, b: SalvagedRows) -> SalvagedRows:
    return {name: [*a.get(name, []), *b.get(name, [])] for name in a.keys() | b.keys()}


def never_used(lines: list[str], *, complete: bool) -> list[int] | None:
    """Pages an integrity check found no b-tree or freelist using, when ``complete``:
    it got through its page accounting (``IntegrityCheck.pages_accounted``: whole,
    or stopped later, on a row read against an index, and the accounting not skipped);
    None otherwise: then every page is walked.

    SQLite skips that page accounting, and still answers in full, when the first
    object of its schema hash has no root page (an FTS5 table or a view: it depends on
    the names in the schema, so one Hermes file has it and another not); that is looked
    up before the check (``integrity.accounting_skipped``). A child pointer that names
    a page used elsewhere ("2nd reference") leaves the page it named unreached: with no
    "never used" line at all, every page is walked then too."""
    if not complete:
        return None
    unused = {int(m.group(1)) for ln in lines if (m := NEVER_USED_RE.match(ln))}
    if not unused and referenced_twice(lines):
        return None
    return sorted(unused)


def complete_salvage(inputs: RebuildInputs, report: Report, copies: dict[str, TableCopy]) -> None:
    """After the build: the partial rows completed from the pages, and those completed
    from an unattached chain held against their FTS copies."""
    db, built, schema = inputs.work.db, inputs.built, inputs.schema
    foreign = set(inputs.diag.cross_linked_pages)
    with DatabaseFile(db) as raw:  # closed before a connection opens the copy (rule 2)
        _complete_partial_rows(raw, built, schema, report, copies, foreign=foreign)
    _check_completed_against_copies(db, built, schema, report, copies)


def verify_by_own_chains(
    inputs: RebuildInputs, report: Report, copies: dict[str, TableCopy]
) -> None:
    """Rows damaged on disk whose unreadable columns all came back from witnesses, left
    with columns nothing vouched for (``unverified_rows``): when the row's cell and its
    own overflow pages, which no b-tree reaches now (its overflow pointer was lost), hold
    its whole record, and every column of it is what the output holds (the restored
    ones as the witnesses gave them), the record is the row's own, whole: verified.
    Raw reads of the work copy (docs/safety.md rule 2)."""
    schema = inputs.schema
    roots = [o.rootpage for o in schema.objects if o.rootpage] + [1]
    foreign = set(inputs.diag.cross_linked_pages)
    conn = apsw.Connection(
        uri_for(inputs.built, mode="ro"), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    kept = []
    raw = DatabaseFile(inputs.work.db)  # (no connection to the copy is open: rule 2)
    try:
        for entry in report.unverified_rows:
            obj = schema.by_name(entry["table"])
            if (
                obj is None
                or obj.without_rowid
                or entry.get("why") not in ("", ZEROED_REASON)
                or not _whole_by_own_chain(
                    conn, raw, obj, entry["rowid"], roots=roots, foreign=foreign
                )
            ):
                kept.append(entry)
                continue
            copies[obj.name].report.unverified -= 1
            report.notes.append(
                f"{obj.name} rowid {entry['rowid']}: its cell and its own overflow pages, which"
                " no b-tree reaches, hold its whole record as its witnesses restored it:"
                " verified"
            )
    finally:
        raw.close()
        conn.close()
    report.unverified_rows = kept


def _whole_by_own_chain(
    conn: apsw.Connection,
    db: DatabaseFile,
    obj: SchemaObject,
    rowid: int,
    *,
    roots: list[int],
    foreign: set[int],
) -> bool:
    """Does row ``rowid``'s record, read from its cell and its own unattached chain,
    decode whole and equal the output's row column for column?"""
    cols = [c.name for c in obj.stored_columns]
    got = partial_columns(db, obj.rootpage, rowid, roots, foreign)
    sel = ", ".join(quote_ident(c) for c in cols)
    row = conn.execute(
        f"SELECT {sel} FROM {quote_ident(obj.name)} WHERE {obj.rowid_sql} = ?", (rowid,)
    ).fetchone()
    if row is None or set(got) != set(range(len(cols))):
        return False
    return all(
        got[i] == v or (c == obj.rowid_alias and got[i] is None)
        for i, (c, v) in enumerate(zip(cols, row, strict=True))
    )


def _complete_partial_rows(
    db: DatabaseFile,
    built: Path,
    schema: Schema,
    report: Report,
    copies: dict[str, TableCopy],
    *,
    foreign: set[int],
) -> None:
    """Columns of partial rows that the file still holds past the break in their
    overflow chain (``broken_cells.partial_columns``) replace what was filled in the output.
    Raw reads of the work copy: no connection is open to it now (docs/safety.md rule 2)."""
    roots = [o.rootpage for o in schema.objects if o.rootpage] + [1]
    conn = apsw.Connection(str(built))
    try:
        for entry in report.partial_rows:
            obj = schema.by_name(entry["table"])
            if obj is None:
                continue
            # Columns zeroed or changed on disk: the file holds no other copy of them.
            changed = set(entry.get("changed", []))
            cols = [c.name for c in obj.stored_columns]
            whole = None if changed else record_by_its_header(db, obj.rootpage, entry["rowid"])
            if (
                whole is not None
                and len(whole) <= len(cols)
                and record_fits(obj, whole)
                and _agrees_with_witnesses(conn, obj, entry["rowid"], whole, report)
            ):
                if obj.rowid_alias and obj.rowid_alias in cols:
                    whole[cols.index(obj.rowid_alias)] = entry["rowid"]
                written = [
                    (c, v) for c, v in zip(cols, whole, strict=False) if c not in obj.generated
                ]
                sets = ", ".join(f"{quote_ident(c)} = ?" for c, _ in written)
                conn.execute(
                    f"UPDATE {quote_ident(obj.name)} SET {sets} WHERE {obj.rowid_sql} = ?",
                    [*(v for _, v in written), entry["rowid"]],
                )
                report.notes.append(
                    f"{obj.name} rowid {entry['rowid']}: its cell's payload size disagrees"
                    " with its record; the record was read whole by its own header"
                )
                entry["columns"] = []
                copies[obj.name].report.partial -= 1
                copies[obj.name].report.recovered_from_pages += 1
                continue
            got = partial_columns(db, obj.rootpage, entry["rowid"], roots, foreign)
            found = {
                cols[i]: v
                for i, v in got.items()
                if i < len(cols)
                and cols[i] in entry["columns"]
                and cols[i] not in changed
                and cols[i] not in obj.generated
            }
            if not found:
                continue
            sets = ", ".join(f"{quote_ident(c)} = ?" for c in found)
            conn.execute(
                f"UPDATE {quote_ident(obj.name)} SET {sets} WHERE {obj.rowid_sql} = ?",
                [*found.values(), entry["rowid"]],
            )
            entry["recovered_from_pages"] = sorted(found, key=cols.index)
            entry["columns"] = [c for c in entry["columns"] if c not in found]
            entry["filled"] = {k: v for k, v in entry["filled"].items() if k not in found}
            if not entry["columns"]:
                copies[obj.name].report.partial -= 1
                copies[obj.name].report.recovered_from_pages += 1
    finally:
        conn.close()
    report.partial_rows_completed = [e for e in report.partial_rows if not e["columns"]]
    report.partial_rows = [e for e in report.partial_rows if e["columns"]]


def _agrees_with_witnesses(
    conn: apsw.Connection, obj: SchemaObject, rowid: int, whole: list[Any], report: Report
) -> bool:
    """Does a record read by its own header hold only values Hermes writes in their
    columns (``column_types``), and the values its witnesses restored in the output
    (``restored_from_copies``)? A header that disagrees with its payload may be the
    changed one (a flipped bit in a serial type), not the payload size."""
    cols = [c.name for c in obj.stored_columns]
    if misfit_columns(column_checks(obj), whole):
        return False
    restored = [
        e["column"]
        for e in report.restored_from_copies
        if (e["table"], e["rowid"]) == (obj.name, rowid) and e["column"] in cols
    ]
    if not restored:
        return True
    sel = ", ".join(quote_ident(c) for c in restored)
    row = conn.execute(
        f"SELECT {sel} FROM {quote_ident(obj.name)} WHERE {obj.rowid_sql} = ?", (rowid,)
    ).fetchone()
    return row is not None and all(
        cols.index(c) < len(whole) and whole[cols.index(c)] == v
        for c, v in zip(restored, row, strict=True)
    )


def _check_completed_against_copies(
    db: Path, built: Path, schema: Schema, report: Report, copies: dict[str, TableCopy]
) -> None:
    """A row whose chain led into another row's pages, completed from an unattached
    chain, must give the text its FTS copies hold; one that does not is counted
    unverified (its completion may have taken a third row's pages)."""
    done = [
        e
        for e in report.partial_rows_completed
        if e.get("why") == CROSS_LINKED and e["table"] in copies
    ]
    if not done:
        return
    src = apsw.Connection(
        uri_for(db, mode="ro"), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    out = apsw.Connection(str(built))
    try:
        for e in done:
            for f in feeds(schema):
                if f.table != e["table"]:
                    continue
                content = quote_ident(f"{f.fts}_content")
                copy = src.execute(
                    f"SELECT * FROM {content} WHERE id = ?", (e["rowid"],)
                ).fetchone()
                if copy is None:
                    continue
                exprs = ", ".join(f.columns.values())
                mine = out.execute(
                    f"SELECT {exprs} FROM {quote_ident(f.table)} AS b WHERE b.rowid = ?",
                    (e["rowid"],),
                ).fetchone()
                want = [copy[1 + int(c[1:])] for c in f.columns]
                if mine is not None and list(mine) != want:
                    copies[e["table"]].report.unverified += 1
                    report.notes.append(
                        f"{e['table']} rowid {e['rowid']}: completed from an unattached"
                        f" overflow chain, but it disagrees with its copy in {f.fts}: unverified"
                    )
                    break
    finally:
        out.close()
        src.close()
