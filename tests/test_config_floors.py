"""Every duration of the config has a floor: a value below it is refused in one line that
names the key and the floor (``config check`` exit 2), the floor itself is accepted."""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import pytest

from statewarden.config import (
    AtLeast,
    Config,
    duration_floor,
    format_duration,
    parse_config,
    public_fields,
)
from statewarden.errors import EXIT_USAGE, ConfigError
from tests.support.cli import run_ctl


def durations(
    cls: type = Config, prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Any]]:
    """(key path, type hint) of every duration in the schema."""
    out: list[tuple[tuple[str, ...], Any]] = []
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in public_fields(cls):
        hint = hints[f.name]
        path = (*prefix, f.name)
        if get_origin(hint) is Annotated and "_Duration" in str(hint):
            out.append((path, hint))
        elif dataclasses.is_dataclass(hint) and isinstance(hint, type):
            out += durations(hint, path)
    return out


DURATIONS = durations()


def nested(path: tuple[str, ...], value: str) -> str:
    data: Any = value
    for part in reversed(path):
        data = {part: data}
    return json.dumps(data)


def floor_of(hint: Any) -> float:
    floor = duration_floor(get_args(hint)[1:])
    assert floor is not None
    return floor


def test_every_duration_has_a_floor() -> None:
    """Each duration key of the schema carries an AtLeast floor, at or below its default."""
    assert len(DURATIONS) >= 30
    defaults = Config()
    for path, hint in DURATIONS:
        markers = get_args(hint)[1:]
        assert any(isinstance(m, AtLeast) for m in markers), ".".join(path)
        default: Any = defaults
        for part in path:
            default = getattr(default, part)
        assert floor_of(hint) <= default, ".".join(path)


@pytest.mark.parametrize(("path", "hint"), DURATIONS, ids=[".".join(p) for p, _ in DURATIONS])
def test_below_the_floor_is_refused_naming_it(path: tuple[str, ...], hint: Any) -> None:
    """Half the floor is refused with one line naming the key and the floor; the floor
    itself is accepted."""
    floor = floor_of(hint)
    with pytest.raises(ConfigError) as caught:
        parse_config(nested(path, format_duration(floor / 2)), source="c.yaml")
    message = str(caught.value)
    assert "\n" not in message
    assert ".".join(path) in message
    assert f"must be at least {format_duration(floor)}" in message
    config: Any = parse_config(nested(path, format_duration(floor)), source="c.yaml")
    for part in path:
        config = getattr(config, part)
    assert config == floor


@pytest.mark.parametrize(
    ("text", "key", "floor"),
    [
        ("watch:\n  holders_interval: 1ms\n", "watch.holders_interval", "1s"),
        ("alerts:\n  heartbeat:\n    interval: 1ms\n", "alerts.heartbeat.interval", "1s"),
        ("watch:\n  poll_interval: 1ms\n", "watch.poll_interval", "100ms"),
    ],
)
def test_config_check_refuses_a_spinning_interval(
    tmp_path: Path, text: str, key: str, floor: str
) -> None:
    """``holders_interval: 1ms`` (half a core) and a 1 ms heartbeat: config check exits 2
    with one line naming the key and its floor."""
    f = tmp_path / "config.yaml"
    f.write_text(text)
    r = run_ctl("config", "check", "--config", str(f))
    assert r.exit_code == EXIT_USAGE
    assert r.stderr.count("\n") == 1
    assert f"{key}: must be at least {floor} (the floor for this key), got 1ms" in r.stderr
