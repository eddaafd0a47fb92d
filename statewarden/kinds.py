"""Every incident kind, once: one :class:`Kind` entry holds all there is to know of it.

A kind's default severity, its journald ``MESSAGE_ID``, how it resolves, the catalogue
text ``journalctl -x`` shows under it, the next step a notification names, whether a
maintenance run mutes it, whether an open ``corruption`` incident folds it in, and when
an open incident of it is evaluated afresh after a restart. Adding a kind is one entry
here (and a row of the README's MESSAGE_ID table); the config validates kind names
against this table, so it lives in the base, below every part.

Kinds use one word per concept, the same in code, CLI, docs and journald.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["info", "warning", "error", "critical"]
# Most severe last: an update escalates an incident only to a higher rank.
SEVERITY_RANK: dict[Severity, int] = {"info": 0, "warning": 1, "error": 2, "critical": 3}

# When an incident of a state kind, open at start-up, is evaluated afresh (its watcher
# remembers nothing across a restart; ``incidents/restart.py``):
# "holder_scan": once a holder scan has run; "start_up": once start-up is done (watchers
# polled, mounts checked, first scan); "window": once the kind's window has passed.
AfterRestart = Literal["holder_scan", "start_up", "window"]


@dataclass(frozen=True, kw_only=True)
class Kind:
    """One incident kind: everything the book, the alerts and the docs know of it."""

    severity: Severity  # the default; a signal may say otherwise
    # A fixed 128-bit id, as journald catalogs want; documented in README.md.
    message_id: str
    # "state": a watcher says when the condition clears (``Signal.clears``);
    # "log": from log or journal lines, resolved after a quiet period.
    rule: Literal["state", "log"]
    what: str  # what it means, in one line (README, ``statewardenctl incidents``)
    subject: str  # the catalogue entry's subject (``journalctl -x``)
    meaning: str  # the catalogue entry's text: what happened and what it puts at risk
    next_step: str  # what a person does next; ``{profile}`` is the profile's name
    # A state kind's moment to be evaluated afresh after a restart; None for log kinds.
    after_restart: AfterRestart | None = None
    # A log kind whose incidents resolve sooner than the configured quiet period.
    quiet_resolve_s: float | None = None
    # A maintenance run on the database causes it (it stops holders and units): muted
    # while the run is in progress (``alerts/router.py``).
    muted_in_maintenance: bool = False
    # Narrower than corruption: while a ``corruption`` incident is open on the database,
    # listed in its notification rather than sent on its own.
    folded_into_corruption: bool = False
    # A maintenance run's own process (it holds the database to repair it) never counts
    # as a holder of this kind (``watch/holders.py``).
    maintenance_process_exempt: bool = False
    # A sign the database may be damaged: its integrity is verified soon after, not at
    # the next scheduled verification (``daemon/verify.py``).
    verified_soon_after: bool = False
    # Of the database file's content (damage, and what is folded into it): an incident
    # is of one file identity (device and inode); damage on a new file (after a repair or
    # a replacement) is a new incident, never the old one reopened (``incidents/book.py``).
    of_one_file: bool = False


# Every incident kind, in the order the README and the catalogue list them.
KINDS: dict[str, Kind] = {
    "corruption": Kind(
        severity="critical",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a01",
        rule="log",
        what="malformed / disk I/O error / not a database from state.db code",
        subject="Hermes state.db is corrupt",
        meaning=(
            "Hermes reported that state.db is malformed, not a database, or failed with a disk I/O "
            "error. Sessions written from now on may be lost or diverted to JSONL, and Hermes' own "
            "repair refuses to run while any process holds the file."
        ),
        next_step=(
            "statewardenctl check --profile {profile}, then statewardenctl maintenance --dry-run "
            "--profile {profile}"
        ),
        of_one_file=True,
    ),
    "jsonl_fallback": Kind(
        severity="critical",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a02",
        rule="log",
        what="the gateway stopped writing to state.db and uses JSONL",
        subject="Hermes stopped writing to state.db and diverts to JSONL",
        meaning=(
            "The gateway could not write state.db and keeps answering from JSONL files. Nothing in "
            "the chat shows it; the database falls behind until it is repaired."
        ),
        next_step=(
            "statewardenctl check --profile {profile}, then statewardenctl maintenance --dry-run "
            "--profile {profile} (Hermes is writing to JSONL, not state.db)"
        ),
        muted_in_maintenance=True,
        folded_into_corruption=True,
        of_one_file=True,
    ),
    # "database is locked" bursts come and go with load; they resolve sooner.
    "write_failures": Kind(
        severity="warning",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a03",
        rule="log",
        what="database is locked / append failed, with a rate",
        subject="Writes to Hermes state.db are failing",
        meaning=(
            "Hermes logged failed writes (database is locked, append or routing save failed). "
            "Bursts come and go with load; a steady rate means a holder keeps the write lock."
        ),
        next_step="statewardenctl holders --profile {profile} (who holds the write lock)",
        quiet_resolve_s=900.0,
        muted_in_maintenance=True,
        folded_into_corruption=True,
        of_one_file=True,
    ),
    "messages_dropped": Kind(
        severity="critical",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a04",
        rule="log",
        what="pending queue full: messages are being lost",
        subject="Hermes is dropping messages",
        meaning=(
            "Hermes' pending transcript queue is full or its JSONL divert failed: messages are "
            "being lost now."
        ),
        next_step=(
            "statewardenctl holders --profile {profile} and statewardenctl check --profile "
            "{profile}: messages are being lost"
        ),
    ),
    "self_repair": Kind(
        severity="error",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a05",
        rule="log",
        what="a state.db.malformed-backup-* appeared: Hermes repaired itself",
        subject="Hermes repaired state.db itself",
        meaning=(
            "Hermes found damage and repaired the file in place (a state.db.malformed-backup-* "
            "appeared, or it rebuilt the full-text index). Rows it could not read may be gone."
        ),
        next_step=(
            "statewardenctl check --profile {profile} (Hermes replaced state.db; the old file is "
            "kept as state.db.malformed-backup-*)"
        ),
        folded_into_corruption=True,
        of_one_file=True,
        verified_soon_after=True,
    ),
    "stale_holder": Kind(
        severity="critical",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a06",
        rule="state",
        what="a process holds a deleted or replaced state.db/-wal/-shm inode",
        subject="A process holds an old or deleted state.db",
        meaning=(
            "A process has state.db, -wal or -shm open on an inode that was deleted or replaced. "
            "Its writes no longer reach the database everyone else uses."
        ),
        next_step=(
            "statewardenctl holders --profile {profile}, then restart the STALE process: its "
            "writes no longer reach state.db"
        ),
        after_restart="holder_scan",
        muted_in_maintenance=True,
    ),
    "lost_locks": Kind(
        severity="error",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a07",
        rule="state",
        what="a holder has the file open but no SQLite lock on it",
        subject="A process lost its SQLite locks on state.db",
        meaning=(
            "A process has the database open but holds no SQLite lock on it (a descriptor was "
            "closed under it). Its next write can corrupt the file."
        ),
        next_step=(
            "statewardenctl holders --profile {profile}, then restart the process flagged "
            "LOST-LOCKS"
        ),
        after_restart="holder_scan",
        muted_in_maintenance=True,
        maintenance_process_exempt=True,
    ),
    "wal_growth": Kind(
        severity="warning",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a08",
        rule="state",
        what="-wal over the threshold and growing: checkpoints starved",
        subject="state.db-wal keeps growing",
        meaning=(
            "The write-ahead log is past its threshold and still growing: checkpoints are starved, "
            "usually by a long-lived reader."
        ),
        next_step=(
            "statewardenctl holders --profile {profile} (a long-lived reader starves checkpoints)"
        ),
        after_restart="window",
    ),
    "unsafe_mount": Kind(
        severity="error",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a09",
        rule="state",
        what="WAL database on virtiofs / 9p / network / FUSE",
        subject="state.db is in WAL mode on an unsafe filesystem",
        meaning=(
            "WAL needs coherent shared memory and locks; on virtiofs, 9p, NFS, SMB, FUSE and "
            "similar it can corrupt silently while integrity checks pass."
        ),
        next_step=(
            "stop Hermes and move its home to a local filesystem (then point targets[].home in the "
            "statewarden config at it), or convert state.db to journal_mode=DELETE while Hermes is "
            "stopped"
        ),
        after_restart="start_up",
    ),
    "multi_writer": Kind(
        severity="info",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0a",
        rule="state",
        what="more writer processes than configured (advisory)",
        subject="More processes than expected hold state.db",
        meaning=(
            "More writer processes than holders.max_writers have the database open at once. Each "
            "is a writer that can race the others (advisory)."
        ),
        next_step=(
            "statewardenctl holders --profile {profile}; raise holders.max_writers in the "
            "statewarden config if this many is normal here"
        ),
        after_restart="holder_scan",
        muted_in_maintenance=True,
        maintenance_process_exempt=True,
    ),
    "unexpected_holder": Kind(
        severity="warning",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0b",
        rule="state",
        what="a holder of a kind not on the configured list",
        subject="An unexpected process holds state.db",
        meaning=(
            "A process of a kind not in holders.expected_kinds (sqlite3, unknown) has "
            "the database open."
        ),
        next_step=(
            "statewardenctl holders --profile {profile}; add the kind to holders.expected_kinds in "
            "the statewarden config if it belongs"
        ),
        after_restart="holder_scan",
        muted_in_maintenance=True,
        maintenance_process_exempt=True,
    ),
    "crash_loop": Kind(
        severity="error",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0c",
        rule="state",
        what="a Hermes unit restarting over and over",
        subject="A Hermes unit is restarting over and over",
        meaning="A Hermes systemd --user unit keeps failing and being restarted.",
        next_step="journalctl --user -u <unit> -n 50 (why the unit keeps failing)",
        after_restart="window",
        muted_in_maintenance=True,
        verified_soon_after=True,
    ),
    "task_died": Kind(
        severity="error",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0d",
        rule="log",
        what='"Supervised task <name> died"',
        subject="A Hermes gateway task died",
        meaning=(
            "A supervised task of the gateway (cron ticker, delivery worker, ...) died; Hermes may "
            "have given up restarting it."
        ),
        next_step="journalctl --user -u hermes-gateway -n 50, then restart the gateway",
        muted_in_maintenance=True,
    ),
    "watcher_failed": Kind(
        severity="warning",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0e",
        rule="state",
        what="one of statewarden's own watchers keeps failing",
        subject="One of statewarden's watchers keeps failing",
        meaning=(
            "statewarden cannot watch part of Hermes (a log, the journal, holders, units); "
            "problems there would go unseen until it recovers."
        ),
        next_step="journalctl --user -u statewarden -p warning",
        after_restart="start_up",
    ),
    "state_unwritable": Kind(
        severity="error",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0f",
        rule="state",
        what="statewarden cannot write its own state (disk full, no descriptors, ...)",
        subject="statewarden cannot write its own state",
        meaning=(
            "A full disk or no descriptors left: incidents and alerts go on from memory and every "
            "write is retried until it works again."
        ),
        next_step=(
            "df -h ~/.local/state/statewarden; free space there (or raise the unit's "
            "LimitNOFILE=); writes are retried"
        ),
        after_restart="start_up",
    ),
    # Sent by statewarden-failed@.service (OnFailure= of the unit), not by the daemon.
    "supervisor_failed": Kind(
        severity="critical",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a10",
        rule="log",
        what="statewarden itself stopped for good (its unit hit the start limit)",
        subject="statewarden has stopped for good",
        meaning=(
            "statewarden.service failed so often that the user manager gave up restarting it (its "
            "start limit). Nothing watches Hermes' state.db, and no other alert will come, until "
            "it runs again."
        ),
        next_step=(
            "journalctl --user -u statewarden -n 50; fix the cause, then systemctl --user "
            "reset-failed statewarden && systemctl --user start statewarden"
        ),
    ),
    # A maintenance run's outcome, told through the alert sinks (never an open incident).
    "maintenance_repaired": Kind(
        severity="warning",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a11",
        rule="log",
        what="a maintenance run swapped a repaired (or converted) state.db in",
        subject="A maintenance run repaired Hermes state.db",
        meaning=(
            "statewarden stopped every holder of state.db, swapped a repaired (or converted) file "
            "in and started Hermes again. The entry says the downtime, the rows kept, any loss and "
            "where the original was quarantined."
        ),
        next_step=(
            "statewardenctl status --profile {profile}; statewardenctl quarantine list shows the "
            "original"
        ),
    ),
    "maintenance_rolled_back": Kind(
        severity="error",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a12",
        rule="log",
        what="a maintenance run aborted and rolled back; the database is unchanged",
        subject="A maintenance run was aborted and rolled back",
        meaning=(
            "A maintenance run stopped Hermes, then gave up (a holder kept coming back, a unit "
            "would not stop, the catch-up failed) and put everything back: the database is "
            "unchanged and the stopped units run again. The entry names who kept coming back."
        ),
        next_step=(
            "statewardenctl maintenance --dry-run --profile {profile}, stop what it names (or "
            "close the app that respawns it), run again"
        ),
    ),
    "maintenance_refused": Kind(
        severity="warning",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a13",
        rule="log",
        what="a maintenance run refused to start; nothing was stopped",
        subject="A maintenance run refused to start",
        meaning=(
            "A maintenance run stopped nothing: a holder may not be stopped (another uid, an "
            "interactive Hermes without --force), there is too little space, or the repair would "
            "lose rows."
        ),
        next_step=(
            "statewardenctl maintenance --dry-run --profile {profile}, fix what it names, run again"
        ),
    ),
    "watcher_degraded": Kind(
        severity="warning",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a21",
        rule="state",
        what=(
            "a watcher got no inotify (limits used up) and polls instead: slower, still detecting"
        ),
        subject="A statewarden watcher polls instead of using inotify",
        meaning=(
            "The user's inotify instances or watches are used up (fs.inotify.max_user_instances, "
            "fs.inotify.max_user_watches), so a watcher could not get one. It polls instead: "
            "everything is still detected, later (up to one poll interval)."
        ),
        next_step=(
            "raise the inotify limit the incident names (sudo sysctl "
            "fs.inotify.max_user_instances=1024 or fs.inotify.max_user_watches=524288; make it "
            "lasting in /etc/sysctl.d/), then systemctl --user restart statewarden"
        ),
        after_restart="start_up",
    ),
    "lock_guard": Kind(
        severity="warning",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a22",
        rule="log",
        what=('a Hermes writer could not arm its WAL lock guard ("WAL lock guard incomplete")'),
        subject="A Hermes writer could not arm its WAL lock guard",
        meaning=(
            "Hermes adds open-file-description locks on state.db and -shm so that a stray close "
            "cannot drop a writer's SQLite locks. A writer could not arm them (a foreign EXCLUSIVE "
            "holder, or a lock error): its WAL generation can be deleted under it, which is how "
            "DeletedWalGenerationError happens."
        ),
        next_step=(
            "statewardenctl holders --profile {profile} (who holds state.db EXCLUSIVE); restart "
            "the Hermes process that logged it once that holder is gone"
        ),
    ),
    "wal_reset_bug": Kind(
        severity="warning",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a23",
        rule="log",
        what="Hermes' SQLite or the sqlite3 shell has the WAL-reset bug (fixed in 3.51.3)",
        subject="Hermes runs with a SQLite that has the WAL-reset bug",
        meaning=(
            "SQLite 3.7.0 to 3.51.2 (except 3.50.7+ and 3.44.6+) can, rarely, corrupt a WAL "
            "database written by several connections at once. Hermes logged that its own SQLite, "
            "or the sqlite3 shell on this machine, is such a version."
        ),
        next_step=(
            "upgrade the SQLite Hermes links (hermes update) and the sqlite3 shell to 3.51.3+; "
            "until then never open state.db with the shell while Hermes runs"
        ),
    ),
    "recovery_files": Kind(
        severity="info",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a24",
        rule="state",
        what=(
            "retired WAL captures, a pending_messages spool or pre-update backups beside state.db"
        ),
        subject="Hermes kept recovery files beside state.db",
        meaning=(
            "Newer Hermes keeps state.db.retired-wal-<ts>-<pid>/ captures (a WAL it could no "
            "longer write to), a pending_messages/ spool of messages not yet in state.db, and "
            "state.db.pre-update-emergency-*.bak copies. New ones mean something went wrong; they "
            "are never deleted by Hermes and can fill the disk."
        ),
        next_step=(
            "statewardenctl status --profile {profile} lists them with sizes; keep retired-wal "
            "captures until recovery is checked, then delete old ones"
        ),
        after_restart="start_up",
    ),
    "sessions_vanished": Kind(
        severity="critical",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a25",
        rule="log",
        what=(
            "Hermes moved an empty or damaged state.db aside and started a fresh, empty one: "
            "every session vanished"
        ),
        subject="Hermes started with an empty state.db: every session has vanished",
        meaning=(
            "Hermes (0.22 and later) found state.db empty or not a database, moved it aside "
            "(state.db.zeroed-<ts>-<pid>.bak or state.db.notadb-<ts>-<pid>.bak, with its -wal "
            "and -shm) and created a fresh, empty database. To the user every session is gone; "
            "the old sessions are only in the moved-aside file, which Hermes never reads back."
        ),
        next_step=(
            "statewardenctl maintenance --merge-from <the moved_aside file the incident names> "
            "--dry-run, then without --dry-run: the old sessions come back into the current "
            "state.db; keep the file and its -wal/-shm until then"
        ),
        of_one_file=True,
    ),
    "duplicate_writers": Kind(
        severity="warning",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a26",
        rule="log",
        what='one Hermes process holds several writer handles on state.db ("N live SessionDB '
        'handles")',
        subject="A Hermes process holds several writer connections on state.db",
        meaning=(
            "Hermes logged that one of its processes opened several SessionDB handles on the "
            "same state.db, each with its own writer connection. Duplicate writers in one "
            "process come before lock storms and WAL damage (Hermes' own early warning)."
        ),
        next_step=(
            "statewardenctl holders --profile {profile}; restart the Hermes process that logged "
            "it (hermes update brings the fix that shares one handle)"
        ),
    ),
    "schema_newer": Kind(
        severity="info",
        message_id="5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a27",
        rule="state",
        what="a state.db whose schema_version is newer than the layouts statewarden knows",
        subject="state.db has a Hermes schema newer than statewarden knows",
        meaning=(
            "Hermes upgraded state.db to a schema_version statewarden has not been verified "
            "on: its log rules, check, recover and maintenance still run (rows are copied by "
            "column name), but objects it does not know are reported as 'cannot verify'."
        ),
        next_step=(
            "statewardenctl status --profile {profile} names the version; update statewarden "
            "when a release knows it"
        ),
        after_restart="start_up",
    ),
}


def is_state_kind(kind: str) -> bool:
    """True for a kind a watcher clears; False for log kinds (and kinds no longer known,
    from an older incident book)."""
    known = KINDS.get(kind)
    return known is not None and known.rule == "state"
