"""The README's module map names every module of the package, and only modules that exist.

A newcomer finds a module's job in the map (``README.md``, "Modules"): a module added
without a row, or a row left behind when a module moves, sends them to the wrong room.
A row's first cell names one or more modules in backticks: a path from the repository's
root (``statewarden/holders/scan.py``), a bare name continuing the folder of the path
before it in the same cell (``desktop_lookalike.py``), or a folder (``statewarden/cli/``),
which covers the modules directly in it. Package ``__init__`` files are the parts'
faces and need no row.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.repo import REPO

PACKAGE = REPO / "statewarden"
_ROW = re.compile(r"^\| (`[^|]+`)(?: [^|]*)? \|", re.M)
_NAME = re.compile(r"`([^`]+)`")


def mapped_names(readme: str) -> list[str]:
    """Every module or folder path the map's rows name in their first cell."""
    names: list[str] = []
    for cell in _ROW.findall(readme):
        folder = ""
        for name in _NAME.findall(cell):
            if "/" in name.rstrip("/"):
                names.append(name)
                folder = name if name.endswith("/") else name.rsplit("/", 1)[0] + "/"
            elif folder and name.endswith(".py"):
                names.append(folder + name)
    return [n for n in names if n.startswith("statewarden/")]


def modules() -> list[str]:
    return sorted(
        str(p.relative_to(REPO))
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    )


def unmapped(names: list[str], found: list[str]) -> list[str]:
    folders = {n for n in names if n.endswith("/")}
    files = set(names)
    return [m for m in found if m not in files and m.rsplit("/", 1)[0] + "/" not in folders]


def test_every_module_has_a_row() -> None:
    """A module no row names fails here by its path."""
    missing = unmapped(mapped_names((REPO / "README.md").read_text()), modules())
    assert not missing, f"modules the README's module map does not name: {missing}"


def test_every_row_names_a_module_that_exists() -> None:
    """A row naming a module that moved or went fails here by the name."""
    stale = [n for n in mapped_names((REPO / "README.md").read_text()) if not (REPO / n).exists()]
    assert not stale, f"the README's module map names what does not exist: {stale}"


def test_the_map_check_catches_a_missing_and_a_stale_row(tmp_path: Path) -> None:
    """The reading above is not vacuous: a planted map misses one module, names a gone one."""
    readme = (
        "| `statewarden/holders/scan.py`, `units.py` | x |\n"
        "| `statewarden/cli/` | commands |\n"
        "| `statewarden/gone.py` | y |\n"
    )
    names = mapped_names(readme)
    assert names == [
        "statewarden/holders/scan.py",
        "statewarden/holders/units.py",
        "statewarden/cli/",
        "statewarden/gone.py",
    ]
    found = [
        "statewarden/cli/ctl.py",
        "statewarden/holders/scan.py",
        "statewarden/holders/locks.py",
    ]
    assert unmapped(names, found) == ["statewarden/holders/locks.py"]
    assert [n for n in names if not (REPO / n).exists()] == ["statewarden/gone.py"]
