"""A work copy's damaged header fitted to what its pages prove (``bundle.make_work_copy``):
a destroyed header replaced by a fresh one with the page size the b-tree pages prove, a
page size or other field that disagrees with the pages rewritten to what they show
(the copy only, never the source), and a size field the file's own length outruns
trusted no further than the pages reach. Each fit is said in a note."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

from statewarden.errors import (
    DatabaseUnreadable,
    PageFormatError,
)
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.schema_root import is_schema_record
from statewarden.recovery.evidence.lost_schema import infer_page_size, rewrite_header
from statewarden.sidecars import WAL_SUFFIX, sidecar
from statewarden.sqlite import (
    HEADER_SIZE,
    TEXT_ENCODINGS,
    HeaderFacts,
    parse_header,
)


def infer_header(copy: Path, source: Path, error: DatabaseUnreadable) -> tuple[HeaderFacts, str]:
    """A destroyed header replaced in the private copy by a fresh one, with the page
    size the pages prove (``lost_schema.infer_page_size``); ``error`` is raised when no
    size is clearly the file's (then it is no database statewarden can read)."""
    found = infer_page_size(copy)
    if found is None:
        raise error
    page_size, why = found
    rewrite_header(copy, page_size)
    with open(copy, "rb") as f:
        header = parse_header(f.read(HEADER_SIZE), str(source))
    return header, (
        f"{source}: the database header is destroyed; the private copy was given a new one"
        f" with the page size the pages prove, {page_size} bytes ({why})"
    )


def fit_page_size(copy: Path, header: HeaderFacts, source: Path) -> tuple[HeaderFacts, str | None]:
    """A page-size field that contradicts the file (one flipped header byte), fixed in
    the private copy when exactly one page size makes the header's valid page count fill
    the file to the byte. SQLite would otherwise read every page at the wrong offset
    and find no schema. The source is not touched. A file whose pages read as b-tree
    pages at the header's size (``infer_page_size``) keeps it: a file cut to a fraction
    of its pages (half of them fill it at half the size) is truncated, not misread."""
    size = copy.stat().st_size
    if not header.page_count_valid or header.page_count * header.page_size == size:
        return header, None
    fits = [ps for ps in (512 << i for i in range(8)) if header.page_count * ps == size]
    if len(fits) != 1:
        return header, None
    (page_size,) = fits
    proven = infer_page_size(copy)
    if proven is not None and proven[0] == header.page_size:
        return header, None  # the pages read at the header's size: a file cut short
    with open(copy, "r+b") as f:
        f.seek(16)
        f.write(struct.pack(">H", 1 if page_size == 65536 else page_size))
    note = (
        f"{source}: the header's page size ({header.page_size}) does not fit the file;"
        f" its {header.page_count} pages fill it exactly at {page_size} bytes, so the"
        " private copy was read with that page size"
    )
    return dataclasses.replace(header, page_size=page_size), note


# Bytes 21 to 23 of the header: the maximum and minimum embedded payload fractions and
# the leaf payload fraction, fixed at 64, 32 and 32 (SQLite refuses a file without).
PAYLOAD_FRACTIONS_AT = 21
PAYLOAD_FRACTIONS = bytes([64, 32, 32])


