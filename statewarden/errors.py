"""Every error statewarden raises on purpose, under one root.

Each error carries the exit code the CLI turns it into and, where there is one, a
hint telling the user what to do next. The CLI prints ``str(error)`` as one line;
nothing here is meant to reach the user as a traceback.
"""

from __future__ import annotations

import errno

# Exit codes (README.md, "Exit codes", lists each name with its meaning). A number
# means different things to different commands; each meaning has its own name here.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_DERIVED_DAMAGE = 1  # check: only derived structures (indexes, FTS) are damaged
EXIT_SCAN_INCOMPLETE = 1  # holders: some process could not be inspected
EXIT_USAGE = 2
EXIT_BASE_DAMAGE = 3  # check: table b-trees are damaged, rows may be lost
EXIT_RECOVERED_WITH_LOSS = 3  # recover: the output is verified, with rows lost (listed)
EXIT_STALE_OR_LOST_LOCKS = 3  # holders: a holder is STALE or has lost its locks
EXIT_UNREADABLE = 4
EXIT_MAINTENANCE_LOSS = 3  # maintenance: the repair would lose rows, or was swapped with loss
EXIT_REFUSED = 5  # maintenance: a holder that may not be stopped
EXIT_ALREADY_RUNNING = 5  # statewarden run: another daemon runs on this state folder
EXIT_NOT_CHECKED = 5  # check: it could not finish (no space, a write failed): nothing judged
EXIT_NO_DAEMON = 6  # verify: no daemon answers (verification is the daemon's)
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of the output went away


class StatewardenError(Exception):
    """Root of every error statewarden raises for the user to read."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class UsageError(StatewardenError):
    """The command line asked for something that cannot be done as asked."""

    exit_code = EXIT_USAGE


class ConfigError(StatewardenError):
    """The configuration file is missing, unreadable or invalid.

    ``location`` is ``file`` or ``file:line``; ``key`` is the dotted key path.
    """

    exit_code = EXIT_USAGE

    def __init__(
        self,
        problem: str,
        *,
        source: str,
        line: int | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.key = key
        self.problem = problem
        where = source if line is None else f"{source}:{line}"
        text = f"{where}: {key}: {problem}" if key else f"{where}: {problem}"
        super().__init__(text, hint=hint)


class UnsafePath(StatewardenError):
    """A folder statewarden would write in is owned or writable by someone else."""

    exit_code = EXIT_USAGE


class StateUnwritable(StatewardenError, OSError):
    """A state file could not be written (full disk, no descriptors, permissions).

    Also an ``OSError``: code that handles a failed write as such keeps doing so."""

    def __init__(self, path: object, exc: OSError) -> None:
        self.path = path
        self.errno = exc.errno
        super().__init__(f"{path}: cannot write: {exc.strerror or exc}")


class AlreadyRunning(StatewardenError):
    """Another daemon already runs on this state folder (or serves this control socket)."""

    exit_code = EXIT_ALREADY_RUNNING


class DatabaseError(StatewardenError):
    """A database could not be read as asked (missing, locked, not SQLite, ...)."""


class DatabaseUnreadable(DatabaseError):
    """The file is not a SQLite database, or its header, schema or page 1 is damaged."""

    exit_code = EXIT_UNREADABLE


class DatabaseChanged(DatabaseError):
    """The source changed while it was being copied: someone is writing to it."""


class CopyFailed(StatewardenError):
    """The private copy of a database could not be made: a write failed (no space
    left, a file size limit) or a read of the source did. Nothing was judged."""


# Why a path the user named cannot be used, by errno: the path's own problems
# (a usage error, exit 2). Other failures (an I/O error, no space) are not the path's.
_PATH_REASONS = {
    errno.ENOENT: "no such file",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ELOOP: "a loop of symbolic links (too many levels of symbolic links)",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.ENAMETOOLONG: "file name too long",
    errno.EROFS: "read-only file system",
}
# Failures of a write that the room or the limits of its folder explain.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def path_error(path: object, exc: OSError, *, option: str = "") -> StatewardenError:
    """A path the user named (``option``: the command-line option it came from) that
    cannot be used, as one line naming it and the real reason: a
    :class:`UsageError` (exit 2) when the path itself is the problem (missing, not
    permitted, a symlink loop, ...), else a :class:`StatewardenError` (exit 1)."""
    where = f" ({option})" if option else ""
    reason = _PATH_REASONS.get(exc.errno or 0)
    if reason is not None:
        return UsageError(f"{path}: {reason}{where}")
    return StatewardenError(f"{path}: {exc.strerror or exc}{where}")


def copy_failed(source: object, folder: object, exc: OSError) -> CopyFailed:
    """The copy of ``source`` into ``folder`` failed with ``exc``: one line naming the
    folder when a write there failed for want of room, else the file that failed."""
    reason = exc.strerror or str(exc)
    if exc.errno in _NO_ROOM:
        return CopyFailed(
            f"{folder}: cannot write the private copy of {source} there: {reason}",
            hint="free some space there or choose another folder"
            if exc.errno in _NO_SPACE
            else None,
        )
    return CopyFailed(f"{exc.filename or source}: copying it into {folder} failed: {reason}")


class BuildStartsOver(StatewardenError):
    """A part of recover's build found that the build must start over, or (``FtsVerdictsMissing``)
    that the file must be diagnosed again first: caught by ``recovery.rebuild.Rebuild.run``,
    never shown to a user."""


class FtsVerdictsMissing(BuildStartsOver):
    """FTS5's own checks gave no verdicts the diagnosis can take alone
    (``FtsPending.join``): the file must be diagnosed again and built with that."""

    def __init__(self) -> None:
        super().__init__("FTS5's own checks gave no verdict the diagnosis can take alone")


class FtsModesChanged(BuildStartsOver):
    """FTS5's own checks, joined after the data went in, found an FTS table damaged
    that must be filled by triggers created before the data: the build starts over."""

    def __init__(self) -> None:
        super().__init__("an FTS table must be filled by triggers created before the data")


class FtsCopyFailed(BuildStartsOver):
    """An FTS table's shadow tables looked intact but could not be copied: the build
    starts over, filling it from its base table."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


