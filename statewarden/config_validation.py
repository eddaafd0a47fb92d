"""Validation: the data a YAML config holds -> its sections, every key checked.

Every invalid value raises :class:`ConfigError` naming the file, the line when YAML
knows it, the dotted key path and what was expected; a rejected secret is never echoed.
What one key's type cannot say (an enabled sink needs its address, the endpoints' listen
addresses) is checked once the sections are built.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from statewarden.config_sections import AlertsConfig, Config, PathsConfig, public_fields
from statewarden.config_values import (
    _Bytes,
    _Duration,
    _Id,
    _Kind,
    _Secret,
    _Window,
    count_floor,
    duration_floor,
    format_duration,
    parse_bytes,
    parse_duration,
    parse_window,
)
from statewarden.endpoints import listen_problems
from statewarden.errors import ConfigError
from statewarden.kinds import KINDS


def config_from_data(
    data: object, *, source: str, lines: dict[tuple[str | int, ...], int]
) -> Config:
    """The :class:`Config` that YAML data (``None``: an empty document) stands for;
    ``lines`` (key path -> line in the file) places each error."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"expected a mapping of sections at the top level, got {_kind(data)}",
            source=source,
            line=lines.get((), 1),
        )
    ctx = _Ctx(source, lines)
    config: Config = _build(Config, data, (), ctx)
    _check_alerts(config.alerts, ctx)
    for key, problem in listen_problems(config.metrics.listen, config.web.listen):
        raise ctx.error(key, problem)
    return dataclasses.replace(config, source=source)


def paths_from_data(section: dict[Any, Any], source: str) -> PathsConfig:
    """The ``paths`` section alone, checked as in a whole config (without line numbers)."""
    paths: PathsConfig = _build(PathsConfig, section, ("paths",), _Ctx(source, {}))
    return paths


def _check_alerts(alerts: AlertsConfig, ctx: _Ctx) -> None:
    """What one key's type cannot say: an enabled Telegram sink needs a chat."""
    tg = alerts.telegram
    if tg.enabled and tg.chat_id is None:
        raise ctx.error(("alerts", "telegram", "chat_id"), "is required when telegram is enabled")
    if not tg.api_base.startswith(("https://", "http://")):
        raise ctx.error(
            ("alerts", "telegram", "api_base"), f"expected an http(s) URL, got {tg.api_base!r}"
        )
    am = alerts.alertmanager
    given = [k for k in ("url", "url_file", "credential") if getattr(am, k) is not None]
    if len(given) > 1:
        raise ctx.error(
            ("alerts", "alertmanager", given[1]), "set one of url, url_file or credential"
        )
    if am.enabled and not given:
        raise ctx.error(
            ("alerts", "alertmanager", "url"),
            "is required when alertmanager is enabled (or url_file, or credential)",
        )
    if am.url is not None and not am.url.startswith(("https://", "http://")):
        raise ctx.error(
            ("alerts", "alertmanager", "url"), f"expected an http(s) URL, got {am.url!r}"
        )
    ap = alerts.apprise
    if ap.urls_file is not None and ap.credential is not None:
        raise ctx.error(
            ("alerts", "apprise", "credential"), "set urls_file or credential, not both"
        )
    if ap.enabled and ap.urls_file is None and ap.credential is None:
        raise ctx.error(
            ("alerts", "apprise", "urls_file"),
            "is required when apprise is enabled (or credential): the URLs are never in here",
        )
    hb = alerts.heartbeat
    if hb.url_file is not None and hb.credential is not None:
        raise ctx.error(
            ("alerts", "heartbeat", "credential"), "set url_file or credential, not both"
        )
    if not hb.fail_suffix.startswith(("/", "?", "&")):
        raise ctx.error(
            ("alerts", "heartbeat", "fail_suffix"),
            f"expected a path or query to add to the URL (/fail, ?status=down), got"
            f" {hb.fail_suffix!r}",
        )


