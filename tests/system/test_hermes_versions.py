"""Every Hermes database generation statewarden supports, through the real commands.

The matrix: 0.19.0 and the oldest PyPI release (0.13.0), each written by its own
``hermes_state.SessionDB``; and the schema-30 shapes of Hermes main
(``lab/hermes_main_writer.py``): a legacy file upgraded by main (inline FTS, prompt
dedupe stopped halfway), one born on main (external-content FTS over views, tool rows
indexed by their first 8 KiB), and the same with the CJK table whose tokenizer is a
loadable extension statewarden cannot load. Each goes through ``status``, a healthy
``check``, ``check`` of a phantom row, ``recover`` of it (every row and every schema
object back, and ``check`` of what it wrote clean, zero-cost usage rows included) and
a real ``maintenance --yes`` run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab import corruption, zero_values
from lab.hermes_fixtures import (
    MAIN_CJK,
    MAIN_EXTERNAL,
    MAIN_LEGACY,
    NEWEST,
    NEWEST_WAL,
    OLDEST,
    TINY,
    AnySpec,
    MainSpec,
    Spec,
    built_db,
    hermes_python,
    make_home,
    writer_env,
)
from statewarden.demo.damage import duplicate_cell
from tests.support.cli import run_ctl
from tests.support.maintenance import maintenance_config
from tests.support.repo import REPO

CJK_WHY = "no such tokenizer: cjk_unicode61"


class Generation:
    def __init__(self, name: str, spec: AnySpec, schema_version: int, journal: str = "wal") -> None:
        self.name = name
        self.spec = spec
        self.schema_version = schema_version
        self.journal = journal  # what status calls its journal mode

    @property
    def unverifiable(self) -> dict[str, str]:
        cjk = isinstance(self.spec, MainSpec) and self.spec.cjk
        return {"messages_fts_cjk": CJK_WHY} if cjk else {}


GENERATIONS = [
    Generation("0.19.0", TINY, 22),
    Generation("0.13.0", OLDEST, 11),
    Generation("0.22.2.post1", NEWEST, 31, journal="rollback"),
    Generation("0.22.2.post1-wal", NEWEST_WAL, 31),
    Generation("main-legacy-fts", MAIN_LEGACY, 30),
    Generation("main-external-fts", MAIN_EXTERNAL, 30),
    Generation("main-cjk", MAIN_CJK, 30),
]


@pytest.fixture(params=GENERATIONS, ids=[g.name for g in GENERATIONS])
def gen(request: pytest.FixtureRequest) -> Generation:
    g: Generation = request.param
    return g


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    return corruption.table_rows(path, sql)


def schema_rows(path: Path) -> list[tuple[object, ...]]:
    return sorted(rows(path, "SELECT type, name, tbl_name, sql FROM sqlite_schema"), key=repr)


def table_contents(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every stored table's rows (virtual tables excluded: their shadow tables are
    compared), with the rowid where the table has one."""
    out = {}
    for name, sql in rows(path, "SELECT name, sql FROM sqlite_schema WHERE type = 'table'"):
        if str(sql).upper().startswith("CREATE VIRTUAL"):
            continue
        q = '"' + str(name).replace('"', '""') + '"'
        without_rowid = "WITHOUT ROWID" in str(sql).upper()
        select = f"SELECT * FROM {q}" if without_rowid else f"SELECT rowid, * FROM {q}"
        out[str(name)] = sorted(rows(path, select), key=repr)
    return out


def assert_same_database(want: Path, got: Path) -> None:
    assert schema_rows(got) == schema_rows(want)
    a, b = table_contents(want), table_contents(got)
    assert sorted(b) == sorted(a)
    for name in a:
        assert b[name] == a[name], name


def check_json(db: Path) -> tuple[int, dict[str, Any]]:
    code, out, err = run_ctl("check", "--db", str(db), "--json", "--progress", "none")
    assert err == ""
    [doc] = json.loads(out)["databases"]
    return code, doc


def assert_check_is_clean(db: Path, gen: Generation) -> None:
    """check of a file recover wrote: exit 0, damage none, no finding (docs/safety.md
    rule 16); a CJK table only "cannot verify"."""
    code, doc = check_json(db)
    assert (code, doc["damage"], doc["findings"], doc["zeroed_cells"]) == (0, "none", [], {})
    assert doc["unverifiable"] == gen.unverifiable


