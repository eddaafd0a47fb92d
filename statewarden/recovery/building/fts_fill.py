"""The FTS tables of the output: how each is filled (its intact shadow tables copied,
reconciled with the rows the output holds, re-indexed from its content, repopulated by
triggers, or carried over when its tokenizer cannot be loaded here), and the record of
which the verification need not check again."""

from __future__ import annotations

import contextlib
import re

import apsw

from statewarden.errors import FtsCopyFailed, FtsModesChanged, FtsVerdictsMissing, StatewardenError
from statewarden.recovery.building.build import Build, BuildPart, TableCopy
from statewarden.recovery.building.row_repair import RowRepair
from statewarden.recovery.building.table_fill import TableFill
from statewarden.recovery.decoding.schema import Schema
from statewarden.recovery.diagnosis import Diagnosis
from statewarden.recovery.evidence.copies import Feed, feeds
from statewarden.recovery.report import TableReport
from statewarden.sqlite import quote_ident, raise_if_machine

# FTS5's structure record of an index with no segment (cookie 0, no level, no segment,
# write counter 0), as FTS5 itself writes it for a new table.
EMPTY_FTS5_STRUCTURE = bytes(7)


def _fts_modes(schema: Schema, damaged: set[str], diag: Diagnosis) -> dict[str, str]:
    """How each FTS table gets its contents: ``copy`` its intact shadow tables (then,
    when its base table was copied row by row, ``reconcile`` them with the rows the
    output holds); ``reindex``: copy only its intact content table and let FTS5's
    ``'rebuild'`` make the index (then reconcile); ``triggers`` (repopulated as the
    feeding table is copied); ``rebuild`` (external content); ``none`` (contentless,
    its index damaged: nothing to make it again from).

    Shadow tables are intact when no integrity error touches them and FTS5's own check
    (index against content) passed: copying them is far cheaper than tokenising every
    row again. An intact external-content table is copied too (``external``: its
    index is then checked against the output's rows, and rebuilt if it disagrees), so
    that its shadow rows come back as they were. ``carry``: its tokenizer cannot be
    loaded here (``tokenizers.py``), so it can be neither checked nor rebuilt: its
    shadow tables are copied as rows and its schema row written as it was."""
    bad_fts = {g.object for g in diag.groups if g.kind == "fts"}
    for g in diag.groups:
        obj = schema.by_name(g.object)
        if obj is not None and obj.shadow_of:
            bad_fts.add(obj.shadow_of)
    bad_fts |= {name for name, res in diag.fts.items() if res != "ok"}
    rotted = {fts for c in diag.copies for fts in c.copies_rotted}
    bad_fts |= rotted
    flagged = {g.object for g in diag.groups} | set(diag.zeroed_cells)
    fed = {f.fts for f in feeds(schema)}
    modes = {}
    for obj in schema.tables():
        if obj.module != "fts5":
            continue
        owner = schema.fts_owner.get(obj.name)
        if obj.name in diag.unverifiable:
            modes[obj.name] = "carry"
        elif obj.fts_content == "":
            # Its index is all it holds: copied when intact, else nothing rebuilds it.
            intact = obj.name not in bad_fts and not flagged & _shadows(schema, obj.name)
            modes[obj.name] = "copy" if intact else "none"
        elif obj.fts_content:
            intact = obj.name not in bad_fts and not flagged & _shadows(schema, obj.name)
            modes[obj.name] = "external" if intact else "rebuild"
        elif obj.name in bad_fts:
            content_ok = f"{obj.name}_content" not in flagged and obj.name not in rotted
            if owner is None:
                # Its own content is the only copy of its text: the index is made
                # again from it, the rows of a damaged content table that read first
                # copied one by one (``salvage``).
                modes[obj.name] = "reindex" if content_ok else "salvage"
            else:
                modes[obj.name] = "reindex" if content_ok and obj.name in fed else "triggers"
        elif owner is not None and owner in damaged:
            modes[obj.name] = "reconcile" if obj.name in fed else "triggers"
        else:
            modes[obj.name] = "copy"
    return modes


