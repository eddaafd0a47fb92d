"""Each concept is defined once: the incident kinds table and the README agree, and the
small shared names (sidecar suffixes, ``ProgressFn``, ``Found``, errors) have one home.

These read the source (as ``tests/project/test_layers.py`` does) so a second definition creeping
back in fails here, naming the file and line.
"""

from __future__ import annotations

import ast
import functools
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import get_args

from statewarden import errors
from statewarden.journald import (
    PRIORITY_CRIT,
    PRIORITY_ERR,
    PRIORITY_INFO,
    PRIORITY_WARNING,
    priority_of,
)
from statewarden.kinds import KINDS, SEVERITY_RANK, Kind, Severity
from tests.support.repo import REPO as ROOT

PACKAGE = ROOT / "statewarden"
README = ROOT / "README.md"


@functools.cache
def parsed(path: Path) -> ast.Module:
    """One file's syntax tree, parsed once per test run (the checks below read the
    whole package many times; nothing here changes a file)."""
    return ast.parse(path.read_text(), filename=str(path))


def modules() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(ROOT)), parsed(p)) for p in sorted(PACKAGE.rglob("*.py"))]


def readme_table(header: str) -> list[list[str]]:
    """The rows of the README table whose header line is ``header``."""
    lines = README.read_text().splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("`") for cell in line.strip("|").split("|")])
    return rows


def definitions(name: str) -> list[str]:
    """Where ``name`` is bound at module level (assignment or class), as file:line."""
    found = []
    for shown_as, tree in modules():
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                found.append(f"{shown_as}:{node.lineno}")
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign):
                targets = [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found.append(f"{shown_as}:{node.lineno}")
    return found


class TestIncidentKinds:
    def test_readme_message_id_table_is_the_kinds_table(self) -> None:
        """The README's MESSAGE_ID table lists every kind, in order, with its id."""
        rows = readme_table("| kind | MESSAGE_ID |")
        assert rows == [[kind, k.message_id] for kind, k in KINDS.items()]

    def test_readme_kind_list_is_the_kinds_table(self) -> None:
        """The prose list of kinds in the README names every kind, in order."""
        text = " ".join(README.read_text().split())
        m = re.search(r"Signals become \*\*incidents\*\* \(kinds: (.*?)\)", text)
        assert m is not None
        assert re.findall(r"`(\w+)`", m[1]) == list(KINDS)

    def test_message_ids_are_distinct_128_bit_ids(self) -> None:
        """Every incident kind's MESSAGE_ID is 32 lower-case hex digits, and no two are the same."""
        ids = [k.message_id for k in KINDS.values()]
        assert len(set(ids)) == len(ids)
        assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)

    def test_every_kind_has_each_field(self) -> None:
        """Each entry of the one kinds table says all of a kind: its texts (one-line
        meaning, catalogue subject and text, next step that formats with a profile), a
        known severity and rule, and for a state kind when it is evaluated afresh after a
        restart (a log kind resolves by quiet period instead)."""
        assert list(KINDS)
        for name, kind in KINDS.items():
            assert re.fullmatch(r"[a-z]+(_[a-z]+)*", name), name
            for text in (kind.what, kind.subject, kind.meaning, kind.next_step):
                assert text.strip(), (name, text)
                assert "\n" not in text, (name, text)
            assert kind.severity in SEVERITY_RANK, name
            assert "{" not in kind.next_step.format(profile="work"), name
            assert kind.rule in ("state", "log"), name
            if kind.rule == "state":
                assert kind.after_restart in ("holder_scan", "start_up", "window"), name
                assert kind.quiet_resolve_s is None, name
            else:
                assert kind.after_restart is None, name
            if kind.quiet_resolve_s is not None:
                assert kind.quiet_resolve_s > 0, name

    def test_the_old_tables_are_views_of_the_kinds_table(self) -> None:
        """The router's mutes and folds and the restart check's groups are computed from
        the table's fields, so a new kind needs no entry anywhere else."""
        from statewarden.alerts.router import FOLDED_INTO_CORRUPTION, MAINTENANCE_MUTES
        from statewarden.daemon.verify import VERIFY_AFTER
        from statewarden.incidents.restart import HOLDER_KINDS, START_KINDS
        from statewarden.watch.holders import MAINTENANCE_EXEMPT

        def where(test: Callable[[Kind], bool]) -> frozenset[str]:
            return frozenset(name for name, kind in KINDS.items() if test(kind))

        assert where(lambda k: k.muted_in_maintenance) == MAINTENANCE_MUTES
        assert where(lambda k: k.folded_into_corruption) == FOLDED_INTO_CORRUPTION
        assert where(lambda k: k.after_restart == "holder_scan") == HOLDER_KINDS
        assert where(lambda k: k.after_restart == "start_up") == START_KINDS
        assert where(lambda k: k.maintenance_process_exempt) == MAINTENANCE_EXEMPT
        assert where(lambda k: k.verified_soon_after) == VERIFY_AFTER
        assert "corruption" not in FOLDED_INTO_CORRUPTION
        assert "stale_holder" in MAINTENANCE_MUTES  # a run stops holders: not news

    def test_no_module_lists_kinds_outside_the_table(self) -> None:
        """No literal (dict, set, list, tuple) outside ``statewarden/kinds.py`` names two
        or more kinds: such a list is a second table that a new kind would miss."""
        names = set(KINDS)
        lists = []
        for shown_as, tree in modules():
            if shown_as == "statewarden/kinds.py":
                continue
            for node in ast.walk(tree):
                elements: list[ast.expr | None] = []
                if isinstance(node, ast.Dict):
                    elements = list(node.keys)
                elif isinstance(node, ast.Set | ast.List | ast.Tuple):
                    elements = list(node.elts)
                spelled = [
                    e.value
                    for e in elements
                    if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in names
                ]
                if len(spelled) >= 2:
                    lists.append(f"{shown_as}:{getattr(node, 'lineno', '?')}: {spelled}")
        assert lists == []

    def test_kinds_are_listed_once(self) -> None:
        """No module re-lists the kinds: the table is their only definition."""
        for name in ("KINDS", "MESSAGE_IDS", "STATE_KINDS", "SEVERITY_RANK", "Kind"):
            places = [p for p in definitions(name) if not p.startswith("statewarden/holders/")]
            assert len(places) <= 1, (name, places)
        for name in ("NEXT_STEPS", "MEANINGS"):
            assert definitions(name) == [], name


