"""The file watcher: what happens to state.db and the files around it.

Each ``poll()`` stats a handful of paths (no file is opened: docs/safety.md rule 2) and
compares with the last poll:

- ``state.db`` / ``-wal`` / ``-shm`` / ``-journal`` created, deleted or replaced (inode
  change) -> timeline observations; the holder watcher decides whether a live process
  is left on an old inode (``stale_holder``).
- ``-wal`` above ``wal_warn_bytes`` (default 50 MB, the figure ``hermes doctor`` warns
  at) and still growing over ``wal_growth_window_s`` -> ``wal_growth``: checkpoints are
  being starved (a long reader, or a writer that never lets one finish). Cleared when
  the WAL is back under the threshold.
- a new ``state.db.malformed-backup-*`` -> ``self_repair``: Hermes found corruption and
  repaired itself in place.
- a new or growing ``sessions/*.jsonl`` -> ``jsonl_fallback``: newer Hermes diverts
  transcripts there when state.db cannot be written.
- newer Hermes' ``state.db.repair.lock`` and friends appearing -> observations.
- newer Hermes' recovery files (``recovery_files.py``: ``state.db.retired-wal-*/``
  captures, the ``pending_messages/`` spool, ``state.db.pre-update-emergency-*.bak``)
  -> ``recovery_files``: key ``present`` (info) while any exist, naming new ones as they
  appear; key ``size`` (warning) when together they pass ``recovery_warn_bytes`` (default
  1 GiB) or grew at each of the last ``recovery_growth_scans`` scans. They are sized every
  ``RECOVERY_SCAN_EVERY_S`` and at once when one appears or goes; both clear when
  the condition does (none left; under the limit and not growing).

What exists at the first poll is the baseline: history is not alerted on again.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from statewarden.config import (
    DEFAULT_RECOVERY_FILES_GROWTH_SCANS,
    DEFAULT_RECOVERY_FILES_WARN_BYTES,
    DEFAULT_WAL_GROWTH_WINDOW_S,
    DEFAULT_WAL_WARN_BYTES,
)
from statewarden.incidents import Found, Observation, Signal
from statewarden.recovery_files import (
    PENDING_SPOOL,
    PRE_UPDATE_INFIX,
    RETIRED_WAL_INFIX,
    RecoveryFiles,
)
from statewarden.recovery_files import scan as scan_recovery_files
from statewarden.sidecars import SIDECAR_SUFFIXES
from statewarden.targets import Target

WAL_SAMPLE_EVERY_S = 60.0
RECOVERY_SCAN_EVERY_S = 30.0
HERMES_LOCK_SUFFIXES = (".repair.lock", ".fts_rebuild.lock", ".auto-maintenance.lock")


@dataclass(frozen=True)
class _Stat:
    ino: int
    size: int


def _stat(path: Path) -> _Stat | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _Stat(st.st_ino, st.st_size)


class FileWatcher:
    def __init__(
        self,
        target: Target,
        *,
        wal_warn_bytes: int = DEFAULT_WAL_WARN_BYTES,
        wal_growth_window_s: float = DEFAULT_WAL_GROWTH_WINDOW_S,
        recovery_warn_bytes: int = DEFAULT_RECOVERY_FILES_WARN_BYTES,
        recovery_growth_scans: int = DEFAULT_RECOVERY_FILES_GROWTH_SCANS,
        recovery_scan_every_s: float = RECOVERY_SCAN_EVERY_S,
    ) -> None:
        self.target = target
        self.db = str(target.db)
        self.wal_warn_bytes = wal_warn_bytes
        self.wal_growth_window_s = wal_growth_window_s
        self.recovery_warn_bytes = recovery_warn_bytes
        self.recovery_growth_scans = recovery_growth_scans
        self.recovery_scan_every_s = recovery_scan_every_s
        self._recovery_names: frozenset[str] | None = None  # recovery files seen, by name
        self._recovery_listed: frozenset[str] | None = None  # their names in the db folder
        self._recovery_scanned_at = float("-inf")
        self._recovery_bytes: int | None = None
        self._recovery_growth = 0  # scans in a row the total grew
        self._recovery_present = False
        self._recovery_over = False
        self.recovery: RecoveryFiles = RecoveryFiles()  # the last scan
        self._files: dict[str, _Stat | None] = {}
        self._backups: set[str] | None = None
        self._locks: set[str] = set()
        self._jsonl: dict[str, int] | None = None
        self._wal_samples: list[tuple[float, int]] = []
        self._wal_sampled_at = 0.0
        self._wal_alerting = False

    # ------------------------------------------------------------------ sidecars

    def _sidecars(self, now: float) -> list[Found]:
        out: list[Found] = []
        for path in self.target.bundle():
            name = path.name
            new = _stat(path)
            first = name not in self._files
            old = self._files.get(name)
            self._files[name] = new
            if first:
                continue
            if old is None and new is not None:
                out.append(
                    Observation(
                        "sidecar_created" if name != "state.db" else "db_created",
                        self.db,
                        f"{name} created",
                        now,
                        {"file": name},
                    )
                )
            elif old is not None and new is None:
                out.append(
                    Observation(
                        "sidecar_deleted" if name != "state.db" else "db_deleted",
                        self.db,
                        f"{name} deleted",
                        now,
                        {"file": name},
                    )
                )
            elif old is not None and new is not None and old.ino != new.ino:
                out.append(
                    Observation(
                        "file_replaced",
                        self.db,
                        f"{name} replaced (inode {old.ino} -> {new.ino})",
                        now,
                        {"file": name, "old_inode": old.ino, "new_inode": new.ino},
                    )
                )
        return out

    def _wal(self, now: float) -> list[Found]:
        out: list[Found] = []
        wal = self._files.get(self.target.wal.name)
        size = wal.size if wal else 0
        if self._wal_samples and size < self._wal_samples[-1][1]:
            out.append(
                Observation(
                    "checkpoint",
                    self.db,
                    f"-wal shrank {self._wal_samples[-1][1]} -> {size} bytes",
                    now,
                    {"wal_bytes": size},
                )
            )
        self._wal_samples.append((now, size))
        horizon = now - self.wal_growth_window_s
        while len(self._wal_samples) > 2 and self._wal_samples[1][0] <= horizon:
            self._wal_samples.pop(0)
        if now - self._wal_sampled_at >= WAL_SAMPLE_EVERY_S and wal is not None:
            self._wal_sampled_at = now
            out.append(
                Observation("wal_size", self.db, f"-wal {size} bytes", now, {"wal_bytes": size})
            )
        oldest_t, oldest_size = self._wal_samples[0]
        spans_window = now - oldest_t >= self.wal_growth_window_s * 0.9
        growing = size > oldest_size
        if size > self.wal_warn_bytes and growing and spans_window and not self._wal_alerting:
            self._wal_alerting = True
            out.append(
                Signal(
                    "wal_growth",
                    self.db,
                    f"-wal is {size / 1e6:.0f} MB and still growing "
                    f"(+{(size - oldest_size) / 1e6:.1f} MB in {now - oldest_t:.0f} s): "
                    "checkpoints are starved",
                    now,
                    source="files",
                    fields={"wal_bytes": size},
                )
            )
        elif self._wal_alerting and size <= self.wal_warn_bytes:
            self._wal_alerting = False
            out.append(
                Signal(
                    "wal_growth",
                    self.db,
                    f"-wal back to {size} bytes",
                    now,
                    source="files",
                    clears=True,
                )
            )
        return out

    # ------------------------------------------------------------------ neighbours

    def _listdir(self, directory: Path) -> list[str]:
        try:
            return os.listdir(directory)
        except OSError:
            return []

    def _neighbours(self, now: float, names: list[str]) -> list[Found]:
        out: list[Found] = []
        prefix = self.target.db.name
        backups = {
            n
            for n in names
            if n.startswith(prefix + ".malformed-backup-") and not n.endswith(SIDECAR_SUFFIXES)
        }
        if self._backups is not None:
            for name in sorted(backups - self._backups):
                out.append(
                    Signal(
                        "self_repair",
                        self.db,
                        f"Hermes found state.db corrupt and repaired it in place (backup {name})",
                        now,
                        evidence=(name,),
                        source="files",
                        fields={"backup": name},
                    )
                )
        self._backups = backups
        locks = {n for n in names if n.startswith(prefix) and n.endswith(HERMES_LOCK_SUFFIXES)}
        for name in sorted(locks - self._locks):
            out.append(
                Observation("hermes_lock", self.db, f"Hermes created {name}", now, {"file": name})
            )
        self._locks = locks
        sessions_dir = self.target.home / "sessions"
        sizes: dict[str, int] = {}
        for name in self._listdir(sessions_dir):
            if name.endswith(".jsonl"):
                st = _stat(sessions_dir / name)
                if st is not None:
                    sizes[name] = st.size
        if self._jsonl is not None:
            for name, size in sorted(sizes.items()):
                before = self._jsonl.get(name)
                if before is None or size > before:
                    what = "new" if before is None else "growing"
                    out.append(
                        Signal(
                            "jsonl_fallback",
                            self.db,
                            "messages are being diverted to JSONL instead of state.db "
                            f"({what} sessions/{name}, {size} bytes)",
                            now,
                            evidence=(f"sessions/{name}",),
                            source="files",
                            fields={"jsonl": name, "jsonl_bytes": size},
                        )
                    )
        self._jsonl = sizes
        return out

    # ------------------------------------------------------------------ recovery files

    def _recovery_due(self, now: float, names: list[str]) -> bool:
        """Size the recovery files now? At the interval, and at once when one of them
        appears or goes in the database's folder (the spool's content is sized at the
        interval)."""
        prefix = self.target.db.name
        here = frozenset(
            n
            for n in names
            if n == PENDING_SPOOL
            or n.startswith((prefix + RETIRED_WAL_INFIX, prefix + PRE_UPDATE_INFIX))
        )
        changed = here != self._recovery_listed
        self._recovery_listed = here
        return changed or now - self._recovery_scanned_at >= self.recovery_scan_every_s

    def _recovery(self, now: float, names: list[str]) -> list[Found]:
        if not self._recovery_due(now, names):
            return []
        self._recovery_scanned_at = now
        kept = self.recovery = scan_recovery_files(self.target.db, self.target.home)
        total = kept.total_bytes
        names_now = frozenset(i.name for i in kept.items)
        out: list[Found] = []
        new = sorted(names_now - (self._recovery_names or frozenset()))
        if self._recovery_names is not None and self._recovery_bytes is not None:
            grew = total > self._recovery_bytes
            self._recovery_growth = self._recovery_growth + 1 if grew else 0
        fields = {"recovery_files": len(kept.items), "recovery_bytes": total}
        if kept.items and (new or not self._recovery_present):
            self._recovery_present = True
            listed = ", ".join(new[:5]) + (f" and {len(new) - 5} more" if len(new) > 5 else "")
            what = f"new: {listed}" if self._recovery_names is not None and new else listed
            out.append(
                Signal(
                    "recovery_files",
                    self.db,
                    f"Hermes keeps {len(kept.items)} recovery file(s) beside state.db, "
                    f"{total / 2**20:.1f} MiB ({what})",
                    now,
                    key="present",
                    evidence=tuple(new[:20]),
                    source="files",
                    severity="info",
                    fields=dict(fields, new=new[:20]),
                )
            )
        elif not kept.items and self._recovery_present:
            self._recovery_present = False
            gone = "no recovery files left beside state.db"
            out.append(
                Signal(
                    "recovery_files", self.db, gone, now, key="present", source="files", clears=True
                )
            )
        over = total > self.recovery_warn_bytes
        growing = self.recovery_growth_scans > 0 and (
            self._recovery_growth >= self.recovery_growth_scans
        )
        if (over or growing) and not self._recovery_over:
            self._recovery_over = True
            why = (
                f"over the {self.recovery_warn_bytes / 2**20:.0f} MiB limit"
                if over
                else f"grew at each of the last {self._recovery_growth} scans"
            )
            out.append(
                Signal(
                    "recovery_files",
                    self.db,
                    f"Hermes' recovery files beside state.db take {total / 2**20:.1f} MiB, "
                    f"{why} (watch.recovery_files_warn_bytes); Hermes never deletes them",
                    now,
                    key="size",
                    source="files",
                    severity="warning",
                    fields=fields,
                )
            )
        elif self._recovery_over and not over and self._recovery_growth == 0:
            self._recovery_over = False
            out.append(
                Signal(
                    "recovery_files",
                    self.db,
                    f"recovery files back to {total / 2**20:.1f} MiB",
                    now,
                    key="size",
                    source="files",
                    severity="warning",
                    clears=True,
                )
            )
        self._recovery_names = names_now
        self._recovery_bytes = total
        return out

    def poll(self, now: float | None = None) -> list[Found]:
        now = time.time() if now is None else now
        names = self._listdir(self.target.db.parent)
        return [
            *self._sidecars(now),
            *self._wal(now),
            *self._neighbours(now, names),
            *self._recovery(now, names),
        ]
