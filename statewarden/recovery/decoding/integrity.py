"""SQLite's integrity check, uncapped, with every error line attributed to its b-tree.

``PRAGMA quick_check`` and ``integrity_check`` stop after 100 errors by default; in
docs/stories.md story 2 the first 100 were all in one FTS tree and hid damage in ``sessions``.
Here the cap is set above anything a file can produce, and each line goes to the root
page of its b-tree -> the object (table, index, FTS shadow table) -> the logical table
it serves. A line without a tree of its own (``Multiple uses for byte ...``) belongs to
the tree named just before it; ``Page N: never used`` lines are pages no b-tree
reaches (a damaged interior page orphans its leaves).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from statewarden.progress import ProgressFn
from statewarden.recovery.decoding.checks_child import (
    UNCAPPED_ERRORS,
    EarlyChecker,
    apart_checks_argv,
)
from statewarden.recovery.decoding.schema import SCHEMA_ROOT_PAGE, Schema, SchemaObject
from statewarden.sidecars import WAL_SUFFIX, sidecar
from statewarden.sqlite import quote_ident, raise_if_interrupted, uri_for

PROGRESS_EVERY_VM_STEPS = 100_000
SAMPLE_LINES_PER_GROUP = 5


_TREE_RE = re.compile(r"^Tree (\d+) ")


def broken_trees(lines: Iterable[str]) -> set[int]:
    """The roots of the b-trees the integrity check's ``lines`` name ("Tree N ...")."""
    return {int(m.group(1)) for line in lines if (m := _TREE_RE.match(line))}


# How the pragma's row of b-tree and page-accounting errors starts (``_check``).
_BTREE_ROW = "*** in database"
NEVER_USED_RE = re.compile(r"^Page (\d+)(?: is)?:? never used")
_INDEX_RE = re.compile(
    r"^(?:wrong # of entries in index|row \d+ missing from index|"
    r"non-unique entry in UNIQUE index) (\S+)"
)
_TABLE_VALUE_RE = re.compile(r"^(?:NULL|TEXT|INTEGER|REAL|BLOB|NUMERIC) value in ([^.\s]+)\.")
_CHECK_RE = re.compile(r"^CHECK constraint failed in (\S+)")
# "malformed inverted index for FTS5 table main.x", "fts5: checksum mismatch for table "x""
_FTS_RE = re.compile(r"\bFTS5 table (?:main\.)?(\S+)|^fts5: .*\btable \"([^\"]+)\"", re.I)
_FREELIST_RE = re.compile(r"^(?:Freelist|Main freelist)")
# A page's own lines, printed once its cells are checked, with no tree named.
PAGE_LINE_RE = re.compile(r"^(?:Multiple uses for byte \d+ of|Fragmentation of .* on) page (\d+)\b")


@dataclass
class ErrorGroup:
    """The integrity errors of one b-tree (or of the pages no b-tree reaches)."""

    object: str
    kind: str  # table | index | fts-shadow | schema | unattached | freelist | unknown
    logical_table: str | None
    root_page: int | None
    derived: bool
    errors: int = 0
    sample: list[str] = field(default_factory=list)

    def label(self) -> str:
        if self.kind in ("fts-shadow", "fts"):
            return f"{self.object} (FTS of {self.logical_table})"
        if self.kind == "index":
            return f"{self.object} (index on {self.logical_table})"
        return self.object


