"""What ``statewardenctl status`` and ``recover --help`` import, as whole processes.

``status`` was 16 times ``python -c pass`` and ``recover --help`` 13 times: nearly all of
it imports the commands never used (asyncio through the control socket's server, the
daemon's verification with all it imports, structlog's console renderer and rich
through the progress bar, the recovery engine). Invariant: a command imports what it
uses. These run the installed launcher as a user would and read the modules each run
loaded (``PYTHONPROFILEIMPORTTIME``): no timing, so no flakiness.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from statewarden.cli import status_cmd
from statewarden.daemon.verify import VERIFIED_FILE
from tests.support.cli import installed_ctl_imports
from tests.support.daemon import DaemonProc

# Modules no status and no --help needs; a name covers its submodules.
NEVER = ("asyncio", "dbus_fast", "structlog", "rich", "statewarden.daemon.verify")
NOT_FOR_HELP = (*NEVER, "statewarden.recovery", "apsw", "statewarden.config")


def run(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The installed ``statewardenctl ARGS`` in ``env``; with the modules it imported."""
    return installed_ctl_imports(*args, env=env)


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` (or their submodules) were imported."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def stderr_text(proc: subprocess.CompletedProcess[str]) -> str:
    return "\n".join(x for x in proc.stderr.splitlines() if not x.startswith("import time:"))


def test_status_without_a_daemon_reads_the_database_and_imports_no_more(
    env: dict[str, str], hermes_home: Path
) -> None:
    """No daemon: ``status`` (text, --json, --db) reads the database (apsw) and says it
    computed it locally, and imports neither asyncio, dbus-fast, structlog, rich nor
    the daemon's verification."""
    db = str(hermes_home / "state.db")
    for args in (["status"], ["status", "--json"], ["status", "--db", db, "--json"]):
        proc, modules = run(args, env)
        assert proc.returncode == 0, (args, stderr_text(proc))
        assert db in proc.stdout, args
        if "--json" in args:
            assert json.loads(proc.stdout)["source"] == "local"
        else:
            assert "(daemon not running: computed locally)" in proc.stderr
        assert "apsw" in modules, args  # the facts were read, not skipped
        assert loaded(modules, NEVER) == [], args
        # no config file: every default is known without the config's dataclasses
        assert loaded(modules, ("statewarden.config_sections",)) == [], args


def test_status_with_a_config_file_reads_it(
    env: dict[str, str], hermes_home: Path, tmp_path: Path
) -> None:
    """A config file is read whole (its targets and folders are the config's, not the
    defaults): ``status`` lists the target it names, and a broken file is exit 2."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "state.db").write_bytes((hermes_home / "state.db").read_bytes())
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"targets:\n  - home: {other}\n    name: named\n")
    proc, modules = run(["status", "--config", str(cfg)], env)
    assert proc.returncode == 0, stderr_text(proc)
    assert proc.stdout.startswith(f"named: {other / 'state.db'}"), proc.stdout
    assert "statewarden.config_sections" in modules
    cfg.write_text("watch: [\n")
    proc, _ = run(["status", "--config", str(cfg)], env)
    assert proc.returncode == 2, proc.stdout
    assert len(stderr_text(proc).splitlines()) == 1, proc.stderr


def test_status_from_a_running_daemon_asks_it_without_asyncio(env: dict[str, str]) -> None:
    """With the daemon running, ``status`` gets its answer over the control socket
    (the daemon's pid in it) with a client that imports no asyncio."""
    d = DaemonProc(env)
    try:
        d.wait_for_line("statewarden ready")
        proc, modules = run(["status"], env)
        assert proc.returncode == 0, stderr_text(proc)
        assert proc.stdout.startswith(f"daemon: pid {d.proc.pid}, "), proc.stdout
        assert loaded(modules, NEVER) == []
        proc, modules = run(["status", "--json"], env)
        assert proc.returncode == 0, stderr_text(proc)
        assert json.loads(proc.stdout)["source"] == "daemon"
        assert loaded(modules, NEVER) == []
    finally:
        d.stop()


def test_recover_help_imports_no_engine(env: dict[str, str]) -> None:
    """``recover --help`` (and ``check --help``, which shares the progress option) print
    their help from click alone: no recovery engine, SQLite, config, rich or structlog."""
    for command in ("recover", "check"):
        proc, modules = run([command, "--help"], env)
        assert proc.returncode == 0, stderr_text(proc)
        assert proc.stdout.startswith(f"Usage: statewardenctl {command} [OPTIONS]")
        assert "--progress [auto|bar|json|none]" in proc.stdout
        assert loaded(modules, NOT_FOR_HELP) == [], command


def test_status_reads_the_record_the_daemon_writes() -> None:
    """``status`` names the daemon's verification record without importing the daemon's
    verification: the name it uses is the one the daemon writes."""
    assert status_cmd.VERIFIED_RECORD == VERIFIED_FILE
