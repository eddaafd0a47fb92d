"""The recovery engine's floors (README, "Modules"): each floor imports only the floors
below it, so a decoder never learns where a row comes back from, and evidence never
how a file is built.

    decoding/   pure reads of one open file
    evidence/   where a row comes back from, and what proves it
    the work copy, its diagnosis, the report and the output's verification
    building/   one build of the output file
    the commands (recover, check, captures)
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.repo import REPO

RECOVERY = REPO / "statewarden" / "recovery"
# floor -> the recovery modules on it; a module of a floor may import its own floor and
# those below it, never one above.
FLOORS: list[tuple[str, set[str]]] = [
    ("decoding", {p.stem for p in (RECOVERY / "decoding").glob("*.py")} - {"__init__"}),
    ("evidence", {p.stem for p in (RECOVERY / "evidence").glob("*.py")} - {"__init__"}),
    (
        "work copy",
        {
            "bundle",
            "header_fit",
            "diagnose",
            "diagnosis",
            "table_scans",
            "fts_checks",
            "report",
            "verify",
        },
    ),
    ("building", {p.stem for p in (RECOVERY / "building").glob("*.py")} - {"__init__"}),
    ("commands", {"recover", "check", "captures", "stale_counts", "accounting"}),
]


def floor_of(module: str) -> int:
    name = module.rsplit(".", 1)[-1]
    for i, (_floor, names) in enumerate(FLOORS):
        if name in names:
            return i
    raise AssertionError(f"{module}: on no floor of this test; place it")


def recovery_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if not node.module.startswith("statewarden.recovery."):
            continue
        if (REPO / node.module.replace(".", "/") / "__init__.py").exists():
            # from a floor's package, a module of it: "from ...decoding import journal"
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        else:
            found.append((node.lineno, node.module))
    return found


def test_every_module_of_the_engine_is_on_a_floor() -> None:
    """A new module of statewarden/recovery is placed on a floor (here and in the README)."""
    for path in RECOVERY.rglob("*.py"):
        if path.stem != "__init__":
            floor_of(path.stem)


def test_no_floor_imports_one_above_it() -> None:
    """Decoding imports only decoding; evidence only decoding and evidence; the work copy
    and its diagnosis no part of the build; the build none of the commands."""
    above = []
    for path in sorted(RECOVERY.rglob("*.py")):
        if path.stem == "__init__":
            continue
        here = floor_of(path.stem)
        for line, module in recovery_imports(path):
            if floor_of(module) > here:
                above.append(
                    f"{path.relative_to(REPO)}:{line}: {FLOORS[here][0]} imports {module},"
                    f" on {FLOORS[floor_of(module)][0]}"
                )
    assert above == []


def test_the_check_catches_an_import_from_above(tmp_path: Path) -> None:
    """The check is no check that cannot fail: a decoder importing the build is found."""
    planted = tmp_path / "pages.py"
    planted.write_text("from statewarden.recovery.building.rebuild import Rebuild\n")
    ((_line, module),) = recovery_imports(planted)
    assert floor_of(module) > floor_of("pages")
