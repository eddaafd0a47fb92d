"""A wal-index is trusted only as far as the ``-wal`` bears it out
(``recovery/decoding/wal_index.py``).

The ``-shm`` of a live writer says where its last commit ends; a raw copy taken while
the writer appends is cut there. An index that is not whole (torn between its two
copies, failing its own checksum, of other salts) or one naming a frame that is no
commit of the log must never cut a copy: ``committed_log`` refuses the first kind,
``names_a_commit`` the second. (One left by a writer killed earlier names a real commit;
that it stands still while the log grows is what gives it away:
``test_copy_under_a_writer.py``.) The bytes are a real writer's, read while it holds the
database open.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import pytest

from lab import corruption
from statewarden.recovery.decoding.wal import checksum
from statewarden.recovery.decoding.wal_index import (
    INDEX_HEADER_BYTES,
    CommittedLog,
    committed_log,
    names_a_commit,
)
from tests.support.key_writer import KeyWriter

pytestmark = pytest.mark.process


def index_with(index: bytes, **changes: int) -> bytes:
    """``index`` (both header copies) with the fields named changed (``frames``: mxFrame)
    and its own checksum made right again, as a writer of it would."""
    head = bytearray(index[:INDEX_HEADER_BYTES])
    if "frames" in changes:
        struct.pack_into("=I", head, 16, changes["frames"])
    big = sys.byteorder == "big"
    struct.pack_into("=2I", head, 40, *checksum(bytes(head[:40]), 0, 0, big_endian=big))
    return bytes(head) * 2


def bears_out(wal: bytes, log: CommittedLog, tmp_path: Path) -> bool:
    path = tmp_path / "copied-wal"
    path.write_bytes(wal)
    fd = os.open(path, os.O_RDONLY)
    try:
        return names_a_commit(fd, log)
    finally:
        os.close(fd)


@pytest.fixture
def live(tmp_path: Path) -> tuple[bytes, bytes, bytes]:
    """(the -shm's header after one commit, after three, the -wal after three) of a
    writer that holds the database open all the while."""
    case = corruption.fresh_copy(tmp_path / "db")
    writer = KeyWriter(case.db)
    try:
        writer.commit("one")
        early = Path(f"{case.db}-shm").read_bytes()[: 2 * INDEX_HEADER_BYTES]
        writer.commit("two")
        writer.commit("three")
        index = Path(f"{case.db}-shm").read_bytes()[: 2 * INDEX_HEADER_BYTES]
        wal = Path(f"{case.db}-wal").read_bytes()
    finally:
        writer.close()
    return early, index, wal


def test_the_live_index_is_borne_out(live: tuple[bytes, bytes, bytes], tmp_path: Path) -> None:
    """The writer's own index: whole, its last commit the -wal's last frame."""
    _, index, wal = live
    log = committed_log(wal[:32], index)
    assert log is not None
    assert log.committed_bytes == len(wal)
    assert bears_out(wal, log, tmp_path)


def test_an_older_index_moves_on_when_its_writer_commits(
    live: tuple[bytes, bytes, bytes],
) -> None:
    """The index after the first commit and after the third: the same log, a commit the
    -wal holds each, and the change counter a copy looks at moved."""
    early, index, wal = live
    before, after = committed_log(wal[:32], early), committed_log(wal[:32], index)
    assert before is not None
    assert after is not None
    assert before.frames < after.frames
    assert before.change != after.change


def test_an_index_naming_another_frame_is_not(
    live: tuple[bytes, bytes, bytes], tmp_path: Path
) -> None:
    """mxFrame moved one frame back, or to none, its own checksum made right: the frame
    it names is no commit, or does not carry the checksum the index gives."""
    _, index, wal = live
    log = committed_log(wal[:32], index)
    assert log is not None
    for frames in (log.frames - 1, 0):
        forged = committed_log(wal[:32], index_with(index, frames=frames))
        assert forged is not None
        assert not bears_out(wal, forged, tmp_path)


def test_an_index_that_is_not_whole_is_refused(live: tuple[bytes, bytes, bytes]) -> None:
    """Torn between its two copies, failing its own checksum, of other salts, or not
    initialised: no log at all."""
    _, index, wal = live
    head = index[:INDEX_HEADER_BYTES]
    torn = head + bytes([head[0] ^ 1]) + head[1:]
    bad_sum = bytearray(head)
    bad_sum[16] ^= 1  # mxFrame changed, the checksum not
    other_salts = bytearray(wal[:32])
    other_salts[16] ^= 1
    uninitialised = bytearray(head)
    uninitialised[12] = 0
    assert committed_log(wal[:32], torn) is None
    assert committed_log(wal[:32], bytes(bad_sum) * 2) is None
    assert committed_log(bytes(other_salts), index) is None
    assert committed_log(wal[:32], index_with(bytes(uninitialised) * 2)) is None
    assert committed_log(wal[:32], index[:50]) is None
