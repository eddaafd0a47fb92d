"""The rows of one table into the output: copied whole when the table is clean, else row by
row past damaged stretches, each row through the dedupe rule (a row stored twice kept
once, two rows claiming one key both kept and reported, a garbled cell set aside)."""

from __future__ import annotations

import re
from typing import Any

import apsw

from statewarden.recovery.building.build import (
    ABOVE_SEQUENCE,
    BAD_TEXT_REASON,
    CROSS_LINKED,
    MISFIT_REASON,
    PROGRESS_EVERY_ROWS,
    RENAME_SUFFIX,
    UNLISTED,
    ZEROED_REASON,
    Build,
    BuildPart,
    RebuildInputs,
    RowShape,
    TableCopy,
    key_fn,
    stored_names,
    zeroed_columns,
)
from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.scan import ScanResult, scan_table
from statewarden.recovery.decoding.schema import Schema, SchemaObject
from statewarden.recovery.evidence.column_types import column_checks, misfit_columns, unwitnessed
from statewarden.recovery.evidence.copies import agrees_with_copies, fts_rowids
from statewarden.recovery.evidence.foreign_cells import OwnRows
from statewarden.recovery.evidence.lost_writes import sequence_of
from statewarden.sqlite import json_value, quote_ident, raise_if_machine

# Constraint failures no row SQLite stored can meet: the table refused it when written.
IMPOSSIBLE_ROWS = ("NOT NULL constraint failed", "CHECK constraint failed")
_UNIQUE_RE = re.compile(r"UNIQUE constraint failed: (.+)$")


