"""The layer rule of the package, enforced on the import graph.

Each module belongs to one *part*; a part may import only the parts listed for it
(and itself). The rule is written down in the README's module map; this test reads
every module's imports (as written, including function-level ones) and fails on an
import that breaks it, naming the file, the line and the rule.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "statewarden"

# The base: small modules every part may use (errors, config, logging, SQLite access,
# the D-Bus client, the control socket transport, ...).
BASE = "base"
# part -> the parts it may import, besides itself and the base.
ALLOWED: dict[str, frozenset[str]] = {
    BASE: frozenset(),
    "recovery": frozenset(),
    "holders": frozenset(),
    "incidents": frozenset(),
    "watch": frozenset({"holders", "incidents"}),
    "alerts": frozenset({"incidents"}),
    "maintenance": frozenset({"recovery", "holders", "incidents", "alerts"}),
    "daemon": frozenset({"recovery", "holders", "incidents", "watch", "alerts", "maintenance"}),
    # The demo runs the real commands on a sandbox: everything below the CLI.
    "demo": frozenset(
        {"recovery", "holders", "incidents", "watch", "alerts", "maintenance", "daemon"}
    ),
    "cli": frozenset(
        {"recovery", "holders", "incidents", "watch", "alerts", "maintenance", "daemon", "demo"}
    ),
}
SUBPACKAGES = frozenset(ALLOWED) - {BASE}


def part_of(module: str) -> str:
    """``statewarden.recovery.decoding.scan`` -> ``recovery``; a top-level module is the base."""
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in SUBPACKAGES:
        return parts[1]
    return BASE


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # "from statewarden import holders" imports the subpackage itself
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] == "statewarden"]


def file_violations(path: Path, module: str, shown_as: str) -> list[str]:
    here = part_of(module)
    out: list[str] = []
    for line, target in imports_of(path):
        there = part_of(target)
        if there in (here, BASE) or there in ALLOWED[here]:
            continue
        out.append(f"{shown_as}:{line}: {here} may not import {there} ({target})")
    return out


def violations() -> list[str]:
    out: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        shown_as = str(path.relative_to(PACKAGE.parent))
        out += file_violations(path, module_name(path), shown_as)
    return out


def test_every_import_follows_the_layer_rule() -> None:
    """No module imports from a part above it or beside it that the layer rule forbids."""
    assert violations() == []


def test_the_base_imports_no_part() -> None:
    """The base is the bottom: a base module importing a part would be a cycle in waiting."""
    bad = [v for v in violations() if ": base may not import" in v]
    assert bad == []


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    """The check can fail: an engine importing the daemon is reported with its line."""
    assert part_of("statewarden.recovery.decoding.scan") == "recovery"
    assert part_of("statewarden.daemon") == "daemon"
    assert part_of("statewarden.sqlite") == BASE
    probe = tmp_path / "probe.py"
    probe.write_text("import os\n\nfrom statewarden.daemon import Daemon\n")
    assert file_violations(probe, "statewarden.recovery.probe", "probe.py") == [
        "probe.py:3: recovery may not import daemon (statewarden.daemon)",
        "probe.py:3: recovery may not import daemon (statewarden.daemon.Daemon)",
    ]
    probe.write_text("from statewarden.alerts import router\n")
    assert file_violations(probe, "statewarden.watch.probe", "probe.py") == [
        "probe.py:1: watch may not import alerts (statewarden.alerts)",
        "probe.py:1: watch may not import alerts (statewarden.alerts.router)",
    ]


def test_every_module_is_in_a_known_part() -> None:
    """Every module of the package belongs to a part the layer rule knows."""
    names = [module_name(p) for p in PACKAGE.rglob("*.py")]
    assert {part_of(n) for n in names} <= set(ALLOWED)
    assert any(part_of(n) == "recovery" for n in names)


# -- public faces: other parts import only what a subpackage's __init__ names ------------


def face_violations(path: Path, module: str, shown_as: str) -> list[str]:
    """Each name this file imports from another subpackage that the subpackage's
    ``__all__`` does not name, as ``file:line: ...``, saying what to do."""
    here = part_of(module)
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        there = part_of(node.module)
        if there == here or there not in SUBPACKAGES:
            continue
        package = f"statewarden.{there}"
        if node.module != package:
            names = ", ".join(alias.name for alias in node.names)
            out.append(
                f"{shown_as}:{node.lineno}: imports {names} from {node.module}, a module "
                f"inside {package}: import it from {package} (its face)"
            )
            continue
        public = set(importlib.import_module(package).__all__)
        for alias in node.names:
            if alias.name not in public:
                out.append(
                    f"{shown_as}:{node.lineno}: imports {alias.name} from {node.module}, "
                    f"which {package} does not name: add it to HOMES in "
                    f"statewarden/{there}/__init__.py, or use a name it has"
                )
    return out


def test_other_parts_import_only_public_names() -> None:
    """A module imports from another subpackage only the names its ``__init__`` makes public."""
    out: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        out += face_violations(path, module_name(path), str(path.relative_to(PACKAGE.parent)))
    assert out == [], "\n" + "\n".join(out)


def test_every_subpackage_names_its_api() -> None:
    """Each subpackage has an ``__all__``; each name in it is there on the package (loaded
    from its home on first use) and is the object its home module defines."""
    for part in sorted(SUBPACKAGES):
        package = importlib.import_module(f"statewarden.{part}")
        assert isinstance(package.__all__, list), part
        homes: dict[str, str] = getattr(package, "HOMES", {})
        for name in package.__all__:
            home = homes.get(name)
            value = getattr(package, name)
            if home:
                assert value is getattr(importlib.import_module(f"{package.__name__}.{home}"), name)
            elif home == "":
                assert value is importlib.import_module(f"{package.__name__}.{name}")


def test_the_face_check_names_the_import(tmp_path: Path) -> None:
    """The check can fail: a private name of another subpackage is reported with its line
    and what to do; a public one, and any name of the importer's own part, pass."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from statewarden.recovery import check_database\n"
        "from statewarden.recovery import scan_table\n"
        "from statewarden.recovery.check import check_database\n"
    )
    assert face_violations(probe, "statewarden.maintenance.probe", "probe.py") == [
        "probe.py:2: imports scan_table from statewarden.recovery, which "
        "statewarden.recovery does not name: add it to HOMES in "
        "statewarden/recovery/__init__.py, or use a name it has",
        "probe.py:3: imports check_database from statewarden.recovery.check, a module "
        "inside statewarden.recovery: import it from statewarden.recovery (its face)",
    ]
    assert face_violations(probe, "statewarden.recovery.probe", "probe.py") == []


