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

What exists at the first poll is the baseline: history is not alerted on again.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from statewarden.config import DEFAULT_WAL_GROWTH_WINDOW_S, DEFAULT_WAL_WARN_BYTES
from statewarden.incidents.signals import Found, Observation, Signal
from statewarden.sidecars import SIDECAR_SUFFIXES
from statewarden.targets import Target

WAL_SAMPLE_EVERY_S = 60.0
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
    ) -> None:
        self.target = target
        self.db = str(target.db)
        self.wal_warn_bytes = wal_warn_bytes
        self.wal_growth_window_s = wal_growth_window_s
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

    def _neighbours(self, now: float) -> list[Found]:
        out: list[Found] = []
        names = self._listdir(self.target.db.parent)
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

    def poll(self, now: float | None = None) -> list[Found]:
        now = time.time() if now is None else now
        return [*self._sidecars(now), *self._wal(now), *self._neighbours(now)]