def test_status_reads_the_schema_version(gen: Generation, tmp_path: Path) -> None:
    """status reads each generation's schema version, its journal mode (0.22 on this
    SQLite creates DELETE mode, a file that is WAL stays WAL) and no problem."""
    home = make_home(tmp_path / "home", gen.spec)
    code, out, err = run_ctl("status", "--db", str(home / "state.db"), "--json")
    assert (code, err) == (0, "")
    [db] = json.loads(out)["databases"]
    assert (db["schema_version"], db["journal_mode"], db["problems"]) == (
        gen.schema_version,
        gen.journal,
        [],
    )


def test_healthy_check_has_no_finding(gen: Generation, tmp_path: Path) -> None:
    """Healthy as written: no finding, exit 0. A CJK table is "cannot verify" only."""
    home = make_home(tmp_path / "home", gen.spec)
    code, doc = check_json(home / "state.db")
    assert (code, doc["damage"], doc["findings"]) == (0, "none", [])
    assert doc["unverifiable"] == gen.unverifiable
    assert set(doc["fts"].values()) == {"ok"}
    text = run_ctl("check", "--db", str(home / "state.db"), "--progress", "none")
    assert text.exit_code == 0
    for name, why in gen.unverifiable.items():
        assert f"  {name}: cannot verify ({why}); not counted as damage" in text.stdout


def test_phantom_row_is_found_exactly(gen: Generation, tmp_path: Path) -> None:
    """check finds a phantom row in each generation exactly: base damage (exit 3), one duplicate
    rowid in sessions, every other table and the FTS indexes clean."""
    case = corruption.phantom_row(tmp_path / "db", gen.spec)
    n = len(rows(case.pristine, "SELECT id FROM sessions"))
    code, doc = check_json(case.db)
    assert (code, doc["damage"]) == (3, "base")
    sessions = next(t for t in doc["tables"] if t["name"] == "sessions")
    assert (sessions["scan_rows"], sessions["distinct_keys"], sessions["planner_rows"]) == (
        n + 1,
        n,
        n,
    )
    assert sessions["duplicate_rowids"] == {str(case.phantom["sessions"]): 2}
    others = [t["name"] for t in doc["tables"] if t["name"] != "sessions"]
    for t in doc["tables"]:
        if t["name"] in others:
            assert t["scan_rows"] == t["distinct_keys"] == t["planner_rows"], t["name"]
    # Only sessions and its own indexes carry errors; no FTS or copy finding.
    assert {g["logical_table"] for g in doc["groups"]} == {"sessions"}
    assert set(doc["fts"].values()) == {"ok"}
    assert doc["unverifiable"] == gen.unverifiable
    assert not any("search-index" in f or "FTS" in f for f in doc["findings"])


def recover_json(db: Path, tmp_path: Path) -> tuple[int, dict[str, Any], Path]:
    """``recover`` of ``db`` into ``tmp_path/out``: exit code, report, output; nothing on
    stderr."""
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    code, stdout, err = run_ctl(
        "recover", "--source", str(db), "--output", str(out), "--json", "--progress", "none"
    )
    assert err == ""
    return code, json.loads(stdout), out


def test_recover_brings_back_every_row_and_object(gen: Generation, tmp_path: Path) -> None:
    """recover on each generation's phantom row gives a verified copy equal to the pristine
    database, the duplicate dropped and nothing lost."""
    case = corruption.phantom_row(tmp_path / "db", gen.spec)
    code, doc, out = recover_json(case.db, tmp_path)
    assert (code, doc["verified"], doc["loss_detected"], doc["lost"]) == (0, True, False, {})
    assert doc["tables"]["sessions"]["duplicates_dropped"] == 1
    assert_same_database(case.pristine, out)
    assert_check_is_clean(out, gen)


def test_recover_of_the_healthy_file_is_identical(gen: Generation, tmp_path: Path) -> None:
    """No damage: exit 0, no loss, and the output holds what the source holds (a CJK
    table included, though nothing here can load its tokenizer)."""
    home = make_home(tmp_path / "home", gen.spec)
    out = tmp_path / "out.db"
    code, stdout, err = run_ctl(
        "recover",
        "--source",
        str(home / "state.db"),
        "--output",
        str(out),
        "--json",
        "--progress",
        "none",
    )
    doc = json.loads(stdout)
    assert (code, err, doc["verified"], doc["loss_detected"]) == (0, "", True, False)
    assert doc["verification"]["fts"].get("messages_fts_cjk") == (
        f"cannot verify ({CJK_WHY})" if gen.unverifiable else None
    )
    assert_same_database(home / "state.db", out)
    assert_check_is_clean(out, gen)


