"""The schema found in a database file, read from its own ``sqlite_schema``.

Nothing about Hermes' tables is hard-coded: both Hermes generations (0.19.0's FTS5
tables with their own content, newer external-content FTS over views) and future ones
are read the same way. This module answers the questions diagnosis and repair ask:
which b-tree belongs to which object, which logical table an index or FTS shadow
table serves, what a table's key is, and in which order to recreate the objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import apsw

from statewarden.sqlite import quote_ident

FTS_SHADOW_SUFFIXES = ("_data", "_idx", "_content", "_docsize", "_config")
SCHEMA_ROOT_PAGE = 1
_CONTENT_OPTION_RE = re.compile(r"\bcontent\s*=\s*(?:'((?:[^']|'')*)'|\"([^\"]*)\"|(\w+))", re.I)
_USING_RE = re.compile(r"\bUSING\s+(\w+)", re.I)
_WITHOUT_ROWID_RE = re.compile(r"\)\s*WITHOUT\s+ROWID\s*;?\s*$", re.I)
_PARTIAL_RE = re.compile(r"\bWHERE\b(.*)$", re.I | re.S)
# The names SQL reads a rowid by, in the order taken: each names it unless a column does.
ROWID_NAMES = ("rowid", "_rowid_", "oid")


@dataclass
class Column:
    name: str
    decl_type: str
    pk: int  # 1-based position in the primary key, 0 if not part of it
    hidden: int  # table_xinfo: 0 normal, 1 hidden (virtual tables), 2/3 generated
    notnull: bool = False
    default: str | None = None  # the DEFAULT expression as written, if any

    @property
    def text_affinity(self) -> bool:
        """SQLite stores numbers given to such a column as text (never as numbers)."""
        t = self.decl_type.upper()
        return "INT" not in t and any(k in t for k in ("CHAR", "CLOB", "TEXT"))


@dataclass
class SchemaObject:
    """One row of ``sqlite_schema`` plus what we learn about it."""

    type: str
    name: str
    tbl_name: str
    rootpage: int
    sql: str | None
    columns: list[Column] = field(default_factory=list)
    module: str | None = None  # virtual tables: fts5, ...
    fts_content: str | None = None  # FTS5 content= option ('' = contentless)
    shadow_of: str | None = None  # shadow tables: the FTS table they belong to
    without_rowid: bool = False

    @property
    def is_virtual(self) -> bool:
        return self.type == "table" and self.module is not None

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("sqlite_")

    @property
    def stored_columns(self) -> list[Column]:
        """Columns that hold values in the record, in its order: a STORED generated
        column (``hidden`` 3) among them, a VIRTUAL one (2) not."""
        return [c for c in self.columns if c.hidden in (0, 1, 3)]

    @property
    def generated(self) -> frozenset[str]:
        """Generated columns: read, never written (an INSERT naming one fails)."""
        return frozenset(c.name for c in self.columns if c.hidden in (2, 3))

    @property
    def rowid_name(self) -> str | None:
        """The name SQL reads this table's rowid by (:func:`rowid_name_among`); None for
        a WITHOUT ROWID table, and for one whose columns take all three names."""
        if self.without_rowid:
            return None
        return rowid_name_among(c.name for c in self.columns)

    @property
    def rowid_sql(self) -> str:
        """``rowid_name`` in SQL that reads rows by rowid (a table none reaches is never
        read so: ``rowid``, as SQL would say)."""
        return self.rowid_name or "rowid"

    @property
    def rowid_table(self) -> bool:
        """An ordinary table whose b-tree is keyed by its rowid, and where the word
        ``rowid`` names that (none of its columns is called so): not a view, a virtual
        table or a WITHOUT ROWID table."""
        return self.type == "table" and not self.is_virtual and self.rowid_name == "rowid"

    @property
    def partial_condition(self) -> str | None:
        """A partial index's WHERE condition: it lists only the rows that meet it."""
        m = _PARTIAL_RE.search(self.sql or "") if self.type == "index" else None
        return m.group(1).strip() if m else None

    @property
    def rowid_alias(self) -> str | None:
        """The INTEGER PRIMARY KEY column that is the rowid, if there is one."""
        if self.without_rowid or self.type != "table":
            return None
        pks = [c for c in self.columns if c.pk]
        if len(pks) == 1 and pks[0].decl_type.strip().upper() == "INTEGER":
            return pks[0].name
        return None

    @property
    def key_names(self) -> list[str]:
        """The columns of ``key_columns`` (none when the rowid is the key; a WITHOUT
        ROWID table's are its primary key's, whatever they are called)."""
        if self.without_rowid:
            return self.key_columns
        return [c for c in self.key_columns if c != "rowid"]

    @property
    def key_columns(self) -> list[str]:
        """The columns that identify a row: the declared primary key, else the rowid."""
        pks = sorted((c for c in self.columns if c.pk), key=lambda c: c.pk)
        if not pks or self.rowid_alias:
            return ["rowid"]
        return [c.name for c in pks]


