"""Configuration: one YAML file -> validated, frozen dataclasses.

Where the file is: ``--config`` > ``$STATEWARDEN_CONFIG`` >
``$XDG_CONFIG_HOME/statewarden/config.yaml``. No file at the default place means
every default; a file named explicitly must exist. Every key is documented in
``etc/statewarden.yaml`` and a test keeps that file and this schema in step.

A section is a dataclass field of :class:`Config`; adding one is adding a field.
Every invalid file raises :class:`ConfigError` naming the file, the line when YAML
knows it, the dotted key path and what was expected. Reading is bounded: a regular
file only (never a FIFO or a device), at most ``CONFIG_MAX_BYTES``, nested at most
``CONFIG_MAX_DEPTH`` levels, aliases expanding to at most ``CONFIG_MAX_NODES`` values;
a rejected secret is never echoed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

# Re-exported ("X as X" marks that for mypy): the holders' literals and the file's place,
# defined where a command that starts fast can import them without this module.
from statewarden.config_literals import DEFAULT_OTHER_USERS as DEFAULT_OTHER_USERS  # noqa: PLC0414
from statewarden.config_literals import ENV_CONFIG as ENV_CONFIG  # noqa: PLC0414
from statewarden.config_literals import HolderKind as HolderKind  # noqa: PLC0414
from statewarden.config_literals import OtherUsersPolicy as OtherUsersPolicy  # noqa: PLC0414
from statewarden.config_literals import default_config_path as default_config_path  # noqa: PLC0414
from statewarden.config_literals import xdg_dir as xdg_dir  # noqa: PLC0414
from statewarden.endpoints import DEFAULT_WEB_PLAN_INTERVAL_S, listen_problems
from statewarden.errors import ConfigError
from statewarden.kinds import KINDS, Severity

if TYPE_CHECKING:
    import yaml

# Bounds on what a config file may cost to read: the whole schema needs a few hundred
# values and 4 levels; the limits leave room for long target lists and comments.
CONFIG_MAX_BYTES = 1 << 20
CONFIG_MAX_DEPTH = 32
CONFIG_MAX_NODES = 100_000
_TOO_LARGE = f"too large (a config is at most {CONFIG_MAX_BYTES} bytes)"

# Named defaults, units in the names.
DEFAULT_RESCAN_INTERVAL_S = 30.0
DEFAULT_POLL_INTERVAL_S = 1.0  # safety-net poll; inotify events wake the daemon sooner
DEFAULT_HOLDERS_INTERVAL_S = 5.0
DEFAULT_WAL_WARN_BYTES = 50 * 1000 * 1000  # the size at which `hermes doctor` warns
DEFAULT_WAL_GROWTH_WINDOW_S = 300.0
# Hermes' recovery files beside state.db (retired WAL captures, ...): one user's reached 2.5 GB.
DEFAULT_RECOVERY_FILES_WARN_BYTES = 1024**3
DEFAULT_RECOVERY_FILES_GROWTH_SCANS = 10  # scans are 30 s apart: 5 minutes of growth
DEFAULT_VERIFY_INTERVAL_S = 86400.0  # each database verified once a day
DEFAULT_VERIFY_TIMEOUT_S = 3600.0  # one verification is given up after this long
DEFAULT_UNEXPECTED_AFTER_S = 60.0  # a script reading for a few seconds is no holder yet
DEFAULT_MAX_WRITERS = 4  # gateway, dashboard, a TUI and the desktop's serve: a normal day
DEFAULT_QUIET_RESOLVE_S = 3600.0
DEFAULT_REOPEN_WINDOW_S = 600.0
DEFAULT_TIMELINE_MAX_AGE_S = 14 * 86400.0
DEFAULT_TIMELINE_MAX_BYTES = 16 * 2**20
DEFAULT_GROUP_WAIT_S = 30.0  # Alertmanager's group_wait: what fires together is sent together
DEFAULT_REPEAT_INTERVAL_S = 4 * 3600.0  # a reminder while an incident stays open
DEFAULT_OUTBOX_MAX_ENTRIES = 10_000
DEFAULT_RETRY_MAX_S = 300.0  # backoff cap for a sink that fails (timeouts, 5xx)
DEFAULT_TELEGRAM_API_BASE = "https://api.telegram.org"
DEFAULT_TELEGRAM_CREDENTIAL = "telegram-token"  # LoadCredential=telegram-token:/path
# The credential names `statewardenctl install --apprise-urls-file` (and the others) give
# the units; the config names them in alerts.<sink>.credential.
APPRISE_CREDENTIAL = "apprise-urls"
HEARTBEAT_CREDENTIAL = "heartbeat-url"
ALERTMANAGER_CREDENTIAL = "alertmanager-url"
DEFAULT_TELEGRAM_TOKEN_ENV = "STATEWARDEN_TELEGRAM_TOKEN"  # noqa: S105 - a variable's name
DEFAULT_TELEGRAM_TIMEOUT_S = 10.0
DEFAULT_TELEGRAM_DEADLINE_S = 30.0  # a whole request, however slowly its answer trickles in
DEFAULT_TELEGRAM_MIN_INTERVAL_S = 1.0  # Telegram allows about one message a second per chat
DEFAULT_HEARTBEAT_INTERVAL_S = 300.0
DEFAULT_HEARTBEAT_FAIL_SUFFIX = "/fail"  # Healthchecks: <ping URL>/fail
DEFAULT_HTTP_TIMEOUT_S = 10.0
DEFAULT_HTTP_DEADLINE_S = 30.0
DEFAULT_ALERTMANAGER_RESEND_S = 60.0  # well within Alertmanager's resolve_timeout (5 m)
LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["auto", "console", "json", "journald", "plain"]
DEFAULT_MAINTENANCE_SETTLE_S = 2.0
DEFAULT_MAINTENANCE_RESPAWN_LIMIT = 3
DEFAULT_MAINTENANCE_STOP_GRACE_S = 10.0
DEFAULT_MAINTENANCE_UNIT_TIMEOUT_S = 90.0
DEFAULT_MAINTENANCE_SETTLE_TIMEOUT_S = 30.0
DEFAULT_QUARANTINE_KEEP = 5
DEFAULT_QUARANTINE_MAX_AGE_S = 30 * 86400.0
DEFAULT_SNAPSHOTS_KEEP = 7
DEFAULT_SNAPSHOTS_MAX_AGE_S = 30 * 86400.0
DEFAULT_IMPORT_TIME_LIMIT_S = 600.0
DEFAULT_IMPORT_MAX_FILE_BYTES = 256 * 1024 * 1024
DEFAULT_SNAPSHOT_INTERVAL_S = 86400.0  # a verified snapshot of each database once a day
DEFAULT_LOG_LEVEL: LogLevel = "info"
DEFAULT_LOG_FORMAT: LogFormat = "auto"


class _Duration:
    """Marker: a duration in seconds, written as ``30s``, ``5m``, ``1h``, ``250ms`` or a number."""


@dataclass(frozen=True)
class AtLeast:
    """Marker: the least a duration may be (seconds). Every duration of the config has
    one: an interval below it would make the daemon spin (a holder scan every
    millisecond costs half a core), a time limit below it could never be met."""

    seconds: float


class _Bytes:
    """Marker: a size in bytes, written as ``50MiB``, ``4KB``, ``1GiB`` or an integer."""


class _Window:
    """Marker: a maintenance window such as ``Sun 03:00-04:00`` or ``daily 04:30-05:00``."""


class _Secret:
    """Marker: a value redacted by ``config show`` and in logs."""


class _Id:
    """Marker: an identifier written as a number or a string (a Telegram chat id), kept as text."""


Duration = Annotated[float, _Duration]
ByteSize = Annotated[int, _Bytes]
Secret = Annotated[str, _Secret]
IdText = Annotated[str, _Id]
Window = Annotated[str, _Window]

REDACTED = "***redacted***"


@dataclass(frozen=True)
class TargetConfig:
    """One Hermes home to watch, named explicitly instead of discovered."""

    home: Path
    name: str | None = None
    db: Path | None = None
    logs_dir: Path | None = None
    gateway_unit: str | None = None


@dataclass(frozen=True)
class DiscoveryConfig:
    """How Hermes homes are found when ``targets`` is empty."""

    hermes_home: Path | None = None
    profiles: bool = True
    rescan_interval: Annotated[Duration, AtLeast(0.1)] = DEFAULT_RESCAN_INTERVAL_S


@dataclass(frozen=True)
class PathsConfig:
    """Where statewarden keeps its own files (``null`` = the XDG default)."""

    state_dir: Path | None = None
    runtime_dir: Path | None = None


@dataclass(frozen=True)
class LoggingConfig:
    """Log level and output format of statewarden itself."""

    level: LogLevel = DEFAULT_LOG_LEVEL
    format: LogFormat = DEFAULT_LOG_FORMAT


@dataclass(frozen=True)
class WatchConfig:
    """What the daemon watches and how often."""

    poll_interval: Annotated[Duration, AtLeast(0.1)] = DEFAULT_POLL_INTERVAL_S
    holders_interval: Annotated[Duration, AtLeast(1.0)] = DEFAULT_HOLDERS_INTERVAL_S
    wal_warn_bytes: ByteSize = DEFAULT_WAL_WARN_BYTES
    wal_growth_window: Annotated[Duration, AtLeast(10.0)] = DEFAULT_WAL_GROWTH_WINDOW_S
    recovery_files_warn_bytes: ByteSize = DEFAULT_RECOVERY_FILES_WARN_BYTES
    recovery_files_growth_scans: int = DEFAULT_RECOVERY_FILES_GROWTH_SCANS
    journal: bool = True
    verify_interval: Annotated[Duration, AtLeast(1.0)] = DEFAULT_VERIFY_INTERVAL_S
    verify_timeout: Annotated[Duration, AtLeast(0.001)] = DEFAULT_VERIFY_TIMEOUT_S


DEFAULT_EXPECTED_KINDS: tuple[HolderKind, ...] = (
    "gateway",
    "dashboard",
    "serve",
    "serve-isolated",
    "cli",
    "tui",
    "cron",
    "acp",
    "litestream",  # replicates the database; maintenance stops and restarts it
)


@dataclass(frozen=True)
class HoldersConfig:
    """Which processes are expected to hold a database."""

    max_writers: int = DEFAULT_MAX_WRITERS
    expected_kinds: tuple[HolderKind, ...] = DEFAULT_EXPECTED_KINDS
    other_users: OtherUsersPolicy = DEFAULT_OTHER_USERS
    exempt_comms: tuple[str, ...] = ()
    unexpected_after: Annotated[Duration, AtLeast(1.0)] = DEFAULT_UNEXPECTED_AFTER_S


@dataclass(frozen=True)
class IncidentsConfig:
    """How incidents open, resolve and are kept."""

    quiet_resolve: Annotated[Duration, AtLeast(1.0)] = DEFAULT_QUIET_RESOLVE_S
    reopen_window: Annotated[Duration, AtLeast(1.0)] = DEFAULT_REOPEN_WINDOW_S


@dataclass(frozen=True)
class TimelineConfig:
    """How much evidence history is kept per database."""

    max_age: Annotated[Duration, AtLeast(60.0)] = DEFAULT_TIMELINE_MAX_AGE_S
    max_bytes: ByteSize = DEFAULT_TIMELINE_MAX_BYTES


class _Kind:
    """Marker: the name of an incident kind (``statewarden.kinds.KINDS``)."""


IncidentKind = Annotated[str, _Kind]


@dataclass(frozen=True)
class JournaldAlertsConfig:
    """Notifications as journald entries (one per incident, with its kind's MESSAGE_ID)."""

    enabled: bool = True
    min_severity: Severity = "info"
    kinds: tuple[IncidentKind, ...] = ()


@dataclass(frozen=True)
class TelegramConfig:
    """Notifications as Telegram messages (Bot API sendMessage); the token is never in here."""

    enabled: bool = False
    token_file: Path | None = None
    credential: str = DEFAULT_TELEGRAM_CREDENTIAL
    token_env: str = DEFAULT_TELEGRAM_TOKEN_ENV
    chat_id: IdText | None = None
    message_thread_id: int | None = None
    api_base: str = DEFAULT_TELEGRAM_API_BASE
    min_severity: Severity = "warning"
    kinds: tuple[IncidentKind, ...] = ()
    timeout: Annotated[Duration, AtLeast(0.1)] = DEFAULT_TELEGRAM_TIMEOUT_S
    deadline: Annotated[Duration, AtLeast(0.1)] = DEFAULT_TELEGRAM_DEADLINE_S
    min_interval: Annotated[Duration, AtLeast(0.01)] = DEFAULT_TELEGRAM_MIN_INTERVAL_S


@dataclass(frozen=True)
class HeartbeatConfig:
    """A dead man's switch: an HTTP GET to a push URL (Healthchecks, Uptime Kuma) every
    ``interval`` while statewarden runs, to its fail form while a critical incident is
    open. The URL is a secret, never in here: it is read from ``url_file`` or the systemd
    credential ``credential``; neither set means off."""

    url_file: Path | None = None
    credential: str | None = None
    interval: Annotated[Duration, AtLeast(1.0)] = DEFAULT_HEARTBEAT_INTERVAL_S
    fail_suffix: str = DEFAULT_HEARTBEAT_FAIL_SUFFIX
    timeout: Annotated[Duration, AtLeast(0.1)] = DEFAULT_HTTP_TIMEOUT_S
    deadline: Annotated[Duration, AtLeast(0.1)] = DEFAULT_HTTP_DEADLINE_S

    @property
    def enabled(self) -> bool:
        return self.url_file is not None or self.credential is not None


@dataclass(frozen=True)
class AlertmanagerConfig:
    """Each incident posted to Prometheus Alertmanager (``POST /api/v2/alerts``).

    ``url`` may be written here when it holds no secret; one that does (the user and
    password of a proxy in front of Alertmanager, ``https://user:pass@host``) is read
    from ``url_file`` or the systemd credential ``credential`` instead."""

    enabled: bool = False
    url: str | None = None
    url_file: Path | None = None
    credential: str | None = None
    min_severity: Severity = "info"
    kinds: tuple[IncidentKind, ...] = ()
    resend_interval: Annotated[Duration, AtLeast(1.0)] = DEFAULT_ALERTMANAGER_RESEND_S
    timeout: Annotated[Duration, AtLeast(0.1)] = DEFAULT_HTTP_TIMEOUT_S
    deadline: Annotated[Duration, AtLeast(0.1)] = DEFAULT_HTTP_DEADLINE_S


@dataclass(frozen=True)
class AppriseConfig:
    """Notifications through Apprise (ntfy, Matrix, Slack, Discord, e-mail, ...): the
    optional extra ``statewarden[apprise]``. The URLs carry secrets, never in here: one
    per line in ``urls_file`` or in the systemd credential ``credential``."""

    enabled: bool = False
    urls_file: Path | None = None
    credential: str | None = None
    min_severity: Severity = "warning"
    kinds: tuple[IncidentKind, ...] = ()
    timeout: Annotated[Duration, AtLeast(0.1)] = DEFAULT_HTTP_TIMEOUT_S
    deadline: Annotated[Duration, AtLeast(0.1)] = DEFAULT_HTTP_DEADLINE_S


@dataclass(frozen=True)
class AlertsConfig:
    """How incident changes become notifications, and where they go."""

    group_wait: Annotated[Duration, AtLeast(0.01)] = DEFAULT_GROUP_WAIT_S
    no_wait: tuple[Severity, ...] = ("critical",)
    repeat_interval: Annotated[Duration, AtLeast(60.0)] = DEFAULT_REPEAT_INTERVAL_S
    send_resolved: bool = True
    outbox_max_entries: int = DEFAULT_OUTBOX_MAX_ENTRIES
    retry_max: Annotated[Duration, AtLeast(0.5)] = DEFAULT_RETRY_MAX_S
    journald: JournaldAlertsConfig = field(default_factory=JournaldAlertsConfig)
    telegram: TelegramConfig = field(default_factory=TelegramConfig)
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    alertmanager: AlertmanagerConfig = field(default_factory=AlertmanagerConfig)
    apprise: AppriseConfig = field(default_factory=AppriseConfig)


@dataclass(frozen=True)
class MetricsConfig:
    """Prometheus metrics over HTTP (off unless ``listen`` is set)."""

    listen: str | None = None


@dataclass(frozen=True)
class WebConfig:  # the read-only web page (daemon/web.py); off unless listen is set
    listen: str | None = None
    plan_interval: Annotated[Duration, AtLeast(30.0)] = DEFAULT_WEB_PLAN_INTERVAL_S


AutoRepair = Literal["never", "in_window", "immediately"]


@dataclass(frozen=True)
class MaintenanceConfig:
    """Maintenance runs: when the daemon repairs, and how holders are stopped."""

    windows: tuple[Window, ...] = ()
    auto_repair: AutoRepair = "in_window"
    repair_kinds: tuple[str, ...] = ("corruption",)
    stop_interactive: bool = False
    accept_loss: bool = False
    settle: Annotated[Duration, AtLeast(0.1)] = DEFAULT_MAINTENANCE_SETTLE_S
    settle_timeout: Annotated[Duration, AtLeast(1.0)] = DEFAULT_MAINTENANCE_SETTLE_TIMEOUT_S
    respawn_limit: int = DEFAULT_MAINTENANCE_RESPAWN_LIMIT
    stop_grace: Annotated[Duration, AtLeast(1.0)] = DEFAULT_MAINTENANCE_STOP_GRACE_S
    unit_timeout: Annotated[Duration, AtLeast(1.0)] = DEFAULT_MAINTENANCE_UNIT_TIMEOUT_S
    quarantine_keep: int = DEFAULT_QUARANTINE_KEEP
    quarantine_max_age: Annotated[Duration, AtLeast(60.0)] = DEFAULT_QUARANTINE_MAX_AGE_S
    snapshots: bool = True
    snapshot_interval: Annotated[Duration, AtLeast(1.0)] = DEFAULT_SNAPSHOT_INTERVAL_S
    snapshots_keep: int = DEFAULT_SNAPSHOTS_KEEP
    snapshots_max_age: Annotated[Duration, AtLeast(60.0)] = DEFAULT_SNAPSHOTS_MAX_AGE_S
    import_time_limit: Annotated[Duration, AtLeast(1.0)] = DEFAULT_IMPORT_TIME_LIMIT_S
    import_max_file_size: ByteSize = DEFAULT_IMPORT_MAX_FILE_BYTES


@dataclass(frozen=True)
class Config:
    """The whole configuration, validated once."""

    targets: tuple[TargetConfig, ...] = ()
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    holders: HoldersConfig = field(default_factory=HoldersConfig)
    incidents: IncidentsConfig = field(default_factory=IncidentsConfig)
    timeline: TimelineConfig = field(default_factory=TimelineConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    web: WebConfig = field(default_factory=WebConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    source: str | None = field(default=None, metadata={"internal": True})


# --------------------------------------------------------------------------- paths


def state_dir(config: Config, env: Mapping[str, str] | None = None) -> Path:
    if config.paths.state_dir is not None:
        return config.paths.state_dir
    return xdg_dir("XDG_STATE_HOME", "~/.local/state", env) / "statewarden"


def runtime_dir(config: Config, env: Mapping[str, str] | None = None) -> Path:
    if config.paths.runtime_dir is not None:
        return config.paths.runtime_dir
    env = os.environ if env is None else env
    base = env.get("XDG_RUNTIME_DIR", "")
    if base and os.path.isabs(base):
        return Path(base) / "statewarden"
    # No runtime dir (no login session): fall back to the state dir, which is private.
    return state_dir(config, env) / "run"


# --------------------------------------------------------------------------- loading


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Load the effective configuration; raise :class:`ConfigError` if it is invalid."""
    env = os.environ if env is None else env
    explicit = path is not None or bool(env.get(ENV_CONFIG))
    chosen = (
        Path(path) if path is not None else Path(env.get(ENV_CONFIG) or default_config_path(env))
    )
    source = str(chosen)
    try:
        text = _read_bounded(chosen, source)
    except FileNotFoundError:
        if not explicit:
            return Config()
        raise ConfigError("no such file", source=source) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, expected a YAML file", source=source) from None
    except PermissionError:
        raise ConfigError("cannot read: permission denied", source=source) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start} is invalid)", source=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=source) from None
    return parse_config(text, source=source)


def paths_only(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Every default but the ``paths`` section of a config file that is otherwise invalid,
    when that section is valid (else every default): where a daemon started from an
    earlier, valid version of the file keeps its socket. Never raises."""
    env = os.environ if env is None else env
    chosen = (
        Path(path) if path is not None else Path(env.get(ENV_CONFIG) or default_config_path(env))
    )
    import yaml  # noqa: PLC0415 - only a config file needs it (commands start faster)

    try:
        data = yaml.safe_load(_read_bounded(chosen, str(chosen)))
        section = data.get("paths") if isinstance(data, dict) else None
        if not isinstance(section, dict):
            return Config()
        paths = _build(PathsConfig, section, ("paths",), _Ctx(str(chosen), {}))
    except (OSError, ValueError, RecursionError, ConfigError, yaml.YAMLError):
        return Config()
    return Config(paths=paths)


def _read_bounded(path: Path, source: str) -> str:
    """The file's text, if it is a regular file of at most ``CONFIG_MAX_BYTES``.

    Opened non-blocking and checked with fstat before any read, so a FIFO, a device
    (``/dev/zero``) or a huge file is refused at once instead of blocking or eating
    memory (a reload runs on the daemon's loop).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError("not a regular file, expected a YAML file", source=source)
        if st.st_size > CONFIG_MAX_BYTES:
            raise ConfigError(
                f"too large ({st.st_size} bytes; a config is at most {CONFIG_MAX_BYTES})",
                source=source,
            )
        data = os.read(fd, CONFIG_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > CONFIG_MAX_BYTES:
        raise ConfigError(_TOO_LARGE, source=source)
    return data.decode("utf-8")


def _check_shape(node: yaml.Node, source: str) -> None:
    """Refuse YAML whose alias expansion or nesting is out of bounds.

    Aliases share nodes, so a few lines can stand for billions of values (a "billion
    laughs" file) or for a value that contains itself; walking either without a bound
    exhausts memory or the stack. Every node is counted as often as aliases repeat it.
    """
    import yaml  # noqa: PLC0415 - only a config file needs it (commands start faster)

    budget = CONFIG_MAX_NODES
    stack: list[tuple[yaml.Node, int, frozenset[int]]] = [(node, 0, frozenset())]
    while stack:
        n, depth, above = stack.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError(
                f"expands to more than {CONFIG_MAX_NODES} values (aliases repeat too much)",
                source=source,
            )
        if depth > CONFIG_MAX_DEPTH:
            raise ConfigError(
                f"nested more than {CONFIG_MAX_DEPTH} levels deep",
                source=source,
                line=n.start_mark.line + 1,
            )
        if id(n) in above:
            raise ConfigError(
                "an alias refers to a value that contains it (recursive alias)",
                source=source,
                line=n.start_mark.line + 1,
            )
        inner = above | {id(n)}
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack.append((k, depth + 1, inner))
                stack.append((v, depth + 1, inner))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend((item, depth + 1, inner) for item in n.value)


def parse_config(text: str, *, source: str = "<config>") -> Config:
    """Validate YAML text into a :class:`Config`."""
    if not text.strip() or all(
        not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()
    ):
        raise ConfigError(
            "the file is empty; expected a mapping of sections",
            source=source,
            hint="write {} to use every default, or delete the file",
        )
    if len(text) > CONFIG_MAX_BYTES:
        raise ConfigError(_TOO_LARGE, source=source)
    import yaml  # noqa: PLC0415 - only a config file needs it (commands start faster)

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            _check_shape(node, source)
        data = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(
            f"nested too deeply (at most {CONFIG_MAX_DEPTH} levels)", source=source
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = " ".join((exc.problem or exc.context or "invalid YAML").split())
        if "\t" in problem or "'\\t'" in problem:
            raise ConfigError(
                "a tab character is not allowed in YAML indentation; use spaces",
                source=source,
                line=line,
            ) from None
        raise ConfigError(f"YAML syntax error: {problem}", source=source, line=line) from None
    except yaml.reader.ReaderError as exc:
        raise ConfigError(
            f"YAML cannot contain the character #x{exc.character:04x} (offset {exc.position})",
            source=source,
        ) from None
    except yaml.YAMLError as exc:
        one_line = " ".join(str(exc).split())
        raise ConfigError(f"YAML syntax error: {one_line}", source=source) from None
    lines = _line_map(node)
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
    if alerts.outbox_max_entries < 1:
        raise ctx.error(("alerts", "outbox_max_entries"), "expected a whole number above zero")


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


def _line_map(node: yaml.Node | None) -> dict[tuple[str | int, ...], int]:
    """Key path -> 1-based line where that key (or list item) starts."""
    import yaml  # noqa: PLC0415 - only a config file needs it (commands start faster)

    lines: dict[tuple[str | int, ...], int] = {}

    def walk(n: yaml.Node, path: tuple[str | int, ...]) -> None:
        if isinstance(n, yaml.MappingNode):
            for key_node, value_node in n.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
                lines[(*path, key)] = key_node.start_mark.line + 1
                walk(value_node, (*path, key))
        elif isinstance(n, yaml.SequenceNode):
            for index, item in enumerate(n.value):
                lines[(*path, index)] = item.start_mark.line + 1
                walk(item, (*path, index))

    if node is not None:
        lines[()] = node.start_mark.line + 1
        walk(node, ())
    return lines


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


def public_fields(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


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


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_BYTES_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_BYTES_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_duration(value: object) -> float | None:
    """Seconds for ``30s`` / ``5m`` / ``1h`` / ``250ms`` / ``2d`` / a number; ``None`` if invalid.

    Every duration in the config is an interval or a time limit, so it must be above zero.
    """
    seconds: float | None = None
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        m = _DURATION_RE.match(value)
        if m:
            seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if seconds is None or not seconds > 0 or seconds == float("inf"):
        return None
    return seconds


_WINDOW_RE = re.compile(r"^\s*(\S+)\s+(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY_SETS = {"daily": range(7), "weekdays": range(5), "weekends": range(5, 7)}


def duration_floor(markers: tuple[Any, ...] | list[Any]) -> float | None:
    """The floor an ``AtLeast`` marker among ``markers`` sets, or None."""
    return next((m.seconds for m in markers if isinstance(m, AtLeast)), None)


def parse_window(value: object) -> tuple[frozenset[int], int, int] | None:
    """``(weekdays 0=Mon, start minute, end minute)`` of ``Sun 03:00-04:00``; None if invalid.

    Days: ``daily``, ``weekdays``, ``weekends``, a day (``Sun``) or a list (``Sat,Sun``).
    An end at or before the start runs past midnight into the next day.
    """
    if not isinstance(value, str):
        return None
    m = _WINDOW_RE.match(value)
    if not m:
        return None
    days: set[int] = set()
    for part in m.group(1).lower().split(","):
        if part in _DAY_SETS:
            days.update(_DAY_SETS[part])
        elif part in WEEKDAYS or part in _WEEKDAY_NAMES:
            days.add(WEEKDAYS.index(part[:3]))
        else:
            return None
    h1, m1, h2, m2 = (int(g) for g in m.groups()[1:])
    if h1 > 23 or h2 > 24 or m1 > 59 or m2 > 59 or (h2 == 24 and m2):
        return None
    start, end = h1 * 60 + m1, h2 * 60 + m2
    if start == end:
        return None
    return frozenset(days), start, end


def parse_bytes(value: object) -> int | None:
    """Bytes for ``50MiB`` / ``4KB`` / an integer; ``None`` if invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str):
        m = _BYTES_RE.match(value)
        if m:
            unit = (m.group(2) or "B").lower()
            return int(float(m.group(1)) * _BYTES_UNITS[unit])
    return None


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
        return _convert(base, value, path, ctx)
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


# --------------------------------------------------------------------------- showing


def is_secret(cls: type, name: str) -> bool:
    hint = typing.get_type_hints(cls, include_extras=True).get(name)
    return get_origin(hint) is Annotated and _Secret in get_args(hint)


def format_duration(seconds: float) -> str:
    """``seconds`` as the config writes it, in the largest unit that keeps it whole:
    ``30s``, ``5m``, ``4h``, ``1d``, ``250ms``; :func:`parse_duration` reads it back."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    millis = f"{seconds * 1000:.6f}".rstrip("0").rstrip(".")  # never an exponent
    return f"{millis}ms"


def format_bytes(n: int) -> str:
    """``n`` bytes as the config writes it (``50MB``, ``16MiB``, ``4096``);
    :func:`parse_bytes` reads it back."""
    for unit, size in (
        ("GiB", 2**30),
        ("MiB", 2**20),
        ("KiB", 2**10),
        ("GB", 10**9),
        ("MB", 10**6),
    ):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


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