class _Ctx:
    def __init__(self, source: str, lines: dict[tuple[str | int, ...], int]) -> None:
        self.source = source
        self.lines = lines

    def error(self, path: tuple[str | int, ...], problem: str) -> ConfigError:
        line = None
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                line = self.lines[path[:end]]
                break
        return ConfigError(problem, source=self.source, line=line, key=_dotted(path) or None)


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f'a string ("{value}")'
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _build(cls: type, data: object, path: tuple[str | int, ...], ctx: _Ctx) -> Any:
    if not isinstance(data, dict):
        raise ctx.error(path, f"expected a mapping, got {_kind(data)}")
    fields = {f.name: f for f in public_fields(cls)}
    hints = typing.get_type_hints(cls, include_extras=True)
    for key in data:
        if not isinstance(key, str) or key not in fields:
            known = ", ".join(fields)
            raise ctx.error((*path, str(key)), f"unknown key (known keys here: {known})")
    values: dict[str, Any] = {}
    for name, f in fields.items():
        if name in data:
            values[name] = _convert(hints[name], data[name], (*path, name), ctx)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ctx.error((*path, name), "is required")
    return cls(**values)


def _convert(hint: Any, value: object, path: tuple[str | int, ...], ctx: _Ctx) -> Any:
    origin = get_origin(hint)
    if origin is Annotated:
        base, *markers = get_args(hint)
        if _Secret in markers and not (isinstance(value, str) and value):
            # Never echo what was written: it may be the secret itself.
            raise ctx.error(path, "expected a non-empty string (the value is not shown)")
        if _Duration in markers:
            seconds = parse_duration(value)
            if seconds is None:
                raise ctx.error(
                    path,
                    "expected a duration above zero such as 30s, 5m, 1h or 250ms, "
                    f"got {_kind(value)}",
                )
            floor = duration_floor(markers)
            if floor is not None and seconds < floor:
                raise ctx.error(
                    path,
                    f"must be at least {format_duration(floor)} (the floor for this key), "
                    f"got {format_duration(seconds)}",
                )
            return seconds
        if _Window in markers:
            if parse_window(value) is None:
                raise ctx.error(
                    path,
                    "expected a window such as 'Sun 03:00-04:00', 'daily 04:30-05:00' or"
                    f" 'Sat,Sun 02:00-03:00', got {_kind(value)}",
                )
            return value
        if _Bytes in markers:
            size = parse_bytes(value)
            if size is None:
                raise ctx.error(path, f"expected a size such as 50MiB or 4096, got {_kind(value)}")
            return size
        if _Kind in markers:
            if value not in KINDS:
                raise ctx.error(path, f"expected one of {', '.join(KINDS)}, got {_kind(value)}")
            return value
        if _Id in markers:
            if isinstance(value, int) and not isinstance(value, bool):
                return str(value)
            if not isinstance(value, str) or not value.strip():
                raise ctx.error(path, f"expected a number or a string, got {_kind(value)}")
            return value.strip()
        converted = _convert(base, value, path, ctx)
        least = count_floor(markers)
        if least is not None and converted < least:
            raise ctx.error(path, f"must be at least {least}, got {converted}")
        return converted
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _convert(args[0], value, path, ctx)
    if origin is Literal:
        choices = get_args(hint)
        if value not in choices or isinstance(value, bool):
            raise ctx.error(
                path, f"expected one of {', '.join(map(str, choices))}, got {_kind(value)}"
            )
        return value
    if origin is tuple:
        (item_type, _ellipsis) = get_args(hint)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise ctx.error(path, f"expected a list, got {_kind(value)}")
        return tuple(_convert(item_type, v, (*path, i), ctx) for i, v in enumerate(value))
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if value is None:
            return hint()
        return _build(hint, value, path, ctx)
    if hint is bool:
        if not isinstance(value, bool):
            raise ctx.error(path, f"expected true or false, got {_kind(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ctx.error(path, f"expected a whole number, got {_kind(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ctx.error(path, f"expected a number, got {_kind(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str) or not value:
            raise ctx.error(path, f"expected a non-empty string, got {_kind(value)}")
        return value
    if hint is Path:
        if not isinstance(value, str) or not value.strip():
            raise ctx.error(path, f"expected a path, got {_kind(value)}")
        return Path(os.path.expandvars(os.path.expanduser(value)))
    raise ctx.error(path, f"unsupported type {hint!r}")  # pragma: no cover - schema bug
