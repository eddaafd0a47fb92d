"""Showing: the config as ``statewardenctl config show`` prints it (defaults filled in,
secrets redacted, durations and sizes as the file writes them) and the key paths the
docs list."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from statewarden.config_sections import Config, public_fields
from statewarden.config_values import (
    REDACTED,
    _Bytes,
    _Duration,
    _Secret,
    format_bytes,
    format_duration,
)


def is_secret(cls: type, name: str) -> bool:
    hint = typing.get_type_hints(cls, include_extras=True).get(name)
    return get_origin(hint) is Annotated and _Secret in get_args(hint)


def _markers(cls: type, name: str) -> tuple[Any, ...]:
    hint = typing.get_type_hints(cls, include_extras=True).get(name)
    if get_origin(hint) in (Union, types.UnionType):  # ``Duration | None``
        hint = next(a for a in get_args(hint) if a is not type(None))
    return tuple(get_args(hint)[1:]) if get_origin(hint) is Annotated else ()


def to_plain(value: Any, *, redact: bool = True, units: bool = False) -> Any:
    """The config as plain YAML/JSON-ready data, secrets replaced by :data:`REDACTED`.

    ``units``: durations and sizes as the config writes them (``30s``, ``50MB``) rather
    than numbers of seconds and bytes (what ``--json`` keeps, for programs).
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in public_fields(type(value)):
            item = getattr(value, f.name)
            markers = _markers(type(value), f.name) if units and item is not None else ()
            if redact and item and is_secret(type(value), f.name):
                out[f.name] = REDACTED
            elif _Duration in markers:
                out[f.name] = format_duration(item)
            elif _Bytes in markers:
                out[f.name] = format_bytes(item)
            else:
                out[f.name] = to_plain(item, redact=redact, units=units)
        return out
    if isinstance(value, tuple | list):
        return [to_plain(v, redact=redact, units=units) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def schema_keys(cls: type = Config, prefix: str = "") -> list[str]:
    """Every documented key path, ``targets[].home`` style for list items."""
    keys: list[str] = []
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in public_fields(cls):
        name = f"{prefix}{f.name}"
        keys.append(name)
        hint = hints[f.name]
        if get_origin(hint) is tuple:
            item = get_args(hint)[0]
            if dataclasses.is_dataclass(item) and isinstance(item, type):
                keys.extend(schema_keys(item, f"{name}[]."))
        elif dataclasses.is_dataclass(hint) and isinstance(hint, type):
            keys.extend(schema_keys(hint, f"{name}."))
    return keys
