"""The config's sections: one frozen dataclass each, with its named defaults (units in
the names). A section is a dataclass field of :class:`Config`; adding one is adding a
field, and adding a key is adding a field to its section (``etc/statewarden.yaml``
documents each, and a test keeps the two in step)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from statewarden.config_literals import (
    DEFAULT_OTHER_USERS,
    DISCOVER_PROFILES,
    HolderKind,
    OtherUsersPolicy,
)
from statewarden.config_values import (
    AtLeast,
    ByteSize,
    Count,
    CountFromZero,
    Duration,
    IdText,
    IncidentKind,
    Window,
)
from statewarden.endpoints import DEFAULT_WEB_PLAN_INTERVAL_S
from statewarden.kinds import Severity

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
    profiles: bool = DISCOVER_PROFILES
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
    recovery_files_growth_scans: CountFromZero = DEFAULT_RECOVERY_FILES_GROWTH_SCANS
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

    max_writers: Count = DEFAULT_MAX_WRITERS
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
    outbox_max_entries: Count = DEFAULT_OUTBOX_MAX_ENTRIES
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
    respawn_limit: CountFromZero = DEFAULT_MAINTENANCE_RESPAWN_LIMIT
    stop_grace: Annotated[Duration, AtLeast(1.0)] = DEFAULT_MAINTENANCE_STOP_GRACE_S
    unit_timeout: Annotated[Duration, AtLeast(1.0)] = DEFAULT_MAINTENANCE_UNIT_TIMEOUT_S
    quarantine_keep: Count = DEFAULT_QUARANTINE_KEEP
    quarantine_max_age: Annotated[Duration, AtLeast(60.0)] = DEFAULT_QUARANTINE_MAX_AGE_S
    snapshots: bool = True
    snapshot_interval: Annotated[Duration, AtLeast(1.0)] = DEFAULT_SNAPSHOT_INTERVAL_S
    snapshots_keep: Count = DEFAULT_SNAPSHOTS_KEEP
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


def public_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of a section the file may hold (not the internal ones, as ``source``)."""
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]