def functions(name: str) -> list[str]:
    """Where a module-level function ``name`` (or ``_name``) is defined, in the package
    and the tests, as file:line."""
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]):
        tree = parsed(path)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.lstrip(
                "_"
            ) == name.lstrip("_"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


class TestSharedNames:
    def test_each_is_defined_once(self) -> None:
        """Each shared name (ProgressFn, Found, Backoff, the sidecar and bundle suffixes) has one
        definition in the package."""
        for name in ("ProgressFn", "Found", "Backoff", "SIDECAR_SUFFIXES", "BUNDLE_SUFFIXES"):
            assert len(definitions(name)) == 1, (name, definitions(name))

    def test_each_function_is_defined_once(self) -> None:
        """Helpers that were written twice have one home: the damage class's exit code
        (diagnose), the folder fsync (atomic), the double-fork detach (the demo's Hermes
        look-alike, which the tests' fake Hermes calls), the synchronous use of the user
        manager (systemd), a server's text as one line (alerts/http)."""
        homes = {
            "exit_code_for": "statewarden/recovery/diagnose.py",
            "fsync_dir": "statewarden/atomic.py",
            "daemonise": "statewarden/demo/hermes_lookalike.py",
            "call_sync": "statewarden/systemd.py",
            "one_line": "statewarden/alerts/http.py",
        }
        for name, home in homes.items():
            places = functions(name)
            assert len(places) == 1, (name, places)
            assert places[0].startswith(home + ":"), (name, places)

    def test_sidecar_suffixes_are_spelled_only_in_sidecars(self) -> None:
        """Code names -wal, -shm and -journal through ``statewarden.sidecars``, not literals."""
        spelled = []
        for shown_as, tree in modules():
            if shown_as == "statewarden/sidecars.py":
                continue
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and re.fullmatch(r"(state\.db)?-(wal|shm|journal)", node.value)
                ):
                    spelled.append(f"{shown_as}:{node.lineno}: {node.value!r}")
        assert spelled == []

    def test_every_error_lives_in_errors_py(self) -> None:
        """Every StatewardenError subclass is defined in statewarden/errors.py."""
        ours = {
            name
            for name, obj in vars(errors).items()
            if isinstance(obj, type) and issubclass(obj, errors.StatewardenError)
        }
        elsewhere = []
        for shown_as, tree in modules():
            if shown_as == "statewarden/errors.py":
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                    bases |= {b.attr for b in node.bases if isinstance(b, ast.Attribute)}
                    if bases & ours:
                        elsewhere.append(f"{shown_as}:{node.lineno}: {node.name}")
        assert elsewhere == []

    def test_every_public_exception_is_under_the_root(self) -> None:
        """No public exception class derives from a built-in exception but in errors.py
        (under ``StatewardenError``). Left out: private ``_Name`` classes (control flow
        inside one module) and a direct ``BaseException`` (made to pass every
        ``except Exception``)."""
        import builtins

        builtin_errors = {
            name
            for name, obj in vars(builtins).items()
            if isinstance(obj, type) and issubclass(obj, Exception)
        }
        outside = []
        for shown_as, tree in modules():
            if shown_as == "statewarden/errors.py":
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                    if bases & builtin_errors:
                        outside.append(f"{shown_as}:{node.lineno}: {node.name}")
        assert outside == []


