"""statewardenctl demo: run for real, as root and as a second uid, with Ctrl-C, SIGTERM
and a full disk; afterwards no process it started runs and no file is left outside
(or, without --keep, inside) its sandbox. The shipped database is checked against what
the real Hermes writes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab.demo_database import build_demo_database
from statewarden.demo.database import write_database
from tests.support.mount_namespace import sh_in_private_mounts
from tests.support.privileges import needs_root
from tests.support.repo import REPO

CTL = [sys.executable, "-m", "statewarden.cli.ctl", "demo"]
NOBODY = "65534"


def contents(db: Path) -> dict[str, Any]:
    """Schema, header values and every row of every table (FTS shadow tables too)."""
    conn = apsw.Connection(
        f"file:{db}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        schema = sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema"))
        out: dict[str, Any] = {"schema": schema}
        for pragma in ("page_size", "user_version", "application_id", "auto_vacuum", "encoding"):
            out[pragma] = conn.execute(f"PRAGMA {pragma}").fetchall()
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
        ).fetchall():
            out[str(name)] = sorted(conn.execute(f'SELECT * FROM "{name}"').fetchall(), key=repr)
        return out
    finally:
        conn.close()


def test_the_shipped_database_is_what_hermes_writes(tmp_path: Path) -> None:
    """The real Hermes (hermes_state.SessionDB), run with the demo's build arguments,
    writes the same schema and the same rows as the shipped copy holds."""
    hermes = contents(build_demo_database(tmp_path / "hermes"))
    (tmp_path / "shipped").mkdir()
    shipped = contents(write_database(tmp_path / "shipped" / "state.db"))
    assert len(hermes["sessions"]) == 40
    assert len(hermes["messages"]) == 700
    assert shipped.keys() == hermes.keys()
    for key in hermes:
        assert shipped[key] == hermes[key], f"the shipped database differs in {key}"


def test_write_database_never_overwrites(tmp_path: Path) -> None:
    """The unpacked file is new: an existing file (or a planted symlink) is not written."""
    target = tmp_path / "elsewhere"
    target.write_text("keep me")
    (tmp_path / ".state.db.unpacking").symlink_to(target)
    with pytest.raises(FileExistsError):
        write_database(tmp_path / "state.db")
    assert target.read_text() == "keep me"
    assert not (tmp_path / "state.db").exists()


def clean_env(base: Path) -> dict[str, str]:
    """An environment whose home, XDG folders and TMPDIR are empty folders under ``base``."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("STATEWARDEN_", "XDG_", "HERMES_"))
    }
    for name in ("HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"):
        d = base / name.lower()
        d.mkdir(mode=0o700)
        env[name] = str(d)
    return env


def leftovers(base: Path) -> list[str]:
    """Files under ``base`` (the folders of :func:`clean_env`) and processes whose command
    line names a path under it or that work in a folder under it (a step's command runs
    ``python -m statewarden.cli.ctl``, in the sandbox: its command line names no path)."""
    files = [str(p) for p in base.rglob("*") if not p.is_dir()]
    marker = os.fsencode(str(base))
    procs = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    cmdline = f.read()
                cwd = os.readlink(f"/proc/{entry.name}/cwd")
            except OSError:
                continue
            if marker in cmdline or cwd.startswith(str(base) + "/"):
                procs.append(f"pid {entry.name} in {cwd}: {cmdline!r}")
    return files + procs


def failed_steps(proc: subprocess.CompletedProcess[str]) -> str:
    """The steps that did not end as expected, their output first (a long report is cut
    in a test log): what a failing demo test names, then the rest."""
    lines = []
    try:
        rep = json.loads(proc.stdout)
        for s in rep.get("steps", []):
            if not s.get("ok"):
                lines.append(f"step {s['name']} exited {s['exit_code']}:\n{s['output']}")
    except (json.JSONDecodeError, AttributeError, KeyError, TypeError):
        pass
    return "\n".join([*lines, proc.stderr, proc.stdout])


