"""What of the configuration a command needs before (or instead of) reading the file.

The literal types and defaults the holders engine shares with the config, and where the
config file is, without the config's dataclasses and validation (:mod:`statewarden.config`,
which re-exports every name here): ``statewardenctl holders`` starts without them when
no config file exists. Nor pathlib: :func:`no_config_file` looks for the file by its name.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

ENV_CONFIG = "STATEWARDEN_CONFIG"

# The kinds of holder, in the order the docs list them (HolderKind's values).
HOLDER_KINDS = (
    "gateway",
    "dashboard",
    "serve",
    "serve-isolated",
    "cli",
    "tui",
    "cron",
    "acp",
    "sqlite3",
    "litestream",
    "unknown",
)
# What a holder scan does with a process it cannot read (another user's, EACCES):
# OtherUsersPolicy's values.
OTHER_USERS_POLICIES = ("locks", "fail")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    # The same values as the tuples above, spelled out for the type checker (a test
    # holds them equal). At run time the types are built from the tuples, on first use
    # (the config module's validation): a command that never reads a config does not
    # import typing.
    HolderKind = Literal[
        "gateway",
        "dashboard",
        "serve",
        "serve-isolated",
        "cli",
        "tui",
        "cron",
        "acp",
        "sqlite3",
        "litestream",
        "unknown",
    ]
    OtherUsersPolicy = Literal["locks", "fail"]
else:

    def __getattr__(name: str) -> object:
        """``HolderKind`` and ``OtherUsersPolicy``, the ``Literal`` types of the tuples."""
        values = {"HolderKind": HOLDER_KINDS, "OtherUsersPolicy": OTHER_USERS_POLICIES}
        if name not in values:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from typing import Literal  # noqa: PLC0415

        literal = Literal[values[name]]
        globals()[name] = literal
        return literal


DEFAULT_OTHER_USERS: OtherUsersPolicy = "locks"
# discovery.profiles' default: each ``profiles/<name>/`` of the Hermes home is a target.
DISCOVER_PROFILES = True


def xdg_dir(env_name: str, fallback: str, env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_*`` if set to an absolute path (the spec ignores relative ones), else the fallback."""
    from pathlib import Path  # noqa: PLC0415 - see the module docstring

    return Path(_xdg_dir_name(env_name, fallback, env))


def _xdg_dir_name(env_name: str, fallback: str, env: Mapping[str, str] | None) -> str:
    env = os.environ if env is None else env
    value = env.get(env_name, "")
    if value and os.path.isabs(value):
        return value
    return os.path.expanduser(fallback)


def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    from pathlib import Path  # noqa: PLC0415 - see the module docstring

    return Path(_default_config_name(env))


def _default_config_name(env: Mapping[str, str] | None) -> str:
    return os.path.join(
        _xdg_dir_name("XDG_CONFIG_HOME", "~/.config", env), "statewarden", "config.yaml"
    )


def default_state_dir_name(env: Mapping[str, str] | None = None) -> str:
    """statewarden's state folder when the config names none: ``$XDG_STATE_HOME/statewarden``."""
    return os.path.join(_xdg_dir_name("XDG_STATE_HOME", "~/.local/state", env), "statewarden")


def runtime_dir_name(state_dir: str, env: Mapping[str, str] | None = None) -> str:
    """statewarden's runtime folder when the config names none: ``$XDG_RUNTIME_DIR/
    statewarden``, else (no login session) ``run`` in the state folder, which is private."""
    env = os.environ if env is None else env
    base = env.get("XDG_RUNTIME_DIR", "")
    if base and os.path.isabs(base):
        return os.path.join(base, "statewarden")
    return os.path.join(state_dir, "run")


def no_config_file(path: str | None, env: Mapping[str, str] | None = None) -> bool:
    """True when loading the config would find no file and give every default: no file
    named (``--config``, ``$STATEWARDEN_CONFIG``) and none at the default place.

    Anything else at the default place (a file, a folder, one that cannot be looked at)
    is for the config loader to read or to refuse.
    """
    env = os.environ if env is None else env
    if path is not None or env.get(ENV_CONFIG):
        return False
    try:
        os.stat(_default_config_name(env))
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False
