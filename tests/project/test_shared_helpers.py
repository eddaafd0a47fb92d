"""Shared test helpers live in ``tests/support/`` only: no test module imports another.

A helper imported from a test module couples two files (a change to one breaks the other
in a way its reader cannot see) and, through the test module, its fixtures and tests.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.repo import REPO

_TEST_MODULE = re.compile(r"^tests(\.\w+)*\.test_\w+$")


def imports_of_test_modules(tests: Path) -> list[str]:
    """``file:line module`` of every import of a test module by a file under ``tests``."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [
                f"{path.relative_to(tests.parent)}:{node.lineno} {n}"
                for n in names
                if _TEST_MODULE.match(n)
            ]
    return found


def test_no_test_module_imports_another() -> None:
    """Every helper two test files share is in ``tests/support/``."""
    assert imports_of_test_modules(REPO / "tests") == []


def test_the_check_finds_such_an_import(tmp_path: Path) -> None:
    """The check is no constant: it names a test module imported by another."""
    (tmp_path / "tests" / "maintenance").mkdir(parents=True)
    (tmp_path / "tests" / "test_a.py").write_text(
        "from tests.maintenance.test_merge import Writer\nfrom tests.support.cli import run_ctl\n"
    )
    assert imports_of_test_modules(tmp_path / "tests") == [
        "tests/test_a.py:1 tests.maintenance.test_merge"
    ]
