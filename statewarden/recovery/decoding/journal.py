"""A rollback ``-journal`` beside the private copy: rolled back before any page is read.

A writer in rollback (DELETE) mode that dies in the middle of a transaction leaves a
hot ``-journal`` with the original image of every page it changed, and a file that
may hold some of the new pages already (spilled from a small cache), past the size in
its header among them. SQLite rolls such a journal back when it next opens the file,
so the file it presents is the last committed one. The copy is given the same
treatment before anything reads its pages: a half-written file read raw shows
pointers into pages that were never committed, which are no damage of the database.

The format (sqlite.org/fileformat2.html#rollbackjournal): a header of one sector
(magic, record count, nonce, the database size before the transaction, sector size,
page size), then records of a page number, the page's original image and a checksum;
a journal may hold several such segments, each starting on a sector boundary.

SQLite takes a journal as hot when its first byte is not zero, and applies it when
its header's magic is right. It cannot tell a journal of another database: rolled
back over this file, such a journal writes another file's pages over it. Two facts
are checked here, as for a ``-wal`` (``bundle._check_wal_belongs``): the journal's
page size must be the database's, and its original page 1 (or, when it holds none,
the database size before the transaction) must be this file's: the same bytes, or
the change counter one below the file's (SQLite counts the change when it writes a
spilled page 1). A journal of another database is set aside, as SQLite would not.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import apsw

from statewarden.sidecars import JOURNAL_SUFFIX, SHM_SUFFIX, sidecar

MAGIC = bytes.fromhex("d9d505f920a163d7")
HEADER_FIELDS = 28  # magic, records, nonce, size before, sector size, page size
_ALL_RECORDS = 0xFFFFFFFF  # written by a writer that did not sync: read to the end


@dataclass
class JournalHeader:
    size_before: int  # the database size in pages before the transaction
    sector_size: int
    page_size: int


def read_header(path: Path) -> JournalHeader | None:
    """The first segment's header of the journal at ``path``; None when SQLite would
    apply nothing of it (empty, a zero first byte, no magic, sizes out of range)."""
    with open(path, "rb") as f:
        head = f.read(HEADER_FIELDS)
    if len(head) < HEADER_FIELDS or head[0] == 0 or head[:8] != MAGIC:
        return None
    _records, _nonce, size_before, sector, page_size = struct.unpack(">5I", head[8:])
    if not 32 <= sector <= 65536 or not _power_of_two_page(page_size):
        return None
    return JournalHeader(size_before, sector, page_size)


def _power_of_two_page(n: int) -> bool:
    return 512 <= n <= 65536 and n & (n - 1) == 0


def original_page1(path: Path, header: JournalHeader) -> bytes | None:
    """Page 1 as it was before the transaction (its first record in the journal), or
    None when the journal holds no record of page 1. Only the records' page numbers
    are read (memory does not grow with the journal)."""
    record = 4 + header.page_size + 4
    size = path.stat().st_size
    offset = 0
    with open(path, "rb") as f:
        while offset + HEADER_FIELDS <= size:
            f.seek(offset)
            head = f.read(12)
            if head[:8] != MAGIC:
                return None
            (count,) = struct.unpack(">I", head[8:12])
            at = offset + header.sector_size
            if count in (0, _ALL_RECORDS):
                count = (size - at) // record
            for _ in range(count):
                if at + record > size:
                    return None
                f.seek(at)
                if struct.unpack(">I", f.read(4))[0] == 1:
                    return f.read(header.page_size)
                at += record
            # The next segment starts on the next sector boundary.
            offset = -(-at // header.sector_size) * header.sector_size
    return None


def foreign(db: Path, header: JournalHeader, page_size: int) -> str | None:
    """Why the journal belongs to another database than the file ``db`` (whose page
    size is ``page_size``), or None."""
    if header.page_size != page_size:
        return f"its page size is {header.page_size}, the database's {page_size}"
    with open(db, "rb") as f:
        page1 = f.read(page_size)
    if len(page1) < 100:
        return None  # no header to compare: SQLite's rollback decides
    counter, size = struct.unpack(">II", page1[24:32])
    before = original_page1(sidecar(db, JOURNAL_SUFFIX), header)
    if before is None:
        if size != header.size_before:
            return (
                f"it was written for a database of {header.size_before} pages; the header"
                f" here says {size}"
            )
        return None
    if before == page1:
        return None
    (old_counter,) = struct.unpack(">I", before[24:28])
    if before[:16] == page1[:16] and (old_counter + 1) & 0xFFFFFFFF == counter:
        return None
    return "its original page 1 is no earlier image of this file's page 1"


def roll_back(db: Path) -> None:
    """Have SQLite roll the hot journal beside ``db`` (a private copy) back into it:
    the first read of an open connection does it, and removes the journal. A ``-wal``
    beside it is left as it is (not checkpointed on close: it is read frame by frame
    after this), and the ``-shm`` SQLite made for it removed."""
    conn = apsw.Connection(str(db))
    try:
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        conn.execute("PRAGMA schema_version").fetchall()
    except apsw.Error:
        pass  # rolled back before the first page is read; the damage is read later
    finally:
        conn.close()
        sidecar(db, SHM_SUFFIX).unlink(missing_ok=True)
