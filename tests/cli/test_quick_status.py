"""``statewardenctl status`` without click: the same output, the same errors, fewer imports.

The installed ``statewardenctl`` runs :mod:`statewarden.cli.quick`; ``status`` with plain
options is read there and reported through :mod:`statewarden.cli.status_output`, the
code the click command runs. Each case runs both ways, as whole processes, and requires
the same stdout, stderr and exit code: with no Hermes home, on real Hermes databases
(profiles, text and JSON), with bad options, and against a running daemon.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, make_home
from statewarden.cli.quick import STATUS_FLAGS, STATUS_VALUES, plain_options
from statewarden.errors import EXIT_USAGE
from tests.support.daemon import DaemonProc, daemon_env
from tests.support.quick import CLICK, PROBED, QUICK, loaded, run
from tests.support.quick import both_ways as both


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No config file, no daemon, no Hermes home unless a test makes one."""
    out = daemon_env(tmp_path, tmp_path / "no-hermes")
    out["HOME"] = str(tmp_path)
    out.pop("STATEWARDEN_CONFIG", None)
    return out


def test_no_hermes_home_both_ways(env: dict[str, str]) -> None:
    """Nothing to report is said the same way, with exit 0, in text and JSON."""
    text = both("status", env=env)
    assert text.returncode == 0
    assert "no Hermes home found" in text.stdout
    document = json.loads(both("status", "--json", env=env).stdout)
    assert document["databases"] == []


def test_real_databases_both_ways(tmp_path: Path, env: dict[str, str]) -> None:
    """A Hermes home with two profiles: every database's facts, the same both ways."""
    home = make_home(tmp_path / "hermes", TINY, profiles=("work",))
    env["HERMES_HOME"] = str(home)
    text = both("status", env=env)
    assert text.returncode == 0
    assert str(home / "state.db") in text.stdout
    assert str(home / "profiles" / "work" / "state.db") in text.stdout
    assert "(daemon not running: computed locally)" in text.stderr
    document = json.loads(both("status", "--json", env=env).stdout)
    assert document["source"] == "local"
    assert {d["profile"] for d in document["databases"]} == {"default", "work"}
    for args in (
        ("--profile", "work"),
        ("--profile=work", "--json"),
        ("--db", str(home / "state.db")),
    ):
        assert both("status", *args, env=env).returncode == 0


@pytest.mark.parametrize(
    "args",
    [
        ("--db", "/nonexistent/state.db", "--profile", "x"),
        ("--profile", "nobody"),
        ("--db",),
        ("--verbose",),
        ("--json", "--help"),
    ],
)
def test_bad_options_both_ways(tmp_path: Path, env: dict[str, str], args: tuple[str, ...]) -> None:
    """Bad or unknown options: click's answer or the same one-line error, no traceback."""
    env["HERMES_HOME"] = str(make_home(tmp_path / "hermes", TINY))
    quick = run(QUICK, "status", *args, env=env)
    slow = run(CLICK, "status", *args, env=env)
    assert quick.returncode == slow.returncode
    # click names the program by argv[0] ("-c" here, "python -m ..." there) in its usage
    assert quick.stdout.splitlines()[1:] == slow.stdout.splitlines()[1:]
    assert "Traceback" not in quick.stderr
    if "--help" not in args:
        assert quick.returncode == EXIT_USAGE
        assert quick.stderr.splitlines()[-1] == slow.stderr.splitlines()[-1]


def test_against_a_running_daemon_both_ways(tmp_path: Path) -> None:
    """With the daemon up, both ways print its view (``source: daemon``) alike."""
    home = make_home(tmp_path / "hermes", TINY)
    env = daemon_env(tmp_path, home)
    daemon = DaemonProc(env)
    try:
        daemon.wait_for_line("statewarden ready")
        quick = json.loads(run(QUICK, "status", "--json", env=env).stdout)
        slow = json.loads(run(CLICK, "status", "--json", env=env).stdout)
        assert quick["source"] == slow["source"] == "daemon"
        assert quick["daemon"]["pid"] == slow["daemon"]["pid"] == daemon.proc.pid
        assert [d["path"] for d in quick["databases"]] == [d["path"] for d in slow["databases"]]
        text = run(QUICK, "status", env=env)
        assert text.returncode == 0
        assert text.stdout.startswith(f"daemon: pid {daemon.proc.pid}, ")
        assert text.stdout.splitlines()[0] == run(CLICK, "status", env=env).stdout.splitlines()[0]
    finally:
        daemon.stop()


def test_quick_status_loads_no_click(tmp_path: Path, env: dict[str, str]) -> None:
    """The point of the quick path: ``status`` with plain options never imports click."""
    env["HERMES_HOME"] = str(make_home(tmp_path / "hermes", TINY))
    r = run(PROBED, "status", "--json", env=env)
    assert r.returncode == 0, r.stderr
    modules = loaded(r.stderr)
    assert "statewarden.cli.status_output" in modules
    assert "click" not in modules
    assert json.loads(r.stdout)["source"] == "local"


def test_status_options_are_read_as_click_reads_them() -> None:
    """Values in both spellings, the last one kept; anything unknown goes to click."""
    read = plain_options(["--db=a", "--db", "b", "--json"], STATUS_VALUES, STATUS_FLAGS)
    assert read == {"config_path": None, "db": "b", "profile": None, "as_json": True}
    for args in (["--db"], ["--db", "-x"], ["--watch"], ["--db="], ["--", "x"]):
        assert plain_options(args, STATUS_VALUES, STATUS_FLAGS) is None, args