def run_demo(
    env: dict[str, str],
    *args: str,
    prefix: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(prefix or []), *CTL, *args],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_demo_exits_0_and_leaves_nothing(tmp_path: Path) -> None:
    """``statewardenctl demo </dev/null``: every step as expected, the phantom row found
    and repaired, and afterwards no process and no file of its own."""
    env = clean_env(tmp_path)
    proc = run_demo(env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "$ statewardenctl holders" in out
    assert "hermes serve --isolated" in out
    assert "44 distinct ids: 1 phantom duplicate" in out
    assert "[exit 3: as expected]" in out  # check before
    assert ": repaired" in out
    assert "damage: none (healthy)" in out
    assert "Demo finished: every step as expected." in out
    assert "Traceback" not in out + proc.stderr
    assert leftovers(tmp_path) == []


def test_json_and_keep(tmp_path: Path) -> None:
    """--json gives every step with its command, exit code and outcome; --keep leaves
    the sandbox (repaired database, quarantined original) but no process."""
    env = clean_env(tmp_path)
    proc = run_demo(env, "--json", "--keep")
    assert proc.returncode == 0, failed_steps(proc)
    rep = json.loads(proc.stdout)
    assert rep["schema_version"] == 1
    assert rep["ok"] is True
    assert rep["kept"] is True
    names = [s["name"] for s in rep["steps"]]
    assert names[:4] == ["status", "holders", "check", "maintenance"]
    assert names[-2:] == ["check-again", "quarantine"]
    codes = {s["name"]: s["exit_code"] for s in rep["steps"]}
    assert codes["check"] == 3
    assert codes["check-again"] == 0
    assert all(s["ok"] for s in rep["steps"])
    assert rep["steps"][0]["command"] == "statewardenctl status"
    sandbox = Path(rep["sandbox"])
    assert sandbox.parent == tmp_path / "tmpdir"
    db = Path(rep["setup"]["db"])
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    ids = [r[0] for r in conn.execute("SELECT id FROM sessions NOT INDEXED")]
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()
    assert len(ids) == len(set(ids))
    assert list((sandbox / "state" / "statewarden" / "quarantine").glob("*/state.db"))
    assert [x for x in leftovers(tmp_path) if x.startswith("pid")] == []
    shutil.rmtree(sandbox)
    assert leftovers(tmp_path) == []


@needs_root
def test_demo_as_a_second_uid() -> None:
    """As uid 65534 (no root, no Hermes): exit 0, the fence keeps the respawned serve
    --isolated out, nothing left behind."""
    base = Path(tempfile.mkdtemp(prefix="statewarden-demo-test-"))
    try:
        base.chmod(0o755)
        env = clean_env(base)
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(base)], check=True)
        prefix = ["setpriv", "--reuid", NOBODY, "--regid", NOBODY, "--clear-groups"]
        proc = run_demo(env, "--json", prefix=prefix)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rep = json.loads(proc.stdout)
        maintenance = next(s for s in rep["steps"] if s["name"] == "maintenance")
        assert maintenance["exit_code"] == 0, maintenance["output"]
        assert "close-desktop-app" not in [s["name"] for s in rep["steps"]]
        assert leftovers(base) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize(
    ("sig", "step"),
    [
        (signal.SIGINT, "holders"),
        (signal.SIGTERM, "holders"),
        (signal.SIGINT, "check"),
        (signal.SIGINT, "maintenance --yes --force"),
    ],
    ids=["SIGINT-holders", "SIGTERM-holders", "SIGINT-check", "SIGINT-maintenance"],
)
def test_interrupted_demo_cleans_up(tmp_path: Path, sig: signal.Signals, step: str) -> None:
    """Ctrl-C (or SIGTERM) as a step's command is started (holders, check with its
    helper processes, maintenance): exit 130, every process it started stopped (the
    daemonised serve --isolated, the step's command and what that started too), the
    sandbox removed. (An interrupt between a command's fork and its Popen object left
    that command running on after the clean-up, as often as one run in two on a loaded
    machine.)"""
    env = clean_env(tmp_path)
    proc = subprocess.Popen(
        [*CTL],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(f"$ statewardenctl {step}"):
            # At once: anything slow between the line and the signal (a scan of
            # /proc on a loaded machine) could let the demo run to its end first.
            proc.send_signal(sig)
            break
    assert any("serve --isolated" in x for x in seen)  # the holders ran
    assert seen[-1].startswith(f"$ statewardenctl {step}")  # interrupted there
    out, err = proc.communicate(timeout=120)
    assert "Demo finished" not in out, out + err  # stopped, not ended
    assert proc.returncode == 130, out + err
    assert "statewardenctl: error: interrupted" in err
    assert "Traceback" not in err
    assert leftovers(tmp_path) == []


@needs_root
@pytest.mark.parametrize("size", ["600k", "3m"])
def test_full_disk_fails_cleanly(tmp_path: Path, size: str) -> None:
    """TMPDIR on a small tmpfs: too small for the database (600k: one line, exit 1,
    nothing started), or for the work copies of check and maintenance (3m: the steps
    that cannot run are named, exit 1). Either way nothing is left behind."""
    env = clean_env(tmp_path)
    tmp = env["TMPDIR"]
    script = f'mount -t tmpfs -o size={size} tmpfs "{tmp}" && "$@"; echo "rc=$?"; ls -A "{tmp}"'
    proc = sh_in_private_mounts(script, "sh", *CTL, env=env, timeout=600)
    lines = proc.stdout.rstrip("\n").splitlines()
    assert lines[-1] == "rc=1", proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    if size == "600k":
        assert "could not build the sandbox" in proc.stderr
        assert "No space left on device" in proc.stderr
    else:
        # check needs room for its private copy (no room: exit 5, it could not finish):
        # the demo stops at the first step that did not end as expected, and goes no further.
        assert "[exit 5: expected 3; the demo stops here]" in proc.stdout
        assert "Demo finished: not as expected: check." in proc.stdout
        assert "$ statewardenctl maintenance" not in proc.stdout
    assert leftovers(tmp_path) == []
