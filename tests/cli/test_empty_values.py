"""An empty value is a usage error, never "not given" and never the current folder.

``--db "$DB"`` with ``DB`` unset hands a command an empty value. Read as "not given"
it meant the default database (``check``, ``status``, ``snapshots take`` worked on
another file than the one meant); read as a path, the current folder (``recover
--source ""`` said ``.`` is a directory; ``maintenance --merge-from ""`` named the folder
it ran in). Every option and argument that takes text is of the one type that refuses
an empty value (``cli._common.Given``), before the command does anything: exit 2, the
option named. Both command groups are walked, so a new option cannot slip past.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from statewarden.cli._common import Given
from statewarden.cli.ctl import main as ctl_main
from statewarden.cli.daemon_cmd import main as daemon_main
from statewarden.errors import EXIT_USAGE

# Parameters whose type is no text: flags, choices, numbers.
NOT_TEXT = (click.types.BoolParamType, click.Choice, click.types.IntParamType, click.FloatRange)


def commands(group: click.Group, path: list[str]) -> list[tuple[list[str], click.Command]]:
    """Every command below ``group``, with the words that name it."""
    out: list[tuple[list[str], click.Command]] = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            out.extend(commands(cmd, [*path, name]))
        else:
            out.append(([*path, name], cmd))
    return out


ALL = [(daemon_main, words, cmd) for words, cmd in commands(daemon_main, [])] + [
    (ctl_main, words, cmd) for words, cmd in commands(ctl_main, [])
]
TEXT_CASES = [
    (group, words, cmd, p)
    for group, words, cmd in ALL
    for p in cmd.params
    if not isinstance(p.type, NOT_TEXT) and not (isinstance(p, click.Option) and p.is_flag)
]
TEXT_PARAMS = [
    pytest.param(group, words, cmd, p, id=" ".join([*words, p.opts[0]]))
    for group, words, cmd, p in TEXT_CASES
]


def test_every_text_parameter_refuses_an_empty_value() -> None:
    """Each option or argument that takes text, in both command groups, is a ``Given``:
    none is a plain string or path that an empty value would pass."""
    assert len(TEXT_PARAMS) > 40  # the walk reached the commands
    plain = [
        " ".join([*words, p.opts[0]])
        for _, words, _, p in TEXT_CASES
        if not isinstance(p.type, Given)
    ]
    assert plain == []


def invocation(words: list[str], cmd: click.Command, empty: click.Parameter) -> list[str]:
    """The command line giving ``empty`` an empty value and every other required
    parameter a plain one."""
    args = list(words)
    for p in cmd.params:
        if p is empty:
            args += [p.opts[0], ""] if isinstance(p, click.Option) else [""]
        elif p.required:
            args += [p.opts[0], "x"] if isinstance(p, click.Option) else ["x"]
    return args


@pytest.fixture
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with nothing in it, and no XDG or Hermes variable pointing elsewhere."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "HERMES_HOME"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


@pytest.mark.parametrize(("group", "words", "cmd", "param"), TEXT_PARAMS)
def test_an_empty_value_is_a_usage_error(
    empty_home: Path,
    group: click.Group,
    words: list[str],
    cmd: click.Command,
    param: click.Parameter,
) -> None:
    """``CMD --option ""``: exit 2 with the option named and the reason, before the
    command does anything (an empty home: nothing is created in it)."""
    result = CliRunner().invoke(group, invocation(words, cmd, param))
    assert result.exit_code == EXIT_USAGE, result.output
    assert "it is empty" in result.output
    named = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
    assert named in result.output
    assert list(empty_home.iterdir()) == []


@pytest.mark.process
@pytest.mark.parametrize("command", ["status", "holders", "check"])
def test_the_installed_command_refuses_an_empty_db(tmp_path: Path, command: str) -> None:
    """As a user types it (``status`` and ``holders`` are read without click first):
    ``--db ""`` is exit 2 and one line naming ``--db``, no report of another file."""
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "from statewarden.cli.quick import main; main()",
            command,
            "--db",
            "",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert run.returncode == EXIT_USAGE, run.stderr
    assert "'--db'" in run.stderr
    assert "it is empty" in run.stderr
    assert run.stdout == ""
