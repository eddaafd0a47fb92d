"""A destroyed 100-byte header: the page size the other pages prove (at each candidate
size, the pages whose b-tree header is consistent), and a fresh header written to the
private copy. Part of the rebuild of a lost schema (``lost_schema.py``).

Only the private copy is written. Call with no SQLite connection open to it
(docs/safety.md rule 2)."""

from __future__ import annotations

import struct
from pathlib import Path

import apsw

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.sidecars import WAL_SUFFIX, sidecar
from statewarden.sqlite import HEADER_SIZE, SQLITE_MAGIC

PAGE_SIZES = tuple(512 << i for i in range(8))


# Pages read per candidate page size: enough to tell the sizes apart on any file.
PAGES_READ_FOR_SIZE = 50_000


def infer_page_size(path: Path) -> tuple[int, str] | None:
    """(page size, why) for a file whose header is destroyed, or None when no size
    is clearly the file's (no b-tree page at any size, or two sizes tie)."""
    size = path.stat().st_size
    scores: dict[int, int] = {}
    for ps in PAGE_SIZES:
        if size % ps or size < 2 * ps:
            continue
        db = DatabaseFile(path, page_size=ps)
        try:
            last = min(db.page_count, PAGES_READ_FOR_SIZE)
            scores[ps] = sum(1 for n in range(2, last + 1) if _plausible(db, n))
        finally:
            db.close()
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])
    if not ranked or ranked[0][1] == 0 or (len(ranked) > 1 and ranked[1][1] == ranked[0][1]):
        return None
    best, count = ranked[0]
    runner = f"; at {ranked[1][0]} bytes {ranked[1][1]}" if len(ranked) > 1 else ""
    return best, f"{count} pages have a consistent b-tree header at {best} bytes{runner}"


def _plausible(db: DatabaseFile, n: int) -> bool:
    """Does page ``n`` read as a b-tree page at ``db``'s page size?"""
    try:
        _kind, h, _count = db.btree_header(n)
        offs = db.cell_offsets(n)
        pg = db.page(n)
        (first_free,) = struct.unpack(">H", pg[h + 1 : h + 3])
        (content,) = struct.unpack(">H", pg[h + 5 : h + 7])
        content = content or 65536
        if content > db.page_size or (offs and content > min(offs)):
            return False
        if first_free and not h + 8 <= first_free < db.page_size:
            return False
        return all(2 <= c <= db.page_count for c in db.children(n))
    except (PageFormatError, struct.error):
        return False


def fresh_header(page_size: int, page_count: int, *, wal: bool) -> bytes:
    """A 100-byte header, UTF-8, no reserved bytes, no freelist known; in WAL mode only
    when ``wal`` (the file has a ``-wal``): a file closed cleanly leaves none in either
    mode, and Hermes 0.22 keeps a file in rollback mode where it will not create WAL
    (a SQLite with the WAL-reset bug) but switches a rollback file it may run in WAL
    back to WAL itself, so rollback is the mode that takes no choice from it."""
    h = bytearray(HEADER_SIZE)
    h[0:16] = SQLITE_MAGIC
    struct.pack_into(">H", h, 16, 1 if page_size == 65536 else page_size)
    version = 2 if wal else 1
    h[18:24] = bytes([version, version, 0, 64, 32, 32])
    struct.pack_into(">II", h, 24, 1, page_count)  # change counter, page count
    struct.pack_into(">II", h, 40, 1, 4)  # schema cookie, schema format
    struct.pack_into(">I", h, 56, 1)  # UTF-8
    struct.pack_into(">II", h, 92, 1, apsw.SQLITE_VERSION_NUMBER)
    return bytes(h)


def rewrite_header(path: Path, page_size: int) -> None:
    """Give a private copy whose header is destroyed a fresh one (page 1's b-tree is
    left as it is)."""
    pages = path.stat().st_size // page_size
    with open(path, "r+b") as f:
        f.write(fresh_header(page_size, pages, wal=sidecar(path, WAL_SUFFIX).exists()))
