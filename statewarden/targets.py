"""Targets: the Hermes homes statewarden watches, each with one state.db.

A target is a Hermes home (``$HERMES_HOME`` or ``~/.hermes``) or one of its
profiles (``<root>/profiles/<name>/``), which is a full home of its own with its
own ``state.db``, ``logs/`` and gateway unit. Targets come from the config's
explicit list or, when that is empty, from discovery, which runs again on every
rescan so a home or profile created later is picked up.
"""

from __future__ import annotations

import os

from statewarden.record import FrozenRecord
from statewarden.sidecars import JOURNAL_SUFFIX, SHM_SUFFIX, WAL_SUFFIX, sidecar

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    # pathlib is imported where a Path is made: `holders --db` names its profile
    # (profile_for_db) and its database's files as strings, without it.
    from pathlib import Path

    # a --db target needs no config (and the config module is slow to import)
    from statewarden.config import Config

DB_NAME = "state.db"
DEFAULT_PROFILE = "default"
_GATEWAY_UNIT_BASE = "hermes-gateway"
# Hermes only gives a profile its own unit name when the name matches this rule
# (hermes_cli/gateway.py, _profile_suffix); other homes get a short hash.
_PROFILE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class Target(FrozenRecord):
    """One Hermes database to watch, and where its home, logs and gateway unit are.

    Without a ``gateway_unit`` given, the unit is Hermes' name for the home
    (:func:`gateway_unit_for`), worked out when first asked: a command that never asks
    (``holders --db``) spares the path resolution and the hash.
    """

    __slots__ = ("_gateway_unit", "db", "home", "logs_dir", "name")
    name: str
    home: Path
    db: Path
    logs_dir: Path
    _gateway_unit: str | None

    def __init__(
        self, name: str, home: Path, db: Path, logs_dir: Path, gateway_unit: str | None = None
    ) -> None:
        self._set(name=name, home=home, db=db, logs_dir=logs_dir, _gateway_unit=gateway_unit)

    @classmethod
    def _fields(cls) -> tuple[str, ...]:
        return ("name", "home", "db", "logs_dir", "gateway_unit")

    @property
    def gateway_unit(self) -> str:
        unit = self._gateway_unit
        if unit is None:
            unit = gateway_unit_for(self.home)
            object.__setattr__(self, "_gateway_unit", unit)  # once: the record stays frozen
        return unit

    @property
    def wal(self) -> Path:
        return sidecar(self.db, WAL_SUFFIX)

    @property
    def shm(self) -> Path:
        return sidecar(self.db, SHM_SUFFIX)

    @property
    def journal(self) -> Path:
        return sidecar(self.db, JOURNAL_SUFFIX)

    def bundle(self) -> tuple[Path, Path, Path, Path]:
        """The database and its sidecars, in the order SQLite writes them."""
        return (self.db, self.wal, self.shm, self.journal)


def default_hermes_home(env: Mapping[str, str] | None = None) -> Path:
    from pathlib import Path  # noqa: PLC0415 - see the imports above

    env = os.environ if env is None else env
    value = env.get("HERMES_HOME", "").strip()
    if value:
        return Path(os.path.expanduser(value))
    return Path(os.path.expanduser("~/.hermes"))


def gateway_unit_for(home: Path) -> str:
    """The systemd --user unit Hermes installs for the gateway of ``home``.

    Mirrors Hermes: ``~/.hermes`` -> ``hermes-gateway.service``;
    ``~/.hermes/profiles/coder`` -> ``hermes-gateway-coder.service``; any other home ->
    ``hermes-gateway-<first 8 hex of sha256(resolved path)>.service``.
    """
    from pathlib import Path  # noqa: PLC0415 - see the imports above

    resolved = _resolve(home)
    native = _resolve(Path(os.path.expanduser("~/.hermes")))
    if resolved == native:
        return f"{_GATEWAY_UNIT_BASE}.service"
    try:
        parts = resolved.relative_to(native / "profiles").parts
    except ValueError:
        parts = ()
    import re  # noqa: PLC0415 - see Target: only a command that asks for the unit

    if len(parts) == 1 and re.match(_PROFILE_NAME_PATTERN, parts[0]):
        return f"{_GATEWAY_UNIT_BASE}-{parts[0]}.service"
    import hashlib  # noqa: PLC0415

    # Hermes hashes str(path).encode(): the same bytes as the path's own, for a UTF-8
    # path. A path that is not UTF-8 (which Hermes cannot hash) hashes its bytes.
    digest = hashlib.sha256(os.fsencode(resolved)).hexdigest()[:8]
    return f"{_GATEWAY_UNIT_BASE}-{digest}.service"


def _resolve(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path.absolute()


def _target(name: str, home: Path) -> Target:
    return Target(
        name=name,
        home=home,
        db=home / DB_NAME,
        logs_dir=home / "logs",
    )


def discover(config: Config, env: Mapping[str, str] | None = None) -> list[Target]:
    """The targets to watch now: the config's explicit list, else what is found on disk.

    Discovery returns the root home as target ``default`` when its directory exists,
    plus one target per ``profiles/<name>/`` directory (when ``discovery.profiles``).
    """
    if config.targets:
        out = []
        for t in config.targets:
            home = t.home
            name = t.name or (home.name if home.parent.name == "profiles" else DEFAULT_PROFILE)
            out.append(
                Target(
                    name=name,
                    home=home,
                    db=t.db or home / DB_NAME,
                    logs_dir=t.logs_dir or home / "logs",
                    gateway_unit=t.gateway_unit,
                )
            )
        return out
    root = config.discovery.hermes_home or default_hermes_home(env)
    return discover_homes(root, profiles=config.discovery.profiles)


def discover_homes(root: Path, *, profiles: bool) -> list[Target]:
    """The Hermes home ``root`` as target ``default`` when it is a folder, and with
    ``profiles`` one target per ``profiles/<name>/`` folder in it."""
    if not root.is_dir():
        return []
    found = [_target(DEFAULT_PROFILE, root)]
    profiles_dir = root / "profiles"
    if profiles and profiles_dir.is_dir():
        try:
            entries = sorted(profiles_dir.iterdir())
        except OSError:
            entries = []
        found.extend(_target(p.name, p) for p in entries if p.is_dir())
    return found


def find_target(targets: list[Target], profile: str) -> Target | None:
    for t in targets:
        if t.name == profile:
            return t
    return None


def target_for_db(db: str | os.PathLike[str]) -> Target:
    """A target for a database named on the command line (``--db PATH``)."""
    from pathlib import Path  # noqa: PLC0415 - see the imports above

    path = Path(os.path.expanduser(os.fspath(db)))
    home = path.parent
    return Target(name=profile_for_db(path), home=home, db=path, logs_dir=home / "logs")


def profile_for_db(db: str | os.PathLike[str]) -> str:
    """The profile a database named on the command line belongs to: its home's name
    when the home is ``<root>/profiles/<name>/``, else ``default``."""
    # The path's parts as pathlib reads them: no empty parts, no ".", ".." kept.
    parts = [p for p in os.path.expanduser(os.fspath(db)).split("/") if p not in ("", ".")]
    if len(parts) >= 3 and parts[-3] == "profiles":
        return parts[-2]
    return DEFAULT_PROFILE
