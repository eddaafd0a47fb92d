"""The recovery files newer Hermes keeps beside state.db, found and sized without harm.

Hermes git main (not 0.19.0) leaves three kinds of them, and deletes none:

- ``state.db.retired-wal-<YYYYmmdd-HHMMSS>-<pid>[-<n>]/`` (``hermes_state_dbfile``,
  ``capture_retired_wal_generation``): when a writer's WAL generation was deleted or
  replaced under it (``DeletedWalGenerationError``), the WAL it still held, the ``-shm``,
  a copy of the main image (or its 100-byte header past 512 MB) and ``manifest.json``
  (``version`` 1, ``database``, ``trigger``, ``pid``, ``captured_at``, ``sqlite``,
  ``wal``/``shm``/``main`` with identities, sizes and digests, ``main.mode`` ``copied`` or
  ``header_only``). Written as ``<name>.partial`` and renamed when complete; a
  ``.partial`` left behind is an interrupted capture. One user's reached 2.5 GB.
- ``pending_messages/`` in the Hermes home (``gateway/shutdown_flush.py``, mode 0700): the
  gateway's spool of messages and transcripts it could not write to state.db, one
  ``pending-<uuid4 hex>.json`` per payload (written atomically, 0600), awaiting replay.
- ``state.db.pre-update-emergency-<timestamp>.bak`` (and its ``-wal``/``-shm`` copies):
  the Desktop updater's copy of the database before it updates.

``scan`` lists them with their sizes. It stats and lists directories (``lstat``, links
not followed, at most ``MAX_ENTRIES`` entries per item) and reads only a capture's
``manifest.json`` (regular files only, non-blocking, at most ``MANIFEST_MAX_BYTES``):
never the database or its sidecars (docs/safety.md rule 2).
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from statewarden.json_text import parse_json

RETIRED_WAL_INFIX = ".retired-wal-"
RETIRED_WAL_MANIFEST = "manifest.json"
PARTIAL_SUFFIX = ".partial"
PENDING_SPOOL = "pending_messages"
PRE_UPDATE_INFIX = ".pre-update-emergency-"
# Entries counted per item: a spool of a million files is sized as "at least".
MAX_ENTRIES = 100_000
MANIFEST_MAX_BYTES = 256 * 1024

What = Literal["retired_wal", "pending_spool", "pre_update_backup"]


@dataclass
class RecoveryFile:
    """One capture directory, the spool, or one backup file."""

    what: What
    name: str  # as found in the database's folder: "state.db.retired-wal-20261001-072448-42"
    bytes: int
    files: int
    partial: bool = False  # a capture interrupted before Hermes published it
    capped: bool = False  # more than MAX_ENTRIES entries: bytes and files are at least this
    captured_at: str | None = None  # from manifest.json
    trigger: str | None = None
    pid: int | None = None
    main_mode: str | None = None  # "copied" or "header_only"
    problem: str | None = None  # manifest.json missing or unreadable

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RecoveryFiles:
    """Every recovery file of one database, oldest name first."""

    items: list[RecoveryFile] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(i.bytes for i in self.items)

    def to_json(self) -> dict[str, Any]:
        return {"total_bytes": self.total_bytes, "items": [i.to_json() for i in self.items]}


def _tree_size(path: Path) -> tuple[int, int, bool, str | None]:
    """(bytes, regular files, capped, why the folder cannot be listed) under ``path``,
    links not followed."""
    total = files = seen = 0
    stack = [path]
    problem = None
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MAX_ENTRIES:
                        return total, files, True, problem
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(Path(entry.path))
                    elif stat.S_ISREG(st.st_mode):
                        total += st.st_size
                        files += 1
        except OSError as exc:
            if here == path:
                problem = f"cannot be listed: {exc.strerror or exc}"
            continue
    return total, files, False, problem


def _read_manifest(path: Path) -> dict[str, Any] | str:
    """The manifest's JSON object, or why it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return "no manifest.json"
    except OSError as exc:
        return f"manifest.json: {exc.strerror or exc}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "manifest.json is not a regular file"
        data = os.read(fd, MANIFEST_MAX_BYTES + 1)
    except OSError as exc:
        return f"manifest.json: {exc.strerror or exc}"
    finally:
        os.close(fd)
    if len(data) > MANIFEST_MAX_BYTES:
        return "manifest.json is too large"
    try:
        doc = parse_json(data)
    except ValueError:
        return "manifest.json is not valid JSON"
    return doc if isinstance(doc, dict) else "manifest.json is not a JSON object"


def _capture(folder: Path, name: str) -> RecoveryFile:
    size, files, capped, unlisted = _tree_size(folder / name)
    item = RecoveryFile(
        "retired_wal",
        name,
        size,
        files,
        capped=capped,
        partial=name.endswith(PARTIAL_SUFFIX),
        problem=unlisted,
    )
    if unlisted:
        return item
    manifest = _read_manifest(folder / name / RETIRED_WAL_MANIFEST)
    if isinstance(manifest, str):
        item.problem = None if item.partial else manifest
        return item
    item.captured_at = str(manifest["captured_at"]) if "captured_at" in manifest else None
    item.trigger = str(manifest["trigger"]) if "trigger" in manifest else None
    with contextlib.suppress(KeyError, TypeError, ValueError):
        item.pid = int(manifest["pid"])
    main = manifest.get("main")
    if isinstance(main, dict) and isinstance(main.get("mode"), str):
        item.main_mode = main["mode"]
    return item


def scan(db: Path, home: Path | None = None) -> RecoveryFiles:
    """The recovery files of ``db`` (its folder) and of the Hermes ``home`` (the spool;
    default: the database's folder)."""
    folder = db.parent
    home = folder if home is None else home
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        names = []
    out = RecoveryFiles()
    for name in names:
        path = folder / name
        if name.startswith(db.name + RETIRED_WAL_INFIX):
            try:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    continue
            except OSError:
                continue
            out.items.append(_capture(folder, name))
        elif name.startswith(db.name + PRE_UPDATE_INFIX):
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.items.append(RecoveryFile("pre_update_backup", name, st.st_size, 1))
    spool = home / PENDING_SPOOL
    try:
        is_dir = stat.S_ISDIR(os.lstat(spool).st_mode)
    except OSError:
        is_dir = False
    if is_dir:
        size, files, capped, unlisted = _tree_size(spool)
        shown = PENDING_SPOOL if home == folder else str(spool)
        out.items.append(
            RecoveryFile("pending_spool", shown, size, files, capped=capped, problem=unlisted)
        )
    return out
