"""The mount watcher: a WAL database on a filesystem where WAL is not safe.

Fed each database's status (from ``statewarden.watch.status``, which names the filesystem
under the file and whether WAL is safe there), it raises ``unsafe_mount`` while the
database is in WAL mode on such a filesystem and clears it once that is no longer so
(converted to another journal mode, or moved).
"""

from __future__ import annotations

from statewarden.incidents import Signal
from statewarden.watch.status import DatabaseStatus


class MountWatcher:
    def __init__(self) -> None:
        self._unsafe: dict[str, bool] = {}

    def check(self, db: str, st: DatabaseStatus) -> list[Signal]:
        """The signal for ``db`` given its status now: raised, cleared, or none."""
        fs = st.filesystem
        unsafe = bool(fs and fs.unsafe_for_wal and st.journal_mode == "wal")
        was_unsafe = self._unsafe.get(db, False)
        self._unsafe[db] = unsafe
        if unsafe and fs is not None:
            return [
                Signal(
                    "unsafe_mount",
                    db,
                    f"state.db is in WAL mode on {fs.type} ({fs.mount_point}): locks are not "
                    "coherent there and WAL can corrupt silently; stop Hermes and convert to "
                    "journal_mode=DELETE or move it to a local volume",
                    source="mounts",
                    fields={"fstype": fs.type, "mount_point": fs.mount_point},
                )
            ]
        if was_unsafe:
            return [
                Signal(
                    "unsafe_mount",
                    db,
                    "no longer on an unsafe filesystem",
                    source="mounts",
                    clears=True,
                )
            ]
        return []