class TestExitCodes:
    def test_readme_table_names_every_exit_code(self) -> None:
        """Each exit-code constant is a row of the README's table, with its number."""
        rows = readme_table("| code | name | meaning |")
        named = {name: int(code) for code, name, _meaning in rows}
        constants = {
            name: value
            for name, value in vars(errors).items()
            if name.startswith("EXIT_") and isinstance(value, int)
        }
        assert named == constants

    def test_three_means_three_things_each_named(self) -> None:
        """Exit code 3 has one named constant for each of its three meanings: base damage, recovered
        with loss, stale or lost locks."""
        assert errors.EXIT_BASE_DAMAGE == 3
        assert errors.EXIT_RECOVERED_WITH_LOSS == 3
        assert errors.EXIT_STALE_OR_LOST_LOCKS == 3


class TestJournaldPriorities:
    def test_every_severity_has_its_own_priority(self) -> None:
        """Incident severities map to journald priorities through the one table."""
        assert [priority_of(s) for s in get_args(Severity)] == [
            PRIORITY_INFO,
            PRIORITY_WARNING,
            PRIORITY_ERR,
            PRIORITY_CRIT,
        ]
        assert priority_of("no-such-level") == PRIORITY_INFO

    def test_priorities_are_spelled_only_in_journald(self) -> None:
        """No module but journald.py writes a priority as a number in a level table."""
        places = [p.partition(":")[0] for p in definitions("LEVEL_PRIORITY")]
        assert places == ["statewarden/journald.py"]


class TestRecords:
    def test_the_tailer_reads_records_not_rules(self) -> None:
        """The tailer's modules (watch/logtail.py and the parts it was cut into) cut
        records with watch/records.py and never import the rules."""
        for name in ("logtail", "log_reader", "rotation", "replays"):
            tree = ast.parse((PACKAGE / "watch" / f"{name}.py").read_text())
            imported = {
                node.module
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module
            }
            assert "statewarden.watch.rules" not in imported, name
            assert "statewarden.watch.records" in imported, name


NOT_YET_IMPORTED: frozenset[str] = frozenset()
MODULE_OF = {"pyyaml": "yaml", "dbus-fast": "dbus_fast"}


class TestDependencies:
    def test_every_declared_dependency_is_imported(self) -> None:
        """A dependency nothing imports is not declared (psutil was, for nothing)."""
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        declared = {re.split(r"[<>=\[ ;]", d)[0].lower() for d in project["dependencies"]}
        imported: set[str] = set()
        for _shown_as, tree in modules():
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    imported |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    imported.add(node.module.split(".")[0])
        unused = {
            d
            for d in declared - NOT_YET_IMPORTED
            if MODULE_OF.get(d, d).replace("-", "_") not in imported
        }
        assert unused == set()
        assert "psutil" not in declared