def fit_header_fields(
    copy: Path, header: HeaderFacts, source: Path
) -> tuple[HeaderFacts, str | None]:
    """Header fields that make SQLite refuse a file whose pages are intact, fixed in
    the private copy as the file proves them (the source is not touched): the file
    format versions (1 or 2; the other one's value when it is valid, else 2 with a
    ``-wal`` and 1 without), the payload fractions (bytes 21 to 23: 64, 32 and 32 in
    every file, SQLite refuses any other), the schema format (0 to 4; else 4, what
    SQLite writes),
    and the text encoding, when the ``sqlite_schema`` records read as text in exactly
    one encoding and it is not the header's."""
    fixes: list[tuple[int, bytes, str]] = []
    versions = [v for v in (header.write_version, header.read_version) if v in (1, 2)]
    if len(versions) < 2:
        wal = sidecar(copy, WAL_SUFFIX).exists()
        v = versions[0] if versions else 2 if wal else 1
        was = f"{header.write_version}/{header.read_version}"
        fixes.append((18, bytes([v, v]), f"file format versions {was}, read as {v}"))
    with open(copy, "rb") as f:
        f.seek(PAYLOAD_FRACTIONS_AT)
        fractions = f.read(len(PAYLOAD_FRACTIONS))
    if fractions != PAYLOAD_FRACTIONS:
        was = "/".join(str(b) for b in fractions)
        fixes.append(
            (PAYLOAD_FRACTIONS_AT, PAYLOAD_FRACTIONS, f"payload fractions {was}, read as 64/32/32")
        )
    if not 0 <= header.schema_format <= 4:  # 0: a file with no schema yet, read as 1
        fixes.append((44, struct.pack(">I", 4), f"schema format {header.schema_format}, read as 4"))
    encodings = _schema_encodings(copy, header.text_encoding)
    if len(encodings) == 1 and encodings[0] != header.text_encoding:
        code = {v: k for k, v in TEXT_ENCODINGS.items()}[encodings[0]]
        what = f"text encoding {header.text_encoding}, but the schema reads as {encodings[0]}"
        fixes.append((56, struct.pack(">I", code), what))
    if not fixes:
        return header, None
    with open(copy, "r+b") as f:
        for offset, data, _ in fixes:
            f.seek(offset)
            f.write(data)
        f.seek(0)
        fixed = parse_header(f.read(HEADER_SIZE), str(source))
    return fixed, (
        f"{source}: the database header is damaged ({'; '.join(w for _, _, w in fixes)});"
        " the private copy was read with the values the file proves"
    )


def _schema_encodings(copy: Path, header_encoding: str) -> list[str]:
    """The text encodings in which the records of page 1's ``sqlite_schema`` tree
    read as schema rows (type, name, ... as text), each with a ``CREATE`` statement;
    only ``[header_encoding]`` when the header's own encoding reads (whatever else
    does, no other is then the one encoding the schema proves)."""
    found = []
    try:
        db = DatabaseFile(copy)
    except (OSError, ValueError, DatabaseUnreadable):
        return []
    with db:
        for encoding in sorted(TEXT_ENCODINGS.values(), key=lambda e: e != header_encoding):
            db.encoding = encoding
            if _reads_as_schema(db):
                found.append(encoding)
                if encoding == header_encoding:
                    break
    return found


def _reads_as_schema(db: DatabaseFile) -> bool:
    stack, seen, good = [1], set[int](), False
    while stack and len(seen) < 1000:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        try:
            kids = db.children(n)
            stack.extend(kids)
            rows = [] if kids else db.leaf_rows(n)[0]
        except (PageFormatError, struct.error, IndexError):
            continue
        for _, values in rows:
            if not is_schema_record(values):
                continue
            sql = values[4]
            if sql is not None and not str(sql).upper().startswith("CREATE"):
                return False
            good = good or sql is not None
    return good


def trust_file_size(copy: Path, header: HeaderFacts) -> None:
    """Make SQLite read a truncated copy as far as it goes.

    SQLite refuses a file shorter than the page count in its header when that count is
    valid (header offset 92 equals the change counter). On our private copy the
    "valid for" field is changed so SQLite takes the size from the file instead, and
    partial last page is cut off; pages past the end then read as damage, which the
    scans narrow down like any other. The source is not touched.
    """
    size = copy.stat().st_size
    with open(copy, "r+b") as f:
        f.truncate(size - size % header.page_size)
        f.seek(92)
        f.write(struct.pack(">I", (header.change_counter + 1) & 0xFFFFFFFF))
