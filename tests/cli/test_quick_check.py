"""``statewardenctl check`` without click: the same output, the same errors, fewer imports.

``check`` is measured against SQLite's own ``integrity_check``, and click was a third of
its imports. The installed ``statewardenctl`` runs :mod:`statewarden.cli.quick`; ``check``
with plain options is read there and run through :mod:`statewarden.cli.check_output`,
the code the click command runs. Each case runs both ways, as whole processes, and
requires the same stdout, stderr and exit code: healthy, derived and base damage, text
and JSON, progress events, and bad input.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.corruption import phantom_row
from lab.hermes_fixtures import TINY, make_home
from statewarden.cli.quick import check_options
from statewarden.errors import EXIT_USAGE
from tests.support.daemon import daemon_env
from tests.support.quick import CLICK, PROBED, QUICK, loaded, run
from tests.support.quick import both_ways as both

pytestmark = pytest.mark.process  # each case is two whole processes


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No config file, no daemon; a private work folder for the copies."""
    out = daemon_env(tmp_path, tmp_path / "no-hermes")
    out["HOME"] = str(tmp_path)
    out["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    out.pop("STATEWARDEN_CONFIG", None)
    return out


def test_a_healthy_file_both_ways(tmp_path: Path, env: dict[str, str]) -> None:
    """A healthy Hermes file: the same report, exit 0, in text, JSON and with progress
    events (which go to stderr, the same both ways once their times are left out)."""
    db = make_home(tmp_path / "hermes", TINY) / "state.db"
    text = both("check", "--db", str(db), env=env)
    assert text.returncode == 0
    assert "damage: none (healthy)" in text.stdout
    document = json.loads(
        both("check", "--db", str(db), "--json", "--max-errors", "0", env=env).stdout
    )
    assert document["damage"] == "none"
    quick = run(QUICK, "check", "--db", str(db), "--progress", "json", "--json", env=env)
    slow = run(CLICK, "check", "--db", str(db), "--progress=json", "--json", env=env)
    assert quick.returncode == slow.returncode == 0
    assert json.loads(quick.stdout)["damage"] == json.loads(slow.stdout)["damage"]
    phases = _steady_phases(quick.stderr)
    assert phases
    assert phases == _steady_phases(slow.stderr)


def _steady_phases(stderr: str) -> list[str]:
    """The progress events' phases, but "FTS check": that one is told only while the
    FTS checks are still running once the rest is done, which a loaded machine decides
    (the two runs once differed by it alone)."""
    phases = [json.loads(line)["phase"] for line in stderr.splitlines()]
    return [p for p in phases if p != "FTS check"]


def test_base_damage_both_ways(tmp_path: Path, env: dict[str, str]) -> None:
    """A phantom row: base damage, exit 3, the same findings and error lines both ways."""
    case = phantom_row(tmp_path / "phantom", TINY)
    text = both("check", "--db", str(case.db), "--max-errors", "3", env=env)
    assert text.returncode == 3
    assert "phantom duplicate" in text.stdout
    document = json.loads(both("check", "--db", str(case.db), "--json", env=env).stdout)
    assert document["damage"] == "base"


@pytest.mark.parametrize(
    "args",
    [
        ("--db", "/nonexistent/state.db"),
        ("--db",),
        ("--max-errors", "x"),
        ("--max-errors", "-1"),
        ("--progress", "loud"),
        ("--work-dir", "/proc/self/nowhere"),
        ("--json", "--help"),
        ("--verbose",),
    ],
)
def test_bad_input_both_ways(tmp_path: Path, env: dict[str, str], args: tuple[str, ...]) -> None:
    """Bad or unknown options: click's answer or the same one-line error, exit 2, no
    traceback, whichever way the options were read."""
    db = make_home(tmp_path / "hermes", TINY) / "state.db"
    full = args if "--db" in args else ("--db", str(db), *args)
    quick = run(QUICK, "check", *full, env=env)
    slow = run(CLICK, "check", *full, env=env)
    assert quick.returncode == slow.returncode
    # click names the program by argv[0] ("-c" here, "python -m ..." there) in its usage
    assert quick.stdout.splitlines()[1:] == slow.stdout.splitlines()[1:]
    assert "Traceback" not in quick.stderr
    if "--help" not in args:
        assert quick.returncode == EXIT_USAGE, quick.stderr
        assert quick.stderr.splitlines()[-1] == slow.stderr.splitlines()[-1]


def test_quick_check_loads_no_click(tmp_path: Path, env: dict[str, str]) -> None:
    """The point of the quick path: ``check`` with plain options never imports click."""
    db = make_home(tmp_path / "hermes", TINY) / "state.db"
    r = run(PROBED, "check", "--db", str(db), "--json", env=env)
    assert r.returncode == 0, r.stderr
    modules = loaded(r.stderr)
    assert "statewarden.cli.check_output" in modules
    assert "click" not in modules
    assert json.loads(r.stdout)["damage"] == "none"


def test_check_options_are_read_as_click_reads_them() -> None:
    """Values in both spellings, numbers as click's INT reads them, ``auto`` progress by
    default; anything it cannot take as click would goes to click."""
    read = check_options(["--db=a", "--max-errors", "+3", "--json", "--progress=none"])
    assert read == {
        "config_path": None,
        "db": "a",
        "profile": None,
        "max_errors": 3,
        "work_dir": None,
        "progress_mode": "none",
        "as_json": True,
    }
    assert check_options([]) == {
        "config_path": None,
        "db": None,
        "profile": None,
        "max_errors": None,
        "work_dir": None,
        "progress_mode": "auto",
        "as_json": False,
    }
    for args in (["--max-errors", "x"], ["--progress", "loud"], ["--db"], ["-h"], ["--watch"]):
        assert check_options(args) is None, args
