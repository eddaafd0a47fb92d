"""Read every row of a table that can still be read, in rowid order, past damaged stretches.

A full scan (``NOT INDEXED``) walks the table's own b-tree; a damaged page makes SQLite
stop with an error. This reader then finds where reading can resume: a one-row probe
``rowid >= p`` succeeds exactly when the leaf that would hold ``p`` is readable, so an
exponential search followed by bisection narrows the unreadable stretch to the smallest
rowid range bounded by readable leaves. A row whose own content cannot be read (a broken
overflow chain) is read column by column: it is kept with the columns that can be read
and the others named (``on_partial``), or, if none can, skipped and counted alone
(docs/safety.md rule 8). The cell a stream stopped at is found by walking the same
stretch for rowids only (no record is decoded); a cell whose rowid is out of order
(not above the row before it and below every cell after it that reads: garbled) never
moves the position: the stream starts over from where it was and steps over that cell,
so the rows after it are still read; another cell that reads as the same rowid is
read by its place. A table no name reaches by rowid is read by ``keyed_scan``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw

from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.schema import declares_without_rowid, rowid_name_among
from statewarden.sqlite import quote_ident, raise_if_interrupted

MIN_ROWID = -(2**63)
# After a damaged stretch, rowids are probed one by one this many times before the
# search starts doubling its step.
LINEAR_PROBES = 4096
# How many cells after the one a stream stopped at are read (rowids only) to tell
# whether its rowid sits in order.
LOOK_AHEAD = 16
# At most this many restarts of a scan after damage (each skips a stretch or a row).
MAX_RESUMES = 100_000
# A rowid delivered more often than this is a loop in a damaged tree, not data; but
# not rowid 0, which no row is given (rowids start at 1): a cell reads as rowid 0 when
# the sector holding its start was zeroed, and each such cell is a row of its own.
MAX_COPIES_PER_ROWID = 2
MAX_ROWID = 2**63 - 1

Row = tuple[Any, ...]


@dataclass
class ScanResult:
    rows_read: int = 0
    unreadable_rows: int = 0  # single rows whose content failed (counted alone)
    unreadable_ranges: list[list[int]] = field(default_factory=list)  # [lo, hi] inclusive
    text_repaired: list[int] = field(default_factory=list)  # rowids with non-UTF-8 text
    out_of_order: list[int] = field(default_factory=list)  # garbled cells' rowids, withheld
    # A table no rowid name reaches (``keyed_scan``): a stretch could not be read, and
    # the rows around it: the last read before it and the first after it, read from
    # the other end (None: none).
    stretch_unread: bool = False
    around_stretch: tuple[Row | None, Row | None] = (None, None)
    # ... and the keys of single rows there that do not read (skipped, named).
    unreadable_keys: list[tuple[Any, ...]] = field(default_factory=list)

    def add_range(self, lo: int, hi: int) -> None:
        if self.unreadable_ranges and self.unreadable_ranges[-1][1] + 1 >= lo:
            self.unreadable_ranges[-1][1] = max(self.unreadable_ranges[-1][1], hi)
        else:
            self.unreadable_ranges.append([lo, hi])


def _is_damage(exc: apsw.Error) -> bool:
    return not isinstance(exc, apsw.InterruptError | apsw.BusyError | apsw.LockedError)


def scan_table(
    conn: apsw.Connection,
    table: str,
    columns: Sequence[str],
    on_row: Callable[[Row], None],
    *,
    hints: Sequence[int] | KeySet = (),
    on_partial: Callable[[int, list[str]], None] | None = None,
    on_bad_text: Callable[[int, list[str]], None] | None = None,
) -> ScanResult:
    """Call ``on_row((rowid, *columns))`` for every readable row, in b-tree order.

    Rows stored twice (a duplicated cell pointer) are delivered twice: deciding what
    a duplicate is belongs to the caller. ``hints`` are rowids known to exist (from an
    intact index): where reading can resume is searched among them first. A row only
    some of whose columns can be read (a broken overflow chain) is delivered with
    ``None`` for the others, which are given to ``on_partial(rowid, columns)`` just
    before the row. A row with text that is not
    valid UTF-8 is delivered with U+FFFD for the bad bytes, those columns given to
    ``on_bad_text(rowid, columns)`` just before the row.
    """
    word = rowid_word(conn, table)
    if word is None:
        return keyed_scan(conn, table, columns, on_row)
    scan = _Scan(conn, (table, word), columns, on_row, hints=hints)
    scan.on_partial = on_partial
    scan.on_bad_text = on_bad_text
    return scan.run()


class _Scan:
    """One scan: stream rows; on damage, read the row at the break alone or skip the
    unreadable stretch, and stream on from there."""

    def __init__(
        self,
        conn: apsw.Connection,
        table: tuple[str, str],
        columns: Sequence[str],
        on_row: Callable[[Row], None],
        *,
        hints: Sequence[int] | KeySet,
    ) -> None:
        """``table``: its name, and the name that reads its rowid (``rowid_word``)."""
        self.conn = conn
        self.columns = list(columns)
        self.on_row = on_row
        # A KeySet: a million listed rowids as a sorted list and a set of Python ints
        # cost about 100 MiB.
        self.hint_set = hints if isinstance(hints, KeySet) else KeySet(hints)
        self.t = t = f'"main".{quote_ident(table[0])}'
        self.r = r = table[1]
        cols = "".join(", " + quote_ident(c) for c in columns)
        self.one = f"SELECT {r}{cols} FROM {t} NOT INDEXED WHERE {r} = ?"
        self.probe = f"SELECT {r} FROM {t} NOT INDEXED WHERE {r} >= ? ORDER BY {r} LIMIT 1"
        self.t_cols = cols
        self.result = ScanResult()
        self.last: int | None = None  # the rowid of the last row delivered, in b-tree order
        self.start: int | None = None  # where streaming resumes; None: from the beginning
        self.seen = KeySet()  # rowids delivered
        self.seen_again: dict[int, int] = {}  # rowid -> times delivered, when more than once
        self.earlier = KeySet()  # rowids delivered by an earlier stream
        self.alone: set[int] = set()  # cells read on their own: a stream steps over them
        # rowid -> the rows read on their own with it: another cell of the same rowid
        # that reads whole, and is none of them, is another row (``_other_cell``).
        self.read_alone: dict[int, list[Row]] = {}
        self.same_cell: set[tuple[int | None, int]] = set()  # (start, place): the one read
        self.tried: set[int] = set()  # listed rowids a scan that looked ended resumed at
        self.returned = 0  # rows the current stream's cursor returned (delivered or not)
        self.on_partial: Callable[[int, list[str]], None] | None = None
        self.on_bad_text: Callable[[int, list[str]], None] | None = None

    def run(self) -> ScanResult:
        result = self.result
        for _ in range(MAX_RESUMES):
            if self._stream():
                if self._resume_at_listed_rowid():
                    continue
                return result
            if self._step_over_failing_cell():
                continue
            lo = MIN_ROWID if self.last is None else self.last + 1
            if lo > MAX_ROWID:
                return result
            status, value = _probe(self.conn, self.probe, lo)
            if status == "end":
                if self._resume_at_listed_rowid():
                    continue
                return result
            if status == "row":
                assert value is not None
                # The leaf is readable but this row may not be: read it alone (unless
                # a stream already delivered it).
                if value not in self.earlier:
                    self.alone.add(value)
                    self._read_alone(value)
                    self.earlier.add(value)
                self.last = value
                if value == MAX_ROWID:
                    return result
                self.start = value + 1
                continue
            resume_at = _next_readable(self.conn, self.probe, lo, self.hint_set)
            if resume_at is None:
                result.add_range(lo, MAX_ROWID)
                return result
            result.add_range(lo, resume_at - 1)
            self.last = resume_at - 1
            self.start = resume_at
        # A b-tree scribbled into cycles can keep a scan going for ever.
        lo = MIN_ROWID if self.last is None else self.last + 1
        result.add_range(min(lo, MAX_ROWID), MAX_ROWID)
        return result

    def _resume_at_listed_rowid(self) -> bool:
        """The table looked ended: but a garbled cell can end a stream, or send a seek
        past rows (its rowid may even be one that exists), on a leaf whose pointers
        still read. If a readable index lists a rowid no stream delivered, outside the
        stretches found unreadable, that reads on its own, the scan resumes there. True
        when it resumes."""
        for h in (self.hint_set - self.seen).ints():  # bitmap by bitmap, not rowid by rowid
            if h in self.alone or h in self.tried:
                continue
            if any(lo <= h <= hi for lo, hi in self.result.unreadable_ranges):
                continue
            self.tried.add(h)
            try:
                found = self.conn.execute(
                    f"SELECT {self.r} FROM {self.t} NOT INDEXED WHERE {self.r} = ?", (h,)
                ).fetchone()
            except apsw.Error as exc:
                if not _is_damage(exc):
                    raise
                continue
            if found is None:
                continue
            self.last = h - 1
            self.start = h
            return True
        return False

    def _select(self, start: int | None, what: str) -> tuple[str, tuple[int, ...]]:
        if start is None:
            return f"SELECT {what} FROM {self.t} NOT INDEXED", ()
        where = f"WHERE {self.r} >= ? ORDER BY {self.r}"
        return f"SELECT {what} FROM {self.t} NOT INDEXED {where}", (start,)

    def _what(self) -> str:
        """The columns of a stream; a cell already read on its own is not decoded
        again (a garbled record would stop the stream at it once more)."""
        if not self.alone:
            return self.r + self.t_cols
        skip = ", ".join(str(r) for r in sorted(self.alone))
        return self.r + "".join(
            f", CASE WHEN {self.r} IN ({skip}) THEN NULL ELSE {quote_ident(c)} END"
            for c in self.columns
        )

    def _stream(self) -> bool:
        """Deliver rows from ``start`` on; True when the table ended, False on damage.

        The position (``last``) is the rowid of the last row delivered, in the order
        the b-tree holds them: a garbled cell read as a large rowid in the middle of a
        leaf must not make the rows after it look "already passed". A row an earlier
        stream delivered is not delivered again; one stored twice in the same stretch
        (a duplicated cell pointer) is.
        """
        result = self.result
        start = self.start
        self.returned = 0
        # Nothing delivered before this stream: what it delivers is then exactly
        # ``seen``, and no row is "already passed" (most scans are one stream).
        first = not self.earlier
        current = None if first else KeySet()
        prev: int | None = None  # rowid of the row before ``pending`` (or of it)
        pending: Row | None = None  # held back until the row after it is seen
        before_pending: int | None = None
        places: list[tuple[int, int]] = []  # (rowid, place) of cells of rowids read alone

        add_new, on_row = self.seen.add_new, self.on_row

        def deliver(row: Row) -> None:
            rowid = int(row[0])
            if not add_new(rowid):
                times = self.seen_again.get(rowid, 1)
                if times >= MAX_COPIES_PER_ROWID and rowid != 0:
                    # Child pointers scribbled to point at the same leaves again and
                    # again: a phantom row shows up twice, not hundreds of times.
                    return
                self.seen_again[rowid] = times + 1
            if current is not None:
                current.add(rowid)
            if start is None or rowid >= start:
                self.last = rowid
            result.rows_read += 1
            on_row(row)

        def unlisted(rowid: int) -> bool:
            return bool(self.hint_set) and rowid not in self.hint_set

        try:
            sql, args = self._select(start, self._what())
            earlier, alone = self.earlier, self.alone
            for raw in _rows(self.conn, sql, args):
                self.returned += 1
                rowid = int(raw[0])
                if rowid in alone:
                    # Read on its own; but a garbled cell may carry a real row's rowid:
                    # the cells of such a rowid are read by their place once the stream
                    # ends (a query in the middle of it would disturb it).
                    if (start, self.returned - 1) not in self.same_cell:
                        places.append((rowid, self.returned - 1))
                    continue
                if not first and rowid in earlier:
                    continue  # a damaged tree can hand back rows already passed
                if prev is not None and rowid < prev and unlisted(rowid):
                    # Below the row before it and listed by no readable index: a garbled
                    # cell (zeroed cell pointers read the page header as cells, rowid 0).
                    result.out_of_order.append(rowid)
                    continue
                if pending is not None:
                    held = int(pending[0])
                    if rowid < held and unlisted(held):
                        # Above the row after it and listed by no index: a garbled cell
                        # that happened to decode; it is no row.
                        result.out_of_order.append(held)
                        prev = before_pending
                    else:
                        deliver(pending)
                pending, before_pending, prev = tuple(raw), prev, rowid
            if pending is not None:
                deliver(pending)
            return True
        except _ReadError as err:
            if pending is not None:
                deliver(pending)
            exc = err.cause
            if isinstance(exc, apsw.Error) and not _is_damage(exc):
                raise exc from None
            return False
        finally:
            last = self.last  # rows delivered late do not move the position
            for rowid, place in places:
                other = self._other_cell(rowid, start, place)
                if other is not None:
                    deliver(other)
            self.last = last
            if current is None:
                self.earlier = self.seen.copy()
            else:
                self.earlier |= current

    def _step_over_failing_cell(self) -> bool:
        """After a stream stopped on damage: find the cell it stopped at by walking the
        same stretch for rowids only (which reads no record), read that row on its own,
        and stream on past it. True when done; False when the walk itself cannot get
        there (a damaged page: the caller searches where reading can resume).

        The stream resumes right after the cell (``rowid >= cell + 1``) only when the
        cell's rowid sits in order: above the row before it, below every one of the
        ``LOOK_AHEAD`` cells after it that read; otherwise its rowid is not
        to be trusted and the stream starts over from the same place, stepping over
        the cell, so that a garbled rowid never moves the position.
        """
        start, n = self.start, self.returned
        sql, args = self._select(start, self.r)
        got: list[int] = []
        ended = False  # the walk read past the cell to the table's end
        try:
            it = iter(self.conn.execute(f"{sql} LIMIT {LOOK_AHEAD + 1} OFFSET {n}", args))
            for row in it:
                got.append(int(row[0]))
            ended = True
        except apsw.Error as exc:
            if not _is_damage(exc):
                raise
        if not got:
            return False
        cell = got[0]
        if cell in self.alone:
            return False  # stopped at it again: not a record that fails, the page does
        self.alone.add(cell)
        before = self.last
        # The last row of the table is in order; one whose successor is unknown is not.
        # In order only below every cell after it that reads: real rows follow a
        # garbled rowid far above them (with no index to list them, nothing else tells).
        after_ok = all(cell < later for later in got[1:]) if len(got) > 1 else ended
        # A rowid no readable index lists (when one lists the table's rows) is not
        # trusted to move the position either: a garbled cell can sit in order.
        listed = not self.hint_set or cell in self.hint_set
        in_order = (before is None or before < cell) and after_ok and listed
        if in_order:
            self._read_alone(cell)
        elif not self._read_alone(cell, record=False):
            # Its rowid is garbage: what is lost is whatever lay between its neighbours.
            lo = MIN_ROWID if before is None else before + 1
            hi = got[1] - 1 if len(got) > 1 else MAX_ROWID
            if lo <= hi:
                self.result.add_range(lo, hi)
        if in_order:
            self.earlier.add(cell)
            self.last = cell
            if cell == MAX_ROWID:
                self.start = cell
                return False
            self.start = cell + 1
        return True

    def _other_cell(self, rowid: int, start: int | None, place: int) -> Row | None:
        """The row of the cell at ``place`` of a stream from ``start``, whose rowid is
        that of a row read on its own: when that cell reads whole and is none of the
        rows read on their own, it is another cell with the same rowid (a garbled cell
        that decodes as an existing row's rowid, and the row's own cell): delivered,
        once. None for the cell read on its own (it fails as it failed, or reads the
        same), known by its place from then on: a stream started over meets it again."""
        sql, args = self._select(start, self.r + self.t_cols)
        row = None
        try:
            row = self.conn.execute(f"{sql} LIMIT 1 OFFSET {place}", args).fetchone()
        except UnicodeDecodeError:
            pass
        except apsw.Error as exc:
            if not _is_damage(exc):
                raise
        if row is None or int(row[0]) != rowid or tuple(row) in self.read_alone.get(rowid, []):
            self.same_cell.add((start, place))
            return None
        # Delivered once, whichever stream meets it after this one.
        self.read_alone.setdefault(rowid, []).append(tuple(row))
        return tuple(row)

    def _read_alone(self, rowid: int, *, record: bool = True) -> bool:
        """Deliver the row ``rowid`` whole, with repaired text, or with the columns that
        can be read; count it unreadable only when not even that works (and, unless
        ``record`` is False, note its rowid as an unreadable range). True if delivered."""
        result = self.result
        rows: list[Row] = []
        try:
            rows = [tuple(r) for r in self.conn.execute(self.one, (rowid,)).fetchall()]
        except UnicodeDecodeError:
            row, bad = _lenient_row(self.conn, self.t, self.r, self.columns, rowid)
            rows = [row]
            result.text_repaired.append(rowid)
            if self.on_bad_text and bad:
                self.on_bad_text(rowid, bad)
        except apsw.Error as exc:
            if not _is_damage(exc):
                raise
            partial = _partial_row(self.conn, self.t, self.r, self.columns, rowid)
            if partial is not None:
                row, missing = partial
                if self.on_partial:
                    self.on_partial(rowid, missing)
                rows = [row]
        if not rows:
            result.unreadable_rows += 1
            if record:
                result.add_range(rowid, rowid)
        for row in rows:  # readable after all (the failure was further on): deliver
            result.rows_read += 1
            self.read_alone.setdefault(rowid, []).append(row)
            self.on_row(row)
        return bool(rows)


def _partial_row(
    conn: apsw.Connection, t: str, r: str, columns: Sequence[str], rowid: int
) -> tuple[Row, list[str]] | None:
    """The row with each column read on its own: (row with None where a column cannot
    be read, those columns), or None if no column can be read. A column stored in the
    cell itself reads even when the overflow chain behind it is broken."""
    values: list[Any] = [rowid]
    missing = []
    for c in columns:
        q = quote_ident(c)
        try:
            got = conn.execute(f"SELECT {q} FROM {t} NOT INDEXED WHERE {r} = ?", (rowid,))
            row = got.fetchone()
            values.append(None if row is None else row[0])
        except UnicodeDecodeError:
            values.append(_lenient_row(conn, t, r, [c], rowid)[0][1])
        except apsw.Error as exc:
            if not _is_damage(exc):
                raise
            values.append(None)
            missing.append(c)
    if not columns or len(missing) == len(columns):
        return None
    return tuple(values), missing


class _ReadError(Exception):
    """A row could not be read from the cursor (damage, or text that is not UTF-8)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _rows(conn: apsw.Connection, sql: str, args: tuple[int, ...]) -> Iterator[Row]:
    """The query's rows; a failure to read one (apsw runs the first step when the query
    is executed) is raised as :class:`_ReadError`, so that it is never confused with an
    error raised by the caller's ``on_row``."""
    try:
        for row in conn.execute(sql, args):
            yield tuple(row)  # the caller's own errors are raised in its frame, not here
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise _ReadError(exc) from exc


