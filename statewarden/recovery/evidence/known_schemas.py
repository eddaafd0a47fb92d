"""The schemas Hermes writes, as its ``sqlite_schema`` rows: one data file per layout.

The files in ``layouts/`` (read with ``importlib.resources``, so they are found inside an
installed wheel too) are written by ``lab/write_known_schemas.py`` from databases the
Hermes releases themselves wrote, fresh and upgraded; do not edit them by hand.
``index.json`` lists the layouts in the order they are tried; each ``<layout>.json`` holds
its description, the ``schema_version`` its file holds, the layout its file was created
in when a later Hermes upgraded it, and its ``sqlite_schema`` rows (type, name, tbl_name,
sql) in creation order, the texts byte for byte (Hermes compares a trigger's stored text
with its own and rewrites it when they differ). ``lost_schema.py`` rebuilds the schema
of a file whose page 1 and schema pages are destroyed from the layout its rows' shapes
match; ``schema_text.py`` puts back a table's text a changed byte cut short.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import apsw

from statewarden.recovery.decoding.schema import Schema, read_schema
from statewarden.sqlite import quote_ident

KnownRow = tuple[str, str, str, str | None]  # (type, name, tbl_name, sql)

LAYOUTS_FOLDER = "layouts"


@dataclass(frozen=True)
class KnownLayout:
    """One layout Hermes writes."""

    name: str
    description: str
    schema_version: int  # the version its ``schema_version`` table holds
    upgraded_from: str | None  # the layout its file was created in, if an upgrade made it
    objects: tuple[KnownRow, ...]  # its ``sqlite_schema`` rows in creation order


def _read(name: str) -> Any:
    folder = resources.files("statewarden.recovery").joinpath(LAYOUTS_FOLDER)
    return json.loads(folder.joinpath(name).read_text(encoding="utf-8"))


def _layout(name: str) -> KnownLayout:
    doc = _read(f"{name}.json")
    if doc["layout"] != name:
        raise ValueError(f"{LAYOUTS_FOLDER}/{name}.json names layout {doc['layout']!r}")
    rows = tuple(
        (str(t), str(n), str(tb), None if s is None else str(s)) for t, n, tb, s in doc["objects"]
    )
    return KnownLayout(
        name, doc["description"], int(doc["schema_version"]), doc["upgraded_from"], rows
    )


def load_layouts() -> dict[str, KnownLayout]:
    """Every known layout, in the order ``index.json`` lists them."""
    return {name: _layout(name) for name in _read("index.json")["layouts"]}


LAYOUTS: dict[str, KnownLayout] = load_layouts()

# layout -> (description, ((type, name, tbl_name, sql), ...) in creation order)
KNOWN_SCHEMAS: dict[str, tuple[str, tuple[KnownRow, ...]]] = {
    name: (layout.description, layout.objects) for name, layout in LAYOUTS.items()
}

# layout -> the layout its file was created in, when a later Hermes upgraded it: only
# that layout's objects were created with the file, before any row was written (their
# rows come first); the others were created by the upgrade, after rows existed
UPGRADED_FROM: dict[str, str] = {
    name: layout.upgraded_from for name, layout in LAYOUTS.items() if layout.upgraded_from
}

# The newest ``schema_version`` of a layout statewarden knows: a file holding a higher
# one was written by a Hermes newer than these layouts.
NEWEST_KNOWN_VERSION = max(layout.schema_version for layout in LAYOUTS.values())


ForeignKey = tuple[str, str, str, str]  # (table, column, referenced table, its column)


def layout_schema(rows: tuple[KnownRow, ...]) -> tuple[Schema, list[ForeignKey]]:
    """The schema a layout's rows make, and its foreign keys, read from an in-memory
    database (its root pages mean nothing here; its columns are exact)."""
    conn = apsw.Connection(":memory:")
    try:
        for _type, _name, _tbl, sql in rows:
            if sql is None:
                continue
            try:
                conn.execute(sql)
            except apsw.SQLError:
                continue  # an FTS shadow table its FTS5 table created already
        schema = read_schema(conn)
        fks = [
            (o.name, str(r[3]), str(r[2]), str(r[4]))
            for o in schema.base_tables()
            for r in conn.execute(f"PRAGMA foreign_key_list({quote_ident(o.name)})")
            if r[4] is not None
        ]
        return schema, fks
    finally:
        conn.close()
