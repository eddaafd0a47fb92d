"""Every count the config takes has a floor (``config_values.Fewest``), checked by the
one validation every key goes through: below it, one line naming the key.

``maintenance.snapshots_keep: 0`` and ``quarantine_keep: -3`` were accepted (and taken as
1), ``holders.max_writers: 0`` made every holder an alert; only
``alerts.outbox_max_entries`` had a check of its own.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest

from statewarden.config import Config, parse_config
from statewarden.config_values import count_floor
from statewarden.errors import ConfigError


def counts(cls: type = Config, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], int]]:
    """(the key's path, its floor) of every count of the config, found by its type."""
    out = []
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        hint: Any = hints[f.name]
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            out += counts(hint, (*prefix, f.name))
        elif typing.get_origin(hint) is typing.Annotated:
            least = count_floor(typing.get_args(hint)[1:])
            if least is not None:
                out.append(((*prefix, f.name), least))
    return out


def yaml_of(path: tuple[str, ...], value: int) -> str:
    text = str(value)
    for key in reversed(path):
        text = f"{{{key}: {text}}}"
    return text[1:-1]


def test_the_counts_are_found() -> None:
    """The walk finds the counts a user would set (no check over an empty list)."""
    found = dict(counts())
    assert found[("maintenance", "snapshots_keep")] == 1
    assert found[("maintenance", "quarantine_keep")] == 1
    assert found[("maintenance", "respawn_limit")] == 0
    assert found[("alerts", "outbox_max_entries")] == 1
    assert len(found) >= 6


@pytest.mark.parametrize(("path", "least"), counts(), ids=str)
def test_below_the_floor_is_one_line_naming_the_key(path: tuple[str, ...], least: int) -> None:
    """One below the floor: a ConfigError naming the key and the floor; the floor
    itself is taken."""
    key = ".".join(path)
    with pytest.raises(ConfigError) as err:
        parse_config(yaml_of(path, least - 1))
    assert str(err.value) == f"<config>:1: {key}: must be at least {least}, got {least - 1}"
    config: Any = parse_config(yaml_of(path, least))
    for name in path:
        config = getattr(config, name)
    assert config == least