class IntegrityCheck:
    """An uncapped ``integrity_check`` of ``conn``'s database, its slow part in a thread.

    Since SQLite 3.44 the pragma also runs each virtual table's own check (FTS5's
    ``integrity-check``: most of the pragma's time on a Hermes database). Here the
    b-trees, their indexes and the page accounting are checked on this thread, through
    a second connection without virtual-table modules (so the pragma skips them), while
    ``PRAGMA integrity_check(<virtual table>)`` runs for each virtual table on a
    connection of its own in a thread (SQLite releases the GIL): the same lines the
    whole pragma gives, the virtual tables' last. If a thread stops without a result,
    that table is checked on the caller's connection when the result is asked for. The
    constructor returns when the b-trees are checked; :meth:`result` waits for the rest,
    so a caller can do other reads meanwhile.

    SQLite reports the b-tree errors first; checking rows against indexes afterwards may
    hit a damaged page and end the pragma with an error, so the cross-checks of the
    tables after that one would never run. When that happens the check is run again
    table by table (``PRAGMA integrity_check(T)``) so that one damaged table does not
    hide the others; lines are kept once each, in order. A check that stopped early
    (as the whole pragma would) gives no virtual-table lines.

    ``apart``: the virtual tables' checks run in a child process instead of threads
    (``_APART_CHECKS``), so that while they run this process may open and close the
    file outside SQLite (docs/safety.md rule 2 is about this process's own locks);
    ``early``: a child started ahead for them (``EarlyChecker``), used if it is there.
    ``background``: the b-trees are checked in a thread as well, on a connection of
    their own, and the constructor returns at once (:meth:`btree_result` waits); the
    caller's thread reads on meanwhile (SQLite releases the GIL: two cores). Both: the
    b-trees are checked in the child too, through its mapping of the file, and this
    process opens no connection for them (one the child did not finish is checked here
    when its result is asked for, reading as usual).
    """

    def __init__(
        self,
        conn: apsw.Connection,
        progress: ProgressFn | None = None,
        tables: list[str] | None = None,
        *,
        skip: Collection[str] = (),
        apart: bool = False,
        background: bool = False,
        early: EarlyChecker | None = None,
    ) -> None:
        self._conn = conn
        self._early = early
        # Looked up before the check runs, in the order SQLite's hash has it then.
        self._skips_accounting = accounting_skipped(conn)
        self._progress = progress
        every = _virtual_tables(conn)
        # ``skip``: virtual tables whose own check is not wanted (verified elsewhere).
        self._vtabs = [name for name in every if name not in skip]
        self._vtab_rows: dict[str, tuple[list[str], str | None]] = {}
        self._cpu: dict[str, float] = {}
        self._threads: list[threading.Thread] = []
        self._child: subprocess.Popen[bytes] | None = None
        self._uri = ""  # the child's (``_start``)
        self._mapped = 0  # the bytes of the file the child maps (``_APART_CHECKS``)
        self._lines: list[str] = []
        self._abort: str | None = None
        self._accounted = False
        self._btree_thread: threading.Thread | None = None
        self._btree_error: BaseException | None = None
        path = conn.filename
        self._path, self._tables = path, tables
        # Whether the child checks the b-trees; what it said not taken yet (``_join_child``).
        self._btrees_apart, self._said = False, b""
        if path and apart and background and self._vtabs:
            self._start(path, apart=True, btrees=list(tables or []))
            if self._child is not None:
                self._btrees_apart = True
                return
        btrees = conn
        vtabs_apart = bool(every) and bool(self._vtabs or skip)
        if path and (vtabs_apart or background):
            try:
                btrees = apsw.Connection(path)
                if every:
                    btrees.drop_modules(None)
            except apsw.Error:
                btrees = conn  # the whole pragma on the caller's connection, as before
            else:
                if vtabs_apart:
                    self._start(path, apart=apart)
        if btrees is conn:
            self._vtabs = []  # the whole pragma runs: the virtual tables are in its lines
        if background and btrees is not conn:
            # ``background``: the b-trees too are checked in a thread, on their own
            # connection, while the caller reads on (``btree_result`` waits for them).
            self._btree_thread = threading.Thread(
                target=self._check_btrees, args=(btrees, tables), name="btree-check", daemon=True
            )
            self._btree_thread.start()
            return
        try:
            self._lines, self._abort, self._accounted = _check(btrees, progress, tables)
        finally:
            if btrees is not conn:
                btrees.close()

    def _check_btrees(self, btrees: apsw.Connection, tables: list[str] | None) -> None:
        """The b-tree check on its own connection, in a thread (``background``)."""
        try:
            self._lines, self._abort, self._accounted = _check(btrees, None, tables)
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread (``_btrees_done``)
            self._btree_error = exc
        finally:
            btrees.close()

    def _btrees_done(self) -> None:
        """Wait for a b-tree check running in a thread or in the child; raise what
        stopped it. One the child did not finish is done here, reading as usual."""
        if self._btrees_apart and not self._btrees_from_child():
            self._btrees_apart = False
            btrees = self._conn  # the whole pragma, as when no connection can be opened
            with contextlib.suppress(apsw.Error):
                btrees = apsw.Connection(self._path)
                btrees.drop_modules(None)
            try:
                self._lines, self._abort, self._accounted = _check(btrees, None, self._tables)
            finally:
                if btrees is not self._conn:
                    btrees.close()
        if self._btree_thread is not None:
            self._btree_thread.join()
            self._btree_thread = None
        if self._btree_error is not None:
            raise self._btree_error

    def _btrees_from_child(self) -> bool:
        """Take the child's b-tree check (the first line it prints, ``_APART_CHECKS``),
        waiting for it, made into lines as ``_check`` makes them; False when there is
        none (the child ended without it, could not check them, or is gone)."""
        child = self._child
        while child is not None and child.stdout is not None and b"\n" not in self._said:
            try:
                chunk = os.read(child.stdout.fileno(), 1 << 16)
            except (OSError, ValueError):  # ValueError: closed (``_join_child`` read it all)
                chunk = b""
            if not chunk:
                break
            self._said += chunk
        line, _, rest = self._said.partition(b"\n")
        try:
            rows, abort, each = json.loads(line)["btrees"]
            self._lines, self._abort, self._accounted = _checked(rows, abort, each)
        except (ValueError, KeyError, TypeError):
            return False
        self._said, self._btrees_apart = rest, False
        return True

    def _start(self, path: str, *, apart: bool, btrees: list[str] | None = None) -> None:
        """Start the virtual tables' own checks: one thread (and connection) per table,
        two FTS tables on two cores; in a child process with ``apart`` (the b-trees
        checked there too with ``btrees``, the tables ``_check`` takes)."""
        if apart and self._vtabs:
            wal = sidecar(Path(path), WAL_SUFFIX)
            frames = wal.exists() and wal.stat().st_size > 0
            self._uri = uri_for(Path(path), **({"mode": "ro"} if frames else {"immutable": "1"}))
            mapped = 0  # or the whole file (``_APART_CHECKS``)
            with contextlib.suppress(OSError):
                mapped = os.stat(path).st_size
            if self._early is not None:
                self._child = self._early.take(self._uri, self._vtabs, mapped=mapped, btrees=btrees)
            if self._child is None:
                self._child = self._child_started(mapped, btrees)
            self._mapped = mapped if self._child is not None else 0
            return
        self._threads = [
            threading.Thread(
                target=self._check_vtab, args=(path, name), name="fts-check", daemon=True
            )
            for name in self._vtabs
        ]
        for thread in self._threads:
            thread.start()

    def _child_started(
        self, mapped: int, btrees: list[str] | None = None
    ) -> subprocess.Popen[bytes] | None:
        """A child checking the virtual tables in ``self._uri`` (and the b-trees, with
        ``btrees``), mapping ``mapped`` bytes of it; None when none can start."""
        if not sys.executable:
            return None
        try:
            return subprocess.Popen(
                apart_checks_argv(self._uri, self._vtabs, mapped=mapped, btrees=btrees),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            return None

    def _check_vtab(self, path: str, name: str) -> None:
        cpu0 = time.thread_time()
        try:
            conn = apsw.Connection(path)
        except apsw.Error:
            return  # result() checks what is missing on the caller's connection
        try:
            self._vtab_rows[name] = _pragma_rows(
                conn, f"PRAGMA integrity_check({quote_ident(name)})"
            )
        finally:
            conn.close()
            self._cpu[name] = time.thread_time() - cpu0

    @property
    def helper_cpu_s(self) -> float:
        """CPU seconds the threads used (not in the calling thread's own CPU time)."""
        return sum(self._cpu.values())

    def pages_accounted(self) -> bool:
        """Did the b-tree check get through SQLite's page accounting (its "never used"
        lines are all there), even where the pragma stopped early afterwards, and not
        skip it (``accounting_skipped``)?"""
        self._btrees_done()
        return self._accounted and self._skips_accounting is False

    def btree_result(self) -> tuple[list[str], str | None]:
        """(lines, abort note) of the b-tree check alone, without waiting for the
        virtual tables' own checks (all of the lines when the whole pragma ran)."""
        self._btrees_done()
        return list(self._lines), self._abort

    def wait(self) -> bool:
        """Wait for the virtual tables' own checks; True when each ran on a connection
        of its own, so that :meth:`result` needs no more of the caller's connection
        (which may be closed by then). A b-tree check in a thread is waited for too."""
        if self._btree_thread is not None:
            self._btree_thread.join()
        for thread in self._threads:
            while thread.is_alive():
                if self._progress:
                    self._progress("FTS check", len(self._vtab_rows), len(self._vtabs))
                thread.join(0.25)
        self._threads = []
        if self._child is not None:
            self._join_child(self._child)
            self._child = None
        return all(name in self._vtab_rows for name in self._vtabs)

    def _join_child(self, child: subprocess.Popen[bytes]) -> None:
        """The child's verdicts; none (each then checked on the caller's connection, or
        the diagnosis made again) when it failed or printed something else. Its b-tree
        check, if it printed one not taken yet, is taken whatever became of it after."""
        out = b""
        while True:
            if self._progress:
                self._progress("FTS check", 0, len(self._vtabs))
            try:
                out, _ = child.communicate(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                continue
        self._said += out
        if self._btrees_apart and self._said.startswith(b'{"btrees"'):
            self._btrees_from_child()
        said, self._said = self._said, b""
        if child.returncode == -signal.SIGBUS and self._mapped:
            # A page of the mapping could not be read: the same checks again, read as
            # usual, so that the error is one SQLite names (or none, if it was passing).
            self._mapped = 0
            again = self._child_started(0)
            if again is not None:
                self._join_child(again)
            return
        if child.returncode != 0:
            return
        try:
            doc = json.loads(said)
            for name, (rows, abort) in doc["rows"].items():
                if name in self._vtabs:
                    self._vtab_rows[name] = (
                        [str(r) for r in rows],
                        None if abort is None else str(abort),
                    )
            self._cpu["child"] = float(doc["cpu_s"])
        except (ValueError, KeyError, TypeError):
            self._vtab_rows.clear()

    def stop(self) -> None:
        """End the child process of an ``apart`` check whose verdicts are no longer
        wanted (its threads, in-process, are waited for: ``wait``)."""
        if self._child is not None:
            self._child.kill()
            self._child.communicate()
            self._child = None
        self.wait()

    def result(self) -> tuple[list[str], bool, str | None]:
        """(lines, finished, abort note), once the virtual tables are checked too."""
        self._btrees_done()
        self.wait()
        lines, abort = self._lines, self._abort
        if abort is None:
            extra: list[str] = []
            for name in self._vtabs:
                if name not in self._vtab_rows:  # its connection could not be opened
                    self._vtab_rows[name] = _pragma_rows(
                        self._conn, f"PRAGMA integrity_check({quote_ident(name)})"
                    )
                rows, v_abort = self._vtab_rows[name]
                if rows != ["ok"]:
                    extra.extend(_lines(rows))
                if v_abort is not None and abort is None:
                    abort = f"{v_abort} on {name}"
            have = set(lines)
            lines = lines + [ln for ln in dict.fromkeys(extra) if ln not in have]
        return lines, abort is None, abort

    def own_verdicts(self) -> dict[str, str] | None:
        """Each virtual table's own check, "ok" or its first lines, even when the b-tree
        check stopped early (a damaged page elsewhere does not stop these); None when
        they were part of the whole pragma instead. Call after :meth:`result`."""
        if not self._vtab_rows:
            return None
        out = {}
        for name, (rows, abort) in self._vtab_rows.items():
            if rows == ["ok"] and abort is None:
                out[name] = "ok"
            else:
                out[name] = "; ".join(_lines(rows)[:3] + ([abort] if abort else []))
        return out


def _virtual_tables(conn: apsw.Connection) -> list[str]:
    """The virtual tables in ``conn``'s schema ([] when the schema cannot be read)."""
    try:
        return [
            str(name)
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND rootpage = 0"
                " AND sql LIKE 'CREATE VIRTUAL TABLE%'"
            )
        ]
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_interrupted(exc)
        return []


def _check(
    conn: apsw.Connection, progress: ProgressFn | None, tables: list[str] | None
) -> tuple[list[str], str | None, bool]:
    """The pragma on ``conn``, again table by table if it stopped early (see above);
    (lines, abort note, whether its page accounting was done).

    SQLite checks every b-tree and accounts for every page in one step, which gives
    the pragma's first row ("*** in database main ***" and its lines) when it finds
    anything; the rows read against their indexes come after it, and those are where
    a damaged page stops the pragma ("database disk image is malformed"). That first
    row read means the page accounting is whole ("never used" lines: ``salvage.py``).
    A pragma that stops with no such row may have stopped before it: not accounted."""
    steps = [0]

    def tick() -> bool:
        steps[0] += 1
        if progress:
            progress("integrity check", steps[0], 0)
        return False

    conn.set_progress_handler(tick, PROGRESS_EVERY_VM_STEPS)
    try:
        rows, abort = _pragma_rows(conn, f"PRAGMA integrity_check({UNCAPPED_ERRORS})")
        by_table: dict[str, tuple[list[str], str | None]] = {}
        if rows != ["ok"] and abort is not None:
            for name in tables or []:
                # One table per pragma takes no error cap (SQLite's default of 100
                # applies); the b-tree errors are already all in the first run's lines.
                by_table[name] = _pragma_rows(conn, f"PRAGMA integrity_check({quote_ident(name)})")
    finally:
        conn.set_progress_handler(None)
    return _checked(rows, abort, by_table)


def _checked(
    rows: list[str], abort: str | None, by_table: dict[str, tuple[list[str], str | None]]
) -> tuple[list[str], str | None, bool]:
    """``_check``'s result from the whole pragma's rows (and its abort) and, when it
    stopped, each table's own (in the order they ran): in this process or in the
    child (``_APART_CHECKS``), the same rows give the same result."""
    if rows == ["ok"]:
        return [], None, True
    lines = dict.fromkeys(_lines(rows))
    if abort is None:
        return list(lines), None, True
    stopped_on: list[str] = []
    for name, (more, t_abort) in by_table.items():
        if more != ["ok"]:
            lines.update(dict.fromkeys(_lines(more)))
        if t_abort is not None:
            stopped_on.append(name)
    where = f" on {', '.join(stopped_on)}" if stopped_on else ""
    return list(lines), f"{abort}{where}", pages_accounted(rows, abort)


def accounting_skipped(conn: apsw.Connection) -> bool | None:
    """Does SQLite's integrity check of ``conn``'s main database skip its page
    accounting ("Page N: never used")? It does when the first table of the schema's
    hash, in the order the check takes them, has no root page (a view, a virtual
    table): the check then runs as one of some b-trees only, and says nothing of the
    pages none of them uses. ``PRAGMA table_list`` gives the tables in that order
    (checked against the check itself on 400 schemas of random names: whenever the
    first is a view or a virtual table, a file with orphaned pages gets no "never used"
    line). None, taken as skipped, when the list cannot be read."""
    try:
        for row in conn.execute("PRAGMA main.table_list"):
            return str(row[2]) in ("view", "virtual")
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_interrupted(exc)
    return None


def pages_accounted(rows: list[str], abort: str | None) -> bool:
    """Did the pragma that gave ``rows`` (and stopped with ``abort``, None if it ran to
    its end) get through its page accounting? See ``_check``."""
    return abort is None or any(r.startswith(_BTREE_ROW) for r in rows)


def _pragma_rows(conn: apsw.Connection, sql: str) -> tuple[list[str], str | None]:
    rows: list[str] = []
    try:
        for (row,) in conn.execute(sql):
            rows.append(str(row))
    except apsw.Error as exc:
        raise_if_interrupted(exc)
        return rows, str(exc).split("\n", 1)[0]
    return rows, None


def _lines(rows: list[str]) -> list[str]:
    return [ln for row in rows for ln in row.split("\n") if ln and not ln.startswith(_BTREE_ROW)]


def _group_for(obj: SchemaObject, schema: Schema) -> ErrorGroup:
    """The group of ``obj``'s b-tree. ``sqlite_sequence`` holds no rows of anyone's, only
    AUTOINCREMENT's counters, which follow the rows (recover sets each from its table's
    rows): damage confined to it is derived, as an index's is."""
    if obj.rootpage == SCHEMA_ROOT_PAGE:
        kind = "schema"
    elif obj.shadow_of is not None:
        kind = "fts-shadow"
    elif obj.module == "fts5":
        kind = "fts"
    else:
        kind = obj.type
    return ErrorGroup(
        object=obj.name,
        kind=kind,
        logical_table=schema.logical_table(obj),
        root_page=obj.rootpage or None,
        derived=schema.is_derived(obj) or obj.name == "sqlite_sequence",
    )


def group_errors(lines: list[str], schema: Schema) -> list[ErrorGroup]:
    """Attribute each error line to a b-tree; a line with no tree of its own (``Multiple
    uses for byte ...``) belongs to the tree named by the line before it, unless the
    page it names is a root page: then it is that root's b-tree's (SQLite checks each
    page of a tree before its root, so the tree named before it may be another)."""
    roots = schema.by_root()
    groups: dict[str, ErrorGroup] = {}
    current: ErrorGroup | None = None

    def group(made: ErrorGroup) -> ErrorGroup:
        return groups.setdefault(made.object, made)

    for line in lines:
        g: ErrorGroup | None = None
        if m := _TREE_RE.match(line):
            root = int(m.group(1))
            obj = roots.get(root)
            if root == SCHEMA_ROOT_PAGE:
                g = group(ErrorGroup("sqlite_schema", "schema", None, 1, False))
            elif obj is not None:
                g = group(_group_for(obj, schema))
            current = g
        elif NEVER_USED_RE.match(line):
            current = None
            g = group(ErrorGroup("(unattached pages)", "unattached", None, None, True))
        elif (
            m := _INDEX_RE.match(line)
            or _TABLE_VALUE_RE.match(line)
            or _CHECK_RE.match(line)
            or _FTS_RE.search(line)
        ) and (obj := schema.by_name(m.group(1) or m.group(m.lastindex or 1))):
            g, current = group(_group_for(obj, schema)), None
        elif (m := PAGE_LINE_RE.match(line)) and (obj := roots.get(int(m.group(1)))):
            # The root is the last page of its tree SQLite checks: the tree is done.
            g, current = group(_group_for(obj, schema)), None
        elif _FREELIST_RE.match(line):
            g, current = group(ErrorGroup("(freelist)", "freelist", None, None, True)), None
        elif current is not None:
            g = current
        if g is None:
            g = group(ErrorGroup("(other)", "unknown", None, None, False))
        g.errors += 1
        if len(g.sample) < SAMPLE_LINES_PER_GROUP:
            g.sample.append(line)
    return sorted(groups.values(), key=lambda x: (-x.errors, x.object))


def fts_from_integrity_lines(lines: list[str], schema: Schema) -> dict[str, str]:
    """FTS verdicts from a finished ``integrity_check``.

    Since SQLite 3.44 ``PRAGMA integrity_check`` runs every virtual table's xIntegrity,
    which for FTS5 is its ``integrity-check`` command; running that again would double
    the most expensive part of the check (1.9 s of 4.5 s on the 266 MB fixture).
    """
    out: dict[str, str] = {}
    for obj in schema.tables():
        if obj.module != "fts5":
            continue
        own = [ln for ln in lines if _fts_table_named(ln) == obj.name]
        out[obj.name] = "ok" if not own else "; ".join(own[:3])
    return out


def _fts_table_named(line: str) -> str | None:
    m = _FTS_RE.search(line)
    if m is None:
        return None
    return m.group(1) or m.group(2)