def typed_names(part: str) -> dict[str, str]:
    """The names a subpackage's ``__init__`` imports for mypy (the ``else:`` of its
    ``if not TYPE_CHECKING:``), each with its home as HOMES spells it."""
    path = PACKAGE / part / "__init__.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.UnaryOp):
            for stmt in node.orelse:
                if isinstance(stmt, ast.ImportFrom) and stmt.module:
                    home = stmt.module.removeprefix(f"statewarden.{part}.")
                    found.update({alias.name: home for alias in stmt.names})
    return found


def test_the_typed_names_are_the_homes() -> None:
    """mypy reads each public name through the ``else:`` import block of the package's
    ``__init__``; it names exactly HOMES (a submodule itself needs no line), so the face
    another part imports through is typed as the home module defines it."""
    for part in sorted(SUBPACKAGES):
        homes: dict[str, str] = getattr(importlib.import_module(f"statewarden.{part}"), "HOMES", {})
        assert typed_names(part) == {n: h for n, h in homes.items() if h}, part


# -- no import circles: the modules import each other in one direction -------------------


def module_of(name: str) -> str | None:
    """The module an imported name lands in: ``statewarden.daemon.core.Daemon`` ->
    ``statewarden.daemon.core``; a name of a subpackage's face -> its home module."""
    parts = name.split(".")
    for n in range(len(parts), 1, -1):
        candidate = ".".join(parts[:n])
        path = PACKAGE.parent / Path(*parts[:n])
        if path.with_suffix(".py").is_file():
            return candidate
        if (path / "__init__.py").is_file():
            rest = parts[n:]
            homes: dict[str, str] = getattr(importlib.import_module(candidate), "HOMES", {})
            if rest and rest[0] in homes:
                home = homes[rest[0]] or rest[0]
                return f"{candidate}.{home}"
            return candidate
    return None


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the modules it imports (as written: module level, function level and
    under TYPE_CHECKING alike). A module's own packages are left out: Python has them
    loaded before the module (``from statewarden.demo import damage`` in
    ``statewarden.demo.sandbox`` imports ``damage``, not the package again)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        here = module_name(path)
        targets = {module_of(name) for _line, name in imports_of(path)}
        graph[here] = {
            t for t in targets if t is not None and t != here and not here.startswith(t + ".")
        }
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each set of modules that reach one another (Tarjan's strongly
    connected components of more than one module), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_module_imports_itself_back() -> None:
    """No import circle in the package: no two modules reach each other through their
    imports, TYPE_CHECKING ones included (the daemon's parts receive what they use
    instead of importing the daemon back)."""
    assert circles(import_graph()) == []


def test_the_circle_check_finds_a_circle() -> None:
    """The check can fail: a part importing the daemon core that imports it is a circle,
    and a chain that does not come back is none."""
    graph = {
        "statewarden.daemon.core": {"statewarden.daemon.runs", "statewarden.errors"},
        "statewarden.daemon.runs": {"statewarden.daemon.core"},
        "statewarden.errors": set(),
    }
    assert circles(graph) == [["statewarden.daemon.core", "statewarden.daemon.runs"]]
    graph["statewarden.daemon.runs"] = {"statewarden.errors"}
    assert circles(graph) == []
    assert module_of("statewarden.daemon.core.Daemon") == "statewarden.daemon.core"
    assert module_of("statewarden.daemon.Daemon") == "statewarden.daemon.core"


LAB = PACKAGE.parent / "lab"


def lab_graph() -> dict[str, set[str]]:
    """lab module -> the lab modules it imports (module level and function level alike)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(LAB.glob("*.py")):
        here = f"lab.{path.stem}"
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = (
                    [node.module] if node.module != "lab" else [f"lab.{a.name}" for a in node.names]
                )
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found |= {n for n in names if n.startswith("lab.") and n != here}
        graph[here] = found
    return graph


def test_the_lab_has_no_import_circle() -> None:
    """The lab's modules import each other in one direction too (the fixtures Hermes
    writes at the bottom, the damage above them, the fuzz lab above the damage): a
    function-level import of the fuzz lab from the damage lab made a circle once."""
    graph = lab_graph()
    assert "lab.hermes_fixtures" in graph
    assert circles(graph) == []
