"""The recovery report: only what was measured on the source copy and the output file.

Loss is computed from key sets (docs/safety.md rule 7): a key is *known to exist in the
source* when a full scan read its row, its row was decoded from a page or a WAL frame,
or (for a table with FTS copies) the copies hold its rowid, else an index whose own
b-tree is intact lists it; it is *lost* when the output has no row with that key.
``loss_detected`` is true exactly when some known key is lost, some rowid range of the
source could not be read at all (its keys cannot even be listed), a row was kept
with unreadable columns (partial) or contradicting its witnesses (unverified), a
stretch of a table no name reaches by rowid could not be read (``unread_stretch``), or a
session's message_count disagrees with the messages recovered for it (a stale row,
or messages missing), or a lost write left rows older than their index entries or
rowids given out that only an index lists (``lost_writes.py``), or rows of a schema
rebuilt from Hermes' known layout fit two tables alike and were left out
(``rows_left_out``).
"""

from __future__ import annotations

import bisect
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from statewarden.recovery.decoding.scan import MAX_ROWID, MIN_ROWID
from statewarden.recovery.diagnosis import describe_range
from statewarden.recovery.evidence.copy_restore import REBUILT_RULE
from statewarden.recovery.verify import Verification

DEDUPE_RULE = (
    "A row stored twice with the same key and identical content is kept once"
    " (duplicates_dropped). Two different rows claiming the same rowid or primary key:"
    " the first in rowid order is kept, the later one is set aside in this report"
    " (set_aside), never dropped silently. A row that only collides on another UNIQUE"
    " index (for example sessions.title) is kept with the colliding text value renamed"
    " to '<value> (duplicate, rowid N)' (renamed). Orphans (rows whose parent is"
    " missing) are kept and counted (orphans)."
)
PARTIAL_RULE = (
    "A row some of whose columns cannot be read (a broken overflow chain) is kept with"
    " the columns that can be; each unreadable column is NULL, or, where the schema"
    " forbids NULL, its DEFAULT, else 0 (numeric columns) or '' (text). Every such row"
    " is listed in partial_rows with its unreadable columns and the values filled in;"
    " it counts as partial, not lost, and makes loss_detected true."
)
SAMPLE_LOST_KEYS = 100


@dataclass
class TableReport:
    source_rows: int = 0
    source_distinct: int = 0
    recovered: int = 0
    duplicates_dropped: int = 0
    unreadable_rows: int = 0
    unreadable_ranges: list[list[int]] = field(default_factory=list)
    status: str = "complete"
    recovered_from_pages: int = 0
    recovered_from_wal: int = 0  # rows of committed transactions SQLite did not replay
    updated_from_wal: int = 0  # rows replaced by their newer version from those
    unvouched_skipped: int = 0  # unreached rows not taken: nothing vouches they are live
    partial: int = 0  # rows kept with some columns unreadable (listed in partial_rows)
    rebuilt_from_copies: int = 0  # lost rows rebuilt from FTS/index copies (side table)
    recovered_from_other_copies: int = 0  # from a snapshot, WAL capture or backup
    deleted_since_copy: int = 0  # rows of those copies the evidence says were deleted
    # Rows still on the file's pages that committed -wal transactions SQLite does not
    # replay deleted: left out of the output (rowids).
    deleted_by_wal: list[int] = field(default_factory=list)
    # Rows kept as stored that differ from two search-index copies agreeing with each
    # other, where no single changed column explains it: not proven good (a loss).
    unverified: int = 0
    # Rows kept older than their index entries (``stale_rows``) or their messages (a
    # stale message_count, ``count_mismatches``): a lost write.
    stale: int = 0
    set_aside: int = 0
    renamed: int = 0
    lost_keys: list[Any] = field(default_factory=list)
    lost: int = 0
    # Rows the b-tree reached whose key was read from damaged bytes (a zeroed cell reads
    # as rowid 0): lost, but no key names them (not in ``lost``; in ``lost_at_most``).
    unnamed_lost: int = 0
    # A table no name reaches by rowid (``scan.keyed_scan``): the keys of the rows
    # around a stretch that could not be read (None: the table's start or end, or
    # rows nothing names), whose rows cannot be counted; None: no such stretch.
    unread_stretch: list[Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "source_rows": self.source_rows,
            "source_distinct": self.source_distinct,
            "recovered": self.recovered,
            "duplicates_dropped": self.duplicates_dropped,
            "unreadable_rows": self.unreadable_rows,
            "unreadable_ranges": self.unreadable_ranges,
            "status": self.status,
            "recovered_from_pages": self.recovered_from_pages,
            "recovered_from_wal": self.recovered_from_wal,
            "updated_from_wal": self.updated_from_wal,
            "unvouched_skipped": self.unvouched_skipped,
            "partial": self.partial,
            "rebuilt_from_copies": self.rebuilt_from_copies,
            "recovered_from_other_copies": self.recovered_from_other_copies,
            "deleted_since_copy": self.deleted_since_copy,
            "deleted_by_wal": list(self.deleted_by_wal),
            "unverified": self.unverified,
            "stale": self.stale,
            "set_aside": self.set_aside,
            "renamed": self.renamed,
            "lost_keys_sample": [
                list(k) if isinstance(k, tuple) else k for k in self.lost_keys[:SAMPLE_LOST_KEYS]
            ],
            "lost_keys": [list(k) if isinstance(k, tuple) else k for k in self.lost_keys],
            "lost": self.lost,
            "unnamed_lost": self.unnamed_lost,
            "unread_stretch": self.unread_stretch,
            "lost_at_most": self.lost_at_most(),
        }

    def lost_at_most(self) -> int | None:
        """The rows lost known (``lost``), those lost unnamed (``unnamed_lost``) and
        those the unreadable ranges could have held (one per rowid, none of them
        deleted); None when a range is open-ended (no ``sqlite_sequence`` bounds it)."""
        if self.unread_stretch is not None:
            return None
        if any(lo == MIN_ROWID or hi == MAX_ROWID for lo, hi in self.unreadable_ranges):
            return None
        ranges = sorted(self.unreadable_ranges)
        starts = [lo for lo, _hi in ranges]

        def in_a_range(k: int) -> bool:
            i = bisect.bisect_right(starts, k) - 1
            return i >= 0 and k <= ranges[i][1]

        inside = sum(1 for k in self.lost_keys if isinstance(k, int) and in_a_range(k))
        widths = sum(hi - lo + 1 for lo, hi in self.unreadable_ranges)
        return self.lost - inside + self.unnamed_lost + widths


