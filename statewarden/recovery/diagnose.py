"""Diagnosis: the damage in a database, by object and logical table, and its class.

The uncapped integrity check and the attribution of its lines live in
``integrity.py``; here the facts added to it (the full scans, ``table_scans.py``; FTS5's
own checks, ``fts_checks.py``; rows that run into zeroed sectors or another row's
overflow pages) are brought together into the verdict, a ``Diagnosis``
(``diagnosis.py``, where the damage classes are defined), and the class's exit code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import apsw

from statewarden.errors import (
    EXIT_BASE_DAMAGE,
    EXIT_DERIVED_DAMAGE,
    EXIT_OK,
    EXIT_UNREADABLE,
    DatabaseUnreadable,
)
from statewarden.progress import ProgressFn
from statewarden.recovery.bundle import WorkCopy
from statewarden.recovery.decoding.checks_child import EarlyChecker
from statewarden.recovery.decoding.damaged_cells import cross_linked_cells, zeroed_cells_in
from statewarden.recovery.decoding.fts_structure import own_zeros_left_out
from statewarden.recovery.decoding.integrity import (
    ErrorGroup,
    IntegrityCheck,
    group_errors,
)
from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.pages import DatabaseFile, ZeroedCells
from statewarden.recovery.decoding.scan import scan_table
from statewarden.recovery.decoding.schema import Schema, SchemaObject, read_schema
from statewarden.recovery.decoding.tokenizers import unloadable
from statewarden.recovery.diagnosis import Diagnosis, TableFacts, classify, worst
from statewarden.recovery.evidence.column_types import find_misfits, hermes_table
from statewarden.recovery.evidence.copies import CopyCheck
from statewarden.recovery.evidence.foreign_cells import foreign_by_table
from statewarden.recovery.evidence.lost_writes import find_lost_writes
from statewarden.recovery.fts_checks import CHECK_CUT_SHORT, FtsPending, _fts_verdicts
from statewarden.recovery.table_scans import _scan_facts, counts_disagree
from statewarden.sqlite import classify_error, quote_ident, raise_if_interrupted

_TWICE_RE = re.compile(r"^Tree (\d+) .*2nd reference to page")


def diagnose(copy: Path | WorkCopy, *, progress: ProgressFn | None = None) -> Diagnosis:
    """Diagnose ``copy``, which must be a private copy: a file, or the work copy made of
    a source (``bundle.make_work_copy``), whose making tells what the source lost.

    The copy is opened read-write only so that FTS5's ``integrity-check`` command (an
    INSERT that changes nothing) can run. A work copy's ``wal`` is what the source's
    ``-wal`` held (``wal.py``): committed transactions SQLite does not replay are base
    damage (their rows are not in the database as SQLite reads it); its ``schema_note``
    says that the copy's page 1 was rebuilt (``bundle.py``): the source itself is
    unreadable; its ``truncated_note``, that the file is shorter than its header says.
    """
    result, pending = diagnose_ahead_of_fts(copy, progress=progress, ahead=False)
    assert pending is None
    return result


def diagnose_ahead_of_fts(
    copy: Path | WorkCopy,
    *,
    progress: ProgressFn | None = None,
    ahead: bool = True,
    early: EarlyChecker | None = None,
) -> tuple[Diagnosis, FtsPending | None]:
    """``diagnose``, except that the diagnosis comes back before FTS5's own checks of
    the FTS tables end, whatever the damage: its FTS verdicts are "ok" for now (or what
    the b-trees and zeroed sectors already say), its class without them, and the
    ``FtsPending`` returned with it gives the real ones (``FtsPending.join``). The checks
    run in a child process (``IntegrityCheck(apart=True)``), so this process may read
    the file outside SQLite meanwhile: no descriptor it closes can drop their locks
    (docs/safety.md rule 2). Not with a rebuilt page 1 or WAL commits SQLite drops (the
    class is settled before the checks). ``ahead=False``: the checks are waited for, as
    ``diagnose`` does (no pending). ``early``: a child started ahead for the checks
    (``EarlyChecker``), used if they run apart.
    """
    work, db = (copy, copy.db) if isinstance(copy, WorkCopy) else (None, copy)
    truncated = work.truncated_note if work is not None else None
    wal = work.wal if work is not None else None
    schema_rebuilt = work.schema_note if work is not None else None
    defer = ahead and schema_rebuilt is None and not (wal and (wal.dropped_commits or wal.foreign))
    # The zeroed-sector search reads pages raw while the FTS tables' own checks run in
    # threads (``_diagnose``), through one descriptor opened before the first connection
    # and closed after the last: closing a descriptor of the file drops every POSIX lock
    # the process holds on it, SQLite's among them (docs/safety.md rule 2). Checks that go
    # on after this returns run in a child process, whose locks are its own.
    raw: DatabaseFile | str
    try:
        raw = DatabaseFile(db)
    except (OSError, ValueError) as exc:  # a PageFormatError is a ValueError
        raw = str(exc)
    pending: FtsPending | None = None
    try:
        named = work.source if work is not None else db  # errors name the database
        try:
            conn = apsw.Connection(str(db))
        except apsw.Error as exc:
            raise classify_error(named, exc) from None
        try:
            try:
                schema = read_schema(conn)
            except (apsw.Error, UnicodeDecodeError) as exc:
                raise DatabaseUnreadable(
                    f"{named}: the schema (sqlite_schema) cannot be read: {exc}"
                ) from None
            result, running = _diagnose(
                conn, db, schema, progress, truncated, raw=raw, defer=defer, early=early
            )
            if running is not None:
                pending = FtsPending(running, schema)
        finally:
            conn.close()
    finally:
        if isinstance(raw, DatabaseFile):
            raw.close()
    # Raw page reads of its own, now that no connection of this process is open to the
    # copy (checks still pending run in a child process).
    if any("2nd reference to page" in ln for ln in result.error_lines):
        _add_cross_links(result, db, schema)
    if wal is not None:
        assert work is not None  # (only a work copy has a WAL's facts)
        result.notes.extend(wal.notes(work.wal_name))
        result.wal_dropped_commits = wal.dropped_commits
        if wal.dropped_commits or wal.foreign:
            # A foreign WAL: SQLite, and so Hermes, would read the file scrambled by it.
            result.damage = worst(result.damage, "base")
    if schema_rebuilt:
        result.notes.insert(0, schema_rebuilt)
        result.damage = "unreadable"
    return result, pending


def _zeroed_search(
    raw: DatabaseFile | str, schema: Schema, destroyed: dict[str, int]
) -> dict[str, ZeroedCells] | str:
    """Rows that run into zeroed sectors (``damaged_cells.zeroed_cells_in``; ``destroyed``
    gets the cells that begin in one), or why the search failed (``raw``: the open file,
    or why it could not be opened)."""
    if isinstance(raw, str):
        return raw
    try:
        hermes = {o.name for o in schema.tables() if hermes_table(o)}
        return zeroed_cells_in(raw, schema, text_proves=hermes, destroyed=destroyed)
    except (OSError, ValueError) as exc:  # a PageFormatError is a ValueError
        return str(exc)


def _add_zeroed_cells(
    result: Diagnosis, found: dict[str, ZeroedCells] | str, schema: Schema
) -> None:
    """Rows that run into zeroed sectors: in a base table they are base damage (the
    row SQLite reads is not the row that was written); in an FTS shadow table the FTS
    table is rebuilt from its base table (derived damage)."""
    if isinstance(found, str):
        result.notes.append(f"the search for zeroed sectors failed: {found}")
        return
    for name, cells in found.items():
        verdict = f"{len(cells)} rows of {name} run into zeroed bytes"
        if _table_damaged(result, schema, name, verdict):
            result.zeroed_cells[name] = cells


def _table_damaged(result: Diagnosis, schema: Schema, name: str, fts_verdict: str) -> bool:
    """Damage found in table ``name``: base damage in a base table; in an FTS shadow
    table its FTS table is rebuilt from its base table (derived damage, ``fts_verdict``
    its verdict unless it has one). False: no such table."""
    obj = schema.by_name(name)
    if obj is None:
        return False
    if obj.shadow_of is not None:
        if result.fts.get(obj.shadow_of, "ok") == "ok":
            result.fts[obj.shadow_of] = fts_verdict
        result.damage = worst(result.damage, "derived")
    else:
        result.damage = worst(result.damage, "base")
    return True


_PAGE_RE = re.compile(r"\bof page (\d+)\b|\bon page (\d+)\b|^Page (\d+)\b")


def _attribute_by_page(conn: apsw.Connection, schema: Schema, groups: list[ErrorGroup]) -> None:
    """Lines the check printed with no b-tree named ("Multiple uses for byte 3508 of
    page 273"): when every page they name belongs to an index or an FTS shadow table
    (SQLite's ``dbstat`` says whose, ``_page_owners``), the group is derived damage,
    named after it. A page no b-tree that can be walked reaches keeps its line
    unattributed: the verdict stays the careful one."""
    named: dict[int, set[int]] = {}  # group index -> the pages its lines name
    for i, g in enumerate(groups):
        if g.kind != "unknown" or g.derived or g.errors != len(g.sample):
            continue
        pages: set[int] = set()
        for ln in g.sample:
            m = _PAGE_RE.search(ln)
            if m is None:
                if ln.strip() == CHECK_CUT_SHORT:
                    continue
                pages = set()
                break
            pages.add(int(next(x for x in m.groups() if x)))
        if pages:
            named[i] = pages
    if not named:
        return
    owners = _page_owners(conn, schema, set().union(*named.values()))
    for i, pages in named.items():
        if not pages <= owners.keys():
            continue
        names = set().union(*(owners[p] for p in pages))
        objs = [schema.by_name(o) for o in names]
        if all(o is not None and (o.type == "index" or o.shadow_of is not None) for o in objs):
            groups[i].derived = True
            groups[i].object = ", ".join(sorted(names))


def _page_owners(conn: apsw.Connection, schema: Schema, pages: set[int]) -> dict[int, set[str]]:
    """The b-trees that reach each of ``pages``, by SQLite's ``dbstat``. Its walk of the
    whole file ends at the first page of any b-tree it cannot read (on a damaged file,
    often one the lines do not name), so then each b-tree is walked on its own: one
    whose walk fails is left out, and a page only it reaches has no owner here."""
    whole = _walked(conn, pages, "SELECT name, pageno FROM dbstat")
    if whole is not None:
        return whole
    owners: dict[int, set[str]] = {}
    for obj in schema.objects:
        if obj.rootpage:
            sql = "SELECT name, pageno FROM dbstat WHERE name = ?"
            for page, names in (_walked(conn, pages, sql, obj.name) or {}).items():
                owners.setdefault(page, set()).update(names)
    return owners


def _walked(
    conn: apsw.Connection, pages: set[int], sql: str, *args: str
) -> dict[int, set[str]] | None:
    """Page -> the b-trees ``dbstat`` (queried by ``sql``) finds reaching it, of
    ``pages``; None when the walk fails (a page it cannot read)."""
    found: dict[int, set[str]] = {}
    try:
        for name, pageno in conn.execute(sql, args):
            if pageno in pages:
                found.setdefault(int(pageno), set()).add(str(name))
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_interrupted(exc)
        return None
    return found


def _unread_held_nothing(
    conn: apsw.Connection, schema: Schema, tables: list[TableFacts], groups: list[ErrorGroup]
) -> None:
    """Tables whose full scan could not read stretches of rowids (a page of the table
    that cannot be read), where every index of the whole table that the integrity check
    walked and found nothing in lists exactly the rowids the scan read, and at least one
    does: those stretches held no row (nothing is lost; the table's b-tree is rebuilt
    from the rows), as recover's accounting says of the same file. Their facts say so
    (``TableFacts.unread_held_nothing``, which names it). Only when the check walked
    every b-tree (its page accounting done): an index it did not walk is no witness."""
    flagged = {g.object for g in groups}
    for t in tables:
        obj = schema.by_name(t.name)
        if not t.unreadable_ranges or obj is None or obj.without_rowid:
            continue
        listed = _intact_index_rowids(conn, schema, obj, flagged)
        if listed is None:
            continue
        read = _rowids_read(conn, t.name)
        t.unread_held_nothing = all(rowids == read for rowids in listed)


def _rowids_read(conn: apsw.Connection, table: str) -> KeySet:
    """The rowids a full scan of ``table`` reads, past damaged stretches (``scan.py``)."""
    read = KeySet()
    scan_table(conn, table, [], lambda row: read.add(int(row[0])))
    return read


def _intact_index_rowids(
    conn: apsw.Connection, schema: Schema, obj: SchemaObject, flagged: set[str]
) -> list[KeySet] | None:
    """The rowids each index of the whole of ``obj`` lists, of those the integrity check
    found nothing in (not ``flagged``), each read whole; None when there is no such
    index, or one of them cannot be read whole."""
    out = []
    t = quote_ident(obj.name)
    for idx in schema.full_indexes(obj.name):
        if idx.name in flagged:
            continue
        try:
            sql = f"SELECT rowid FROM {t} INDEXED BY {quote_ident(idx.name)}"
            out.append(KeySet(r[0] for r in conn.execute(sql)))
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_interrupted(exc)
            return None
    return out or None


def _add_cross_links(result: Diagnosis, db: Path, schema: Schema) -> None:
    """Overflow pages two chains reach (the integrity check saw a page referenced
    twice): the rows that read another row's bytes are base damage."""
    try:
        found, pages = cross_linked_cells(db, schema)
    except (OSError, ValueError) as exc:  # a PageFormatError is a ValueError
        result.notes.append(f"the search for cross-linked overflow chains failed: {exc}")
        return
    result.cross_linked_pages = sorted(pages)
    for name, cells in found.items():
        obj = schema.by_name(name)
        if obj is None:
            continue
        result.cross_linked[name] = cells
        base = obj.shadow_of is None
        result.damage = worst(result.damage, "base" if base else "derived")


@dataclass
class _Facts:
    """What the scans found, apart from the integrity check's lines."""

    notes: list[str]
    tables: list[TableFacts]
    orphans: dict[str, int]
    fk_errors: list[str]
    copies: list[CopyCheck]
    counts: list[tuple[int, int, int]]
    zeroed: dict[str, ZeroedCells] | str
    destroyed: dict[str, int]  # cells that begin in zeroed bytes, per table
    # Rowids only an index lists, per table, as the scan found them (before the lost
    # writes take the rowids given out from them).
    index_only: dict[str, list[int]]
    unverifiable: dict[str, str]
    truncated: bool


def _diagnose(
    conn: apsw.Connection,
    db: Path,
    schema: Schema,
    progress: ProgressFn | None,
    truncated: str | None,
    *,
    raw: DatabaseFile | str,
    defer: bool = False,
    early: EarlyChecker | None = None,
) -> tuple[Diagnosis, IntegrityCheck | None]:
    """The diagnosis; with ``defer``, a file whose b-trees, rows and copies show no
    damage is returned at once with FTS verdicts still to come, and the running check
    with it (``FtsPending``); otherwise the check is waited for here."""
    table_names = [o.name for o in schema.tables() if o.rootpage]
    # The FTS tables' own checks run in threads of their own (in a child process with
    # ``defer``), while the tables are scanned, their orphans counted and their FTS copies
    # compared (``IntegrityCheck``). With ``defer`` the b-trees too are checked in a
    # thread meanwhile; without it (``check``, which waits for FTS5's checks, the longest
    # of which is its whole run) first: a fourth thread on two cores would slow that one.
    if progress:
        progress("integrity check", 0, 0)
    check = IntegrityCheck(
        conn, progress, table_names, apart=defer, background=defer, early=early if defer else None
    )
    # ``check`` has checked the b-trees before it returned (unless ``defer``): when they
    # are clean the indexes need not be read for the scans (``table_facts``).
    agree = not defer and check.btree_result() == ([], None)
    scanned = _scan_facts(conn, schema, progress, {}, indexes_agree=agree)
    # Raw reads while the checks run (SQLite releases the GIL): see ``diagnose``.
    destroyed: dict[str, int] = {}
    zeroed = _zeroed_search(raw, schema, destroyed)
    # Cells of another table's leaf a wrong child pointer names are no rows of the
    # table whose b-tree reaches them (``foreign_cells.py``): the scans are made again
    # without them when the b-tree check names such a leaf.
    opened = raw if isinstance(raw, DatabaseFile) else None
    foreign = foreign_by_table(opened, schema, check.btree_result()[0])
    if progress:
        progress("integrity check", 1, 1)
    if foreign:
        scanned = _scan_facts(conn, schema, progress, foreign)
    tables, orphans, fk_errors, copies = scanned
    counts = counts_disagree(conn)
    facts = _Facts(
        notes=[truncated] if truncated else [],
        tables=tables,
        orphans=orphans,
        fk_errors=fk_errors,
        copies=copies,
        counts=counts,
        zeroed=zeroed,
        destroyed=destroyed,
        index_only={t.name: t.stale_index_entries for t in tables},
        unverifiable=unloadable(conn, schema),
        truncated=truncated is not None,
    )
    if defer:
        # Every FTS verdict "ok" for now, the b-trees' lines alone: the diagnosis is
        # handed back before the FTS checks end (``FtsPending.join`` gives the verdicts).
        btree_lines, btree_abort = check.btree_result()
        ahead = {o.name: "ok" for o in schema.tables() if o.module == "fts5"}
        checked = (btree_lines, btree_abort is None, btree_abort)
        result = _verdict(conn, schema, facts, checked, check, fts=ahead, raw=opened)
        result.path = str(db)
        result.foreign_cells = foreign
        return result, check
    result = _verdict(conn, schema, facts, check.result(), check, progress=progress, raw=opened)
    result.path = str(db)
    result.foreign_cells = foreign
    return result, None


def _verdict(
    conn: apsw.Connection,
    schema: Schema,
    facts: _Facts,
    checked: tuple[list[str], bool, str | None],
    check: IntegrityCheck,
    *,
    fts: dict[str, str] | None = None,
    progress: ProgressFn | None = None,
    raw: DatabaseFile | None = None,
) -> Diagnosis:
    """The diagnosis from the scans' facts and the integrity check's (lines, finished,
    abort note); ``fts``: the FTS verdicts when they are given, not read from it;
    ``raw``: the file open for plain reads (``find_lost_writes``)."""
    lines, complete, abort = checked
    notes = list(facts.notes)
    tables = facts.tables
    if abort:
        notes.append(f"the integrity check stopped early: {abort}")
    lost = find_lost_writes(conn, schema, lines, facts.index_only, facts.orphans, raw=raw)
    for g in lost.given_out:  # named there as rowids that may be lost, not as left behind
        t = next(t for t in tables if t.name == g.table)
        t.stale_index_entries = [r for r in facts.index_only[t.name] if r not in g.rowids]
    groups = group_errors(lines, schema)
    _attribute_by_page(conn, schema, groups)
    if check.pages_accounted():
        _unread_held_nothing(conn, schema, tables, groups)
    roots = schema.by_root()
    twice = {
        roots[int(m.group(1))].name
        for ln in lines
        if (m := _TWICE_RE.match(ln)) and int(m.group(1)) in roots
    }
    for t in tables:
        t.page_referenced_twice = t.name in twice
    unverifiable = facts.unverifiable
    if fts is None:
        fts = _fts_verdicts(
            conn,
            schema,
            checked=(lines, complete),
            groups=groups,
            check=check,
            progress=progress,
            unverifiable=unverifiable,
        )
    fts = {name: res for name, res in fts.items() if name not in unverifiable}
    notes.extend(f"foreign_key_check failed on {e}" for e in facts.fk_errors)
    damage = classify(groups, tables, fts, complete=complete, truncated=facts.truncated)
    if facts.counts:
        damage = worst(damage, "base")
    damage = worst(damage, lost.damage)
    for c in facts.copies:
        if c.rows_rotted or c.rows_bad_text or c.rows_unreadable:
            damage = worst(damage, "base")
        if c.copies_rotted:
            damage = worst(damage, "derived")
    result = Diagnosis(
        path="",
        damage=damage,
        integrity_ok=not lines and complete,
        integrity_complete=complete,
        integrity_errors=len(lines),
        groups=groups,
        tables=tables,
        fts=fts,
        orphans=facts.orphans,
        notes=notes,
        error_lines=lines,
        foreign_key_check_complete=not facts.fk_errors,
        copies=facts.copies,
        unverifiable=unverifiable,
        helper_cpu_s=check.helper_cpu_s,
        pages_accounted=check.pages_accounted(),
        counts_disagree=facts.counts,
        lost_writes=lost,
        misfits=find_misfits(conn, schema),
    )
    result.damage = worst(result.damage, "base" if result.misfits else "none")
    _add_zeroed_cells(result, own_zeros_left_out(conn, schema, facts.zeroed), schema)
    _add_destroyed_cells(result, facts.destroyed, schema)
    return result


def _add_destroyed_cells(result: Diagnosis, found: dict[str, int], schema: Schema) -> None:
    """Cells that begin in zeroed bytes, which SQLite reads as rows of rowid 0 with
    nothing stored: each was a row, lost. Base damage in a base table; in an FTS shadow
    table the FTS table is rebuilt (derived)."""
    for name, n in found.items():
        if _table_damaged(result, schema, name, f"{n} cells of {name} destroyed by zeroed bytes"):
            result.destroyed_cells[name] = n


def exit_code_for(damage: str) -> int:
    """0 healthy, 1 derived damage only, 3 base damage, 4 unreadable."""
    return {
        "none": EXIT_OK,
        "derived": EXIT_DERIVED_DAMAGE,
        "base": EXIT_BASE_DAMAGE,
        "unreadable": EXIT_UNREADABLE,
    }[damage]
