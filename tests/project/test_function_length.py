"""No function of statewarden passes 100 lines: a longer one is cut at its seams (named
steps), not scrolled through."""

from __future__ import annotations

import ast
from pathlib import Path

import statewarden

MAX_LINES = 100
PACKAGES = (
    "maintenance",
    "holders",
    "watch",
    "incidents",
    "alerts",
    "recovery",
    "daemon",
    "cli",
    "demo",
)


def long_functions(root: Path) -> list[str]:
    """``path:line name (n lines)`` of each function in ``root`` longer than MAX_LINES."""
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_LINES:
                    out.append(f"{path}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_over_100_lines() -> None:
    """Every function of every package, and of the ground floor, is at most 100 lines."""
    base = Path(statewarden.__file__).parent
    assert all((base / p).is_dir() for p in PACKAGES)
    assert {p.name for p in base.iterdir() if (p / "__init__.py").is_file()} == set(PACKAGES)
    # The whole tree at once: the ground floor's modules too.
    assert long_functions(base) == []


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    """The check itself finds a function of 101 lines (it is not blind)."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(f"def f() -> None:\n{body}\n")
    assert long_functions(tmp_path) == [f"{tmp_path / 'm.py'}:1 f (101 lines)"]
