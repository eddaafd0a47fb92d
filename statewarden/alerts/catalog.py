"""The journal message catalogue: what each incident kind means and what to do.

``journalctl -x`` shows, under each entry with a catalogued ``MESSAGE_ID``, the text of
that id from the catalogue database (``/var/lib/systemd/catalog/database``, built by
``journalctl --update-catalog`` from the ``*.catalog`` files in
``/usr/local/lib/systemd/catalog/`` and ``/usr/lib/systemd/catalog/``, the only two folders
systemd 252 reads; there is no per-user one). This module writes
``systemd/statewarden.catalog`` (``python -m statewarden.alerts.catalog``; a test keeps the
committed file equal to it); ``packaging/install.sh`` installs it when run as root.
``@STATEWARDEN_DB@``-style names are replaced by the entry's fields.
"""

from __future__ import annotations

from statewarden.alerts.journald_sink import TEST_MESSAGE_ID
from statewarden.alerts.message import NEXT_STEPS
from statewarden.incidents.signals import KINDS

MEANINGS: dict[str, tuple[str, str]] = {
    "corruption": (
        "Hermes state.db is corrupt",
        "Hermes reported that state.db is malformed, not a database, or failed with a disk "
        "I/O error. Sessions written from now on may be lost or diverted to JSONL, and "
        "Hermes' own repair refuses to run while any process holds the file.",
    ),
    "jsonl_fallback": (
        "Hermes stopped writing to state.db and diverts to JSONL",
        "The gateway could not write state.db and keeps answering from JSONL files. Nothing "
        "in the chat shows it; the database falls behind until it is repaired.",
    ),
    "write_failures": (
        "Writes to Hermes state.db are failing",
        "Hermes logged failed writes (database is locked, append or routing save failed). "
        "Bursts come and go with load; a steady rate means a holder keeps the write lock.",
    ),
    "messages_dropped": (
        "Hermes is dropping messages",
        "Hermes' pending transcript queue is full or its JSONL divert failed: messages are "
        "being lost now.",
    ),
    "self_repair": (
        "Hermes repaired state.db itself",
        "Hermes found damage and repaired the file in place (a state.db.malformed-backup-* "
        "appeared, or it rebuilt the full-text index). Rows it could not read may be gone.",
    ),
    "stale_holder": (
        "A process holds an old or deleted state.db",
        "A process has state.db, -wal or -shm open on an inode that was deleted or replaced. "
        "Its writes no longer reach the database everyone else uses.",
    ),
    "lost_locks": (
        "A process lost its SQLite locks on state.db",
        "A process has the database open but holds no SQLite lock on it (a descriptor was "
        "closed under it). Its next write can corrupt the file.",
    ),
    "wal_growth": (
        "state.db-wal keeps growing",
        "The write-ahead log is past its threshold and still growing: checkpoints are "
        "starved, usually by a long-lived reader.",
    ),
    "unsafe_mount": (
        "state.db is in WAL mode on an unsafe filesystem",
        "WAL needs coherent shared memory and locks; on virtiofs, 9p, NFS, SMB, FUSE and "
        "similar it can corrupt silently while integrity checks pass.",
    ),
    "multi_writer": (
        "More processes than expected hold state.db",
        "More writer processes than holders.max_writers have the database open at once. "
        "Each is a writer that can race the others (advisory).",
    ),
    "unexpected_holder": (
        "An unexpected process holds state.db",
        "A process of a kind not in holders.expected_kinds (sqlite3, litestream, unknown) "
        "has the database open.",
    ),
    "crash_loop": (
        "A Hermes unit is restarting over and over",
        "A Hermes systemd --user unit keeps failing and being restarted.",
    ),
    "task_died": (
        "A Hermes gateway task died",
        "A supervised task of the gateway (cron ticker, delivery worker, ...) died; Hermes "
        "may have given up restarting it.",
    ),
    "watcher_failed": (
        "One of statewarden's watchers keeps failing",
        "statewarden cannot watch part of Hermes (a log, the journal, holders, units); "
        "problems there would go unseen until it recovers.",
    ),
    "state_unwritable": (
        "statewarden cannot write its own state",
        "A full disk or no descriptors left: incidents and alerts go on from memory and "
        "every write is retried until it works again.",
    ),
    "supervisor_failed": (
        "statewarden has stopped for good",
        "statewarden.service failed so often that the user manager gave up restarting it "
        "(its start limit). Nothing watches Hermes' state.db, and no other alert will come, "
        "until it runs again.",
    ),
    "maintenance_repaired": (
        "A maintenance run repaired Hermes state.db",
        "statewarden stopped every holder of state.db, swapped a repaired (or converted) "
        "file in and started Hermes again. The entry says the downtime, the rows kept, any "
        "loss and where the original was quarantined.",
    ),
    "maintenance_rolled_back": (
        "A maintenance run was aborted and rolled back",
        "A maintenance run stopped Hermes, then gave up (a holder kept coming back, a unit "
        "would not stop, the catch-up failed) and put everything back: the database is "
        "unchanged and the stopped units run again. The entry names who kept coming back.",
    ),
    "maintenance_refused": (
        "A maintenance run refused to start",
        "A maintenance run stopped nothing: a holder may not be stopped (another uid, an "
        "interactive Hermes without --force), there is too little space, or the repair "
        "would lose rows.",
    ),
    "watcher_degraded": (
        "A statewarden watcher polls instead of using inotify",
        "The user's inotify instances or watches are used up (fs.inotify.max_user_instances, "
        "fs.inotify.max_user_watches), so a watcher could not get one. It polls instead: "
        "everything is still detected, later (up to one poll interval).",
    ),
    "lock_guard": (
        "A Hermes writer could not arm its WAL lock guard",
        "Hermes adds open-file-description locks on state.db and -shm so that a stray close "
        "cannot drop a writer's SQLite locks. A writer could not arm them (a foreign "
        "EXCLUSIVE holder, or a lock error): its WAL generation can be deleted under it, "
        "which is how DeletedWalGenerationError happens.",
    ),
    "wal_reset_bug": (
        "Hermes runs with a SQLite that has the WAL-reset bug",
        "SQLite 3.7.0 to 3.51.2 (except 3.50.7+ and 3.44.6+) can, rarely, corrupt a WAL "
        "database written by several connections at once. Hermes logged that its own SQLite, "
        "or the sqlite3 shell on this machine, is such a version.",
    ),
    "recovery_files": (
        "Hermes kept recovery files beside state.db",
        "Newer Hermes keeps state.db.retired-wal-<ts>-<pid>/ captures (a WAL it could no longer "
        "write to), a pending_messages/ spool of messages not yet in state.db, and "
        "state.db.pre-update-emergency-*.bak copies. New ones mean something went wrong; they "
        "are never deleted by Hermes and can fill the disk.",
    ),
}