def test_page1_and_schema_destroyed_every_session_and_message_back(
    gen: Generation, tmp_path: Path
) -> None:
    """Page 1 and every sqlite_schema page zeroed, header included: no page names a
    table. recover takes the schema from the known layout the rows' shapes fit and
    gives every session and every message back exactly, verified, and what it wrote
    passes check: no loss in any generation (main's CJK search table, in no layout,
    holds only what its messages hold)."""
    case = corruption.zeroed_page1(tmp_path / "db", gen.spec, schema_leaves=True)
    code, doc, out = recover_json(case.db, tmp_path)
    assert doc["verified"] is True
    for table in ("sessions", "messages"):
        sql = f"SELECT rowid, * FROM {table} ORDER BY rowid"
        assert rows(out, sql) == rows(case.pristine, sql), table
    assert (code, doc["loss_detected"], doc["lost"]) == (0, False, {})
    code, checked = check_json(out)
    assert (code, checked["damage"]) == (0, "none")


# Every generation with a session_model_usage table (0.13.0 has none).
WITH_USAGE = [g for g in GENERATIONS if g.name != "0.13.0"]


@pytest.mark.parametrize("gen", WITH_USAGE, ids=lambda g: g.name)
def test_recover_output_of_zero_cost_rows_passes_check(gen: Generation, tmp_path: Path) -> None:
    """A local model's usage rows (costs 0.0, no tokens), one laid out by recover with its
    sixteen zero bytes of costs across a 512-byte boundary (``lab/zero_values.py``), a
    sessions row stored twice: recover brings every row back and check of its output is
    clean (they were "run into zeroed bytes", base damage)."""
    case = corruption.fresh_copy(tmp_path / "db", gen.spec)
    run = zero_values.zeros_on_a_boundary(case.db, tmp_path / "trial")
    duplicate_cell(case.db, "sessions")
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    code, stdout, err = run_ctl(
        "recover", "--source", str(case.db), "--output", str(out), "--json", "--progress", "none"
    )
    doc = json.loads(stdout)
    assert (code, err, doc["verified"], doc["loss_detected"]) == (0, "", True, False)
    assert run in zero_values.zero_runs(out)  # the zeros lie on the boundary
    usage = f"SELECT rowid, * FROM {zero_values.TABLE} ORDER BY rowid"
    assert rows(out, usage) == rows(case.db, usage)
    assert_check_is_clean(out, gen)


def test_damaged_cjk_index_is_derived_damage_and_carried(tmp_path: Path) -> None:
    """A zeroed leaf of the CJK table's docsize: derived damage (exit 1, never 4), the
    table still "cannot verify"; recover carries the rest of it, says so once, and
    every base row comes back."""
    case = corruption.fresh_copy(tmp_path / "db", MAIN_CJK)
    pf = corruption.PristineFile(case.db)
    [leaf] = pf.tree_pages(case.roots["messages_fts_cjk_docsize"])[1]
    corruption.zero_page(case, leaf)
    code, doc = check_json(case.db)
    assert (code, doc["damage"], doc["unverifiable"]) == (
        1,
        "derived",
        {"messages_fts_cjk": CJK_WHY},
    )
    assert [g["object"] for g in doc["groups"]] == ["messages_fts_cjk_docsize"]
    out = tmp_path / "out.db"
    code, stdout, _ = run_ctl(
        "recover", "--source", str(case.db), "--output", str(out), "--json", "--progress", "none"
    )
    rep = json.loads(stdout)
    assert (code, rep["verified"], rep["loss_detected"]) == (0, True, False)
    lost_copy = [n for n in rep["notes"] if "messages_fts_cjk_docsize could not be copied" in n]
    assert len(lost_copy) == 1
    assert schema_rows(out) == schema_rows(case.pristine)
    want, got = table_contents(case.pristine), table_contents(out)
    for name in want:
        if not name.startswith("messages_fts_cjk"):
            assert got[name] == want[name], name
    assert got["messages_fts_cjk_data"] == want["messages_fts_cjk_data"]


