"""The holder kinds and other_users policies: one list of values, two spellings checked equal."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from statewarden import config, config_literals
from statewarden.cli._plain import discover_targets, own_folders
from statewarden.config_literals import HOLDER_KINDS, OTHER_USERS_POLICIES
from statewarden.targets import discover

SOURCE = Path(config_literals.__file__)


def spelled_for_the_type_checker(name: str) -> tuple[str, ...]:
    """The values of ``name = Literal[...]`` as written in the TYPE_CHECKING block."""
    for node in ast.walk(ast.parse(SOURCE.read_text())):
        if (
            isinstance(node, ast.Assign)
            and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name]
            and isinstance(node.value, ast.Subscript)
        ):
            inner = node.value.slice
            items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            return tuple(ast.literal_eval(i) for i in items)
    raise AssertionError(f"{name} = Literal[...] not found in {SOURCE}")


def test_the_type_checker_sees_the_values_the_tuples_hold() -> None:
    """HolderKind and OtherUsersPolicy as mypy reads them list the tuples' values, in order."""
    assert spelled_for_the_type_checker("HolderKind") == HOLDER_KINDS
    assert spelled_for_the_type_checker("OtherUsersPolicy") == OTHER_USERS_POLICIES


def test_the_config_validates_against_the_same_values() -> None:
    """At run time the Literal types are built from the tuples (what the config checks)."""
    assert get_args(config.HolderKind) == HOLDER_KINDS
    assert get_args(config.OtherUsersPolicy) == OTHER_USERS_POLICIES
    assert config_literals.HolderKind is config.HolderKind


@pytest.mark.parametrize("runtime", [None, "/run/user/4242", "relative/run"])
@pytest.mark.parametrize("state", [None, "/var/lib/somewhere"])
def test_with_no_config_file_the_defaults_are_the_configs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime: str | None, state: str | None
) -> None:
    """With no config file, ``status`` finds its targets and folders without loading the
    config: what it finds is what the config's defaults give, for each way the XDG
    variables can be set (unset, absolute, relative: ignored) and a Hermes home with
    profiles (a stray file among them is no profile)."""
    home = tmp_path / "hermes"
    for name in ("work", "zeta", "alpha"):
        (home / "profiles" / name).mkdir(parents=True)
    (home / "profiles" / "notes.txt").write_text("not a profile")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("STATEWARDEN_CONFIG", raising=False)
    for name, value in (("XDG_RUNTIME_DIR", runtime), ("XDG_STATE_HOME", state)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert config_literals.no_config_file(None)
    defaults = config.Config()
    assert discover_targets(None) == discover(defaults)
    assert [t.name for t in discover_targets(None)] == ["default", "alpha", "work", "zeta"]
    assert own_folders(None) == (str(config.state_dir(defaults)), str(config.runtime_dir(defaults)))
    # a config file at the default place is read, and its folders are the config's
    (tmp_path / "config" / "statewarden").mkdir(parents=True)
    (tmp_path / "config" / "statewarden" / "config.yaml").write_text(
        f"paths:\n  state_dir: {tmp_path / 'mine'}\ndiscovery:\n  profiles: false\n"
    )
    assert not config_literals.no_config_file(None)
    assert own_folders(None)[0] == str(tmp_path / "mine")
    assert [t.name for t in discover_targets(None)] == ["default"]
