"""Rows the table's b-tree no longer gives, added to the output where the vouching rules
allow: from leaves no tree reaches, cells carved from damaged leaves, committed WAL
transactions SQLite does not replay (with the rows they deleted), and other copies of
this database (each proving whose it is first: docs/safety.md rule 15)."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import apsw

from statewarden.recovery.building.build import (
    Build,
    BuildPart,
    RowShape,
    TableCopy,
    stored_names,
)
from statewarden.recovery.building.table_fill import TableFill, misfits
from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.diagnosis import Diagnosis
from statewarden.recovery.evidence.copies import feeds
from statewarden.recovery.evidence.copy_restore import rebuild_from_copies, write_rebuilt
from statewarden.recovery.evidence.index_witnesses import index_readings, indexed_values_of
from statewarden.recovery.evidence.lost_writes import drop_misshapen
from statewarden.recovery.evidence.other_copies import (
    OtherCopy,
    foreign,
    fts_disagreement,
    index_disagreement,
)
from statewarden.sqlite import quote_ident


class SalvageInserts(BuildPart):
    """Salvaged rows into the output, after the table's own rows."""

    def __init__(
        self, build: Build, fill: TableFill, copy_verdicts: dict[Path, str | None]
    ) -> None:
        super().__init__(build)
        self.fill = fill
        # Other copies judged (``_of_this_database``): None, or why it is not of this file.
        self._copy_verdicts = copy_verdicts

    def add_unreached(self, tc: TableCopy) -> None:
        """Rows decoded from leaves the b-tree no longer reaches, for rowids it lacks.

        A rowid the output holds keeps the b-tree's row (the unreached copy is counted,
        not used). When the freelist cannot be trusted, an unreached row is taken only
        if an intact index or FTS copy of the table lists its key: deleted rows live on
        freed pages, and nothing else remembers them. A rowid the b-tree read but whose
        row was set aside (a child pointer that names another table's leaf reads that
        table's cells under the same rowids) does not block the real row: it is taken
        when those witnesses list it, whatever the freelist says.
        """
        rows = self.inputs.salvaged.get(tc.obj.name, [])
        if not rows:
            return
        known = tc.known_keys() | self.inputs.listed_by_old_indexes.get(tc.obj.name, set())
        vouched = None if self.inputs.trust_unreached else known
        for rowid, values in rows:
            if rowid in tc.rowids:
                witnessed = (tc.has_fts_copies or tc.indexed) and rowid in known
                witnessed = witnessed and not tc.obj.without_rowid
                if not witnessed or self._holds(tc, rowid):
                    continue
                tc.rowids.discard(rowid)
                self._insert_salvaged(tc, rowid, values, None)
                continue
            self._insert_salvaged(tc, rowid, values, vouched)

    def _holds(self, tc: TableCopy, rowid: int) -> bool:
        """Does the output hold a row under ``rowid``?"""
        t, rid = quote_ident(tc.obj.name), tc.obj.rowid_sql
        return (
            self.dst.execute(f"SELECT 1 FROM main.{t} WHERE {rid} = ?", (rowid,)).fetchone()
            is not None
        )

    def add_carved(self, tc: TableCopy) -> None:
        """Rows carved from the table's leaves whose header or cell pointers are
        damaged, for rowids the output lacks, each only if an intact index or FTS copy
        of the table lists it (stale cells of deleted rows stay in a page's free
        space)."""
        rows = self.inputs.carved.get(tc.obj.name, [])
        if not rows:
            return
        # Either witness vouches: an intact index drops a row's entry with the row as
        # surely as the FTS copies do (whose own pages may be the damaged ones).
        vouched = tc.known_keys() | tc.index_keys
        vouched |= self.inputs.listed_by_old_indexes.get(tc.obj.name, set())
        for rowid, values in rows:
            # A rowid the b-tree read blocks a carved row only when a row is in under it:
            # a garbled cell read under a real row's rowid was set aside.
            if rowid in tc.rowids and self._holds(tc, rowid):
                continue
            self._insert_salvaged(tc, rowid, list(values), vouched)

    def _insert_salvaged(
        self, tc: TableCopy, rowid: int, values: list[Any], vouched: AbstractSet[Any] | None = None
    ) -> None:
        obj = tc.obj
        cols = stored_names(obj)[: len(values)]
        values = values[: len(cols)]
        if obj.rowid_alias and obj.rowid_alias in cols:
            values[cols.index(obj.rowid_alias)] = rowid
        key_cols = obj.key_names
        if key_cols and not set(key_cols) <= set(cols):
            return
        key = rowid if not key_cols else tuple(values[cols.index(c)] for c in key_cols)
        if vouched is not None and key not in vouched and rowid not in vouched:
            tc.report.unvouched_skipped += 1
            return
        hit = misfits(self.src, self.inputs.schema, obj, rowid=rowid, values=values)
        if hit is None:
            return  # a key Hermes never writes: the record changed on disk
        tc.rowids.add(rowid)
        tc.report.source_rows += 1
        tc.page_keys.add(key)
        tc.page_rowids.add(rowid)
        if hit:
            if self.fill.write_partial(tc, rowid, values, cols, hit):
                tc.report.recovered_from_pages += 1
        elif self.fill.insert_row(tc, rowid, values, cols):
            tc.report.recovered_from_pages += 1

    def add_wal_rows(self, tc: TableCopy) -> None:
        """Rows of committed transactions SQLite does not replay: a rowid the output
        lacks is added, a row that differs is replaced by its newer version, and a row
        they deleted is deleted (``_apply_wal_deletes``)."""
        self._apply_wal_deletes(tc)
        rows = self.inputs.wal_rows.rows.get(tc.obj.name, [])
        if not rows:
            return
        obj = tc.obj
        newest: dict[int, list[Any]] = {}
        for rowid, values in rows:
            newest[rowid] = values
        all_cols = stored_names(obj)
        t = quote_ident(obj.name)
        for rowid, found in sorted(newest.items()):
            cols = all_cols[: len(found)]
            values = list(found[: len(cols)])
            if obj.rowid_alias and obj.rowid_alias in cols:
                values[cols.index(obj.rowid_alias)] = rowid
            if rowid not in tc.rowids:
                if self.fill.insert_row(tc, rowid, values, cols):
                    tc.rowids.add(rowid)
                    tc.report.source_rows += 1
                    tc.report.recovered_from_wal += 1
                    key_cols = obj.key_names
                    key = rowid if not key_cols else tuple(values[cols.index(c)] for c in key_cols)
                    tc.page_keys.add(key)
                    tc.page_rowids.add(rowid)
                continue
            sel = ", ".join(quote_ident(c) for c in cols)
            have = self.dst.execute(
                f"SELECT {sel} FROM main.{t} WHERE {obj.rowid_sql} = ?", (rowid,)
            ).fetchone()
            if have is None or list(have) == values:
                continue
            written = [(c, v) for c, v in zip(cols, values, strict=True) if c not in obj.generated]
            sets = ", ".join(f"{quote_ident(c)} = ?" for c, _ in written)
            update = f"UPDATE main.{t} SET {sets} WHERE {obj.rowid_sql} = ?"
            try:
                self.dst.execute(update, [*(v for _, v in written), rowid])
            except apsw.Error as exc:
                self.report.notes.append(
                    f"{obj.name} rowid {rowid}: its newer version from the -wal was not"
                    f" applied: {exc}"
                )
                continue
            tc.report.updated_from_wal += 1

    def _apply_wal_deletes(self, tc: TableCopy) -> None:
        """Rows committed transactions SQLite does not replay deleted are not the
        database's: taken out of the output and of the keys read (their index and FTS
        entries were deleted with them). Rows they may have deleted (a page of the table
        is a damaged frame's) are kept, listed as unverified."""
        obj = tc.obj
        gone = sorted(self.inputs.wal_rows.gone.get(obj.name, set()) & tc.rowids)
        key_cols = obj.key_names
        sel = "".join(", " + quote_ident(c) for c in key_cols)
        t, rid = quote_ident(obj.name), obj.rowid_sql
        for rowid in gone:
            row = self.dst.execute(f"SELECT {rid}{sel} FROM main.{t} WHERE {rid} = ?", (rowid,))
            found = row.fetchone()
            if found is None:
                continue
            self.dst.execute(f"DELETE FROM main.{t} WHERE {rid} = ?", (rowid,))
            key = rowid if not key_cols else tuple(found[1:])
            for keys in (tc.source_keys, tc.page_keys, tc.index_keys, tc.hint_keys):
                keys.discard(key)
                keys.discard(rowid)
            for rowids in (tc.rowids, tc.page_rowids, tc.fts_rowids, tc.hint_rowids):
                rowids.discard(rowid)
            tc.report.source_rows -= 1
            tc.report.deleted_by_wal.append(rowid)
        if gone:
            shown = ", ".join(str(r) for r in gone[:20])
            self.report.notes.append(
                f"{obj.name}: {len(gone)} rows deleted by committed -wal transactions SQLite"
                f" does not replay were left out (rowids {shown})"
            )
        unsure = sorted(self.inputs.wal_rows.unsure.get(obj.name, set()) & tc.rowids)
        tc.report.unverified += len(unsure)
        for rowid in unsure:
            self.report.unverified_rows.append(
                {
                    "table": obj.name,
                    "rowid": rowid,
                    "columns": stored_names(obj),
                    "why": "a committed -wal transaction SQLite does not replay may have"
                    " deleted it: its page image there is damaged",
                }
            )

    def add_from_other_copies(self, tc: TableCopy) -> None:
        """Rows the output lacks that another verified copy holds, newest copy first,
        each only where the evidence says it was lost, not deleted (docs/safety.md,
        "Rows from other copies"): when the table has witnesses (readable FTS copies,
        which Hermes' delete triggers empty with the row, or an index whose own b-tree
        is intact, which lists every row), a row comes back only if they list it; with
        none, only if its rowid lies in a stretch of the table that could not be read
        (a stretch that reads without it is where it was deleted). Only from a copy that
        proves it is of this database, and only a row that agrees with every witness
        this file still has of it (``_take_from_copy``, docs/safety.md rule 15)."""
        obj = tc.obj
        if not self.inputs.others or obj.without_rowid:
            return
        witnesses = tc.has_fts_copies or tc.indexed
        known = tc.known_keys()
        ranges = [(lo, hi) for lo, hi in tc.report.unreadable_ranges]
        cols = stored_names(obj)
        key_cols = obj.key_names
        for copy in self.inputs.others:
            if not self._of_this_database(copy):
                continue
            rows = copy.rows(obj)
            if rows is None:
                self.report.notes.append(f"{obj.name}: not in {copy.label}, or other columns")
                continue
            lost = []
            for rowid, values in rows:
                if rowid in tc.rowids:
                    continue
                key = rowid if not key_cols else tuple(values[cols.index(c)] for c in key_cols)
                if witnesses:
                    gone = key not in known and rowid not in known
                else:
                    gone = not any(lo <= rowid <= hi for lo, hi in ranges)
                if gone:
                    tc.report.deleted_since_copy += 1
                else:
                    lost.append((rowid, values))
            self._take_from_copy(tc, copy, lost)

    def _of_this_database(self, copy: OtherCopy) -> bool:
        """Does ``copy`` prove it is of this database (``other_copies.foreign``)? Judged
        once per copy; one that does not is named in the notes, and no row of it is
        taken."""
        if copy.path not in self._copy_verdicts:
            app_id = self.inputs.work.source_header.application_id
            self._copy_verdicts[copy.path] = foreign(
                copy, self.src, app_id, damaged_rows(self.inputs.diag)
            )
        why = self._copy_verdicts[copy.path]
        note = f"{copy.label}: not used, it is not a copy of this database ({why})"
        if why is not None and note not in self.report.notes:
            self.report.notes.append(note)
        return why is None

    def _take_from_copy(self, tc: TableCopy, copy: OtherCopy, rows: list[tuple[int, Any]]) -> None:
        """Insert the lost ``rows`` of ``copy``, each only when it agrees with the entries
        this file's intact indexes hold for its rowid and with the text of its FTS copies;
        the others are named in one note and stay lost."""
        if not rows:
            return
        obj = tc.obj
        cols = stored_names(obj)
        broken = self.build.unwitnessed_roots()
        readings = index_readings(self.src, self.inputs.schema, obj.name, broken_roots=broken)
        entries = indexed_values_of(self.src, readings, [r for r, _ in rows])
        drop_misshapen(entries, self.inputs.diag.lost_writes.misshapen)
        fed = [f for f in feeds(self.inputs.schema) if f.table == obj.name]
        changed = changed_fts_copies(self.inputs.diag, obj.name)
        refused: list[tuple[int, str]] = []
        for rowid, values in rows:
            why = index_disagreement(dict(zip(cols, values, strict=True)), entries.get(rowid, {}))
            self.dst.execute("SAVEPOINT other")
            try:
                if why is None:
                    self.dst.execute(*RowShape.of(obj).insert(cols, rowid, values))
                    why = fts_disagreement((self.dst, self.src), fed, changed, obj.name, rowid)
            except apsw.Error as exc:
                self.dst.execute("ROLLBACK TO other")
                self.dst.execute("RELEASE other")
                self.report.notes.append(
                    f"{obj.name} rowid {rowid} from {copy.label}: not taken ({exc})"
                )
                continue
            if why is not None:
                self.dst.execute("ROLLBACK TO other")
                self.dst.execute("RELEASE other")
                refused.append((rowid, why))
                continue
            self.dst.execute("RELEASE other")
            tc.rowids.add(rowid)
            tc.report.recovered_from_other_copies += 1
            self.report.from_other_copies.append(
                {"table": obj.name, "rowid": rowid, "from": copy.label, "copy_taken_at": copy.taken}
            )
        if refused:
            shown = "; ".join(f"rowid {r}: {why}" for r, why in refused[:20])
            note = (
                f"{obj.name}: {len(refused)} rows of {copy.label} not taken, they disagree"
                f" with what this file still holds of them ({shown})"
            )
            if note not in self.report.notes:
                self.report.notes.append(note)

    def rebuild_lost_from_copies(self, tc: TableCopy) -> None:
        """Rows the FTS copies remember that the output table lacks go, as far as the
        copies hold them, to a documented side table (``copy_restore.REBUILT_RULE``)."""
        if not tc.has_fts_copies:
            return
        have = KeySet(
            r[0]
            for r in self.dst.execute(
                f"SELECT {tc.obj.rowid_sql} FROM main.{quote_ident(tc.obj.name)}"
            )
        )
        lost = tc.fts_rowids - have
        if not lost:
            return
        rows = rebuild_from_copies(
            self.src,
            self.inputs.schema,
            tc.obj.name,
            lost,
            broken_roots=self.build.unwitnessed_roots(),
        )
        if not rows:
            return
        name = write_rebuilt(self.dst, tc.obj.name, rows)
        tc.report.rebuilt_from_copies = len(rows)
        self.report.rebuilt[tc.obj.name] = name


def damaged_rows(diag: Diagnosis) -> dict[str, set[int]]:
    """Rowids per table ``diag`` found damaged on disk: what this file reads of them
    proves nothing of another copy (``other_copies.foreign``)."""
    out: dict[str, set[int]] = {}
    for cells in (diag.zeroed_cells, diag.cross_linked):
        for table, rowids in cells.items():
            out.setdefault(table, set()).update(rowids)
    for c in diag.copies:
        out.setdefault(c.table, set()).update(c.rows_rotted, c.rows_bad_text)
    return out


def changed_fts_copies(diag: Diagnosis, table: str) -> dict[str, set[int]]:
    """Per FTS table fed by ``table``, the rowids whose copy there ``diag`` found
    changed on disk: no witness of those rows."""
    out: dict[str, set[int]] = {}
    for c in diag.copies:
        if c.table == table:
            for fts, rowids in c.copies_rotted.items():
                out.setdefault(fts, set()).update(rowids)
    return out