@dataclass
class Report:
    source: str
    output: str
    damage: str
    strategy: str = "none"
    verified: bool = False
    tables: dict[str, TableReport] = field(default_factory=dict)
    verification: Verification | None = None
    set_aside: list[dict[str, Any]] = field(default_factory=list)
    renamed: list[dict[str, Any]] = field(default_factory=list)
    partial_rows: list[dict[str, Any]] = field(default_factory=list)
    # Partial rows made whole from the file's pages (not in the JSON: working state).
    partial_rows_completed: list[dict[str, Any]] = field(default_factory=list)
    rebuilt: dict[str, str] = field(default_factory=dict)  # table -> its side table
    # Rows taken from another copy: table, rowid, from (its label), copy_taken_at.
    from_other_copies: list[dict[str, Any]] = field(default_factory=list)
    # Columns changed on disk, put back from the search-index copies: table, rowid,
    # column, stored (what the file held), from (the copies).
    restored_from_copies: list[dict[str, Any]] = field(default_factory=list)
    # Sessions whose message_count disagrees with the messages recovered for them:
    # table, rowid, message_count, messages, and what it means: "stale" (the row is
    # older than its messages: a lost write) or "messages missing".
    count_mismatches: list[dict[str, Any]] = field(default_factory=list)
    # Lost writes the source shows (``lost_writes.py``): rows older than their index
    # entries, kept as stored (table, rowid, certain, columns) and rowids the sequence
    # gave out that only an index lists (table, sequence, highest_rowid, rowids: maybe
    # lost).
    stale_rows: list[dict[str, Any]] = field(default_factory=list)
    given_out: list[dict[str, Any]] = field(default_factory=list)
    # Rows damaged on disk whose unreadable columns all came back from witnesses, but
    # with columns nothing vouches for: table, rowid, columns, why (counted unverified).
    unverified_rows: list[dict[str, Any]] = field(default_factory=list)
    # sqlite_schema rowid stretches lost with a destroyed page (page 1 rebuilt): the
    # objects there, tables among them, are missing.
    schema_rows_lost: list[list[int]] = field(default_factory=list)
    # leaves of a schema rebuilt from Hermes' known layout whose rows fit two tables
    # alike: not recovered, a loss (``lost_schema.py``)
    rows_left_out: list[dict[str, Any]] = field(default_factory=list)
    # tables of a schema rebuilt from Hermes' known layout no page of which was found,
    # though Hermes wrote rows to them: all their rows are lost (``lost_schema.py``)
    tables_lost: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Seconds per phase: copy, diagnose, salvage, rebuild, fts, verify (as they ran).
    timings: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Add the time spent in the ``with`` block to ``timings[phase]``."""
        start = time.monotonic()
        try:
            yield
        finally:
            spent = time.monotonic() - start
            self.timings[phase] = round(self.timings.get(phase, 0.0) + spent, 3)

    @property
    def lost(self) -> dict[str, int]:
        return {name: t.lost for name, t in self.tables.items() if t.lost}

    @property
    def loss_detected(self) -> bool:
        listed = self.count_mismatches or self.stale_rows or self.given_out
        lost_schema = self.schema_rows_lost or self.rows_left_out or self.tables_lost
        return bool(listed or lost_schema) or any(
            t.lost
            or t.unreadable_ranges
            or t.partial
            or t.unverified
            or t.unnamed_lost
            or t.unread_stretch is not None
            for t in self.tables.values()
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "output": self.output,
            "strategy": self.strategy,
            "verified": self.verified,
            "loss_detected": self.loss_detected,
            "tables": {name: t.to_json() for name, t in self.tables.items()},
            "lost": self.lost,
            "damage": self.damage,
            "orphans": self.verification.orphans if self.verification else {},
            "verification": self.verification.to_json() if self.verification else None,
            "dedupe_rule": DEDUPE_RULE,
            "set_aside": self.set_aside,
            "renamed": self.renamed,
            "partial_rows": self.partial_rows,
            "partial_rule": PARTIAL_RULE,
            "rebuilt": self.rebuilt,
            "rebuilt_rule": REBUILT_RULE,
            "from_other_copies": self.from_other_copies,
            "restored_from_copies": self.restored_from_copies,
            "count_mismatches": self.count_mismatches,
            "stale_rows": self.stale_rows,
            "given_out": self.given_out,
            "unverified_rows": self.unverified_rows,
            "schema_rows_lost": self.schema_rows_lost,
            "rows_left_out": self.rows_left_out,
            "tables_lost": self.tables_lost,
            "notes": self.notes,
            "timings": self.timings,
        }

    def render(self) -> list[str]:
        """The human table: one line per table, then the verdict."""
        head = (
            f"{'table':<28} {'source':>8} {'distinct':>8} {'recovered':>9}"
            f" {'dups':>5} {'lost':>5}  status"
        )
        out = [f"source {self.source}", f"output {self.output}", f"strategy {self.strategy}", head]
        out.extend(self._table_lines())
        out.extend(self._row_lines())
        if self.verification:
            for o, n in self.verification.orphans.items():
                out.append(f"  orphans kept: {o}: {n}")
            out.extend(f"  verification problem: {p}" for p in self.verification.problems)
        out.extend(f"  note: {n}" for n in self.notes)
        verdict = "verified" if self.verified else "NOT verified"
        if self.timings:
            out.append("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.timings.items()))
        out.append(f"result: {verdict}, {self._loss_verdict()}")
        return out

    def _table_lines(self) -> list[str]:
        """One line per table, and what came back or stayed unread in it."""
        out: list[str] = []
        for name, t in self.tables.items():
            out.append(
                f"{name:<28} {t.source_rows:>8} {t.source_distinct:>8} {t.recovered:>9}"
                f" {t.duplicates_dropped:>5} {t.lost:>5}  {t.status}"
            )
            out.extend(
                f"  {name}: {describe_range(lo, hi)} could not be read"
                if (lo, hi) != (MIN_ROWID, MAX_ROWID)
                else f"  {name}: no row could be read by a full scan"
                for lo, hi in t.unreadable_ranges
            )
            if t.recovered_from_pages:
                out.append(
                    f"  {name}: {t.recovered_from_pages} rows recovered from leaf pages"
                    " the b-tree no longer reaches"
                )
            if t.recovered_from_wal or t.updated_from_wal:
                out.append(
                    f"  {name}: {t.recovered_from_wal} rows added and {t.updated_from_wal}"
                    " updated from committed -wal transactions SQLite does not replay"
                )
            if t.rebuilt_from_copies:
                out.append(
                    f"  {name}: {t.rebuilt_from_copies} lost rows rebuilt from their FTS and"
                    f" index copies into {self.rebuilt.get(name)} (see rebuilt_rule)"
                )
            if t.recovered_from_other_copies or t.deleted_since_copy:
                froms = sorted({e["from"] for e in self.from_other_copies if e["table"] == name})
                out.append(
                    f"  {name}: {t.recovered_from_other_copies} lost rows back from"
                    f" {', '.join(froms) or 'other copies'}; {t.deleted_since_copy} rows of"
                    " those copies not taken (deleted since)"
                )
            if t.unvouched_skipped:
                out.append(
                    f"  {name}: {t.unvouched_skipped} rows on unreached pages not taken"
                    " (the freelist is damaged and no index or FTS copy lists them:"
                    " they may be deleted rows)"
                )
        return out

    def _row_lines(self) -> list[str]:
        """A line per row restored, unverified, stale, partial, set aside or renamed."""
        out: list[str] = []
        for r in self.restored_from_copies:
            out.append(
                f"  restored: {r['table']} rowid {r['rowid']}: {r['column']} from"
                f" {', '.join(r['from'])} (changed on disk)"
            )
        for u in self.unverified_rows:
            out.append(
                f"  unverified: {u['table']} rowid {u['rowid']}: {', '.join(u['columns'])}"
                f" read but not vouched for ({u['why']})"
            )
        for m in self.count_mismatches:
            out.append(
                f"  {m['what']}: {m['table']} rowid {m['rowid']}: message_count"
                f" {m['message_count']}, {m['messages']} messages recovered"
                + (
                    f"; {m['written']} written (every message of the session came back;"
                    " its other columns may be as old)"
                    if m.get("proven")
                    else f"; {m['written']} written, the messages recovered (so that the"
                    " output passes check; the count the file held is the one above)"
                )
            )
        for s in self.stale_rows:
            how = "older than" if s["certain"] else "the row or one index entry older:"
            out.append(
                f"  stale: {s['table']} rowid {s['rowid']}: {how} its index entries"
                f" ({', '.join(s['columns'])})"
            )
        for g in self.given_out:
            shown = ", ".join(str(r) for r in g["rowids"][:20])
            out.append(
                f"  maybe lost: {g['table']} rowids {shown}: given out (sqlite_sequence"
                f" {g['sequence']}), listed by its indexes, not in the table or its FTS copies"
            )
        for p in self.partial_rows:
            out.append(
                f"  partial: {p['table']} rowid {p['rowid']}: unreadable " + ", ".join(p["columns"])
            )
        for s in self.set_aside:
            out.append(f"  set aside: {s['table']} rowid {s['rowid']}: {s['reason']}")
        for r in self.renamed:
            out.append(f"  renamed: {r['table']} rowid {r['rowid']}: {r['column']} -> {r['new']!r}")
        return out

    def _loss_verdict(self) -> str:
        """The loss half of the verdict: "no loss", or what was lost."""
        loss = (
            "loss detected: " + ", ".join(f"{k} {v}" for k, v in self.lost.items())
            if self.loss_detected
            else "no loss"
        )
        if self.tables_lost:
            return "loss detected: " + ", ".join(
                [
                    *(f"all rows of {t}" for t in self.tables_lost),
                    *(f"{k} {v}" for k, v in self.lost.items()),
                ]
            )
        if self.loss_detected and not self.lost:
            partial = sum(t.partial for t in self.tables.values())
            unverified = sum(t.unverified for t in self.tables.values())
            counts = len(self.count_mismatches)
            loss = (
                f"loss detected: {partial} partial row{'s' if partial != 1 else ''}"
                if partial
                else f"loss detected: {unverified} row{'s' if unverified != 1 else ''}"
                " contradicting their witnesses"
                if unverified
                else f"loss detected: {len(self.stale_rows)} rows older than their index entries"
                if self.stale_rows
                else f"loss detected: {sum(len(g['rowids']) for g in self.given_out)} rows given"
                " out that only an index lists"
                if self.given_out
                else f"loss detected: {counts} session{'s' if counts != 1 else ''} whose"
                " message_count disagrees with the messages recovered"
                if counts
                else "loss detected: schema rows on a destroyed page (objects missing)"
                if self.schema_rows_lost
                else "loss detected: a stretch of rows no rowid reaches could not be read"
                if any(t.unread_stretch is not None for t in self.tables.values())
                else "loss detected: unreadable rowid ranges"
            )
        return loss