class TableFill(BuildPart):
    """Rows into the output, table by table."""

    def __init__(self, build: Build, shapes: dict[str, RowShape]) -> None:
        super().__init__(build)
        self._shapes = shapes  # table -> how its rows are written, across builds

    def shape(self, obj: SchemaObject) -> RowShape:
        """How ``obj``'s rows are written, worked out once a table (its properties read
        every column)."""
        shape = self._shapes.get(obj.name)
        if shape is None:
            shape = self._shapes[obj.name] = RowShape.of(obj)
        return shape

    def read_index_keys(self, tc: TableCopy) -> None:
        """Keys listed by the source's indexes: rows known to exist even when the table's
        own pages can no longer be read. An index whose own b-tree is damaged is no
        witness (its entries may be garbage), but every readable index helps find where
        a damaged scan can resume (``hint_keys``)."""
        broken_trees = self.build.unwitnessed_roots()
        obj = tc.obj
        key_cols = obj.key_names
        t = quote_ident(obj.name)
        for idx in self.inputs.schema.full_indexes(obj.name):
            try:
                info = self.src.execute(f"PRAGMA index_info({quote_ident(idx.name)})")
                cols = [r[2] for r in info]
            except (apsw.Error, UnicodeDecodeError):
                continue
            if not cols or any(c is None for c in cols) or not set(key_cols) <= set(cols):
                continue
            order = ", ".join(quote_ident(str(c)) for c in cols)
            word = obj.rowid_name
            if not key_cols and word is None:
                continue  # nothing names its rows: no index entry names one either
            select = ", ".join(quote_ident(c) for c in key_cols) if key_cols else str(word)
            # Read whole before any of it counts (a damaged index says nothing
            # reliable), into KeySets rather than a list of a million tuples.
            keys, rowids = KeySet(), KeySet()
            sql = (
                f"SELECT {word or 'NULL'}, {select}"
                f" FROM {t} INDEXED BY {quote_ident(idx.name)} ORDER BY {order}"
            )
            try:
                if key_cols:
                    for r in self.src.execute(sql):
                        keys.add(tuple(r[1:]))
                        if isinstance(r[0], int):
                            rowids.add(r[0])
                else:  # the key is the rowid: one set read once
                    rowids.update(r[0] for r in self.src.execute(sql))
                    keys = rowids
            except (apsw.Error, UnicodeDecodeError):
                continue  # a damaged index says nothing reliable
            if word is not None:
                tc.hint_rowids |= rowids
            tc.hint_keys |= keys
            if idx.rootpage not in broken_trees:
                tc.index_keys |= keys
                tc.indexed = True
                tc.intact_indexes += 1
                tc.listed_by |= rowids

    def read_fts_rowids(self, tc: TableCopy) -> None:
        """Rowids held by the table's FTS copies (Hermes 0.19.0 writes each message's
        text there under the message's id): as the diagnosis read them from the same
        work copy, or read here where it did not (``TableFacts.fts_copies``)."""
        facts = next((t for t in self.inputs.diag.tables if t.name == tc.obj.name), None)
        if facts is not None and facts.fts_copies_read:
            read = facts.fts_copies
            found = None if read is None else read.copy()  # the build changes its own
        else:
            found = fts_rowids(self.src, self.inputs.schema, tc.obj.name)
        tc.has_fts_copies = found is not None and tc.obj.key_columns == ["rowid"]
        tc.fts_rowids = found or KeySet()

    def bulk_copy(self, tc: TableCopy) -> bool:
        """Copy a clean table in one statement; False (and nothing copied) if it fails.

        The source's keys are read first: if even that fails (text that is not UTF-8 in
        a key column), the table goes row by row, where such rows are handled one by one.
        """
        obj = tc.obj
        key_cols = obj.key_names
        keyf = key_fn(obj)
        sel = "".join(", " + quote_ident(c) for c in key_cols)
        word = obj.rowid_name
        t = quote_ident(obj.name)
        keys, read_rowids = KeySet(), KeySet()
        try:
            cursor = self.src.execute(f"SELECT {word or 'NULL'}{sel} FROM {t} NOT INDEXED")
            if key_cols or word is None:
                for r in cursor:
                    keys.add(keyf(r))
                    if word is not None:
                        read_rowids.add(r[0])
            else:  # the key is the rowid
                read_rowids.update(r[0] for r in cursor)
                keys = read_rowids
        except UnicodeDecodeError:
            return False
        shape = self.shape(obj)
        cols = ", ".join(quote_ident(c) for c in stored_names(obj) if c not in shape.generated)
        rid = "" if shape.rowid is None else f"{shape.rowid}, "
        self.dst.execute("SAVEPOINT bulk")
        try:
            self.dst.execute(
                f"INSERT INTO main.{t}({rid}{cols}) SELECT {rid}{cols} FROM src.{t} NOT INDEXED"
            )
        except apsw.ConstraintError:
            self.dst.execute("ROLLBACK TO bulk")
            self.dst.execute("RELEASE bulk")
            return False
        self.dst.execute("RELEASE bulk")
        # Every row read went in: a rowid (or a WITHOUT ROWID table's key, never NULL)
        # read twice would have failed the INSERT.
        tc.report.source_rows += len(keys) if word is None else len(read_rowids)
        tc.source_keys |= keys
        tc.rowids |= read_rowids
        return True

    def row_copy(self, tc: TableCopy) -> None:
        obj = tc.obj
        cols = stored_names(obj)
        key_idx = [cols.index(c) + 1 for c in obj.key_names]
        seen = [0]
        partial: dict[int, list[str]] = {}
        zeroed = self.inputs.diag.zeroed_cells.get(obj.name, {})
        destroyed = [self.inputs.diag.destroyed_cells.get(obj.name, 0)]
        crossed = self.inputs.diag.cross_linked.get(obj.name, {})
        checks = column_checks(obj)
        seq = sequence_of(self.src, obj.name)

        def at(row: tuple[Any, ...]) -> dict[str, Any]:
            return {"rowid": int(row[0]), "values": list(row[1:]), "checks": checks}

        def on_row(row: tuple[Any, ...]) -> None:
            if _destroyed(tc, destroyed, cols, row):
                return
            if why_garbled := garbled(tc, int(row[0]), partial, seq, self.inputs):
                # A garbled cell that decodes, not a row: set aside, never copied as a
                # good row.
                self._set_aside(tc, int(row[0]), dict(zip(cols, row[1:], strict=True)), why_garbled)
                return
            tc.report.source_rows += 1
            key = int(row[0]) if not key_idx else tuple(row[i] for i in key_idx)
            tc.source_keys.add(key)
            values = list(row[1:])
            missing = partial.pop(int(row[0]), None)
            why = None
            hit: list[str] | None = []
            if int(row[0]) in crossed and not agrees_with_copies(
                self.src, self.inputs.schema, obj.name, int(row[0])
            ):
                # Its chain leads into pages another row's chain reaches too, and its
                # FTS copies do not vouch for what it reads there: the columns past its
                # cell may be that row's bytes. Its own rest is looked for later
                # (salvage.py).
                hit = zeroed_columns(crossed[int(row[0])], cols, key_idx)
                why = CROSS_LINKED
            elif int(row[0]) in zeroed:
                hit = zeroed_columns(zeroed[int(row[0])], cols, key_idx)
                why = ZEROED_REASON
            elif (misfit := misfits(self.src, self.inputs.schema, obj, **at(row))) != []:
                hit, why = misfit, MISFIT_REASON
            if hit is not None and int(row[0]) in bad_text and why != CROSS_LINKED:
                # Hermes writes valid UTF-8 only: such text was changed on disk.
                bad = bad_text.pop(int(row[0]))
                hit = None if any(cols.index(c) + 1 in key_idx for c in bad) else [*hit, *bad]
                why = why or BAD_TEXT_REASON
            if hit is None:
                # Its record header (or a key) ran into damage: no column can be trusted.
                zeroed_lost.append(int(row[0]))
                self._key_unread(tc, key, by_columns=bool(key_idx))
                return
            hit_names = set(hit)
            if hit:
                missing = sorted({*(missing or []), *hit}, key=cols.index)
                for c in hit:
                    values[cols.index(c)] = None
            tc.rowids.add(int(row[0]))
            if missing is not None:
                filled = fill_missing(self.dst, obj, cols, values, missing)
            put = self.insert_row(tc, int(row[0]), values, cols, reached=True)
            if put and missing is not None:
                changed = [c for c in missing if c in hit_names]
                note_partial(
                    self.report.partial_rows,
                    tc,
                    int(row[0]),
                    missing,
                    filled,
                    why=why,
                    changed=changed if why != CROSS_LINKED else None,
                )
            seen[0] += 1
            if self.progress and seen[0] % PROGRESS_EVERY_ROWS == 0:
                self.progress(f"copy {obj.name}", seen[0], 0)

        zeroed_lost: list[int] = []
        bad_text: dict[int, list[str]] = {}
        hints = tc.hint_rowids
        # Another table's cells a wrong child pointer leads to are no rows of this one.
        own = OwnRows(obj, self.inputs.diag.foreign_cells.get(obj.name, {}))
        result = scan_table(
            self.src,
            obj.name,
            own.columns(cols),
            own.keep(cols, on_row),
            hints=hints,
            on_partial=partial.__setitem__,
            on_bad_text=bad_text.__setitem__,
        )
        self._note_row_scan(tc, result, zeroed_lost)
        if own.left_out:
            shown = ", ".join(str(r) for r in own.left_out[:10])
            self.report.notes.append(
                f"{obj.name}: {len(own.left_out)} cells of another table's leaf, which its"
                f" b-tree reaches through a wrong child pointer, are no rows of it: not"
                f" copied (rowids {shown})"
            )

    def _key_unread(self, tc: TableCopy, key: Any, *, by_columns: bool) -> None:
        """A row lost because its record header or key ran into damage: when its key
        was read from those bytes too (key columns, or a zeroed cell's rowid 0: Hermes
        gives out rowids from 1) it is no key that existed. The row is counted among
        those lost unnamed (``unnamed_lost``: it may yet come back from another copy
        of its cell, under the key nothing here can read)."""
        if by_columns or key == 0:
            tc.source_keys.discard(key)
            tc.report.unnamed_lost += 1

    def _note_row_scan(self, tc: TableCopy, result: ScanResult, zeroed_lost: list[int]) -> None:
        """What a row-by-row copy of the table could not read, in its report and notes."""
        obj = tc.obj
        if result.out_of_order:
            shown = ", ".join(str(r) for r in result.out_of_order[:10])
            self.report.notes.append(
                f"{obj.name}: {len(result.out_of_order)} cells read out of rowid order that no"
                f" index lists (rowids {shown}): garbled cells, not rows; not copied"
            )
        tc.report.unreadable_rows = result.unreadable_rows + len(zeroed_lost)
        tc.report.unreadable_ranges = result.unreadable_ranges
        if zeroed_lost:
            shown = ", ".join(str(r) for r in zeroed_lost[:10])
            self.report.notes.append(
                f"{obj.name}: {len(zeroed_lost)} rows whose record header or key ran into"
                f" zeroed or changed bytes were not copied (rowids {shown})"
            )
        if result.text_repaired:
            shown = ", ".join(str(r) for r in result.text_repaired[:20])
            self.report.notes.append(
                f"{obj.name}: {len(result.text_repaired)} rows held text that is not valid"
                f" UTF-8 (changed on disk): those columns are unreadable, unless their"
                f" search-index copies restore them (rowids {shown})"
            )

    def write_partial(
        self,
        tc: TableCopy,
        rowid: int,
        values: list[Any],
        cols: list[str],
        hit: list[str],
    ) -> bool:
        """Insert a row whose ``hit`` columns cannot be trusted (set to NULL, or filled
        where NULL is not allowed), and report it among the partial rows; True if it
        went in."""
        for c in hit:
            values[cols.index(c)] = None
        filled = fill_missing(self.dst, tc.obj, cols, values, hit)
        if not self.insert_row(tc, rowid, values, cols):
            return False
        note_partial(
            self.report.partial_rows, tc, rowid, hit, filled, why=MISFIT_REASON, changed=hit
        )
        return True

    def insert_row(
        self,
        tc: TableCopy,
        rowid: int | None,
        values: list[Any],
        cols: list[str],
        *,
        reached: bool = False,
    ) -> bool:
        """Insert one row; on a conflict apply the dedupe rule. True if the row is in.
        ``reached``: the row's cell sat in a cell pointer slot of a leaf the table's
        b-tree walk reached (a row the table held, whatever it now decodes to).
        ``rowid`` None: a row of a table no name reaches by rowid (``keyed_copy``)."""
        try:
            self.dst.execute(*self.shape(tc.obj).insert(cols, rowid, values))
            return True
        except apsw.ConstraintError as exc:
            if reached and rowid is not None and str(exc).startswith(IMPOSSIBLE_ROWS):
                tc.garbled.append(rowid)
            return self._conflict(tc, rowid, values, cols, str(exc))
        except apsw.Error as exc:
            raise_if_machine(exc)  # a full disk is no fault of the row's: the run ends
            self._set_aside(
                tc, rowid, dict(zip(cols, values, strict=True)), f"insert failed: {exc}"
            )
            return False

    def _conflict(
        self, tc: TableCopy, rowid: int | None, values: list[Any], cols: list[str], message: str
    ) -> bool:
        obj = tc.obj
        row = dict(zip(cols, values, strict=True))
        t = quote_ident(obj.name)
        sel = ", ".join(quote_ident(c) for c in cols)
        word = obj.rowid_name
        existing = (
            None
            if word is None or rowid is None
            else self.dst.execute(
                f"SELECT {sel} FROM main.{t} WHERE {word} = ?", (rowid,)
            ).fetchone()
        )
        key_cols = obj.key_names
        if existing is None and key_cols:
            where = " AND ".join(f"{quote_ident(c)} IS ?" for c in key_cols)
            existing = self.dst.execute(
                f"SELECT {sel} FROM main.{t} WHERE {where}", [row[c] for c in key_cols]
            ).fetchone()
        if existing is not None:
            if list(existing) == list(values):
                tc.report.duplicates_dropped += 1
                return False
            self._set_aside(tc, rowid, row, f"a different row already has this key ({message})")
            return False
        m = _UNIQUE_RE.search(message)
        if m:
            columns = [c.split(".", 1)[-1].strip() for c in m.group(1).split(",")]
            if all(c in row and c not in key_cols and isinstance(row[c], str) for c in columns):
                return self._rename(tc, rowid, row, columns, message)
        if message.startswith(IMPOSSIBLE_ROWS):
            # A record SQLite never stores in this table: a garbled cell that decodes,
            # not a row. Its key is no key that existed (the real row may still come
            # back from a carved or unreached copy). When the b-tree reached it, the
            # row its cell held is counted lost unnamed (``TableCopy.garbled``).
            tc.source_keys.discard(tuple(row[c] for c in key_cols) if key_cols else rowid)
        self._set_aside(tc, rowid, row, message)
        return False

    def _rename(
        self,
        tc: TableCopy,
        rowid: int | None,
        row: dict[str, Any],
        columns: list[str],
        message: str,
    ) -> bool:
        new = dict(row)
        for c in columns:
            new[c] = f"{row[c]}{RENAME_SUFFIX.format(rowid=rowid)}"
        try:
            self.dst.execute(*self.shape(tc.obj).insert(list(new), rowid, list(new.values())))
        except apsw.Error as exc:
            self._set_aside(tc, rowid, row, f"{message}; renaming failed: {exc}")
            return False
        tc.report.renamed += 1
        self.report.renamed.extend(
            {"table": tc.obj.name, "rowid": rowid, "column": c, "old": row[c], "new": new[c]}
            for c in columns
        )
        return True

    def _set_aside(
        self, tc: TableCopy, rowid: int | None, row: dict[str, Any], reason: str
    ) -> None:
        tc.report.set_aside += 1
        self.report.set_aside.append(
            {
                "table": tc.obj.name,
                "rowid": rowid,
                "reason": reason,
                "row": {c: json_value(v) for c, v in row.items()},
            }
        )


