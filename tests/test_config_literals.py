"""The holder kinds and other_users policies: one list of values, two spellings checked equal."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from statewarden import config, config_literals
from statewarden.config_literals import HOLDER_KINDS, OTHER_USERS_POLICIES

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
