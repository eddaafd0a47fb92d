"""``statewardenctl`` itself: the command list, and nothing imported before a command runs."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from statewarden.cli.ctl import COMMANDS, main
from tests.support.repo import REPO

# What --help shows and which modules it loaded, from a fresh interpreter.
PROBE = (
    "import io, json, sys, contextlib\n"
    "from statewarden.cli.ctl import main\n"
    "out = io.StringIO()\n"
    "with contextlib.redirect_stdout(out):\n"
    "    try:\n"
    "        main(sys.argv[1:], prog_name='statewardenctl')\n"
    "    except SystemExit:\n"
    "        pass\n"
    "print(json.dumps({'help': out.getvalue(), 'modules': sorted(sys.modules)}))\n"
)


def probe(*args: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=REPO, check=True
    )
    result: dict[str, object] = json.loads(proc.stdout)
    return result


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_one_line_help_is_its_own(name: str) -> None:
    """The help line written next to a command's module is the command's own docstring's."""
    module, attr, short = COMMANDS[name]
    command = getattr(importlib.import_module(module), attr)
    assert isinstance(command, click.Command)
    for limit in (45, 80, 10**6):
        assert click.Command(name, help=short).get_short_help_str(limit) == (
            command.get_short_help_str(limit)
        )


def test_help_imports_no_command_module() -> None:
    """--help lists every command without importing one (nor apsw, YAML, D-Bus, rich)."""
    out = probe("--help")
    modules = out["modules"]
    assert isinstance(modules, list)
    loaded = [
        m
        for m in modules
        if m.endswith("_cmd") or m.split(".")[0] in ("apsw", "yaml", "dbus_fast", "rich", "asyncio")
    ]
    assert loaded == []
    help_text = out["help"]
    assert isinstance(help_text, str)
    section = help_text.split("Commands:\n", 1)[1].splitlines()
    # A name line starts two columns in; a summary wrapped onto more lines goes on deeper.
    names = [line.split()[0] for line in section if line.startswith("  ") and line[2] != " "]
    assert names == sorted(COMMANDS)


def test_a_command_imports_only_its_own_modules() -> None:
    """`holders --help` loads the holders command, not check's or recover's engine."""
    modules = probe("holders", "--help")["modules"]
    assert isinstance(modules, list)
    assert "statewarden.cli.holders_cmd" in modules
    assert not [m for m in modules if m.startswith(("statewarden.recovery", "apsw", "dbus_fast"))]


def test_unknown_command_is_a_usage_error() -> None:
    """An unknown command is a usage error (exit 2) naming it."""
    result = CliRunner().invoke(main, ["nope"])
    assert result.exit_code == 2
    assert "No such command 'nope'" in result.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["maintenance", "--bogus"],
            "No such option '--bogus' (see statewardenctl maintenance --help)",
        ),
        (["recover"], "Missing option '--source' (see statewardenctl recover --help)"),
        (["nope"], "No such command 'nope' (see statewardenctl --help)"),
        (["maintenance", "--action", "x"], "Invalid value for '--action'"),
    ],
)
def test_a_usage_error_is_one_line(args: list[str], said: str) -> None:
    """Invariant: bad input is one line and a documented exit code. A usage error click
    finds (an unknown option or command, a missing or bad value) is one line on stderr,
    exit 2, naming where the help is (click printed the usage, a hint and the error on
    four lines)."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("statewardenctl: error: ")
    assert said in line
