"""The page walks of ``recover`` and ``check``, timed against another version of them.

    .venv/bin/python bench/page_walks.py [--spec medium|large] [--repeat 5]
        [--against OTHER_CHECKOUT/statewarden/recovery/pages.py]

On a Hermes-written fixture and on a damaged copy of it (a sector zeroed in the middle
of a ``messages`` leaf, one in an overflow page, an interior page of ``messages``
zeroed whole, which orphans its leaves), times ``DatabaseFile.reachable`` (every page
the b-trees and the freelist reach), ``orphan_table_leaves``, ``zeroed_cells``
(every row whose record runs into a zeroed sector) and ``carve_damaged_leaves`` of
``sessions`` and ``messages``, each on a freshly opened file;
with ``--against``, the same functions of that ``pages.py`` (one from before the walks left it for modules of their own) in the same run, A/B
alternated, and whether both give the same answers. Prints one line per function and
file: the medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import apsw

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lab.hermes_fixtures import LARGE, MEDIUM, built_db  # noqa: E402
from statewarden.demo.damage import PristineFile, schema_roots, write_at  # noqa: E402
from statewarden.recovery.decoding.carving import (  # noqa: E402
    carve_damaged_leaves,
    orphan_table_leaves,
)
from statewarden.recovery.decoding.damaged_cells import zeroed_cells  # noqa: E402
from statewarden.recovery.decoding.pages import DatabaseFile  # noqa: E402
from statewarden.recovery.decoding.schema import Schema, read_schema  # noqa: E402

SPECS = {"medium": MEDIUM, "large": LARGE}
# The tables whose damaged leaves are carved (as recover does for tables it finds damaged).
CARVED = ["sessions", "messages"]
# This checkout's walks, each from its module, as ``walks`` reads them off a module.
OURS = SimpleNamespace(
    DatabaseFile=DatabaseFile,
    orphan_table_leaves=orphan_table_leaves,
    zeroed_cells=zeroed_cells,
    carve_damaged_leaves=carve_damaged_leaves,
)


def load_pages(path: Path) -> ModuleType:
    """``pages.py`` of another checkout, imported under a name of its own."""
    spec = importlib.util.spec_from_file_location("other_pages", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def damaged_copy(src: Path, dest: Path) -> Path:
    """``src`` copied to ``dest`` with a sector zeroed in a ``messages`` leaf and one
    in an overflow page, and an interior page of ``messages`` zeroed."""
    shutil.copyfile(src, dest)
    pf = PristineFile(src)
    ps = pf.page_size
    interior, leaves = pf.tree_pages(schema_roots(src)["messages"])
    write_at(dest, (leaves[len(leaves) // 2] - 1) * ps + 2048, bytes(512))
    # An overflow page: not a b-tree page, its next page number a page of the file.
    count = len(pf.data) // ps
    for n in range(count // 2, count + 1):
        page = pf.page(n)
        if page[0] not in (2, 5, 10, 13) and 1 <= struct.unpack(">I", page[:4])[0] <= count:
            write_at(dest, (n - 1) * ps + 1024, bytes(512))
            break
    below_root = [n for n in interior if n != schema_roots(src)["messages"]]
    if below_root:
        write_at(dest, (below_root[0] - 1) * ps, bytes(ps))
    return dest


def walks(
    module: ModuleType | SimpleNamespace, db: Path, schema: Schema
) -> dict[str, Callable[[], Any]]:
    roots = [o.rootpage for o in schema.objects if o.rootpage] + [1]

    def reachable() -> Any:
        f = module.DatabaseFile(db)
        try:
            return f.reachable(roots)
        finally:
            f.close()

    def orphans() -> Any:
        f = module.DatabaseFile(db)
        try:
            return module.orphan_table_leaves(f, roots)
        finally:
            f.close()

    return {
        "reachable": reachable,
        "orphan_table_leaves": orphans,
        "zeroed_cells": lambda: module.zeroed_cells(db, schema),
        "carve_damaged_leaves": lambda: module.carve_damaged_leaves(db, schema, CARVED),
    }


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--spec", choices=sorted(SPECS), default="medium")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--against", type=Path, help="another checkout's recovery/decoding/pages.py")
    args = p.parse_args()
    src = built_db(SPECS[args.spec])
    conn = apsw.Connection(str(src), flags=apsw.SQLITE_OPEN_READONLY)
    schema = read_schema(conn)
    conn.close()
    other = load_pages(args.against) if args.against else None
    with tempfile.TemporaryDirectory() as tmp:
        files = {"healthy": src, "damaged": damaged_copy(src, Path(tmp) / "state.db")}
        for label, db in files.items():
            ours = walks(OURS, db, schema)
            theirs = walks(other, db, schema) if other else {}
            for name, fn in ours.items():
                mine: list[float] = []
                others: list[float] = []
                same = True
                for _ in range(args.repeat):
                    t, got = timed(fn)
                    mine.append(t)
                    if name in theirs:
                        t, want = timed(theirs[name])
                        others.append(t)
                        same = same and got == want
                line = f"{args.spec} {label} {name}: {statistics.median(mine) * 1000:.1f} ms"
                if others:
                    other_s = statistics.median(others)
                    line += (
                        f"  |  --against: {other_s * 1000:.1f} ms"
                        f"  (ratio {statistics.median(mine) / other_s:.2f}x)"
                        f"  answers {'equal' if same else 'DIFFER'}"
                    )
                print(line, flush=True)


if __name__ == "__main__":
    main()