def _entry(message_id: str, subject: str, body: str, next_step: str) -> str:
    return (
        f"-- {message_id}\n"
        f"Subject: statewarden: {subject}\n"
        "Defined-By: statewarden\n"
        "\n"
        f"{body}\n"
        "\n"
        "Incident @STATEWARDEN_INCIDENT@ on @STATEWARDEN_DB@ (profile @STATEWARDEN_PROFILE@), "
        "@STATEWARDEN_STATE@.\n"
        "\n"
        f"What to do: {next_step}\n"
    )


def catalog_text() -> str:
    """The whole ``statewarden.catalog`` file."""
    parts = [
        "# statewarden journal message catalogue (generated: python -m "
        "statewarden.alerts.catalog).\n# Installed into /usr/local/lib/systemd/catalog/ "
        "by packaging/install.sh (as root), then: journalctl --update-catalog\n"
    ]
    for kind in KINDS:
        subject, body = MEANINGS[kind]
        step = NEXT_STEPS[kind].format(profile="@STATEWARDEN_PROFILE@")
        parts.append(_entry(KINDS[kind].message_id, subject, body, step))
    parts.append(
        f"-- {TEST_MESSAGE_ID}\n"
        "Subject: statewarden: test notification\n"
        "Defined-By: statewarden\n"
        "\n"
        "Sent by statewardenctl alerts test: alerts from statewarden reach the journal.\n"
    )
    return "\n".join(parts)


if __name__ == "__main__":
    print(catalog_text(), end="")