def _destroyed(tc: TableCopy, left: list[int], cols: list[str], row: tuple[Any, ...]) -> bool:
    """Is ``row`` one of the cells that begin in zeroed bytes (``left``: how many are
    still to come, ``Diagnosis.destroyed_cells``), read as a row of rowid 0? The row the
    cell held is lost, its key unknown: counted so, never written."""
    if not left[0] or not _nothing_stored(tc.obj, cols, row):
        return False
    left[0] -= 1
    tc.report.unnamed_lost += 1
    return True


def _nothing_stored(obj: SchemaObject, cols: list[str], row: tuple[Any, ...]) -> bool:
    """Is ``row`` (rowid, then ``cols``) what SQLite reads from a cell of zeros: rowid 0
    and no column stored (NULL; the rowid's alias column 0)?"""
    if row[0] != 0:
        return False
    alias = obj.rowid_alias
    return all(v is None or (c == alias and v == 0) for c, v in zip(cols, row[1:], strict=True))


def garbled(
    tc: TableCopy,
    rowid: int,
    partial: dict[int, list[str]],
    seq: int | None,
    inputs: RebuildInputs,
) -> str | None:
    """Why the row read under ``rowid`` is a garbled cell, not a row (None: it may be
    a row): no intact index lists it, though two or more of them list every row,
    and no FTS copy holds it (``unlisted``); or some of its columns do not read and
    its rowid is above the table's AUTOINCREMENT sequence ``seq``, which SQLite
    never gave out, and no index, FTS copy or old index's page (``inputs``) lists it
    (a whole row above a sequence whose page is older is kept: its columns read)."""
    if unlisted(tc, rowid):
        return UNLISTED
    if seq is None or rowid <= seq or not partial.get(rowid):
        return None
    witnesses = (tc.listed_by, tc.fts_rowids, tc.hint_rowids)
    old = inputs.listed_by_old_indexes.get(tc.obj.name, set())
    if rowid in old or any(rowid in w for w in witnesses):
        return None
    return ABOVE_SEQUENCE.format(seq=seq)