class SystemdUnavailable(StatewardenError):
    """The systemd user manager could not be reached over D-Bus."""


class SystemdCallFailed(StatewardenError):
    """The user manager answered a call with an error (no such unit, refused job, ...)."""

    def __init__(self, member: str, error_name: str, text: str) -> None:
        super().__init__(f"systemd {member} failed: {error_name}: {text}")
        self.error_name = error_name


class DaemonNotRunning(StatewardenError):
    """No daemon answers on the control socket."""


class NoDaemon(DaemonNotRunning):
    """A command only the daemon does (``verify``) with no daemon to ask."""

    exit_code = EXIT_NO_DAEMON


class ControlError(StatewardenError):
    """The daemon answered with an error."""


class Cancelled(StatewardenError):
    """A maintenance run was cancelled by the user (Ctrl-C) before its swap."""


class RunInProgress(StatewardenError):
    """A maintenance run is already in progress on the database (one at a time)."""

    exit_code = EXIT_REFUSED


class MergeRefused(StatewardenError):
    """``maintenance --merge-from`` refused the file: it is not the database's earlier
    file (not a Hermes state.db, a copy of the current file, nothing proves it)."""

    exit_code = EXIT_REFUSED


class RunLocked(StatewardenError):
    """Another maintenance run holds this database's lock (refused, as a run in
    progress is)."""

    exit_code = EXIT_REFUSED


class FenceError(StatewardenError):
    """The fence around the old state.db could not be put up or taken down as asked."""


class QuiesceFailed(StatewardenError):
    """A unit could not be stopped or started; what was stopped is started again."""


class InstallError(StatewardenError):
    """The systemd --user units could not be installed or removed as asked."""


class SandboxError(StatewardenError):
    """``statewardenctl demo`` could not build its sandbox (no room, a holder did not start)."""


class PageFormatError(StatewardenError, ValueError):
    """A page or cell of a database file does not follow the file format.

    Also a ``ValueError``: code that handles a bad value as such keeps doing so."""


class SinkError(StatewardenError):
    """An alert sink could not deliver an outbox entry (``statewarden.alerts.sink``).

    ``after_s``: when to try again, if the answer said (429's ``retry_after``)."""

    def __init__(self, message: str, *, after_s: float | None = None) -> None:
        super().__init__(message)
        self.after_s = after_s


class Retry(SinkError):
    """A passing failure: try the same entry again later."""


class Rejected(SinkError):
    """The sink's configuration is wrong: pause until it changes."""


class Refused(SinkError):
    """This entry can never be delivered: set it aside."""


class SecretMissing(StatewardenError):
    """No usable sink secret (push URL, Apprise URLs): the message says where it was
    looked for and why not."""


class TokenMissing(StatewardenError):
    """No usable Telegram bot token was found; the message says where it was looked for."""
