"""Write ``statewarden/recovery/layouts/`` from databases Hermes itself wrote.

Run ``python lab/write_known_schemas.py`` after a Hermes release changes its schema;
``tests/recovery/test_known_layouts.py`` checks that every checked-in file still equals
what this script writes. Each layout is one JSON file: its ``sqlite_schema`` rows (type,
name, tbl_name, sql, in the order Hermes created them, the texts byte for byte), the
``schema_version`` its file holds, and the layout the file was created in when a later
Hermes upgraded it. ``index.json`` lists the layouts in the order recovery tries them.

The rows are taken from the lab's fixtures: 0.13.0, 0.19.0 and 0.22.2.post1 (schema 31)
written by the installed releases, schema 30 (born on main, and a 0.19.0 file opened by
main) by ``lab/hermes_main_writer.py``; and from copies of those fixtures opened once by
Hermes 0.22's own ``SessionDB`` (the upgrades users make: columns added by ``ALTER TABLE``
land at the end of a table, so an upgraded file's column order differs from a fresh one's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import apsw

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lab.hermes_fixtures import (
    MAIN_EXTERNAL,
    MAIN_LEGACY,
    NEWEST,
    NEWEST_HERMES,
    OLDEST,
    TINY,
    AnySpec,
    built_db,
    hermes_python,
    writer_env,
)

TARGET = Path(__file__).resolve().parent.parent / "statewarden" / "recovery" / "layouts"

# layout name -> (what it is, the fixture written by that Hermes)
LAYOUTS: dict[str, tuple[str, AnySpec]] = {
    "0.13.0": ("Hermes 0.13.0 (schema_version 11)", OLDEST),
    "0.19.0": ("Hermes 0.19.0 (own-content FTS5)", TINY),
    "30-external": ("Hermes main, schema_version 30, external-content FTS5", MAIN_EXTERNAL),
    "30-legacy": ("Hermes main, schema_version 30, a 0.19.0 file opened by main", MAIN_LEGACY),
    "31-external": ("Hermes 0.22, schema_version 31, external-content FTS5", NEWEST),
}

# layout name -> (what it is, the fixture a Hermes 0.22 SessionDB opens once, upgrading it)
OPENED_BY_NEWEST: dict[str, tuple[str, AnySpec]] = {
    "31-from-0.19.0": (
        "Hermes 0.22, schema_version 31, a 0.19.0 file opened by 0.22 (own-content FTS5)",
        TINY,
    ),
    "31-from-30-external": (
        "Hermes 0.22, schema_version 31, a schema-30 file of main opened by 0.22",
        MAIN_EXTERNAL,
    ),
    "31-from-30-legacy": (
        "Hermes 0.22, schema_version 31, a 0.19.0 file opened by main, then by 0.22",
        MAIN_LEGACY,
    ),
    "31-from-0.13.0": (
        "Hermes 0.22, schema_version 31, a 0.13.0 file opened by 0.22 (own-content FTS5)",
        OLDEST,
    ),
}

# layout -> the layout its file was created in, when a later Hermes upgraded it: only
# that layout's objects were created with the file, before any row was written
UPGRADED_FROM: dict[str, str] = {
    "30-legacy": "0.19.0",
    "31-from-0.19.0": "0.19.0",
    "31-from-30-external": "30-external",
    "31-from-30-legacy": "0.19.0",
    "31-from-0.13.0": "0.13.0",
}

KnownRow = tuple[str, str, str, str | None]

OPEN_ONCE = (
    "import os, sys; os.environ['HERMES_HOME'] = sys.argv[1];"
    " from hermes_state import SessionDB; SessionDB().close()"
)


def schema_rows(db: Path) -> list[KnownRow]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY rowid"
        ).fetchall()
    finally:
        conn.close()
    return [(str(t), str(n), str(tb), None if s is None else str(s)) for t, n, tb, s in rows]


def schema_version(db: Path) -> int:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(str(conn.execute("SELECT version FROM schema_version").fetchall()[0][0]))
    finally:
        conn.close()


def opened_by_newest(spec: AnySpec, home: Path) -> Path:
    """A copy of ``spec``'s fixture in ``home``, opened and closed once by Hermes 0.22."""
    home.mkdir(parents=True, exist_ok=True)
    db = home / "state.db"
    shutil.copyfile(built_db(spec), db)
    subprocess.run(
        [hermes_python(NEWEST_HERMES), "-c", OPEN_ONCE, str(home)],
        check=True,
        env=writer_env(home),
        capture_output=True,
    )
    return db


def layout_facts(layout: str) -> tuple[str, int, list[KnownRow]]:
    """(description, schema_version, sqlite_schema rows) of a real file of ``layout``."""
    if layout in LAYOUTS:
        what, spec = LAYOUTS[layout]
        db = built_db(spec)
        return what, schema_version(db), schema_rows(db)
    what, spec = OPENED_BY_NEWEST[layout]
    with tempfile.TemporaryDirectory() as tmp:
        db = opened_by_newest(spec, Path(tmp) / "home")
        return what, schema_version(db), schema_rows(db)


def layout_text(layout: str) -> str:
    """The data file of ``layout``: one object row a line, the texts exact."""
    what, version, rows = layout_facts(layout)
    head = {
        "layout": layout,
        "description": what,
        "schema_version": version,
        "upgraded_from": UPGRADED_FROM.get(layout),
    }
    lines = [f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}," for k, v in head.items()]
    objects = [f"    {json.dumps(list(r), ensure_ascii=False)}" for r in rows]
    return "{\n" + "\n".join(lines) + '\n  "objects": [\n' + ",\n".join(objects) + "\n  ]\n}\n"


def index_text() -> str:
    return json.dumps({"layouts": [*LAYOUTS, *OPENED_BY_NEWEST]}, indent=2) + "\n"


def main() -> None:
    TARGET.mkdir(exist_ok=True)
    (TARGET / "index.json").write_text(index_text())
    for layout in [*LAYOUTS, *OPENED_BY_NEWEST]:
        (TARGET / f"{layout}.json").write_text(layout_text(layout))
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