def test_main_fixtures_have_the_schema_30_shapes() -> None:
    """What the schema-30 fixtures must hold for the matrix to mean something."""
    for spec in (MAIN_LEGACY, MAIN_EXTERNAL, MAIN_CJK):
        db = built_db(spec)
        names = {str(r[0]) for r in rows(db, "SELECT name FROM sqlite_schema")}
        assert {
            "system_prompts",
            "gateway_heartbeats",
            "conversation_generations",
            "session_turn_leases",
            "state_meta",
            "messages_display_order_insert",
            "idx_sessions_system_prompt_hash",
        } <= names
        assert rows(db, "SELECT version FROM schema_version") == [(30,)]
        assert rows(db, "SELECT count(*) FROM messages WHERE active = 0") == [(3,)]
        long_tools = rows(
            db, "SELECT count(*) FROM messages WHERE role = 'tool' AND length(content) > 8192"
        )
        assert long_tools[0][0] >= 1  # type: ignore[operator]
        meta = {str(k): str(v) for k, v in rows(db, "SELECT key, value FROM state_meta")}
        if spec.layout == "legacy":
            assert "fts_storage_version" not in meta
            assert meta["fts_optimize_available"] == "1"
            # the v25 dedupe stopped after 2 of the 4 inline prompts
            assert rows(db, "SELECT count(*) FROM sessions WHERE system_prompt IS NOT NULL") == [
                (2,)
            ]
        else:
            assert meta["fts_storage_version"] == "3"
            assert "messages_fts_src" in names
            # soft-deleted rows are in the FTS index: the view and triggers ignore active
            soft = {r[0] for r in rows(db, "SELECT id FROM messages WHERE active = 0")}
            indexed = {r[0] for r in rows(db, "SELECT id FROM messages_fts_docsize")}
            assert soft <= indexed
        assert ("messages_fts_cjk" in names) == spec.cjk


def test_main_cjk_table_names_the_unloadable_tokenizer() -> None:
    """Hermes main's CJK search table is built with the cjk_unicode61 tokenizer named in its SQL."""
    [(sql,)] = rows(
        built_db(MAIN_CJK), "SELECT sql FROM sqlite_schema WHERE name = 'messages_fts_cjk'"
    )
    assert "tokenize='cjk_unicode61'" in str(sql)


# -- maintenance -------------------------------------------------------------------------


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


def test_maintenance_repairs_the_phantom_row(gen: Generation, config: Path, tmp_path: Path) -> None:
    """maintenance repairs each generation's phantom row in place: outcome repaired, no loss, the
    post-check clean and the file equal to the pristine one."""
    case = corruption.phantom_row(tmp_path / "home", gen.spec)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "statewarden.cli.ctl",
            "maintenance",
            "--db",
            str(case.db),
            "--yes",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["outcome"] == "repaired"
    assert rep["recover"]["loss_detected"] is False
    assert rep["post_check"]["ok"] is True
    assert_same_database(case.pristine, case.db)


@pytest.mark.parametrize(
    "gen", [g for g in GENERATIONS if isinstance(g.spec, Spec)], ids=lambda g: g.name
)
def test_hermes_reopens_the_repaired_file_and_sees_every_row(
    gen: Generation, config: Path, tmp_path: Path
) -> None:
    """After a real repair of the phantom row, that Hermes' own SessionDB opens the file,
    finds every session and reads every message, and leaves the schema byte for byte as
    it was (a Hermes that finds a trigger's stored text different rewrites it on every
    open)."""
    assert isinstance(gen.spec, Spec)
    case = corruption.phantom_row(tmp_path / "home", gen.spec)
    code, _out, err = run_ctl("maintenance", "--db", str(case.db), "--yes", "--json")
    assert code == 0, err
    schema_before = schema_rows(case.db)
    counted = rows(
        case.db,
        "SELECT s.id, count(m.id) FROM sessions s LEFT JOIN messages m"
        " ON m.session_id = s.id GROUP BY s.id",
    )
    want = {str(sid): n for sid, n in counted}
    script = (
        "import json, sys; from hermes_state import SessionDB; db = SessionDB();"
        " ids = json.loads(sys.argv[1]);"
        " print(json.dumps({i: (db.get_session(i) is not None) and len(db.get_messages(i))"
        " for i in ids})); db.close()"
    )
    out = subprocess.run(
        [hermes_python(gen.spec.hermes), "-c", script, json.dumps(sorted(want))],
        env=writer_env(case.db.parent),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == want
    assert schema_rows(case.db) == schema_before