def _savepoint_name(fts: str) -> str:
    """The savepoint of an FTS table's shadow tables copied ahead (``_copy_ahead``)."""
    return quote_ident(f"fts_ahead_{fts}")


def _shadows(schema: Schema, fts: str) -> set[str]:
    return {o.name for o in schema.tables() if o.shadow_of == fts}


class FtsFill(BuildPart):
    """The FTS tables of one build."""

    def __init__(self, build: Build, repair: RowRepair, force_triggers: set[str]) -> None:
        super().__init__(build)
        self.repair = repair
        self.force_triggers = force_triggers
        # FTS tables copied whole from the work copy and left as they were (mode
        # ``copy``, every shadow table copied): the verification need not check their
        # index again (``recover.py``).
        self.fts_unchanged: set[str] = set()
        # Rows each FTS shadow table's copy wrote (``_copy_shadow``), by shadow table.
        self.fts_copied: dict[str, int] = {}
        # FTS tables with their own content, copied whole from the work copy and then
        # reconciled with the output's rows only by ordinary INSERT and DELETE on the FTS
        # table, no row re-indexed from a damaged source (``_reconcile_fts``): FTS5 kept
        # their index from their own stored content. Each with its feed, by which the
        # verification checks them instead of FTS5's own check (``verify.py``).
        self.fts_reconciled: dict[str, Feed] = {}
        # Own-content FTS tables whose index FTS5's 'rebuild' made in the output from
        # the content the output stores (``_note_reindexed``).
        self.fts_reindexed: dict[str, Feed] = {}

    def modes(self) -> dict[str, str]:
        """How each FTS table is filled (``_fts_modes``), as the diagnosis stands."""
        modes = _fts_modes(self.inputs.schema, self.inputs.damaged, self.inputs.diag)
        for name in self.force_triggers:
            external = bool((obj := self.inputs.schema.by_name(name)) and obj.fts_content)
            modes[name] = "rebuild" if external else "triggers"
        return modes

    def copy_ahead(self, modes: dict[str, str]) -> set[str]:
        """While FTS5's own checks are still pending: the shadow tables of the FTS
        tables to be copied whole (``copy``, ``reconcile``) copied now, each table's
        inside a savepoint of its own kept open until the verdicts are in
        (``_settle_fts_modes``), which keeps them or undoes them. Returns the tables
        copied; one whose copy failed is undone at once and copied (or not) the usual
        way once the verdicts are in."""
        if self.inputs.fts_pending is None:
            return set()
        ahead: set[str] = set()
        owned = self.inputs.schema.fts_owner
        for i, (name, mode) in enumerate(modes.items()):
            if self.progress:
                self.progress("copy FTS tables ahead", i, len(modes))
            if mode not in ("copy", "reconcile") or name not in owned:
                continue  # (a copy that fails then is noted, not raised: not ahead)
            if name in self.force_triggers:
                continue
            point = _savepoint_name(name)
            self.dst.execute(f"SAVEPOINT {point}")
            try:
                self._copy_shadows(name)
            except FtsCopyFailed:
                self.dst.execute(f"ROLLBACK TO {point}")
                self.dst.execute(f"RELEASE {point}")
                continue
            ahead.add(name)
        return ahead

    def settle_modes(self, modes: dict[str, str], ahead: set[str]) -> dict[str, str]:
        """The FTS modes with FTS5's own verdicts, once the base tables are in: those
        chosen before the data with the verdicts still pending stand where they agree.
        A table found damaged is filled its new way (``reindex``, ``rebuild``) unless
        that needed triggers before the data: then the build starts over. Shadow tables
        copied ahead (``_copy_ahead``) are kept where the mode stands; ``ahead`` is left
        with those only, the others' copies undone."""
        pending = self.inputs.fts_pending
        if pending is None:
            return modes
        if not pending.join(self.inputs.diag):
            raise FtsVerdictsMissing()
        now = self.modes()
        if {n for n, m in now.items() if m in ("triggers", "carry")} != {
            n for n, m in modes.items() if m in ("triggers", "carry")
        }:
            raise FtsModesChanged()
        # Savepoints nest: the last one opened is settled first, and undoing one also
        # undoes the copies made after it (kept or not): those are made again.
        opened = [n for n in modes if n in ahead]
        for i in reversed(range(len(opened))):
            point = _savepoint_name(opened[i])
            if now.get(opened[i]) != modes[opened[i]]:
                self.dst.execute(f"ROLLBACK TO {point}")
                ahead.difference_update(opened[i:])
            self.dst.execute(f"RELEASE {point}")
        return now

    def fill(self, name: str, mode: str, *, copied: bool = False) -> None:
        """Fill the FTS table ``name`` its ``mode``'s way (``_fts_modes``); ``copied``:
        its shadow tables are already copied (``_copy_ahead``)."""
        q = quote_ident(name)
        if mode == "carry":
            for obj in self.inputs.schema.tables():
                if obj.shadow_of == name:
                    self._carry_shadow(name, obj.name)
            self._keep_fts_version(name)
            self._keep_fts_structure(name)
            why = self.inputs.diag.unverifiable.get(name, "")
            self.report.notes.append(
                f"{name}: carried over as it was, its index unchecked ({why});"
                " Hermes rebuilds it with `hermes sessions optimize-storage` where the"
                " tokenizer loads"
            )
        elif mode == "external":
            self._copy_shadows(name)
            try:
                self.dst.execute(f"INSERT INTO main.{q}({q}, rank) VALUES('integrity-check', 1)")
            except apsw.Error as exc:
                self.report.notes.append(
                    f"{name}: its copied index disagrees with the recovered rows ({exc});"
                    " rebuilt from them"
                )
                self.fill(name, "rebuild")
        elif mode == "rebuild":
            try:
                self.dst.execute(f"INSERT INTO main.{q}({q}) VALUES('rebuild')")
            except apsw.Error as exc:
                self.report.notes.append(f"{name}: FTS 'rebuild' failed: {exc}")
        elif mode == "salvage":
            self._salvage_content(name)
            self.fill(name, "rebuild")
        elif mode in ("copy", "reconcile", "reindex"):
            if mode == "copy":
                self.fts_unchanged.add(name)
            for obj in self.inputs.schema.tables():
                if obj.shadow_of != name or copied:
                    continue
                if mode == "reindex" and obj.name != f"{name}_content":
                    continue
                self._copy_shadow(name, obj.name)
            if mode == "reindex":
                self.dst.execute(f"INSERT INTO main.{q}({q}) VALUES('rebuild')")
            owner_damaged = self.inputs.schema.fts_owner.get(name) in self.inputs.damaged
            if mode != "copy" and owner_damaged:
                self._reconcile_fts(name)
            if mode == "reindex" and (name in self.fts_reconciled or not owner_damaged):
                self._note_reindexed(name)
        elif mode == "none":
            # Its index was the only copy of what it held: left empty, all of it is lost
            # (unless the source's held nothing).
            try:
                held = self.src.execute(f"SELECT count(*) FROM {q}").get
            except apsw.Error:
                held = None
            self.report.notes.append(
                f"{name}: contentless FTS table left empty (nothing to rebuild it from;"
                f" the source's held {'an unknown number of' if held is None else held} rows)"
            )
            if held != 0 and name not in self.report.tables_lost:
                self.report.tables_lost.append(name)

    def _salvage_content(self, name: str) -> None:
        """An FTS5 table no other table feeds, its content table damaged: the content
        rows that read copied one by one past the damage (``TableFill.row_copy``), and
        accounted as a table of their own (``<name>_content`` in the report: the rows
        that did not read are its loss); FTS5's 'rebuild' then makes the index."""
        content = self.inputs.schema.by_name(f"{name}_content")
        if content is None:
            return
        self.dst.execute(f"DELETE FROM main.{quote_ident(content.name)}")
        tc = TableCopy(content, TableReport())
        self.copies[content.name] = tc
        TableFill(self.build, {}).row_copy(tc)
        self.report.notes.append(
            f"{name}: its content table is damaged: the rows that read were copied one by"
            f" one and its index made again from them ({content.name} in the tables above)"
        )

    def _note_reindexed(self, name: str) -> None:
        """An own-content FTS table whose index FTS5's 'rebuild' just made from the
        content it stores in the output, changed since only by ordinary INSERT and
        DELETE of clean rows (``_reconcile_fts``): listed with its feed, by which the
        verification checks it instead of FTS5's own check (``verify.py``)."""
        feed = next((f for f in feeds(self.inputs.schema) if f.fts == name), None)
        fts = self.inputs.schema.by_name(name)
        if feed is not None and fts is not None and fts.fts_content is None:
            self.fts_reindexed[name] = feed

    def _copy_shadows(self, name: str) -> None:
        """Copy every shadow table of the FTS table ``name`` (``_copy_shadow``)."""
        for obj in self.inputs.schema.tables():
            if obj.shadow_of == name:
                self._copy_shadow(name, obj.name)

    def _copy_shadow(self, name: str, shadow: str) -> None:
        """Copy one FTS shadow table from the source (in one statement when the source
        is attached, else row by row through Python)."""
        s = quote_ident(shadow)
        self.dst.execute(f"DELETE FROM main.{s}")
        try:
            if self.attached:
                self.dst.execute(f"INSERT INTO main.{s} SELECT * FROM src.{s} NOT INDEXED")
                self.fts_copied[shadow] = self.dst.changes()
                return
            rows = self.src.execute(f"SELECT * FROM {s} NOT INDEXED").fetchall()
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_machine(exc)  # a full disk is no damage of the FTS table's: the run ends
            if name in self.inputs.schema.fts_owner and name not in self.force_triggers:
                raise FtsCopyFailed(name, str(exc)) from None
            self.report.notes.append(f"{name}: copying {shadow} failed: {exc}")
            self.fts_unchanged.discard(name)
            return
        if rows:
            marks = ", ".join("?" for _ in rows[0])
            self.dst.executemany(f"INSERT INTO main.{s} VALUES ({marks})", rows)
        self.fts_copied[shadow] = len(rows)

    def confirm_unchanged(self) -> None:
        """Each FTS table taken as copied whole and unchanged (``fts_unchanged``, whose
        index the verification then does not check again) must hold in its small shadow
        tables (all but ``_data`` and ``_content``) the rows its copy wrote. One that
        does not (a copy undone, or never made) is a fault of this build, which an FTS5
        check could miss (an empty index over empty content passes it): the run ends
        and nothing is published."""
        for name in sorted(self.fts_unchanged):
            for obj in self.inputs.schema.tables():
                if obj.shadow_of != name or obj.name in (f"{name}_data", f"{name}_content"):
                    continue
                wrote = self.fts_copied.get(obj.name)
                row = self.dst.execute(
                    f"SELECT count(*) FROM main.{quote_ident(obj.name)}"
                ).fetchone()
                holds = int(row[0]) if row else 0
                if wrote is None or holds != wrote:
                    raise StatewardenError(
                        f"{name}: its copy in the new file is not whole ({obj.name} holds"
                        f" {holds} rows, its copy wrote {wrote if wrote is not None else 'none'});"
                        " the new file was not kept"
                    )

    def _keep_fts_version(self, name: str) -> None:
        """A carried FTS table whose ``_config`` lost its ``version`` row (a damaged
        page) could not be opened at all in the output: the row is written back with
        the file-format version FTS5 gives every table (5 for ``contentless_delete``)."""
        obj = self.inputs.schema.by_name(name)
        config = quote_ident(f"{name}_config")
        try:
            have = self.dst.execute(f"SELECT 1 FROM main.{config} WHERE k = 'version'").fetchone()
        except apsw.Error:
            return  # not a regular FTS5 config table: nothing to restore
        if have is not None:
            return
        delete = bool(obj and re.search(r"contentless_delete\s*=\s*1", obj.sql or "", re.I))
        self.dst.execute(
            f"INSERT INTO main.{config}(k, v) VALUES ('version', ?)", (5 if delete else 4,)
        )
        self.report.notes.append(
            f"{name}: its config had no version row; written back (version {5 if delete else 4})"
        )

    def _keep_fts_structure(self, name: str) -> None:
        """A carried FTS table whose index lost its structure record (``_data`` rowid
        10, the map of its segments) cannot be read or checked at all, and cannot be
        rebuilt here: its index is carried empty instead (an empty structure, no
        segments), its content kept, so that the output opens and Hermes rebuilds it."""
        data = quote_ident(f"{name}_data")
        try:
            have = self.dst.execute(f"SELECT 1 FROM main.{data} WHERE id = 10").fetchone()
        except apsw.Error:
            return  # not a regular FTS5 data table
        if have is not None:
            return
        for shadow in ("_data", "_idx", "_docsize"):
            with contextlib.suppress(apsw.Error):  # _docsize is absent with columnsize=0
                self.dst.execute(f"DELETE FROM main.{quote_ident(name + shadow)}")
        self.dst.execute(
            f"INSERT INTO main.{data}(id, block) VALUES (1, x''), (10, ?)", (EMPTY_FTS5_STRUCTURE,)
        )
        self.report.notes.append(
            f"{name}: its index lost its structure record; carried empty (content kept):"
            " Hermes must rebuild it (`hermes sessions optimize-storage`)"
        )

    def _carry_shadow(self, name: str, shadow: str) -> None:
        """Copy one shadow table of a carried FTS table, keeping what can be read."""
        try:
            self._copy_shadow(name, shadow)
        except FtsCopyFailed as exc:
            note = (
                f"{name}: {shadow} could not be copied whole ({exc.reason}); Hermes must"
                " rebuild this index (`hermes sessions optimize-storage`)"
            )
            if note not in self.report.notes:  # a build that starts over meets it again
                self.report.notes.append(note)

    def _reconcile_fts(self, name: str) -> None:
        """After copying an intact FTS table whose base table was copied row by row:
        remove entries of rows the output lacks, and (re)index rows that are new or
        differ, with the expressions of the file's own insert trigger (``copies.py``).
        Rows found rotted on disk keep their copies (see ``recover.py``)."""
        feed = next((f for f in feeds(self.inputs.schema) if f.fts == name), None)
        fts = self.inputs.schema.by_name(name)
        if feed is None or fts is None:  # pragma: no cover - only fed tables reconcile
            return
        rotted = {
            r for c in self.inputs.diag.copies if c.table == feed.table for r in c.rows_rotted
        }
        q, content = quote_ident(name), quote_ident(f"{name}_content")
        base = quote_ident(feed.table)
        rid = feed.rowid_expr
        differs = f"NOT {feed.copy_matches()}"
        stale = [
            int(r[0])
            for r in self.dst.execute(
                f"SELECT c.id FROM main.{content} AS c LEFT JOIN main.{base} AS b"
                f" ON ({rid}) = c.id WHERE b.rowid IS NULL"
                f" UNION ALL SELECT c.id FROM main.{content} AS c JOIN main.{base} AS b"
                f" ON ({rid}) = c.id WHERE {differs}"
            )
        ]
        stale = [r for r in stale if r not in rotted]
        self.dst.executemany(f"DELETE FROM main.{q} WHERE rowid = ?", [(r,) for r in stale])
        cols = [c.name for c in fts.columns if not c.hidden]
        names = ", ".join(quote_ident(cols[int(k[1:])]) for k in feed.columns)
        exprs = ", ".join(feed.columns.values())
        lacking = (
            f" FROM main.{base} AS b WHERE NOT EXISTS"
            f" (SELECT 1 FROM main.{content} AS c WHERE c.id = ({rid}))"
        )
        added = {r[0] for r in self.dst.execute(f"SELECT ({rid}){lacking}")}
        if added:  # (none, most of the time: the search is not made twice)
            self.dst.execute(
                f"INSERT INTO main.{q}(rowid, {names}) SELECT ({rid}), {exprs}{lacking}"
            )
        damaged = self.repair.damaged_rowids(feed.table)
        if fts.fts_content is None and damaged is not None and not added & damaged:
            self.fts_reconciled[name] = feed
