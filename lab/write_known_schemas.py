"""Write ``statewarden/recovery/known_schemas.py`` from databases Hermes itself wrote.

Run ``python lab/write_known_schemas.py`` after a Hermes release changes its schema;
``tests/recovery/test_page1.py`` checks that the checked-in module still equals what
this script writes. Each layout's ``sqlite_schema`` rows (type, name, tbl_name, sql, in
the order Hermes created them) are taken from the lab's fixtures: 0.13.0 and 0.19.0
written by the installed hermes-agent releases, schema 30 (born on main, and a 0.19.0
file opened by main) by ``lab/hermes_main_writer.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import apsw

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lab.hermes_fixtures import MAIN_EXTERNAL, MAIN_LEGACY, OLDEST, TINY, AnySpec, built_db

TARGET = Path(__file__).resolve().parent.parent / "statewarden" / "recovery" / "known_schemas.py"

# layout name -> (what it is, the fixture written by that Hermes)
LAYOUTS: dict[str, tuple[str, AnySpec]] = {
    "0.13.0": ("Hermes 0.13.0 (schema_version 11)", OLDEST),
    "0.19.0": ("Hermes 0.19.0 (own-content FTS5)", TINY),
    "30-external": ("Hermes main, schema_version 30, external-content FTS5", MAIN_EXTERNAL),
    "30-legacy": ("Hermes main, schema_version 30, a 0.19.0 file opened by main", MAIN_LEGACY),
}

# layout -> the layout its file was created in, when a later Hermes upgraded it: the
# fixture of ``30-legacy`` is a 0.19.0 file opened by main (``hermes_main_writer.py``)
UPGRADED_FROM: dict[str, str] = {"30-legacy": "0.19.0"}

HEADER = '''# ruff: noqa: E501
"""The schemas Hermes writes, as its ``sqlite_schema`` rows: one entry per layout.

Written by ``lab/write_known_schemas.py`` from databases the Hermes releases themselves
wrote; do not edit by hand. ``lost_schema.py`` rebuilds the schema of a file whose
page 1 and schema pages are destroyed from the layout its rows' shapes match.
"""

from __future__ import annotations

# layout -> (description, ((type, name, tbl_name, sql), ...) in creation order)
KNOWN_SCHEMAS: dict[str, tuple[str, tuple[tuple[str, str, str, str | None], ...]]] = {
'''


UPGRADED_HEADER = """
# layout -> the layout its file was created in, when a later Hermes upgraded it: only
# that layout's objects were created with the file, before any row was written (their
# rows come first above); the others were created by the upgrade, after rows existed
UPGRADED_FROM: dict[str, str] = {
"""


def schema_rows(db: Path) -> list[tuple[str, str, str, str | None]]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY rowid"
        ).fetchall()
    finally:
        conn.close()
    return [(str(t), str(n), str(tb), None if s is None else str(s)) for t, n, tb, s in rows]


def module_text() -> str:
    out = [HEADER]
    for layout, (what, spec) in LAYOUTS.items():
        out.append(f"    {layout!r}: (\n        {what!r},\n        (\n")
        for row in schema_rows(built_db(spec)):
            out.append(f"            {row!r},\n")
        out.append("        ),\n    ),\n")
    out.append("}\n")
    out.append(UPGRADED_HEADER)
    for layout, first in UPGRADED_FROM.items():
        out.append(f"    {layout!r}: {first!r},\n")
    out.append("}\n")
    return "".join(out)


def main() -> None:
    TARGET.write_text(module_text())
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
