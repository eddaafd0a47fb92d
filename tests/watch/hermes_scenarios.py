"""Make the newest Hermes write its own log lines about its database, for real.

Run by the interpreter of the Hermes under test (``hermes_python(NEWEST_HERMES)``), never
imported by the tests' own interpreter::

    python hermes_scenarios.py SCENARIO HOME

Hermes' own ``hermes_logging.setup_logging`` writes ``HOME/logs/agent.log`` in its real
format; the scenario then makes Hermes' state layer meet the situation, with Hermes' own
code. What the test needs to know besides the log (a holder's pid) is printed as one JSON
object on stdout. The scenarios:

- ``wal_first``: SessionDB opens a state.db that is already in WAL mode (SQLite 3.40.1
  has the WAL-reset bug: Hermes keeps WAL and warns).
- ``zeroed`` / ``notadb``: SessionDB opens a state.db of zeros / of text: Hermes moves it
  aside and starts a fresh, empty database.
- ``handles``: five SessionDB writer handles on one state.db in one process.
- ``latch``: Hermes' health latch is told of a malformed-database error.
- ``write_lock``: a second process holds the WAL write lock; Hermes names the holder.
- ``retired_wal``: state.db-wal and -shm are deleted under a live handle; the next write
  halts and Hermes captures the retired generation.
- ``repaired``: an index of state.db no longer matches its table; Hermes' repair runs.
- ``repair_exhausted``: Hermes' repair ledger says three repairs failed on this file.
- ``repair_held``: a damaged state.db whose write lock another process holds.
- ``unclean_exit``: the gateway's integrity check after an unclean exit, on a state.db
  the test damaged (``HOME/state.db`` given).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

# Holds state.db's write lock until stdin closes (a plain SQLite writer, not Hermes).
_LOCK_HOLDER = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "c.execute('BEGIN IMMEDIATE')\n"
    "c.execute('CREATE TABLE IF NOT EXISTS held(x)')\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


def _hold_write_lock(db: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCK_HOLDER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("the lock holder did not start")
    return proc


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.close()
    proc.wait(timeout=30)
    proc.stdout.close()


def _wal_file(db: Path) -> None:
    """An empty database already in WAL mode."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()


def _stale_index(hs: Any, db: Path) -> None:
    """A state.db written by Hermes whose idx_sessions_source no longer matches the
    sessions table (its definition changed under it): integrity_check reports it."""
    handle = hs.SessionDB(db_path=db)
    handle.create_session("s1", source="cli")
    handle.append_message("s1", role="user", content="hello")
    handle.close()
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = 'CREATE INDEX idx_sessions_source ON sessions(id)' "
        "WHERE name = 'idx_sessions_source'"
    )
    conn.commit()
    conn.close()


def run(scenario: str, home: Path) -> dict[str, Any]:
    """Play ``scenario`` in ``home``; what the test needs besides the log."""
    db = home / "state.db"
    hs = importlib.import_module("hermes_state")
    facts: dict[str, Any] = {}
    if scenario == "wal_first":
        _wal_file(db)
        hs.SessionDB(db_path=db).close()
    elif scenario in ("zeroed", "notadb"):
        db.write_bytes(bytes(8192) if scenario == "zeroed" else b"not a database\n" * 500)
        hs.SessionDB(db_path=db).close()
    elif scenario == "handles":
        handles = [hs.SessionDB(db_path=db) for _ in range(5)]
        for handle in handles:
            handle.close()
    elif scenario == "latch":
        health = importlib.import_module("hermes_state_health")
        health.mark_storage_corrupt(db, sqlite3.DatabaseError("database disk image is malformed"))
    elif scenario == "write_lock":
        _wal_file(db)
        holder = _hold_write_lock(db)
        facts["holder_pid"] = holder.pid
        importlib.import_module("hermes_state_lockowners").log_write_lock_holders(db, 20.0)
        _release(holder)
    elif scenario == "retired_wal":
        _wal_file(db)
        handle = hs.SessionDB(db_path=db)
        handle.create_session("s1", source="cli")
        handle.append_message("s1", role="user", content="hello")
        for side in ("-wal", "-shm"):
            os.unlink(f"{db}{side}")
        halted = importlib.import_module("hermes_state_errors").DeletedWalGenerationError
        try:
            handle.append_message("s1", role="user", content="again")
        except halted as exc:
            facts["raised"] = type(exc).__name__
        handle.close()
    elif scenario in ("repaired", "repair_exhausted", "repair_held"):
        repair = importlib.import_module("hermes_state_repair")
        _stale_index(hs, db)
        if scenario == "repair_exhausted":
            for _ in range(3):
                repair._record_repair_outcome(db, repaired=False)
        blocker = _hold_write_lock(db) if scenario == "repair_held" else None
        facts["report"] = {k: str(v) for k, v in repair.repair_state_db_schema(db).items()}
        if blocker is not None:
            _release(blocker)
    elif scenario == "unclean_exit":
        ledger = importlib.import_module("gateway.lifecycle_ledger")
        evidence: dict[str, Any] = {}
        ledger._report_unclean_exit(evidence, home)
        facts["verdict"] = evidence.get("state_db_integrity")
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    return facts


def main() -> None:
    scenario, home = sys.argv[1], Path(sys.argv[2]).resolve()
    os.environ["HERMES_HOME"] = str(home)
    importlib.import_module("hermes_logging").setup_logging(hermes_home=home)
    facts = run(scenario, home)
    logging.shutdown()
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
