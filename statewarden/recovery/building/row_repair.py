"""Columns of the rows in the output put right from their witnesses: a row's other copies
(its FTS copies, an other copy of the database), the table's intact indexes and the old
index pages of a lost schema; rows no witness vouches for are named, never passed as
good."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import apsw

from statewarden.recovery.building.build import (
    DIFFERING_ROWS_MOST,
    WITNESS_WINDOW_ROWS,
    BuildPart,
    TableCopy,
    stored_names,
)
from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.evidence.copies import feeds
from statewarden.recovery.evidence.copy_restore import restore_from_copies
from statewarden.recovery.evidence.copy_vote import rows_differing_from_copies
from statewarden.recovery.evidence.index_witnesses import (
    IndexReading,
    Witnesses,
    index_readings,
    indexed_values,
    indexed_values_in_order,
    indexed_values_of,
)
from statewarden.recovery.evidence.lost_writes import drop_misshapen
from statewarden.recovery.evidence.old_indexes import indexed_columns, old_index_witnesses
from statewarden.sqlite import json_value, quote_ident, raise_if_machine


class RowRepair(BuildPart):
    """Rows in the output completed or corrected from their witnesses."""

    def restore_from_copies(self) -> None:
        """Rows that differ from two FTS copies that agree with each other (changed on
        disk) get the changed column back from the copies (``copy_restore.restore_from_copies``);
        each is listed in ``restored_from_copies``; the others stay as stored."""
        for check in self.inputs.diag.copies:
            if check.error and check.table in self.copies:
                # The diagnosis could not compare them in the file: held here against
                # the rows as the output holds them (a partial row is known damaged:
                # its columns come back as such).
                partial = {
                    e["rowid"] for e in self.report.partial_rows if e["table"] == check.table
                }
                differing = rows_differing_from_copies(
                    self.src,
                    self.dst,
                    self.inputs.schema,
                    check,
                    self.copies[check.table].rowids,
                    attached=self.attached,
                )
                check.rows_rotted = [r for r in differing if r not in partial]
            changed = {
                e["rowid"]
                for e in self.report.partial_rows
                if e["table"] == check.table and e.get("changed")
            }
            if check.table not in self.copies or not (check.rows_rotted or changed):
                continue
            done = restore_from_copies(self.src, self.dst, self.inputs.schema, check, changed)
            restored = {r.rowid for r in done}
            tc = self.copies[check.table]
            for r in done:
                self._restored(tc, r.rowid, r.column, r.stored, r.copies)
            # A partial row is already a loss, and may yet be completed (salvage.py).
            partial = {e["rowid"] for e in self.report.partial_rows if e["table"] == check.table}
            kept = [
                r
                for r in check.rows_rotted
                if r not in restored and r not in partial and _written(self.dst, check.table, r)
            ]
            if done:
                shown = ", ".join(str(r) for r in sorted(restored)[:20])
                self.report.notes.append(
                    f"{check.table}: {len(done)} rows changed on disk were restored from"
                    f" their search-index copies ({', '.join(check.copies)}), which agree"
                    f" with each other (rowids {shown})"
                )
            if kept:
                shown = ", ".join(str(r) for r in kept[:20])
                self.report.notes.append(
                    f"{check.table}: {len(kept)} rows differ from their search-index copies,"
                    " which agree with each other, and no single column changed explains"
                    f" it: kept as stored (rowids {shown}); the copies keep the text they had"
                )
                tc.report.unverified += len(kept)

    def damaged_rowids(self, table: str) -> set[Any] | None:
        """Rowids of the output's rows of ``table`` whose values did not come whole and
        unchanged through the b-tree of a row that read clean: decoded from pages or WAL
        frames, partial, run into zeroed bytes, cross-linked, changed on disk, restored
        or renamed, from another copy, unverified. None (any row may be) when rows were
        updated from the WAL (those are not listed one by one)."""
        tc = self.copies.get(table)
        diag = self.inputs.diag
        if tc is None or tc.report.updated_from_wal:
            return None
        out: set[Any] = set(tc.page_rowids)
        out.update(diag.zeroed_cells.get(table, {}), diag.cross_linked.get(table, {}))
        for c in diag.copies:
            if c.table == table:
                out.update(c.rows_rotted, c.rows_bad_text)
        report = self.report
        for entries in (
            report.partial_rows,
            report.restored_from_copies,
            report.unverified_rows,
            report.renamed,
            report.from_other_copies,
        ):
            out.update(e["rowid"] for e in entries if e["table"] == table)
        return out

    def restore_from_indexes(self, tc: TableCopy) -> None:
        """Rows of a table copied row by row are compared with the entries its intact
        indexes hold for their rowid. A column of a row known to be damaged on disk
        (partial, or restored from its FTS copies) that differs from an index entry,
        or a column of any row that differs from the entries of two or more indexes
        agreeing with each other, is set to the indexed value, written with the row
        (a changed real, a filled-in value). A column only one index holds that
        differs in a row with no other damage is left as stored and counted as
        unverified (either may be the changed one)."""
        entries: dict[int, dict[str, list[Any]]] = {}
        try:
            entries = self._fix_from_indexes(tc)
        finally:
            self._settle_partial(tc, entries)

    def _index_witnesses(
        self, tc: TableCopy, broken: set[int], suspects: set[int]
    ) -> tuple[Iterator[tuple[int, Witnesses]], set[str]]:
        """The entries the intact indexes of ``tc``'s table hold, by rowid in ascending
        order, and the columns they hold. Where SQLite can name the rows that differ
        from an entry (``_differing_rowids``), the entries of those rows and of
        ``suspects`` only: a row every entry agrees with needs none. Else one rowid at
        a time (memory does not grow with the table), unless the old indexes' pages
        vouch too (a schema rebuilt): then all entries are read at once."""
        obj = tc.obj
        misshapen = self.inputs.diag.lost_writes.misshapen
        if self.inputs.index_pages:
            everything = indexed_values(self.src, self.inputs.schema, obj.name, broken_roots=broken)
            drop_misshapen(everything, misshapen)
            self._add_old_index_entries(tc, everything)
            return iter(sorted(everything.items())), {c for e in everything.values() for c in e}
        readings = index_readings(self.src, self.inputs.schema, obj.name, broken_roots=broken)
        held = {c for r in readings for c in r.columns}
        differ = self._differing_rowids(tc, readings)
        if differ is not None:
            wanted = sorted(differ | suspects)
            picked = indexed_values_of(self.src, readings, wanted)
            drop_misshapen(picked, misshapen)
            return iter(sorted((r, w) for r, w in picked.items() if w)), held
        windows = tc.hint_rowids.windows(WITNESS_WINDOW_ROWS)
        return (
            indexed_values_in_order(self.src, readings, misshapen=misshapen, windows=windows),
            held,
        )

    def _differing_rowids(self, tc: TableCopy, readings: list[IndexReading]) -> KeySet | None:
        """The rowids of the output's rows that differ from an entry an index of
        ``readings`` holds for them (another type, or another value compared byte for
        byte), found by SQLite joining each index to the output table; None when it
        cannot say (the source is not attached, a reading fails, or more than
        ``DIFFERING_ROWS_MOST`` rows differ: then every row is compared)."""
        if not self.attached:
            return None
        t, rid = quote_ident(tc.obj.name), tc.obj.rowid_sql
        out = KeySet()
        found = 0
        for r in readings:
            cols = [quote_ident(c) for c in r.columns]
            picked = ", ".join(f"{c} AS c{i}" for i, c in enumerate(cols))
            where = f" WHERE {r.condition}" if r.condition else ""
            same = " AND ".join(
                f"((d.{c} IS NULL AND s.c{i} IS NULL) OR"
                f" (typeof(d.{c}) = typeof(s.c{i}) AND d.{c} = s.c{i} COLLATE BINARY))"
                for i, c in enumerate(cols)
            )
            sql = (
                f"SELECT s.rid FROM (SELECT {rid} AS rid, {picked} FROM src.{t}"
                f" INDEXED BY {quote_ident(r.name)}{where} LIMIT -1) AS s"
                f" JOIN main.{t} AS d ON d.{rid} = s.rid WHERE NOT ({same})"
            )
            try:
                for (rowid,) in self.dst.execute(sql):
                    if out.add_new(rowid):
                        found += 1
                        if found > DIFFERING_ROWS_MOST:
                            return None
            except (apsw.Error, UnicodeDecodeError) as exc:
                raise_if_machine(exc)
                if self._unreadable(r):
                    continue  # no witness either way (a partial index the planner refuses)
                return None
        return out

    def _unreadable(self, reading: IndexReading) -> bool:
        """Does the reading's own query fail before it reads a row? Then the index
        witnesses nothing however it is read."""
        try:
            self.src.execute(reading.sql + " LIMIT 0").fetchall()
        except apsw.SQLError:
            return True
        except (apsw.Error, UnicodeDecodeError):
            return False
        return False

    def _compare_rows(
        self,
        tc: TableCopy,
        witnessed: Iterator[tuple[int, Witnesses]],
        indexed: list[str],
        suspects: set[int],
        stale: set[int],
    ) -> tuple[dict[int, Witnesses], list[tuple[int, str, Any, Any, list[str]]], list[int]]:
        """The output's rows beside their index entries, both in rowid order: the
        columns to set from the entries (rowid, column, value, stored, indexes), the rows
        that differ from the one index that holds a column (unverified), and the entries
        kept: those of the rows known damaged (``suspects``: ``_settle_partial`` reads
        them) and of every row that differs from one."""
        entries: dict[int, Witnesses] = {}
        t, rid = quote_ident(tc.obj.name), tc.obj.rowid_sql
        sel = ", ".join(quote_ident(c) for c in indexed)
        # A value renamed by the dedupe rule differs from its index entry on purpose.
        renamed = {
            (e["rowid"], e["column"]) for e in self.report.renamed if e["table"] == tc.obj.name
        }
        unverified: list[int] = []
        fixes: list[tuple[int, str, Any, Any, list[str]]] = []
        ahead = next(witnessed, None)
        for row in self.dst.execute(f"SELECT {rid}, {sel} FROM main.{t} ORDER BY {rid}"):
            rowid = int(row[0])
            while ahead is not None and ahead[0] < rowid:
                if ahead[0] in suspects:
                    entries[ahead[0]] = ahead[1]
                ahead = next(witnessed, None)
            if ahead is None or ahead[0] != rowid:
                continue
            found = ahead[1]
            if rowid in suspects:
                entries[rowid] = found
            if rowid in stale:
                continue
            for col, stored in zip(indexed, row[1:], strict=True):
                witnesses = found.get(col, [])
                kind = type(stored)
                if all(type(v) is kind and v == stored for v, _ in witnesses):
                    continue  # every entry holds what the row holds (most rows)
                entries[rowid] = found
                if (rowid, col) in renamed:
                    continue
                values = {(type(v), v) for v, _ in witnesses}
                if not witnesses or len(values) != 1:
                    continue
                value = witnesses[0][0]
                if stored == value and type(stored) is type(value):
                    continue
                if rowid in suspects or len(witnesses) >= 2:
                    fixes.append((rowid, col, value, stored, [i for _, i in witnesses]))
                elif rowid not in unverified:
                    unverified.append(rowid)
        for rowid, found in itertools.chain([ahead] if ahead is not None else [], witnessed):
            if rowid in suspects:
                entries[rowid] = found
        return entries, fixes, unverified

    def _fix_from_indexes(self, tc: TableCopy) -> dict[int, dict[str, list[Any]]]:
        """``_restore_from_indexes`` but the settling; returns the index entries read."""
        obj = tc.obj
        if obj.without_rowid or obj.name not in self.inputs.damaged:
            return {}
        suspects = {e["rowid"] for e in self.report.partial_rows if e["table"] == obj.name}
        suspects |= {e["rowid"] for e in self.report.restored_from_copies if e["table"] == obj.name}
        # A row older than its index entries (a lost write) stays as it was once
        # written, named stale (``lost_writes.py``), not patched into a mix.
        stale = {
            s.rowid
            for s in self.inputs.diag.lost_writes.stale_rows
            if s.table == obj.name and not s.restorable
        }
        witnessed, held = self._index_witnesses(tc, self.build.unwitnessed_roots(), suspects)
        cols = stored_names(obj)
        indexed = [c for c in cols if c in held and c not in obj.generated]
        if not indexed:
            return {r: w for r, w in witnessed if r in suspects}
        entries, fixes, unverified = self._compare_rows(tc, witnessed, indexed, suspects, stale)
        t = quote_ident(obj.name)
        key_cols = obj.key_names
        for rowid, col, value, stored, by in fixes:
            before = self._key_of(tc, key_cols, rowid) if col in key_cols else None
            self.dst.execute(
                f"UPDATE main.{t} SET {quote_ident(col)} = ? WHERE {obj.rowid_sql} = ?",
                (value, rowid),
            )
            if before is not None:
                # The key read was a changed one, never a row's: the row's is restored.
                tc.source_keys.discard(before)
                tc.source_keys.add(self._key_of(tc, key_cols, rowid))
            self._restored(tc, rowid, col, stored, [f"index {i}" for i in by])
        if fixes:
            shown = ", ".join(str(r) for r in sorted({f[0] for f in fixes})[:20])
            self.report.notes.append(
                f"{obj.name}: {len(fixes)} columns changed on disk were restored from the"
                f" entries of its intact indexes (rowids {shown})"
            )
        if unverified:
            tc.report.unverified += len(unverified)
            for rowid in unverified:
                self.report.unverified_rows.append(
                    {
                        "table": obj.name,
                        "rowid": rowid,
                        "columns": [c for c in indexed if len(entries[rowid].get(c, [])) == 1],
                        "why": "differs from the one intact index that holds the column",
                    }
                )
            shown = ", ".join(str(r) for r in unverified[:20])
            self.report.notes.append(
                f"{obj.name}: {len(unverified)} rows differ from the one intact index that"
                f" holds a column of theirs: kept as stored, unverified (rowids {shown})"
            )
        return entries

    def _restored(
        self, tc: TableCopy, rowid: int, column: str, stored: Any, sources: list[str]
    ) -> None:
        """A column of a row put back from its witnesses (``sources``): listed in
        ``restored_from_copies``, and no longer among the row's unreadable columns."""
        table = tc.obj.name
        self.report.restored_from_copies.append(
            {
                "table": table,
                "rowid": rowid,
                "column": column,
                "stored": json_value(stored),
                "from": sources,
            }
        )
        for entry in self.report.partial_rows:
            if (entry["table"], entry["rowid"]) == (table, rowid):
                entry["columns"] = [c for c in entry["columns"] if c != column]
                entry["filled"].pop(column, None)
                if not entry["columns"]:
                    tc.report.partial -= 1

    def _key_of(self, tc: TableCopy, key_cols: list[str], rowid: int) -> tuple[Any, ...]:
        """The key of the output's row ``rowid`` (as ``key_fn`` makes a scanned row's)."""
        sel = ", ".join(quote_ident(c) for c in key_cols)
        t, rid = quote_ident(tc.obj.name), tc.obj.rowid_sql
        row = self.dst.execute(f"SELECT {sel} FROM main.{t} WHERE {rid} = ?", (rowid,)).fetchone()
        return tuple(row) if row is not None else ()

    def _add_old_index_entries(
        self, tc: TableCopy, entries: dict[int, dict[str, list[Any]]]
    ) -> None:
        """Add to ``entries`` what the old indexes' pages hold for the rows copied
        (``old_indexes.old_index_witnesses``)."""
        if not self.inputs.index_pages:
            return
        t = quote_ident(tc.obj.name)
        # Only the indexed columns are read (the others stand as NULL: not compared).
        held = indexed_columns(self.inputs.schema, tc.obj)
        sel = ", ".join(quote_ident(c) if c in held else "NULL" for c in stored_names(tc.obj))
        rows = {
            int(r[0]): list(r[1:])
            for r in self.dst.execute(f"SELECT {tc.obj.rowid_sql}, {sel} FROM main.{t}")
        }
        old = old_index_witnesses(self.inputs.index_pages, self.inputs.schema, tc.obj.name, rows)
        for rowid, cols in old.items():
            got = entries.setdefault(rowid, {})
            for col, values in cols.items():
                got.setdefault(col, []).extend(values)

    def _settle_partial(self, tc: TableCopy, entries: dict[int, dict[str, list[Any]]]) -> None:
        """A row whose record was damaged on disk: the columns that did read may have
        been changed too. Each such row lists the columns it read but nothing vouches
        for (``unverified``): not its key, not a column an intact index holds for its
        rowid, not a column its FTS copies were found to agree with (restored from
        them). A partial row keeps them in its entry; a row whose unreadable columns
        all came back is listed in ``unverified_rows`` when any is left, else it is
        whole."""
        obj = tc.obj
        cols = stored_names(obj)
        keys = set(obj.key_columns) | ({obj.rowid_alias} if obj.rowid_alias else set())
        fed = {
            c
            for f in feeds(self.inputs.schema)
            if f.table == obj.name
            for expr in f.columns.values()
            for c in re.findall(r"\bb\.[\"`\[]?(\w+)", expr)
        }
        by_copies = {
            e["rowid"]
            for e in self.report.restored_from_copies
            if e["table"] == obj.name and not e["from"][0].startswith("index ")
        }
        kept = []
        for entry in self.report.partial_rows:
            if entry["table"] != obj.name:
                kept.append(entry)
                continue
            vouched = keys | set(entries.get(entry["rowid"], {}))
            if entry["rowid"] in by_copies:
                vouched |= fed
            entry["unverified"] = [
                c for c in cols if c not in entry["columns"] and c not in vouched
            ]
            if entry["columns"]:
                kept.append(entry)
            elif entry["unverified"]:
                tc.report.unverified += 1
                self.report.unverified_rows.append(
                    {
                        "table": obj.name,
                        "rowid": entry["rowid"],
                        "columns": entry["unverified"],
                        "why": entry.get("why", ""),
                    }
                )
        self.report.partial_rows = kept


def _written(dst: apsw.Connection, table: str, rowid: int) -> bool:
    """Does the output hold a row of ``table`` under ``rowid``? (A row lost is no row
    kept as stored: it was once named both.)"""
    sql = f"SELECT 1 FROM main.{quote_ident(table)} WHERE rowid = ?"
    try:
        return dst.execute(sql, (rowid,)).fetchone() is not None
    except apsw.Error:
        return True  # (unknown: counted unverified, the careful side)