@dataclass
class Schema:
    objects: list[SchemaObject]
    fts_owner: dict[str, str] = field(default_factory=dict)  # FTS table -> logical table

    def by_name(self, name: str) -> SchemaObject | None:
        for o in self.objects:
            if o.name == name:
                return o
        return None

    def by_root(self) -> dict[int, SchemaObject]:
        return {o.rootpage: o for o in self.objects if o.rootpage}

    def tables(self) -> list[SchemaObject]:
        return [o for o in self.objects if o.type == "table"]

    def full_indexes(self, table: str) -> list[SchemaObject]:
        """The indexes of ``table`` that list every row of it (a partial index lists
        only the rows that meet its condition)."""
        return [
            o
            for o in self.objects
            if o.type == "index" and o.tbl_name == table and o.partial_condition is None
        ]

    def base_tables(self) -> list[SchemaObject]:
        """Tables that hold data: not virtual, not an FTS shadow, not sqlite_* internals."""
        return [
            o
            for o in self.tables()
            if not o.is_virtual and o.shadow_of is None and not o.is_internal
        ]

    def is_derived(self, obj: SchemaObject) -> bool:
        """An index or an FTS shadow table: rebuildable from base tables without loss.

        A shadow table of an FTS table that nothing feeds (own content, no triggers
        from a base table) holds the only copy of its text, so it is not derived.
        """
        if obj.type == "index":
            return True
        if obj.shadow_of is not None:
            return obj.shadow_of in self.fts_owner
        return obj.module == "fts5" and obj.name in self.fts_owner

    def logical_table(self, obj: SchemaObject) -> str:
        if obj.shadow_of is not None:
            return self.fts_owner.get(obj.shadow_of, obj.shadow_of)
        if obj.module == "fts5":
            return self.fts_owner.get(obj.name, obj.name)
        return obj.tbl_name


def rowid_name_among(columns: Iterable[str]) -> str | None:
    """The name that reads the rowid of a table with ``columns``: ``rowid``, unless a
    column is called so (then ``_rowid_``, else ``oid``); None when the columns take all
    three: no SQL reaches that rowid, and the table is read by its columns alone, as a
    WITHOUT ROWID table is."""
    taken = {c.lower() for c in columns}
    return next((w for w in ROWID_NAMES if w not in taken), None)


def declares_without_rowid(sql: str | None) -> bool:
    """Whether the CREATE TABLE text ``sql`` makes a WITHOUT ROWID table."""
    return bool(sql and _WITHOUT_ROWID_RE.search(sql))


def read_schema(conn: apsw.Connection) -> Schema:
    """Read ``sqlite_schema`` and the column lists; raises apsw errors as they come."""
    rows = conn.execute(
        "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_schema ORDER BY rowid"
    ).fetchall()
    objects = [
        SchemaObject(
            type=str(t),
            name=str(n),
            tbl_name=str(tb),
            rootpage=int(r or 0),
            sql=None if s is None else str(s),
        )
        for t, n, tb, r, s in rows
    ]
    fts_tables: set[str] = set()
    for o in objects:
        if o.type != "table" or not o.sql:
            continue
        if o.sql.lstrip().upper().startswith("CREATE VIRTUAL"):
            m = _USING_RE.search(o.sql)
            o.module = m.group(1).lower() if m else "unknown"
            if o.module == "fts5":
                fts_tables.add(o.name)
                c = _CONTENT_OPTION_RE.search(o.sql)
                if c:
                    o.fts_content = next(g for g in c.groups() if g is not None)
        o.without_rowid = declares_without_rowid(o.sql)
    for o in objects:
        if o.type == "table" and o.module is None:
            for fts in fts_tables:
                if o.name.startswith(fts) and o.name[len(fts) :] in FTS_SHADOW_SUFFIXES:
                    o.shadow_of = fts
        if o.type == "table" and o.module is not None:
            # A virtual table that cannot open (an FTS5 table's damaged config page or
            # structure record; a module this SQLite lacks) has no columns: its shadow
            # tables are read as plain tables, the table itself never.
            try:
                o.columns = _columns(conn, o.name)
            except apsw.Error as exc:
                if isinstance(exc, apsw.InterruptError | apsw.BusyError | apsw.LockedError):
                    raise
        elif o.type == "table":
            o.columns = _columns(conn, o.name)
    schema = Schema(objects)
    schema.fts_owner = _fts_owners(schema, fts_tables)
    return schema


def _columns(conn: apsw.Connection, name: str) -> list[Column]:
    return [
        Column(
            name=str(r[1]),
            decl_type=str(r[2] or ""),
            pk=int(r[5]),
            hidden=int(r[6]),
            notnull=bool(r[3]),
            default=None if r[4] is None else str(r[4]),
        )
        for r in conn.execute(f"PRAGMA table_xinfo({quote_ident(name)})")
    ]


def _fts_owners(schema: Schema, fts_tables: set[str]) -> dict[str, str]:
    """Which base table each FTS table is built from.

    External content: the ``content=`` table (or view). Own content (Hermes 0.19.0):
    the table whose triggers write into the FTS table.
    """
    owners: dict[str, str] = {}
    for name in fts_tables:
        fts = schema.by_name(name)
        assert fts is not None
        if fts.fts_content:
            owners[name] = fts.fts_content
            continue
        for trig in schema.objects:
            if trig.type == "trigger" and trig.sql and inserts_into(trig.sql, name):
                owners[name] = trig.tbl_name
                break
    return owners


def inserts_into(sql: str, name: str) -> bool:
    """Does the trigger ``sql`` hold an ``INSERT INTO`` the table ``name``, written bare
    or quoted in any of SQLite's ways (``"we""ird fts"``, `` `x` ``, ``[x]``)?"""
    forms = [
        re.escape(name) + r"\b",
        re.escape('"' + name.replace('"', '""') + '"'),
        re.escape("`" + name.replace("`", "``") + "`"),
        re.escape(f"[{name}]"),
        re.escape("'" + name.replace("'", "''") + "'"),
    ]
    return re.search(r"\bINSERT\s+INTO\s+(?:" + "|".join(forms) + ")", sql, re.I) is not None
