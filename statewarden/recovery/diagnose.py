"""Diagnosis: the damage in a database, by object and logical table, and its class.

The uncapped integrity check and the attribution of its lines live in
``integrity.py``; here are the facts added to it and the verdict. Counts come
from full scans (``NOT INDEXED``, docs/safety.md rule 7) next to what the planner answers,
because an index may be the broken part (docs/stories.md story 3).

Damage classes, worst last: ``none``; ``derived`` (only indexes and FTS shadow tables,
which can be rebuilt from base tables without loss, or a table's b-tree whose every row
still reads once while its indexes or FTS copies list no other); ``base`` (a table
holding data is damaged: rows are missing or may be, as SQLite reads the file, or
committed WAL transactions are dropped); ``unreadable`` (header, schema or page 1).
``classify`` is the one definition; check and recover both use it.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import apsw

from statewarden.errors import (
    EXIT_BASE_DAMAGE,
    EXIT_DERIVED_DAMAGE,
    EXIT_OK,
    EXIT_UNREADABLE,
    DatabaseUnreadable,
)
from statewarden.progress import ProgressFn
from statewarden.recovery.decoding.damaged_cells import cross_linked_cells, zeroed_cells_in
from statewarden.recovery.decoding.fts_structure import own_zeros_left_out
from statewarden.recovery.decoding.integrity import (
    EarlyChecker,
    ErrorGroup,
    IntegrityCheck,
    fts_from_integrity_lines,
    group_errors,
)
from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.scan import MAX_ROWID, MIN_ROWID, ScanResult, scan_table
from statewarden.recovery.decoding.schema import Schema, SchemaObject, read_schema
from statewarden.recovery.decoding.tokenizers import unloadable
from statewarden.recovery.decoding.wal import WalFacts
from statewarden.recovery.decoding.zeroed_columns import ZeroedCells
from statewarden.recovery.evidence.column_types import Misfits, find_misfits
from statewarden.recovery.evidence.copies import (
    CopyCheck,
    compare,
    fts_rowids,
    rowids_shown,
    sample,
)
from statewarden.recovery.evidence.foreign_cells import OwnRows, Records, foreign_by_table
from statewarden.recovery.evidence.lost_writes import LostWrites, find_lost_writes, sequence_of
from statewarden.sqlite import classify_error, quote_ident

DAMAGE_ORDER = ("none", "derived", "base", "unreadable")
# integrity_check's line when a read error ended it (the virtual tables' checks may
# not have run).
CHECK_CUT_SHORT = "database disk image is malformed"
_TWICE_RE = re.compile(r"^Tree (\d+) .*2nd reference to page")


@dataclass
class TableFacts:
    name: str
    key: list[str]
    planner_rows: int | None
    scan_rows: int
    distinct_keys: int
    duplicate_rowids: dict[int, int]  # rowid -> times stored
    duplicate_keys: int  # distinct keys held by more than one rowid
    unreadable_rows: int
    unreadable_ranges: list[list[int]]
    planner_error: str | None = None
    text_repaired: int = 0  # rows whose key text is not valid UTF-8
    # Rowids the table lacks although its FTS copies hold them: rows missing.
    missing_rows: list[int] = field(default_factory=list)
    # Rowids only an index lists (no FTS copy has them): entries a delete left behind.
    stale_index_entries: list[int] = field(default_factory=list)
    # The integrity check found a page of this table referenced twice: a rowid met twice
    # by the scan was read twice through it, not stored twice.
    page_referenced_twice: bool = False
    # An index of the whole table or an FTS copy cross-checks the full scan's rowids.
    witnessed: bool = False
    # The rowids the table's FTS copies hold (``copies.fts_rowids``), as read for the
    # diagnosis, when ``fts_copies_read``: the rebuild takes them from here rather than
    # read them again (``TableFill.read_fts_rowids``). Not part of the JSON.
    fts_copies: KeySet | None = field(default=None, repr=False, compare=False)
    fts_copies_read: bool = field(default=False, repr=False, compare=False)

    def every_row_accounted_for(self) -> bool:
        """Every row reads, once, and its witnesses (indexes, FTS copies) agree."""
        return (
            self.witnessed
            and self.scan_rows == self.distinct_keys
            and not self.unreadable_ranges
            and not self.unreadable_rows
            and not self.duplicate_keys
            and not self.duplicate_rowids
            and not self.text_repaired
            and not self.missing_rows
            and self.planner_error is None
            and self.planner_rows == self.scan_rows
        )

    def findings(self) -> list[str]:
        out = []
        key = "ids" if self.key == ["id"] else ("rowids" if self.key == ["rowid"] else "keys")
        extra = self.scan_rows - self.distinct_keys
        if extra > 0:
            phantoms = sum(n - 1 for n in self.duplicate_rowids.values())
            parts = []
            if phantoms:
                rowids = sample(sorted(self.duplicate_rowids))
                s = "s" if phantoms != 1 else ""
                rs = "s" if len(self.duplicate_rowids) != 1 else ""
                if self.page_referenced_twice:
                    parts.append(
                        f"{phantoms} row{s} read twice through a page the b-tree references"
                        f" twice (stored once), rowid{rs} {rowids}"
                    )
                else:
                    parts.append(f"{phantoms} phantom duplicate{s}, rowid{rs} {rowids}")
            if extra - phantoms > 0:
                n = extra - phantoms
                parts.append(
                    f"{n} row{'s' if n != 1 else ''} under another rowid claiming"
                    f" {'an id' if key == 'ids' else 'a key'} held by another row"
                )
            out.append(
                f"{self.name}: {self.scan_rows} stored rows, {self.distinct_keys}"
                f" distinct {key}: {'; '.join(parts)}"
            )
        if self.planner_rows is not None and self.planner_rows != self.scan_rows:
            out.append(
                f"{self.name}: the query planner counts {self.planner_rows} rows,"
                f" a full scan {self.scan_rows}"
            )
        if self.text_repaired:
            out.append(f"{self.name}: {self.text_repaired} keys are text that is not valid UTF-8")
        if self.missing_rows:
            n = len(self.missing_rows)
            out.append(
                f"{self.name}: {n} row{'s are' if n != 1 else ' is'} missing from the table"
                f" but {'their' if n != 1 else 'its'} text is still in its FTS copies"
                f" ({rowids_shown(self.missing_rows)})"
            )
        if self.stale_index_entries:
            n = len(self.stale_index_entries)
            out.append(
                f"{self.name}: {n} index entr{'ies' if n != 1 else 'y'} name rowids the table"
                " lacks and no FTS copy holds: left behind by deletes, not lost rows"
                f" ({rowids_shown(self.stale_index_entries)})"
            )
        if self.planner_error:
            out.append(f"{self.name}: the planner's count failed: {self.planner_error}")
        for lo, hi in self.unreadable_ranges:
            if (lo, hi) == (MIN_ROWID, MAX_ROWID):
                out.append(f"{self.name}: no row can be read by a full scan")
            else:
                out.append(f"{self.name}: {describe_range(lo, hi)} cannot be read")
        return out


def describe_range(lo: int, hi: int) -> str:
    if lo == MIN_ROWID and hi == MAX_ROWID:
        return "every rowid"
    if hi == MAX_ROWID:
        return f"rowids from {lo} on"
    if lo == MIN_ROWID:
        return f"rowids up to {hi}"
    return f"rowid {lo}" if lo == hi else f"rowids {lo}..{hi}"


@dataclass
class Diagnosis:
    path: str
    damage: str
    integrity_ok: bool
    integrity_complete: bool
    integrity_errors: int
    groups: list[ErrorGroup]
    tables: list[TableFacts]
    fts: dict[str, str]  # FTS table -> "ok" or the error
    orphans: dict[str, int]  # rows with a missing parent, per table (orphan_rows)
    notes: list[str]
    error_lines: list[str] = field(default_factory=list)
    foreign_key_check_complete: bool = True
    wal_dropped_commits: int = 0  # committed transactions SQLite does not replay
    copies: list[CopyCheck] = field(default_factory=list)  # rows vs their FTS copies
    # FTS tables whose tokenizer cannot be loaded here (tokenizers.py) -> why: their
    # index cannot be verified; that is not damage.
    unverifiable: dict[str, str] = field(default_factory=dict)
    # CPU seconds of the threads that ran the FTS tables' own checks (not in the calling
    # thread's CPU time); not part of the JSON.
    helper_cpu_s: float = 0.0
    # The integrity check got through SQLite's page accounting, whole, even if it
    # stopped early afterwards (``integrity._check``); not part of the JSON.
    pages_accounted: bool = False
    # Rows whose record runs into zeroed sectors, per table: rowid -> the positions of
    # the columns hit (None: its header was hit). SQLite reads them with the zeros as
    # their values, and no integrity check sees it (damaged_cells.zeroed_cells).
    zeroed_cells: dict[str, ZeroedCells] = field(default_factory=dict)
    # Rows whose overflow chain leads into pages another row's chain owns, per table
    # (rowid -> positions of the columns past the cell), and the pages claimed twice
    # and their owners' (damaged_cells.cross_linked_cells).
    cross_linked: dict[str, ZeroedCells] = field(default_factory=dict)
    cross_linked_pages: list[int] = field(default_factory=list)
    # Hermes' sessions whose message_count disagrees with the messages the file holds
    # for them: (rowid, message_count, messages counted) (``counts_disagree``).
    counts_disagree: list[tuple[int, int, int]] = field(default_factory=list)
    # Rows older than their index entries, rowids given out but gone (``lost_writes.py``).
    lost_writes: LostWrites = field(default_factory=LostWrites)
    # Per table, other tables' cells its b-tree reaches: no rows of it (``foreign_cells``).
    foreign_cells: dict[str, Records] = field(default_factory=dict)
    # Rows holding a value Hermes never writes in its column (``column_types.py``).
    misfits: list[Misfits] = field(default_factory=list)

    def findings(self) -> list[str]:
        out = [f"{g.label()}: {g.errors} error{'s' if g.errors != 1 else ''}" for g in self.groups]
        for t in self.tables:
            out.extend(t.findings())
        out.extend(
            f"{name}: FTS integrity-check: {res}" for name, res in self.fts.items() if res != "ok"
        )
        for c in self.copies:
            out.extend(c.findings())
        out.extend(f for m in self.misfits for f in m.findings())
        if self.counts_disagree:
            n = len(self.counts_disagree)
            shown = sample(sorted(r for r, _, _ in self.counts_disagree))
            out.append(
                f"sessions: {n} row{'s' if n != 1 else ''} whose message_count disagrees with"
                f" the messages stored for {'them' if n != 1 else 'it'} (rowids {shown}):"
                " a write lost (a page back to an older image) or messages lost"
            )
        out.extend(self.lost_writes.findings())
        for name, cells in self.cross_linked.items():
            n = len(cells)
            out.append(
                f"{name}: {n} row{'s' if n != 1 else ''} whose overflow chain leads into"
                f" another row's pages ({rowids_shown(sorted(cells))})"
            )
        for name, cells in self.zeroed_cells.items():
            n = len(cells)
            out.append(
                f"{name}: {n} row{'s' if n != 1 else ''} run into zeroed bytes, read as"
                f" values by SQLite ({rowids_shown(sorted(cells))})"
            )
        out.extend(
            f"{t}: {n} orphan row{'s' if n != 1 else ''} (foreign_key_check)"
            for t, n in self.orphans.items()
        )
        return out + self.notes

    def to_json(self) -> dict[str, Any]:
        # Without the FTS copies' rowids, which asdict would copy whole.
        data = asdict(replace(self, tables=[replace(t, fts_copies=None) for t in self.tables]))
        del data["helper_cpu_s"], data["pages_accounted"]
        for t in data["tables"]:
            del t["fts_copies"], t["fts_copies_read"]
            t["duplicate_rowids"] = {str(k): v for k, v in t["duplicate_rowids"].items()}
        data["zeroed_cells"] = {t: sorted(c) for t, c in self.zeroed_cells.items()}
        data["cross_linked"] = {t: sorted(c) for t, c in self.cross_linked.items()}
        data["lost_writes"] = self.lost_writes.to_json()
        data["findings"] = self.findings()
        return data


def exit_code_for(damage: str) -> int:
    """0 healthy, 1 derived damage only, 3 base damage, 4 unreadable."""
    return {
        "none": EXIT_OK,
        "derived": EXIT_DERIVED_DAMAGE,
        "base": EXIT_BASE_DAMAGE,
        "unreadable": EXIT_UNREADABLE,
    }[damage]


def worst(*classes: str) -> str:
    return max(classes, key=DAMAGE_ORDER.index)


def diagnose(
    db: Path,
    *,
    progress: ProgressFn | None = None,
    truncated: str | None = None,
    wal: WalFacts | None = None,
    wal_name: str = "the WAL",
    schema_rebuilt: str | None = None,
) -> Diagnosis:
    """Diagnose ``db``, which must be a private copy (see ``bundle.make_work_copy``).

    The copy is opened read-write only so that FTS5's ``integrity-check`` command (an
    INSERT that changes nothing) can run. ``wal`` is what the source's ``-wal`` held
    (``wal.py``): committed transactions SQLite does not replay are base damage (their
    rows are not in the database as SQLite reads it). ``schema_rebuilt`` says that the
    copy's page 1 was rebuilt (``bundle.py``): the source itself is unreadable.
    """
    result, pending = diagnose_ahead_of_fts(
        db,
        progress=progress,
        truncated=truncated,
        wal=wal,
        wal_name=wal_name,
        schema_rebuilt=schema_rebuilt,
        ahead=False,
    )
    assert pending is None
    return result


def diagnose_ahead_of_fts(
    db: Path,
    *,
    progress: ProgressFn | None = None,
    truncated: str | None = None,
    wal: WalFacts | None = None,
    wal_name: str = "the WAL",
    schema_rebuilt: str | None = None,
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
        try:
            conn = apsw.Connection(str(db))
        except apsw.Error as exc:
            raise classify_error(db, exc) from None
        try:
            try:
                schema = read_schema(conn)
            except (apsw.Error, UnicodeDecodeError) as exc:
                raise DatabaseUnreadable(
                    f"{db}: the schema (sqlite_schema) cannot be read: {exc}"
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
        result.notes.extend(wal.notes(wal_name))
        result.wal_dropped_commits = wal.dropped_commits
        if wal.dropped_commits or wal.foreign:
            # A foreign WAL: SQLite, and so Hermes, would read the file scrambled by it.
            result.damage = worst(result.damage, "base")
    if schema_rebuilt:
        result.notes.insert(0, schema_rebuilt)
        result.damage = "unreadable"
    return result, pending


class FtsPending:
    """FTS5's own checks of a diagnosed file, still running in a child process on
    connections of its own (``diagnose_ahead_of_fts``)."""

    def __init__(self, check: IntegrityCheck, schema: Schema) -> None:
        self._check = check
        self._schema = schema
        self._apart: bool | None = None
        self._joined: bool | None = None
        # Seconds ``join`` waited for the checks (a stage of the diagnosis).
        self.waited_s = 0.0

    def close(self) -> None:
        """Wait for the checks (their verdicts kept for ``join``)."""
        if self._apart is None:
            self._apart = self._check.wait()

    def stop(self) -> None:
        """End the checks whose verdicts are not wanted any more (an error path)."""
        if self._apart is None:
            self._check.stop()
            self._apart = False

    def join(self, diag: Diagnosis) -> bool:
        """Complete ``diag`` with the FTS checks' verdicts, its class with them: the
        diagnosis that waited for them (``diagnose``). False when their outcome is not
        one this can add alone (a check that did not run in the child or stopped, or a
        line that names something other than an FTS table): ``diag`` is then unchanged
        and the file must be diagnosed again (``diagnose``). Called again, it answers
        as the first time."""
        if self._joined is None:
            started = time.monotonic()
            self.close()
            self.waited_s = time.monotonic() - started
            self._joined = bool(self._apart) and _join_verdicts(diag, self._check, self._schema)
        return self._joined


def _join_verdicts(diag: Diagnosis, check: IntegrityCheck, schema: Schema) -> bool:
    """``diag``, made with the b-trees' lines alone and FTS verdicts "ok" for now,
    completed as ``_verdict`` would have made it with the whole check (see
    ``FtsPending.join``)."""
    lines, complete, _ = check.result()
    if complete != diag.integrity_complete:
        return False  # an FTS check stopped: its note and class are the diagnosis's
    before = group_errors(diag.error_lines, schema)
    # ``_attribute_by_page`` renamed some groups in place, in the same order.
    attributed = {g.object: a for g, a in zip(before, diag.groups, strict=True)}
    groups = []
    for g in group_errors(lines, schema):
        old = next((b for b in before if b.object == g.object), None)
        if old is None and g.kind == "fts":
            groups.append(g)
        elif old is not None and (old.kind, old.errors, old.sample) == (g.kind, g.errors, g.sample):
            groups.append(attributed.pop(g.object))
        else:
            return False  # the FTS checks' lines named or changed another b-tree
    if attributed:
        return False  # pragma: no cover - the b-trees' lines are part of the whole check's
    unverifiable = diag.unverifiable
    fts5 = [o.name for o in schema.tables() if o.module == "fts5" and o.name not in unverifiable]
    cut_short = any(ln.strip() == CHECK_CUT_SHORT for ln in lines)
    if complete and not cut_short and not any(g.kind == "unknown" for g in groups):
        fts = fts_from_integrity_lines(lines, schema)
    else:
        own = check.own_verdicts() or {}
        if not all(name in own for name in fts5):
            return False  # ``_fts_verdicts`` would check them on its own connection
        fts = {name: own[name] for name in fts5}
    fts = {name: res for name, res in fts.items() if name not in diag.unverifiable}
    # A verdict of FTS5's own comes before a note of zeroed sectors (``_add_zeroed_cells``).
    diag.fts.update({name: res for name, res in fts.items() if res != "ok"})
    diag.error_lines = lines
    diag.integrity_errors = len(lines)
    diag.integrity_ok = not lines and complete
    diag.groups = groups
    diag.helper_cpu_s = check.helper_cpu_s
    diag.damage = worst(diag.damage, classify(groups, diag.tables, fts, complete=complete))
    return True


def _zeroed_search(raw: DatabaseFile | str, schema: Schema) -> dict[str, ZeroedCells] | str:
    """Rows that run into zeroed sectors (``damaged_cells.zeroed_cells_in``), or why the search
    failed (``raw``: the open file, or why it could not be opened)."""
    if isinstance(raw, str):
        return raw
    try:
        return zeroed_cells_in(raw, schema)
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
        obj = schema.by_name(name)
        if obj is None:
            continue
        result.zeroed_cells[name] = cells
        if obj.shadow_of is not None:
            if result.fts.get(obj.shadow_of, "ok") == "ok":
                result.fts[obj.shadow_of] = f"{len(cells)} rows of {name} run into zeroed bytes"
            result.damage = worst(result.damage, "derived")
        else:
            result.damage = worst(result.damage, "base")


_PAGE_RE = re.compile(r"\bof page (\d+)\b|\bon page (\d+)\b|^Page (\d+)\b")


def _attribute_by_page(conn: apsw.Connection, schema: Schema, groups: list[ErrorGroup]) -> None:
    """Lines the check printed with no b-tree named ("Multiple uses for byte 3508 of
    page 273"): when every page they name belongs to an index or an FTS shadow table
    (SQLite's ``dbstat`` says whose), the group is derived damage, named after it."""
    for g in groups:
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
        if not pages:
            continue
        owners: set[str] = set()
        found: set[int] = set()
        try:
            for name, pageno in conn.execute("SELECT name, pageno FROM dbstat"):
                if pageno in pages:
                    owners.add(str(name))
                    found.add(int(pageno))
        except (apsw.Error, UnicodeDecodeError) as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
            continue
        objs = [schema.by_name(o) for o in owners]
        if found == pages and all(
            o is not None and (o.type == "index" or o.shadow_of is not None) for o in objs
        ):
            g.derived = True
            g.object = ", ".join(sorted(owners))


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
    scanned = _scan_facts(conn, schema, progress, {})
    # Raw reads while the checks run (SQLite releases the GIL): see ``diagnose``.
    zeroed = _zeroed_search(raw, schema)
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


def _scan_facts(
    conn: apsw.Connection,
    schema: Schema,
    progress: ProgressFn | None,
    foreign: dict[str, Records],
) -> tuple[list[TableFacts], dict[str, int], list[str], list[CopyCheck]]:
    """The full scans' facts: each base table's (``table_facts``), the orphans per table
    and the tables whose foreign keys could not be checked (``foreign_key_orphans``),
    the FTS copies compared (``compare``); ``foreign``: other tables' cells each
    table's b-tree reaches (``foreign_cells.py``), which are no rows of it."""
    base = schema.base_tables()
    tables = []
    for i, obj in enumerate(base):
        if progress:
            progress("scan tables", i, len(base))
        tables.append(table_facts(conn, obj, schema, foreign=foreign.get(obj.name, {})))
    if progress:
        progress("scan tables", len(base), len(base))
    orphans, fk_errors = foreign_key_orphans(conn, base, foreign)
    if progress:
        progress("compare FTS copies", 0, 1)
    copies = compare(conn, schema, foreign)
    return tables, orphans, fk_errors, copies


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
        if c.rows_rotted or c.rows_bad_text:
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
    return result


def _fts_verdicts(
    conn: apsw.Connection,
    schema: Schema,
    *,
    checked: tuple[list[str], bool],
    groups: list[ErrorGroup],
    check: IntegrityCheck,
    progress: ProgressFn | None,
    unverifiable: dict[str, str],
) -> dict[str, str]:
    """Each FTS table's verdict: from the finished check's lines, else from its own
    check on a connection of its own, else from FTS5's check run here."""
    lines, complete = checked
    fts5 = [o.name for o in schema.tables() if o.module == "fts5" and o.name not in unverifiable]
    own = check.own_verdicts() or {}
    # A line that names no object ("database disk image is malformed") can end the
    # b-tree check; the FTS tables' own checks ran on connections of their own.
    cut_short = any(ln.strip() == CHECK_CUT_SHORT for ln in lines)
    if complete and not cut_short and not any(g.kind == "unknown" for g in groups):
        return fts_from_integrity_lines(lines, schema)
    if all(name in own for name in fts5):
        # Their own checks ran on a connection of their own, whatever stopped the rest.
        return {name: own[name] for name in fts5}
    return fts_integrity(conn, schema, progress, skip=set(unverifiable))


def table_facts(
    conn: apsw.Connection,
    obj: SchemaObject,
    schema: Schema | None = None,
    *,
    foreign: Records | None = None,
) -> TableFacts:
    """Planner count, full-scan count, distinct keys and phantom duplicates of one table;
    with ``schema``, rowids its indexes or FTS copies hold that the table lacks.
    ``foreign``: other tables' cells its b-tree reaches, which are no rows of it."""
    key = obj.key_columns
    key_cols = [c for c in key if c != "rowid"]
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

    hints = _index_rowids(conn, schema, obj) if schema is not None else KeySet()
    own = OwnRows(obj, foreign or {})
    result: ScanResult = scan_table(
        conn, obj.name, own.columns(key_cols), own.keep(key_cols, on_row), hints=hints
    )
    result.rows_read -= len(own.left_out)
    planner: int | None = None
    planner_error = None
    try:
        row = conn.execute(f"SELECT count(*) FROM {quote_ident(obj.name)}").fetchone()
        planner = int(row[0]) if row else None
    except apsw.Error as exc:
        planner_error = str(exc).split("\n", 1)[0]
    missing: list[int] = []
    stale: list[int] = []
    witnessed = False
    copies: KeySet | None = None
    if schema is not None:
        witnessed = any(
            o.type == "index"
            and o.tbl_name == obj.name
            and not (o.sql and re.search(r"\bWHERE\b", o.sql, re.I))
            for o in schema.objects
        )
        if key == ["rowid"]:
            copies = fts_rowids(conn, schema, obj.name)
            missing, stale = _rows_elsewhere(conn, obj, rowids, hints, copies)
    return TableFacts(
        fts_copies=copies,
        fts_copies_read=key == ["rowid"] and schema is not None,
        witnessed=witnessed,
        missing_rows=missing,
        stale_index_entries=stale,
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
    )


def _index_rowids(conn: apsw.Connection, schema: Schema, obj: SchemaObject) -> KeySet:
    """Rowids the table's readable full indexes list: where a damaged scan can resume,
    and what tells a garbled cell (a rowid out of order that no index lists) from a
    row (``scan.py``)."""
    out = KeySet()
    if obj.without_rowid:
        return out
    for idx in schema.objects:
        if idx.type != "index" or idx.tbl_name != obj.name:
            continue
        if idx.sql and re.search(r"\bWHERE\b", idx.sql, re.I):
            continue  # a partial index lists only some rows
        try:
            sql = f"SELECT rowid FROM {quote_ident(obj.name)} INDEXED BY {quote_ident(idx.name)}"
            out.update(r[0] for r in conn.execute(sql))
        except (apsw.Error, UnicodeDecodeError) as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
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


def fts_integrity(
    conn: apsw.Connection,
    schema: Schema,
    progress: ProgressFn | None = None,
    *,
    skip: set[str] | None = None,
) -> dict[str, str]:
    """FTS5's own ``integrity-check`` per FTS table ("ok" or its error); with
    ``rank = 1`` for an external-content table, so that its index is also compared
    with the content it is built from. Tables in ``skip`` (their tokenizer cannot be
    loaded) are not checked."""
    out: dict[str, str] = {}
    fts_tables = [o for o in schema.tables() if o.module == "fts5" and o.name not in (skip or ())]
    for i, obj in enumerate(fts_tables):
        if progress:
            progress("FTS check", i, len(fts_tables))
        q = quote_ident(obj.name)
        rank = ", 1" if obj.fts_content else ""
        try:
            conn.execute(
                f"INSERT INTO {q}({q}{', rank' if rank else ''}) VALUES('integrity-check'{rank})"
            )
            out[obj.name] = "ok"
        except apsw.Error as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
            out[obj.name] = str(exc).split("\n", 1)[0]
    return out


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
        if isinstance(exc, apsw.InterruptError):
            raise
        return []


def orphan_rows(conn: apsw.Connection, table: str, foreign: OwnRows | None = None) -> int:
    """Rows of ``table`` whose parent row is missing, found by full scans of both
    tables that read past damage (``scan.py``). ``foreign_key_check`` looks parents up
    through the parent's index, which on a damaged file still lists parents whose rows
    are gone, and fails outright on an unreadable page. Each row counts once however
    many of its foreign keys fail; check and recover count orphans with this function.
    ``foreign`` leaves out other tables' cells the table's b-tree reaches.
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
        rules.append(([p[1] for p in parts], _key_values(conn, parent, [str(t) for t in to])))
    columns = list(dict.fromkeys(c for cols, _ in rules for c in cols))
    at = {c: i + 1 for i, c in enumerate(columns)}
    orphans = 0

    def on_row(row: tuple[Any, ...]) -> None:
        nonlocal orphans
        for cols, keys in rules:
            values = tuple(row[at[c]] for c in cols)
            if None not in values and values not in keys:
                orphans += 1
                return

    if foreign is None:
        scan_table(conn, table, columns, on_row)
    else:
        scan_table(conn, table, foreign.columns(columns), foreign.keep(columns, on_row))
    return orphans


def _key_values(conn: apsw.Connection, table: str, columns: list[str]) -> set[tuple[Any, ...]]:
    out: set[tuple[Any, ...]] = set()
    if columns == ["rowid"]:
        scan_table(conn, table, [], lambda row: out.add((row[0],)))
    else:
        scan_table(conn, table, columns, lambda row: out.add(tuple(row[1:])))
    return out


def foreign_key_orphans(
    conn: apsw.Connection, tables: list[SchemaObject], foreign: dict[str, Records] | None = None
) -> tuple[dict[str, int], list[str]]:
    """Rows per table whose parent row is missing (``foreign_key_check``), table by table
    so that one unreadable table does not hide the others; ``foreign``: other tables'
    cells each table's b-tree reaches (``foreign_cells.py``), which are no rows of it."""
    counts: dict[str, int] = {}
    errors = []
    for obj in tables:
        found = (foreign or {}).get(obj.name)
        try:
            n = orphan_rows(conn, obj.name, OwnRows(obj, found) if found else None)
        except apsw.Error as exc:
            errors.append(f"{obj.name}: {str(exc).split(chr(10), 1)[0]}")
            continue
        if n:
            counts[obj.name] = n
    return counts, errors


def classify(
    groups: list[ErrorGroup],
    tables: list[TableFacts],
    fts: dict[str, str],
    *,
    complete: bool,
    truncated: bool = False,
) -> str:
    damage = "none"
    by_name = {t.name: t for t in tables}
    for g in groups:
        if g.kind == "schema":
            return "unreadable"
        facts = by_name.get(g.object) if g.kind == "table" else None
        if facts is not None and complete and facts.every_row_accounted_for():
            # The b-tree is damaged but every row reads, once, and the table's indexes
            # or FTS copies list no other: a rebuild loses nothing (leaves swapped, a
            # freelist that also lists a live page).
            damage = worst(damage, "derived")
            continue
        damage = worst(damage, "derived" if g.derived else "base")
    for t in tables:
        if (
            t.scan_rows != t.distinct_keys
            or t.unreadable_ranges
            or t.duplicate_keys
            or t.text_repaired
            or t.missing_rows
        ):
            damage = worst(damage, "base")
        elif t.planner_rows != t.scan_rows:
            damage = worst(damage, "derived")
    if any(res != "ok" for res in fts.values()):
        damage = worst(damage, "derived")
    if truncated:
        damage = worst(damage, "base")
    if not complete and damage == "none":
        damage = "base"  # the check could not finish: never call that healthy
    return damage
