"""Where a log tail stopped: one offset per file, kept across restarts.

An :class:`Offset` names a log file by (device, inode) and keeps two digests beside
the read position: of the file's first bytes (an inode number can be reused by a new
file) and of the bytes just before the offset (a file rewritten in place while
statewarden was down). :func:`is_saved_file` tells whether a path is still the file an
offset describes.

The offsets file (:class:`OffsetsFile`) is one JSON document per Hermes home: the
current file of each log, the rotated files still followed, and the rotated files
whose lines were already read. It is written atomically, and only when it changed; a
damaged one is read as "nothing known, but not a first start".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewarden.atomic import write_atomic

OFFSETS_VERSION = 1
# Bytes at the start of a log whose digest is saved with its offset.
HEAD_BYTES = 256
# Bytes just before the read offset kept to tell a log rewritten in place.
MARK_BYTES = 256

# (device, inode) of a rotated file
FileId = tuple[int, int]


@dataclass(frozen=True)
class Offset:
    """Where reading one log file stopped, and how to know it is still that file."""

    dev: int
    ino: int
    offset: int
    head: str  # digest of the file's first bytes: an inode number can be reused
    # Digest of the MARK_BYTES before ``offset``: the file was not rewritten in place
    # while statewarden was down ("" in offsets files written before it was kept).
    mark: str = ""

    def to_json(self) -> dict[str, int | str]:
        return {
            "dev": self.dev,
            "inode": self.ino,
            "offset": self.offset,
            "head": self.head,
            "mark": self.mark,
        }

    @classmethod
    def from_json(cls, v: object) -> Offset | None:
        """The offset an offsets file entry describes; None for a damaged entry."""
        if not isinstance(v, dict):
            return None
        try:
            mark = str(v.get("mark", ""))
            return cls(int(v["dev"]), int(v["inode"]), int(v["offset"]), str(v["head"]), mark)
        except (KeyError, TypeError, ValueError):
            return None


def head_digest(fd: int, upto: int) -> str:
    """Digest of the first ``min(upto, HEAD_BYTES)`` bytes: tells a reused inode apart."""
    data = os.pread(fd, min(upto, HEAD_BYTES), 0)
    return f"{len(data)}:{hashlib.sha256(data).hexdigest()[:16]}"


def mark_digest(fd: int, offset: int) -> str:
    """Digest of the ``MARK_BYTES`` before ``offset`` (fewer near the start)."""
    n = min(offset, MARK_BYTES)
    data = os.pread(fd, n, offset - n) if n else b""
    return f"{n}:{hashlib.sha256(data).hexdigest()[:16]}"


def open_log(path: Path) -> tuple[int, os.stat_result] | None:
    """The file open for reading, or None if it is gone or not a regular file.

    ``PermissionError`` is raised, not swallowed: a log that cannot be read is a
    problem to report (detection from it has stopped), not a file that went away.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except PermissionError:
        raise
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


def is_saved_file(path: Path, saved: Offset) -> bool:
    """True when ``path`` is the file the offsets file describes (inode, first bytes and
    the bytes before the offset)."""
    opened = open_log(path)
    if opened is None:
        return False
    fd, st = opened
    try:
        if (st.st_dev, st.st_ino) != (saved.dev, saved.ino):
            return False
        length = int(saved.head.partition(":")[0] or 0)
        if head_digest(fd, length) != saved.head:
            return False
        return not saved.mark or mark_digest(fd, saved.offset) == saved.mark
    except (OSError, ValueError):
        return False
    finally:
        os.close(fd)


@dataclass
class Saved:
    """What an offsets file holds, per log name."""

    files: dict[str, Offset] | None = None  # None: no offsets file (a first start)
    rotated: dict[str, list[Offset]] = field(default_factory=dict)
    known: dict[str, set[FileId]] = field(default_factory=dict)
    newest: dict[str, float] = field(default_factory=dict)  # newest record time returned


class OffsetsFile:
    """The offsets file of one tailer: read once at start, written when it changed."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._written: dict[str, Any] | None = None

    def load(self) -> Saved:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return Saved()
        except (OSError, ValueError):
            # A damaged offsets file: not a first start (history is not news), nothing known.
            return Saved(files={})
        if not isinstance(raw, dict):
            return Saved(files={})
        found: dict[str, Offset] = {}
        files = raw.get("files")
        if isinstance(files, dict):
            for name, v in files.items():
                saved = Offset.from_json(v)
                if saved is not None:
                    found[name] = saved
        out = Saved(files=found)
        rot = raw.get("rotated")
        if isinstance(rot, dict):
            for name, items in rot.items():
                if isinstance(items, list):
                    out.rotated[name] = [s for s in map(Offset.from_json, items) if s is not None]
        kn = raw.get("known_rotated")
        if isinstance(kn, dict):
            for name, pairs in kn.items():
                with contextlib.suppress(TypeError, ValueError):
                    out.known[name] = {(int(d), int(i)) for d, i in pairs}
        newest = raw.get("newest_record")
        if isinstance(newest, dict):
            out.newest = {
                n: float(t)
                for n, t in newest.items()
                if isinstance(t, int | float) and not isinstance(t, bool)
            }
        return out

    def save(
        self,
        files: dict[str, Offset],
        rotated: dict[str, list[Offset]],
        known: dict[str, set[FileId]],
        newest: dict[str, float] | None = None,
    ) -> None:
        """Write the offsets file if it changed (tmp + fsync + rename, then the dir);
        raises ``StateUnwritable`` when it cannot be written."""
        data: dict[str, Any] = {
            "version": OFFSETS_VERSION,
            "files": {name: o.to_json() for name, o in files.items()},
        }
        if rotated:
            data["rotated"] = {name: [o.to_json() for o in offs] for name, offs in rotated.items()}
        if known:
            data["known_rotated"] = {
                name: sorted([d, i] for d, i in ids) for name, ids in known.items()
            }
        if newest:
            data["newest_record"] = dict(newest)
        if data == self._written:
            return
        write_atomic(self.path, json.dumps(data, sort_keys=True))
        self._written = data