def unlisted(tc: TableCopy, rowid: int) -> bool:
    """Does no intact index of the table list ``rowid``, though two or more of
    them list every row, and no FTS copy hold it?"""
    return (
        tc.intact_indexes >= 2
        and rowid not in tc.listed_by
        and rowid not in tc.fts_rowids
        and not tc.obj.without_rowid
    )


def misfits(
    src: apsw.Connection,
    schema: Schema,
    obj: SchemaObject,
    *,
    rowid: int,
    values: list[Any],
    checks: list[tuple[int, str, str]] | None = None,
) -> list[str] | None:
    """The columns of a row read from the source (``values``, its stored columns) holding a
    value Hermes never writes there that no index of the source vouches for
    (``column_types``): the record changed on disk. None when a key column is one of
    them (no column of the row can be trusted then). Every path a row takes into the
    output holds it to this rule (a row salvaged from pages once kept such a value,
    and ``check`` called the output damaged)."""
    found = misfit_columns(column_checks(obj) if checks is None else checks, values)
    if not found:
        return []
    found = unwitnessed(src, schema, obj, rowid=rowid, misfit=found)
    return None if any(c in obj.key_names for c in found) else found


def fill_missing(
    dst: apsw.Connection, obj: SchemaObject, cols: list[str], values: list[Any], missing: list[str]
) -> dict[str, Any]:
    """Fill the unreadable columns of a partial row in place (the rule is
    ``report.PARTIAL_RULE``); return the values put where NULL is not allowed."""
    filled = {}
    by_name = {c.name: c for c in obj.stored_columns}
    for name in missing:
        col = by_name.get(name)
        if col is None or not col.notnull:
            continue
        value: Any
        if col.default is not None:
            try:
                row = dst.execute(f"SELECT {col.default}").fetchone()
                value = row[0] if row else None
            except apsw.Error:
                value = None
        else:
            value = None
        if value is None:
            value = "" if col.text_affinity else 0
        values[cols.index(name)] = value
        filled[name] = value
    return filled


def note_partial(
    partial_rows: list[dict[str, Any]],
    tc: TableCopy,
    rowid: int,
    columns: list[str],
    filled: dict[str, Any],
    *,
    why: str | None,
    changed: list[str] | None,
) -> None:
    """A row written with ``columns`` it could not read or trust, among the partial
    rows: ``filled`` the values put where NULL is not allowed, ``why`` the reason
    (none: a chain cut short), ``changed`` those the record holds changed."""
    tc.report.partial += 1
    entry: dict[str, Any] = {
        "table": tc.obj.name,
        "rowid": rowid,
        "columns": columns,
        "filled": {c: json_value(v) for c, v in filled.items()},
    }
    if why:
        entry["why"] = why
    if why and changed is not None:
        entry["changed"] = changed
    partial_rows.append(entry)
