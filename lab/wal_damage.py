"""Damage to a ``-wal`` and to the header's database size, written over files Hermes wrote.

``wal_with_delete`` has Hermes delete a session between appends and be killed with every
commit in the ``-wal``; ``set_frame_bit`` flips one bit of a frame's page image (SQLite
then drops that commit and every later one); ``set_commit_size`` rewrites the database
size of a commit frame with the checksums of every frame from it on recomputed (the
file stays a valid WAL, as SQLite checks it); ``set_commit_size_only`` rewrites it and
leaves the checksums as they were (the frame then fails its checksum, and SQLite stops
replaying there); ``set_header_size`` rewrites the database size in the file's header.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

from lab.corruption import Case, fold_copy, fresh_copy, wal_frames
from lab.hermes_fixtures import SMALL, Spec, hermes_python
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.wal import checksum

DELETING_WRITER = """
import os, sys
os.environ["HERMES_HOME"] = sys.argv[1]
from hermes_state import SessionDB
db = SessionDB()
db._conn.execute("PRAGMA wal_autocheckpoint=0")
ids = [r[0] for r in db._conn.execute("SELECT id FROM sessions ORDER BY started_at")]
keep, gone = ids[0], ids[int(sys.argv[2])]
for i in range(4):
    db.append_message(keep, "user", f"before the delete {i}")
db.delete_session(gone)
for i in range(4):
    db.append_message(keep, "assistant", f"after the delete {i}")
print(gone)
sys.stdout.flush()
os._exit(0)  # killed: no checkpoint on close, every commit stays in the -wal
"""


def wal_with_delete(dest_dir: Path, which: int = 5, spec: Spec = SMALL) -> tuple[Case, str]:
    """Hermes appends 4 messages, deletes session number ``which`` (by start time) with
    its messages, appends 4 more and is killed: every commit is in the ``-wal``.
    ``pristine`` is the copy with that WAL replayed. Returns the case and the deleted
    session's id."""
    case = fresh_copy(dest_dir, spec)
    done = subprocess.run(
        [hermes_python(), "-c", DELETING_WRITER, str(dest_dir), str(which)],
        check=True,
        capture_output=True,
        text=True,
    )
    Path(f"{case.db}-shm").unlink(missing_ok=True)
    case.pristine = dest_dir / "pristine" / "state.db"
    case.pristine.parent.mkdir()
    fold_copy(case.db, case.pristine)
    gone = done.stdout.split()[-1]
    case.note = f"session {gone} deleted between appends; every commit in the -wal"
    return case, gone


def set_frame_bit(wal: Path, frame: int, at: int = 1000) -> None:
    """Flip one bit at byte ``at`` of frame ``frame``'s (0-based) page image."""
    offset = wal_frames(wal)[frame][0] + 24 + at
    with open(wal, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


def set_commit_size(wal: Path, frame: int, pages: int) -> None:
    """Write ``pages`` as the database size of frame ``frame`` (0-based; a commit
    frame), then recompute the checksum of it and of every later frame, so that the
    WAL is valid as SQLite checks it."""
    data = bytearray(wal.read_bytes())
    (page_size,) = struct.unpack(">I", data[8:12])
    big = bool(struct.unpack(">I", data[:4])[0] & 1)
    frames = wal_frames(wal)
    struct.pack_into(">I", data, frames[frame][0] + 4, pages)
    prev = struct.unpack(">II", data[24:32])
    if frame:
        prev = struct.unpack(">II", data[frames[frame - 1][0] + 16 : frames[frame - 1][0] + 24])
    for offset, _page, _commit in frames[frame:]:
        got = checksum(bytes(data[offset : offset + 8]), *prev, big_endian=big)
        got = checksum(bytes(data[offset + 24 : offset + 24 + page_size]), *got, big_endian=big)
        struct.pack_into(">II", data, offset + 16, *got)
        prev = got
    wal.write_bytes(bytes(data))


def set_commit_size_only(wal: Path, frame: int, pages: int) -> None:
    """Write ``pages`` as the database size of frame ``frame`` (0-based), the checksums
    left as they were: one damaged field, as a flipped bit or a zeroed word leaves it."""
    offset = wal_frames(wal)[frame][0] + 4
    with open(wal, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack(">I", pages))


def set_header_size(db: Path, pages: int) -> None:
    """Write ``pages`` as the database size in ``db``'s header (offset 28), leaving the
    version-valid-for number as it is (SQLite trusts the size when it equals the change
    counter)."""
    with open(db, "r+b") as f:
        f.seek(28)
        f.write(struct.pack(">I", pages))


def table_leaves(db: Path, root: int) -> dict[int, set[int]]:
    """The leaves of the table b-tree at ``root`` in the file ``db`` (a ``-wal`` not
    read; pages past the header's database size neither), each with its rowids."""
    f = DatabaseFile(db)
    try:
        out, stack = {}, [root]
        while stack:
            n = stack.pop()
            kids = f.children(n)
            stack.extend(kids)
            if not kids:
                out[n] = {r for r, _ in f.leaf_rows(n)[0]}
        return out
    finally:
        f.close()


def page_at(db: Path, n: int) -> bytes:
    """Page ``n`` of ``db`` as the file holds it."""
    with open(db, "rb") as f:
        (size,) = struct.unpack(">H", f.read(18)[16:18])
        page_size = 65536 if size == 1 else size
        f.seek((n - 1) * page_size)
        return f.read(page_size)
