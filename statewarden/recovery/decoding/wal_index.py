"""What a live writer's wal-index (the ``-shm``) says of its ``-wal``, and whether the
``-wal`` bears it out.

SQLite keeps the wal-index header twice at the start of the ``-shm`` (48 bytes each, in
the machine's byte order): version, an unused word, a change counter, "initialised",
the checksum order, the page size, the last committed frame (``mxFrame``), the database
size in pages, the checksum of frame ``mxFrame``, the ``-wal``'s salts, and a checksum
of the first 40 bytes. A writer updates it after its commit frame is written.

An index is not trusted alone: one written by anyone can carry this log's salts and
name a frame that is no commit (:func:`names_a_commit` holds it against the ``-wal``'s
own frames), and a ``-shm`` left by a writer killed earlier, while another keeps its
index in its own memory (``locking_mode=EXCLUSIVE``), names a real but old commit: only
its standing still while the ``-wal`` changes tells that one (``CommittedLog.change``,
held by the copy in ``recovery/bundle.py``).
"""

from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass

from statewarden.recovery.decoding.wal import FRAME_HEADER_BYTES, HEADER_BYTES, checksum

WAL_INDEX_VERSION = 3007000
INDEX_HEADER_BYTES = 48
# version, unused, change counter, initialised, big-endian checksums, page size,
# mxFrame, pages, frame checksum (2), salts (2), header checksum (2)
_INDEX_HEADER = struct.Struct("=IIIBBHII2I2I2I")


@dataclass(frozen=True)
class CommittedLog:
    """A live ``-wal``'s committed frames, as its wal-index says: ``header``, the
    ``-wal``'s first 32 bytes; ``frames``, the last committed frame's number (from 1; 0:
    none); ``frame_checksum``, the checksum that frame carries; ``page_size``;
    ``change``, the counter its writer moves at every commit. A frame up to there is
    never written again until the log starts over, which gives the ``-wal`` a new
    header."""

    header: bytes
    frames: int
    frame_checksum: tuple[int, int]
    page_size: int
    change: int

    @property
    def committed_bytes(self) -> int:
        """Where the last committed frame ends in the ``-wal``."""
        return HEADER_BYTES + self.frames * (FRAME_HEADER_BYTES + self.page_size)


def committed_log(wal_header: bytes, index: bytes) -> CommittedLog | None:
    """What the wal-index ``index`` (the ``-shm``'s first 96 bytes) says of the ``-wal``
    whose first 32 bytes are ``wal_header``; None when it is not a whole index of this
    log: torn between its two copies, of another version, not initialised, failing its
    own checksum, of other salts or another page size."""
    if len(wal_header) < HEADER_BYTES or len(index) < 2 * INDEX_HEADER_BYTES:
        return None
    first = index[:INDEX_HEADER_BYTES]
    if first != index[INDEX_HEADER_BYTES : 2 * INDEX_HEADER_BYTES]:
        return None
    (version, _, change, initialised, _, size, frames, _, c1, c2, _, _, k1, k2) = (
        _INDEX_HEADER.unpack(first)
    )
    native_big = sys.byteorder == "big"
    if version != WAL_INDEX_VERSION or initialised != 1:
        return None
    if checksum(first[:40], 0, 0, big_endian=native_big) != (k1, k2):
        return None
    page_size = 65536 if size == 1 else size
    if first[32:40] != wal_header[16:24]:
        return None
    if struct.unpack(">I", wal_header[8:12])[0] != page_size:
        return None
    return CommittedLog(bytes(wal_header[:HEADER_BYTES]), frames, (c1, c2), page_size, change)


def names_a_commit(fd: int, log: CommittedLog) -> bool:
    """Whether the ``-wal`` open at ``fd`` bears ``log`` out: it has ``log``'s header, and
    its frame ``log.frames`` is a commit frame of this log's salts carrying the index's
    checksum (with no frame, the index's checksum is the log header's)."""
    header = os.pread(fd, HEADER_BYTES, 0)
    if header != log.header:
        return False
    if log.frames == 0:
        return struct.unpack(">2I", header[24:32]) == log.frame_checksum
    at = HEADER_BYTES + (log.frames - 1) * (FRAME_HEADER_BYTES + log.page_size)
    last = os.pread(fd, FRAME_HEADER_BYTES, at)
    if len(last) < FRAME_HEADER_BYTES or last[8:16] != header[16:24]:
        return False
    _, commit, _, _, k1, k2 = struct.unpack(">6I", last)
    return commit != 0 and (k1, k2) == log.frame_checksum
