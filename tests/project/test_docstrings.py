"""Every test says what it pins: each test function in ``tests/`` has a docstring.

Read from the source with ``ast``, as ``test_layers.py`` reads imports, so a test added
without one fails here with its file, line and name.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def undocumented(root: Path) -> list[str]:
    """The test functions under ``root`` without a docstring, as ``file:line name``."""
    out = []
    for path in sorted(root.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        bare = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test")
            and not ast.get_docstring(node)
        ]
        for node in sorted(bare, key=lambda n: n.lineno):
            out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    return out


def test_every_test_has_a_docstring() -> None:
    """No test function in tests/, at any depth, is without a docstring."""
    missing = undocumented(TESTS)
    assert missing == [], "\n" + "\n".join(missing)


def test_a_test_without_one_is_named(tmp_path: Path) -> None:
    """The check finds a test function, a method and an async test without a docstring in a
    nested folder, names each by file and line, and passes documented ones and helpers."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_x.py").write_text(
        "def helper():\n    pass\n\n"
        'def test_documented():\n    """Pins a thing."""\n\n'
        "def test_bare():\n    assert True\n\n"
        "class TestC:\n    def test_method(self):\n        pass\n\n"
        "async def test_async():\n    pass\n"
    )
    (tmp_path / "helpers.py").write_text("def test_not_a_test_file():\n    pass\n")
    assert undocumented(tmp_path) == [
        "sub/test_x.py:7 test_bare",
        "sub/test_x.py:11 test_method",
        "sub/test_x.py:14 test_async",
    ]