def _lenient_row(
    conn: apsw.Connection, t: str, r: str, columns: Sequence[str], rowid: int
) -> tuple[Row, list[str]]:
    """A row whose TEXT is not valid UTF-8 (scribbled bytes): text is read as bytes and
    decoded with U+FFFD for what cannot be decoded; other values are read as they are.
    Returns the row and the columns whose text was not valid UTF-8."""
    parts = "".join(
        f", typeof({q}), CASE WHEN typeof({q}) = 'text' THEN CAST({q} AS BLOB) ELSE {q} END"
        for q in (quote_ident(c) for c in columns)
    )
    raw = conn.execute(f"SELECT {r}{parts} FROM {t} NOT INDEXED WHERE {r} = ?", (rowid,)).fetchone()
    assert raw is not None
    values: list[Any] = [int(raw[0])]
    bad = []
    for i, c in enumerate(columns):
        kind, value = raw[1 + 2 * i], raw[2 + 2 * i]
        if kind == "text" and isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                value = value.decode("utf-8", errors="replace")
                bad.append(c)
        values.append(value)
    return tuple(values), bad


def rowid_word(conn: apsw.Connection, table: str) -> str | None:
    """The name that reads ``table``'s rowid in SQL (``schema.rowid_name_among``); None
    for a WITHOUT ROWID table and one whose columns take all three names."""
    try:
        row = conn.execute(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
        info = conn.execute(f'PRAGMA "main".table_xinfo({quote_ident(table)})').fetchall()
    except apsw.Error:
        return "rowid"
    if row is not None and isinstance(row[0], str) and declares_without_rowid(row[0]):
        return None
    return rowid_name_among(str(r[1]) for r in info)


def keyed_scan(
    conn: apsw.Connection,
    table: str,
    columns: Sequence[str],
    on_row: Callable[[Row], None],
    *,
    key: Sequence[str] = (),
) -> ScanResult:
    """``on_row((None, *columns))`` for every row of a table no name reaches by rowid (a
    WITHOUT ROWID table, or one whose columns take all three names) that the reads
    below read.

    One plain scan from the start; where it stops on damage, one from the end (``PRAGMA
    reverse_unordered_selects``: a full scan walks the b-tree backwards) until it stops
    too, or (with ``key``) comes to the last row read from the start. With ``key``
    (columns among ``columns`` that name a row: the primary key), each scan that stops
    goes on by key (``KeyedResume``): the row after the last read is read alone, and one
    that does not read is skipped and named (``ScanResult.unreadable_keys``), as a rowid
    scan skips a row (docs/safety.md rule 8). Where no next key reads (a damaged page),
    nothing tells where reading could resume: that stretch is unread, its rows
    uncounted (``ScanResult.stretch_unread``, with the rows around it)."""
    result = ScanResult()
    cols = "".join(", " + quote_ident(c) for c in columns)
    plain = f'SELECT NULL{cols} FROM "main".{quote_ident(table)} NOT INDEXED'
    resume = KeyedResume(conn, table, cols, [list(columns).index(k) + 1 for k in key], key)
    last: Row | None = None
    for row in (forward := _UntilDamage(conn, plain)):
        on_row(row)
        result.rows_read += 1
        last = row
    last, damaged = resume.onward(forward.damaged, last, on_row, result)
    if not damaged:
        return result
    result.stretch_unread = True
    first: Row | None = None
    conn.execute("PRAGMA reverse_unordered_selects = 1")
    try:
        backward = _UntilDamage(conn, plain)
        for row in backward:
            if key and row == last:
                backward.damaged = False  # where the first read stopped: nothing unread
                break
            on_row(row)
            result.rows_read += 1
            first = row
    finally:
        conn.execute("PRAGMA reverse_unordered_selects = 0")
    first, damaged = resume.onward(backward.damaged, first, on_row, result, down_to=last)
    result.stretch_unread = damaged
    result.around_stretch = (last, first) if damaged else (None, None)
    return result


class KeyedResume:
    """A keyed scan's read past a row that does not read (``keyed_scan``): by the key's
    own order, up (``>``) after a read from the start, down (``<``) after one from the
    end."""

    def __init__(
        self, conn: apsw.Connection, table: str, cols: str, at: list[int], key: Sequence[str]
    ) -> None:
        self.conn, self.at, self.cols = conn, at, cols
        self.t = f'"main".{quote_ident(table)}'
        self.names = [quote_ident(k) for k in key]
        self.marks = ", ".join("?" for _ in key)

    def onward(
        self,
        damaged: bool,
        last: Row | None,
        on_row: Callable[[Row], None],
        result: ScanResult,
        *,
        down_to: Row | None = None,
    ) -> tuple[Row | None, bool]:
        """Go on from ``last`` while the read stopped on damage: the next key looked up,
        the row there read alone (skipped and named when it does not read), then the rest
        streamed from it. Down (``down_to`` given: the last row read up) it stops above
        that row. Returns the last row read and whether a read still stops on damage."""
        if not damaged or not self.at or last is None:
            return last, damaged
        names, marks = ", ".join(self.names), self.marks
        op, order = (">", "") if down_to is None else ("<", " DESC")
        by = ", ".join(f"{n}{order}" for n in self.names)
        floor: tuple[Any, ...] = ()
        above = ""
        if down_to is not None:
            floor = tuple(down_to[i] for i in self.at)
            above = f" AND ({names}) > ({marks})"
        t, cols = self.t, self.cols
        after = (
            f"SELECT {names} FROM {t} WHERE ({names}) {op} ({marks}){above} ORDER BY {by} LIMIT 1"
        )
        alone = f"SELECT NULL{cols} FROM {t} WHERE ({names}) = ({marks})"
        rest = f"SELECT NULL{cols} FROM {t} WHERE ({names}) {op}= ({marks}){above} ORDER BY {by}"
        held = tuple(last[i] for i in self.at)
        while True:
            probe = _UntilDamage(self.conn, after, (*held, *floor))
            found = list(probe)
            if probe.damaged:
                return last, True  # no next key reads: a damaged page
            if not found:
                return last, False  # nothing after it: nothing left unread
            held = tuple(found[0])
            one = _UntilDamage(self.conn, alone, held)
            if one.damaged or not list(one):
                result.unreadable_keys.append(held)  # the row there does not read
                continue
            stream = _UntilDamage(self.conn, rest, (*held, *floor))
            read = 0
            for row in stream:
                on_row(row)
                result.rows_read += 1
                read += 1
                last = row
            if not stream.damaged:
                return last, False
            if read:
                held = tuple(last[i] for i in self.at)
            else:  # it reads alone, but no read from it does: skipped all the same
                result.unreadable_keys.append(held)


class _UntilDamage:
    """The rows one SELECT reads, to its end or to a read that fails (``damaged``).
    Only the reads are caught: what the caller does with a row (a write that fails on
    a full disk among it) is never taken for damage."""

    def __init__(self, conn: apsw.Connection, sql: str, params: tuple[Any, ...] = ()) -> None:
        self.conn, self.sql, self.params = conn, sql, params
        self.damaged = False

    def __iter__(self) -> Iterator[Row]:
        try:
            cursor = self.conn.execute(self.sql, self.params)  # (apsw takes the first step)
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_interrupted(exc)
            self.damaged = True
            return
        while True:
            try:
                row = next(cursor)
            except StopIteration:
                return
            except (apsw.Error, UnicodeDecodeError) as exc:
                raise_if_interrupted(exc)
                self.damaged = True
                return
            yield row


def _probe(conn: apsw.Connection, sql: str, p: int) -> tuple[str, int | None]:
    """("row", rowid) | ("end", None) | ("error", None) for the first rowid >= p."""
    try:
        row = conn.execute(sql, (p,)).fetchone()
    except apsw.Error as exc:
        if not _is_damage(exc):
            raise
        return "error", None
    if row is None:
        return "end", None
    return "row", int(row[0])


def _next_readable(conn: apsw.Connection, sql: str, lo: int, hints: KeySet) -> int | None:
    """Smallest p > lo whose probe does not fail (None if none is found); probe(lo) fails.

    Damaged leaves need not be next to each other in rowid order (a truncated file
    loses scattered pages), so a plain exponential search could jump over a readable
    stretch. The search therefore takes the first rowid an index lists that reads as
    a bound, tries every rowid one by one below it for a while (dense AUTOINCREMENT
    keys; an index's own lost pages do not list them all), and only then narrows to
    the bound by bisection, or, with no bound, doubles its step.
    """
    bad = lo
    # The first listed rowid that reads bounds the search; readable rowids an index
    # does not list (its own pages lost) may lie below it, so they are probed too.
    bound = None
    for k in hints.after(lo):
        status, _ = _probe(conn, sql, k)
        if status != "error":
            bound = k
            break
    p = max(bad, 0)  # nothing read yet: rowids start at 1 far more often than not
    for _ in range(LINEAR_PROBES):
        p += 1
        if bound is not None and p >= bound:
            return bound if bound - 1 == bad else _narrow(conn, sql, bad, bound)
        status, _ = _probe(conn, sql, p)
        if status != "error":
            return p if p - 1 == bad else _narrow(conn, sql, bad, p)
        bad = p
    if bound is not None:
        return _narrow(conn, sql, bad, bound)
    step = LINEAR_PROBES
    while bad < MAX_ROWID:
        p = min(bad + step, MAX_ROWID)
        status, _ = _probe(conn, sql, p)
        if status != "error":
            return _narrow(conn, sql, bad, p)
        bad = p
        step *= 2
    return None


def _narrow(conn: apsw.Connection, sql: str, bad: int, good: int) -> int:
    """Smallest p in (bad, good] whose probe does not fail, by bisection."""
    while good - bad > 1:
        mid = (bad + good) // 2
        status, _ = _probe(conn, sql, mid)
        if status == "error":
            bad = mid
        else:
            good = mid
    return good
