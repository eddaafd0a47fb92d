"""The texts an installed Hermes logs about its database, read from its source.

Never imported (each release lives in its own venv) and never copied into this
repository: the source is parsed with ``ast`` at test time.

**Which modules** (``SCANNED``): the state layer, ``hermes_state*.py``; the gateway,
``gateway/*.py`` (the top level only: ``gateway/platforms/``, ``relay/`` and
``builtin_hooks/`` talk to chat services, not to state.db); and the two modules that
write messages into session storage outside them, ``run_agent.py`` (0.19.0) and
``agent/session_persistence.py`` (0.22: "Session DB append_message failed", the JSONL
divert).

**Which calls**: ``<logger>.info/warning/warn/error/critical/exception/fatal(...)``,
``<logger>.log(LEVEL, ...)`` unless LEVEL is ``logging.DEBUG``, and ``print(...)`` to
stdout or stderr (a gateway run by systemd prints into its unit's journal, which
statewarden follows). DEBUG is left out: Hermes' file handlers write INFO and up
(``agent.log``) and WARNING and up (``errors.log``), so a DEBUG line never reaches a
file statewarden reads unless the user turns debug logging on.

**Which texts**: the first argument when it is a string constant, an f-string (its
fields become ``{}``), a ``%``-format or a ``+`` concatenation, and the strings a name
passed there is bound to: in the function (an assignment, a ``for`` over a table, a
tuple unpacked from a table, a parameter filled in at the module's call sites), in the
module, or imported from another scanned module, and what a function of the module
returns. A call whose text none of that finds is *unresolved* and listed apart, so it
can be named too.

**Which texts are about the database** (``ABOUT_THE_DATABASE``): those naming state.db,
SessionDB / Session DB, session storage / store / database, WAL, -wal / -shm, FTS,
SQLite, integrity, corrupt, malformed, repair, journal_mode, checkpoint, VACUUM,
quarantine, the word database, or a lock (``lock``, ``locks``, ``locked``): the words
Hermes uses when its storage is in trouble. A line about a lock that is not the
database's (the kanban dispatcher lock, a session's compression lock) is caught too and
has to be ignored by name, with the reason: a wider net costs a table entry, a narrower
one lets a new storage message through unseen.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import product
from pathlib import Path

from lab.hermes_fixtures import HERMES_VERSION, REPO

ABOUT_THE_DATABASE = re.compile(
    r"state\.db|session ?db|session (?:storage|store|database)|\bWAL\b|-wal\b|-shm\b"
    r"|\bFTS|sqlite|integrity|corrupt|malformed|repair|journal_mode|checkpoint|vacuum"
    r"|quarantin|\bdatabase|\block(?:s|ed)?\b|backup|transcript|spool|persist",
    re.IGNORECASE,
)
# The calls that log (``exception`` logs at ERROR; ``log`` takes the level first).
LOG_METHODS = {
    "info": "info",
    "warning": "warning",
    "warn": "warning",
    "error": "error",
    "critical": "critical",
    "fatal": "critical",
    "exception": "error",
    "log": "log",
}
PLACEHOLDER = "{}"
# run_agent.py's prints are the output of its own command line (``python run_agent.py``),
# which no Hermes service runs: only its log calls are read.
PRINTS_NOT_READ = ("run_agent.py",)
# How deep names are followed (a name bound to a name bound to ...).
MAX_DEPTH = 8


@dataclass(frozen=True)
class LoggedText:
    """One text a log or print call of Hermes writes (``{}`` and ``%`` fields unfilled)."""

    module: str  # relative to site-packages, e.g. "gateway/lifecycle_ledger.py"
    line: int
    level: str  # "info", "warning", "error", "critical", "log" (level not known), "print"
    template: str
    logger: str  # the logger's name ("" for a print)


@dataclass(frozen=True)
class Unresolved:
    """A log or print call whose text the source does not tell."""

    module: str
    line: int
    level: str
    expression: str  # the first argument's source


def site_packages(version: str) -> Path | None:
    """Where Hermes ``version`` is installed (None: it is not): 0.19.0 in the tests' own
    interpreter, any other in ``.venv-hermes-<version>`` (packaging/setup-dev.sh)."""
    if version == HERMES_VERSION:
        spec = importlib.util.find_spec("hermes_state")
        try:
            installed = importlib.metadata.version("hermes-agent")
        except importlib.metadata.PackageNotFoundError:
            return None
        if spec is None or spec.origin is None or installed != version:
            return None
        return Path(spec.origin).parent
    for site in sorted((REPO / f".venv-hermes-{version}").glob("lib/python3*/site-packages")):
        if (site / "hermes_state.py").is_file():
            return site
    return None


def scanned_modules(site: Path) -> list[Path]:
    """The state layer and gateway modules of the Hermes installed in ``site``."""
    out = sorted(site.glob("hermes_state*.py")) + sorted((site / "gateway").glob("*.py"))
    for extra in ("run_agent.py", "agent/session_persistence.py"):
        if (site / extra).is_file():
            out.append(site / extra)
    return out


def _logger_name(tree: ast.Module, dotted: str) -> str:
    """The name of ``logger = logging.getLogger(...)`` in the module (``__name__``: the
    module's dotted name)."""
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        call = node.value
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "getLogger" and call.args:
            arg = call.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                return arg.value
            return dotted
    return dotted


class _Module:
    """One parsed module: its tree, parents and the names bound at each level."""

    def __init__(self, site: Path, path: Path, all_modules: dict[str, _Module]) -> None:
        self.site = site
        self.rel = str(path.relative_to(site))
        self.tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        self.dotted = self.rel.removesuffix(".py").replace("/", ".")
        self.logger = _logger_name(self.tree, self.dotted)
        self.all = all_modules
        self.parent: dict[ast.AST, ast.AST] = {}
        self.functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self.calls: list[ast.Call] = []
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.Call):
                self.calls.append(node)

    def scopes(self, node: ast.AST) -> list[ast.AST]:
        """The functions around ``node``, innermost first, then the module."""
        out: list[ast.AST] = []
        at: ast.AST | None = node
        while at is not None:
            at = self.parent.get(at)
            if isinstance(at, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                out.append(at)
        out.append(self.tree)
        return out


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope`` outside the functions and classes nested in it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _target_paths(target: ast.expr, name: str, path: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    """Where ``name`` sits in an assignment target: () for the whole value, (1, 0) for
    ``a, (b, c)``'s ``b``."""
    if isinstance(target, ast.Name):
        return [path] if target.id == name else []
    if isinstance(target, ast.Tuple | ast.List):
        out = []
        for i, elt in enumerate(target.elts):
            out.extend(_target_paths(elt, name, (*path, i)))
        return out
    return []


@dataclass(frozen=True)
class _Binding:
    value: ast.expr
    path: tuple[int, ...]
    iterated: bool  # the value is iterated (a ``for`` target): its items are bound
    module: _Module


class _Resolver:
    def __init__(self, modules: dict[str, _Module]) -> None:
        self.modules = modules
        # Every call of the scanned modules by the name it calls (``f(...)``, ``x.f(...)``).
        self.calls: dict[str, list[tuple[ast.Call, _Module]]] = {}
        for mod in modules.values():
            for node in mod.calls:
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name is not None:
                    self.calls.setdefault(name, []).append((node, mod))

    # -- names -> the expressions they may hold --------------------------------------
    def bindings(self, mod: _Module, name: str, scope: ast.AST) -> list[_Binding]:
        out: list[_Binding] = []
        for node in _own_nodes(scope):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for path in _target_paths(target, name):
                        out.append(_Binding(node.value, path, False, mod))
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                for path in _target_paths(node.target, name):
                    out.append(_Binding(node.value, path, False, mod))
            elif isinstance(node, ast.NamedExpr) and node.target.id == name:
                out.append(_Binding(node.value, (), False, mod))
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                for path in _target_paths(node.target, name):
                    out.append(_Binding(node.iter, path, True, mod))
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            out.extend(self.parameter_bindings(mod, scope, name))
        return out

    def parameter_bindings(
        self, mod: _Module, func: ast.FunctionDef | ast.AsyncFunctionDef, name: str
    ) -> list[_Binding]:
        params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
        kwonly = [a.arg for a in func.args.kwonlyargs]
        if name not in params and name not in kwonly:
            return []
        out: list[_Binding] = []
        defaults = func.args.defaults
        if name in params:
            index = params.index(name)
            first_default = len(params) - len(defaults)
            if index >= first_default:
                out.append(_Binding(defaults[index - first_default], (), False, mod))
        method = bool(params) and params[0] in ("self", "cls")
        for node, caller in self.calls.get(func.name, []):
            callee = node.func
            for kw in node.keywords:
                if kw.arg == name:
                    out.append(_Binding(kw.value, (), False, caller))
            if name in params:
                index = params.index(name) - (
                    1 if method and isinstance(callee, ast.Attribute) else 0
                )
                if 0 <= index < len(node.args) and not isinstance(node.args[index], ast.Starred):
                    out.append(_Binding(node.args[index], (), False, caller))
        return out

    def name_values(
        self, mod: _Module, name: ast.Name, depth: int
    ) -> list[tuple[ast.expr, _Module]]:
        """The expressions a name may hold, each with the module it is written in."""
        for scope in mod.scopes(name):
            found = self.bindings(mod, name.id, scope)
            if found:
                return [v for b in found for v in self.bound(b, depth)]
            imported = self.imported(mod, name.id, scope, depth)
            if imported:
                return imported
        return []

    def imported(
        self, mod: _Module, name: str, scope: ast.AST, depth: int
    ) -> list[tuple[ast.expr, _Module]]:
        """What ``from <scanned module> import name`` in ``scope`` binds."""
        for node in _own_nodes(scope):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                continue
            for alias in node.names:
                other = self.modules.get(node.module.replace(".", "/") + ".py")
                if (alias.asname or alias.name) != name or other is None:
                    continue
                bound = self.bindings(other, alias.name, other.tree)
                return [v for b in bound for v in self.bound(b, depth)]
        return []

    def bound(self, binding: _Binding, depth: int) -> list[tuple[ast.expr, _Module]]:
        values = [(binding.value, binding.module)]
        if binding.iterated:
            values = [i for v, m in values for i in self.items(v, m, depth)]
        for index in binding.path:
            values = [e for v, m in values for e in self.element(v, m, index, depth)]
        return values

    def candidates(
        self, expr: ast.expr, mod: _Module, depth: int
    ) -> list[tuple[ast.expr, _Module]]:
        """What ``expr`` may evaluate to, as expressions: names followed."""
        if depth > MAX_DEPTH:
            return []
        if isinstance(expr, ast.Name):
            return [
                c
                for v, m in self.name_values(mod, expr, depth + 1)
                for c in self.candidates(v, m, depth + 1)
            ]
        if isinstance(expr, ast.Subscript):
            index = expr.slice
            if isinstance(index, ast.Constant) and isinstance(index.value, int):
                return [
                    c
                    for v, m in self.candidates(expr.value, mod, depth + 1)
                    for e in self.element(v, m, index.value, depth + 1)
                    for c in self.candidates(*e, depth + 1)
                ]
            return [
                c
                for v, m in self.candidates(expr.value, mod, depth + 1)
                for i in self.values(v, m, depth + 1)
                for c in self.candidates(*i, depth + 1)
            ]
        if (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and expr.func.attr == "get"
        ):
            return [
                c
                for v, m in self.candidates(expr.func.value, mod, depth + 1)
                if isinstance(v, ast.Dict)
                for i in self.values(v, m, depth + 1)
                for c in self.candidates(*i, depth + 1)
            ]
        if isinstance(expr, ast.IfExp):
            return self.candidates(expr.body, mod, depth + 1) + self.candidates(
                expr.orelse, mod, depth + 1
            )
        if isinstance(expr, ast.BoolOp):
            return [c for v in expr.values for c in self.candidates(v, mod, depth + 1)]
        return [(expr, mod)]

    def values(self, expr: ast.expr, mod: _Module, depth: int) -> list[tuple[ast.expr, _Module]]:
        """A table's values (a dict's values, a tuple's or list's items)."""
        if isinstance(expr, ast.Dict):
            return [(v, mod) for v in expr.values]
        if isinstance(expr, ast.Tuple | ast.List | ast.Set):
            return [(e, mod) for e in expr.elts if not isinstance(e, ast.Starred)]
        return []

    def items(self, expr: ast.expr, mod: _Module, depth: int) -> list[tuple[ast.expr, _Module]]:
        """What a ``for`` over ``expr`` binds, one expression per item."""
        out: list[tuple[ast.expr, _Module]] = []
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            method = expr.func.attr
            for table, m in self.candidates(expr.func.value, mod, depth + 1):
                if isinstance(table, ast.Dict) and method == "items":
                    out.extend(
                        (ast.Tuple(elts=[k, v], ctx=ast.Load()), m)
                        for k, v in zip(table.keys, table.values, strict=True)
                        if k is not None
                    )
                elif isinstance(table, ast.Dict) and method == "values":
                    out.extend((v, m) for v in table.values)
            return out
        for table, m in self.candidates(expr, mod, depth + 1):
            if isinstance(table, ast.Dict):
                out.extend((k, m) for k in table.keys if k is not None)
            else:
                out.extend(self.values(table, m, depth + 1))
        return out

    def element(
        self, expr: ast.expr, mod: _Module, index: int, depth: int
    ) -> list[tuple[ast.expr, _Module]]:
        out = []
        for value, m in self.candidates(expr, mod, depth + 1):
            if isinstance(value, ast.Tuple | ast.List) and index < len(value.elts):
                out.append((value.elts[index], m))
        return out

    # -- expressions -> texts ---------------------------------------------------------
    def texts(self, expr: ast.expr, mod: _Module, depth: int = 0) -> list[str]:
        """The texts ``expr`` may be, fields as ``{}`` ([] when it is not known)."""
        if depth > MAX_DEPTH:
            return []
        if isinstance(expr, ast.Constant):
            return [expr.value] if isinstance(expr.value, str) else []
        if isinstance(expr, ast.JoinedStr):
            parts = [
                [str(v.value)]
                if isinstance(v, ast.Constant)
                else self.texts_or_field(v.value, mod, depth)
                for v in expr.values
                if isinstance(v, ast.Constant | ast.FormattedValue)
            ]
            return ["".join(p) for p in product(*parts)]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left = self.texts_or_field(expr.left, mod, depth)
            right = self.texts_or_field(expr.right, mod, depth)
            return [a + b for a, b in product(left, right)]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
            return self.texts(expr.left, mod, depth + 1)
        if isinstance(expr, ast.Call):
            return self.call_texts(expr, mod, depth)
        out: list[str] = []
        for value, m in self.candidates(expr, mod, depth + 1):
            if value is not expr:
                out.extend(self.texts(value, m, depth + 1))
        return out

    def texts_or_field(self, expr: ast.expr, mod: _Module, depth: int) -> list[str]:
        """The texts of a part of a text; a part not known is a field (``{}``)."""
        found = sorted(set(self.texts(expr, mod, depth + 1)))
        # A part with many values is a field as far as a rule is concerned.
        return found if 0 < len(found) <= 4 else [PLACEHOLDER]

    def call_texts(self, call: ast.Call, mod: _Module, depth: int) -> list[str]:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "format":
            return self.texts(func.value, mod, depth + 1)
        if isinstance(func, ast.Name):
            out = []
            for defined in mod.functions.get(func.id, []):
                for node in ast.walk(defined):
                    if isinstance(node, ast.Return) and node.value is not None:
                        out.extend(self.texts(node.value, mod, depth + 1))
            return out
        return []


def _is_debug(expr: ast.expr) -> bool:
    return (isinstance(expr, ast.Attribute) and expr.attr == "DEBUG") or (
        isinstance(expr, ast.Constant) and expr.value == 10
    )


def _log_call(call: ast.Call) -> tuple[str, ast.expr] | None:
    """(level, the text argument) of a log or print call worth reading, else None."""
    func = call.func
    if isinstance(func, ast.Name) and func.id == "print":
        for kw in call.keywords:
            if kw.arg == "file" and not (
                isinstance(kw.value, ast.Attribute) and kw.value.attr in ("stderr", "stdout")
            ):
                return None
        return ("print", call.args[0]) if call.args else None
    if not isinstance(func, ast.Attribute) or func.attr not in LOG_METHODS:
        return None
    receiver = func.value
    who = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", "")
    if "log" not in who.lower():
        return None  # warnings.warn, self.error(...) of a parser, ...
    args = call.args
    if func.attr == "log":
        if len(args) < 2 or _is_debug(args[0]):
            return None
        return ("log", args[1])
    return (LOG_METHODS[func.attr], args[0]) if args else None


def _meaningful(template: str) -> bool:
    """A text with some words of its own, not only fields."""
    return len(re.sub(r"\{\}|%[-#0-9. +]*[sdifrx]|\W", "", template)) >= 8


@functools.cache
def read_texts(site: Path) -> tuple[list[LoggedText], list[Unresolved]]:
    """Every text the scanned modules of the Hermes in ``site`` log or print (all of
    them, not only those about the database), and the calls whose text is not known
    (read once per site: callers do not change the lists)."""
    modules: dict[str, _Module] = {}
    for path in scanned_modules(site):
        mod = _Module(site, path, modules)
        modules[mod.rel] = mod
    resolver = _Resolver(modules)
    found: list[LoggedText] = []
    unresolved: list[Unresolved] = []
    for mod in modules.values():
        for node in mod.calls:
            call = _log_call(node)
            if call is None:
                continue
            level, arg = call
            if level == "print" and mod.rel in PRINTS_NOT_READ:
                continue
            texts = sorted({t for t in resolver.texts(arg, mod) if _meaningful(t)})
            if not texts:
                unresolved.append(Unresolved(mod.rel, node.lineno, level, ast.unparse(arg)))
                continue
            logger = "" if level == "print" else mod.logger
            found.extend(LoggedText(mod.rel, node.lineno, level, t, logger) for t in texts)
    return found, unresolved


def about_the_database(found: LoggedText) -> bool:
    """Every text of the state layer; a text of the other modules that names the
    database (``ABOUT_THE_DATABASE``)."""
    if found.module.startswith("hermes_state"):
        return True
    return ABOUT_THE_DATABASE.search(found.template) is not None


_FIELD_RE = re.compile(
    r"%(?:\(\w+\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?([diouxXeEfFgGcrsa%])|\{\}"
)


def sample_line(template: str, value: str) -> str:
    """``template`` with every field filled: numbers with 3, the rest with ``value``."""

    def fill(m: re.Match[str]) -> str:
        conv = m.group(1)
        if conv == "%":
            return "%"
        if conv is not None and conv in "diouxXeEfFgG":
            return "3"
        return value

    return _FIELD_RE.sub(fill, template)
