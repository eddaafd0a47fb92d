"""A size ratchet: no class of statewarden passes 400 lines and no module 800. The ones
that did when the cap came in are listed in ``tests/project/sizes_allowed.py`` with the
size they had; a listed one may shrink, never grow, and leaves the list once it fits
(functions are capped at 100 lines in ``test_function_length.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import statewarden
from tests.project.sizes_allowed import CLASSES, MODULES

MAX_CLASS_LINES = 400
MAX_MODULE_LINES = 800
PACKAGE = Path(statewarden.__file__).parent


def module_sizes(root: Path = PACKAGE) -> dict[str, int]:
    """``statewarden/x/y.py`` -> its number of lines."""
    return {
        str(p.relative_to(root.parent)): len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted(root.rglob("*.py"))
    }


def class_sizes(root: Path = PACKAGE) -> dict[str, int]:
    """``statewarden/x/y.py:Class`` (nested: ``Outer.Inner``) -> its number of lines."""
    out: dict[str, int] = {}
    for p in sorted(root.rglob("*.py")):
        rel = str(p.relative_to(root.parent))

        def visit(node: ast.AST, prefix: str, rel: str = rel) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    name = f"{prefix}{child.name}"
                    out[f"{rel}:{name}"] = (child.end_lineno or child.lineno) - child.lineno + 1
                    visit(child, f"{name}.")

        visit(ast.parse(p.read_text(encoding="utf-8")), "")
    return out


def over(sizes: dict[str, int], cap: int, allowed: dict[str, int]) -> list[str]:
    """What breaks the ratchet: over the cap and not listed, grown past its listed size,
    or listed though it fits now (take it off the list)."""
    out = []
    for name, n in sorted(sizes.items()):
        if n > cap and name not in allowed:
            out.append(f"{name}: {n} lines, over {cap}: cut it at its seams")
        elif name in allowed and n > allowed[name]:
            out.append(f"{name}: {n} lines, grew past the {allowed[name]} it is allowed")
        elif name in allowed and n <= cap:
            out.append(f"{name}: {n} lines, fits now: take it off sizes_allowed.py")
    out += [f"{name}: listed in sizes_allowed.py but gone" for name in allowed if name not in sizes]
    return out


def test_no_class_over_400_lines_but_the_listed_ones_which_only_shrink() -> None:
    """Every class is at most 400 lines, or listed and no bigger than listed."""
    assert over(class_sizes(), MAX_CLASS_LINES, CLASSES) == []


def test_no_module_over_800_lines_but_the_listed_ones_which_only_shrink() -> None:
    """Every module is at most 800 lines, or listed and no bigger than listed."""
    assert over(module_sizes(), MAX_MODULE_LINES, MODULES) == []


def test_the_ratchet_catches_growth_and_newcomers() -> None:
    """The check itself: a new offender, a listed one that grew, one that fits now."""
    assert over({"a.py": 801}, 800, {}) == ["a.py: 801 lines, over 800: cut it at its seams"]
    assert over({"a.py": 900}, 800, {"a.py": 850}) == [
        "a.py: 900 lines, grew past the 850 it is allowed"
    ]
    assert over({"a.py": 700}, 800, {"a.py": 850}) == [
        "a.py: 700 lines, fits now: take it off sizes_allowed.py"
    ]
    assert over({"a.py": 840}, 800, {"a.py": 850}) == []
