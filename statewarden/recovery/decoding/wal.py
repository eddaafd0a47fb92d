"""A ``-wal`` file read frame by frame: what SQLite replays, and what it leaves out.

The format (sqlite.org/fileformat2.html#walformat): a 32-byte header (magic, version,
page size, checkpoint sequence, two salts, a checksum of the first 24 bytes), then
frames of a 24-byte header (page number, database size after commit or 0, the salts, a
checksum chained over every earlier frame) and one page image.

SQLite ignores the whole WAL when its header is not valid (magic, version, page size,
header checksum) and stops replaying at the first frame whose salts or checksum do not
match; frames after the last commit frame it reached are an unfinished transaction.
Both rules drop committed transactions without a word. Here each frame is checked on
its own, from the checksum stored in the frame (or header) before it, so the commits
that come after a damaged frame (or behind a damaged header) are found, counted and
their page images kept for salvage. Frames whose salts differ from the header's are
from an older WAL generation (already checkpointed) only when no frame after them
carries the header's salts; otherwise such a frame is damaged and reading goes on
(``_frames`` says how the frame after it is judged).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

HEADER_BYTES = 32
FRAME_HEADER_BYTES = 24
MAGICS = (0x377F0682, 0x377F0683)  # checksums in little- / big-endian words
VERSION = 3007000
_MASK = 0xFFFFFFFF


def checksum(data: bytes, s0: int, s1: int, *, big_endian: bool) -> tuple[int, int]:
    """SQLite's WAL checksum of ``data`` (a multiple of 8 bytes) from ``(s0, s1)``."""
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & _MASK
        s1 = (s1 + words[i + 1] + s0) & _MASK
    return s0, s1


def checksum_back(data: bytes, s0: int, s1: int, *, big_endian: bool) -> tuple[int, int]:
    """The checksum state before ``data`` given the state ``(s0, s1)`` after it: the
    inverse of ``checksum`` (each step of it can be undone)."""
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    for i in range(len(words) - 2, -1, -2):
        s1 = (s1 - words[i + 1] - s0) & _MASK
        s0 = (s0 - words[i] - s1) & _MASK
    return s0, s1


def proven_size(
    header: bytes, image: bytes, prev: tuple[int, int], *, big_endian: bool
) -> int | None:
    """The database-size field (bytes 4-7 of the frame ``header``) that makes the
    frame's stored checksum follow from ``prev`` and its page number and ``image``,
    or None when no value does (the damage is elsewhere in the frame).

    The checksum covers the header's first 8 bytes and the page; run back over the
    page from the stored checksum, it gives the state after those 8 bytes, whose first
    word depends on the page number alone (a 32-bit proof that page number, image and
    chain are intact) and whose second word then gives the size field's value."""
    order = ">" if big_endian else "<"
    k1, k2 = struct.unpack(">II", header[16:24])
    h0, h1 = checksum_back(image, k1, k2, big_endian=big_endian)
    (page_word,) = struct.unpack(f"{order}I", header[:4])
    if h0 != (prev[0] + page_word + prev[1]) & _MASK:
        return None
    size_word = (h1 - prev[1] - h0) & _MASK
    return int(struct.unpack(">I", struct.pack(f"{order}I", size_word))[0])


def valid_page_size(n: int) -> bool:
    return 512 <= n <= 65536 and n & (n - 1) == 0


@dataclass
class Frame:
    index: int  # 0-based position in the file
    page: int
    commit: int  # database size in pages after this commit, 0 if not a commit frame
    intact: bool  # salts match and its checksum follows from the frame before it
    offset: int = 0  # of its page image in the file
    header_damaged: bool = False  # its salts are not the header's, yet later frames' are
    unverified: bool = False  # intact by salts and page number (the chain was broken)
    # its database-size field is damaged: ``commit`` is the value its checksum proves,
    # ``stored_commit`` the one the field holds (SQLite's replay stops at it)
    size_repaired: bool = False
    stored_commit: int = 0


@dataclass
class WalFacts:
    """What one ``-wal`` holds and what SQLite makes of it."""

    size: int
    path: Path | None = None  # where the file is read from (page images on demand)
    ignored: str | None = None  # why SQLite ignores the whole file, if it does
    page_size: int = 0
    frames: list[Frame] = field(default_factory=list)
    replayed: int = 0  # frames SQLite applies (up to its last good commit frame)
    first_bad: Frame | None = None  # the frame where SQLite's replay stops on damage
    dropped_commits: int = 0  # committed transactions SQLite does not apply
    dropped_frames: int = 0
    foreign: str | None = None  # why it was set aside as another database's WAL

    def newest_images(self) -> dict[int, bytes]:
        """Page images of the dropped committed transactions, the newest per page
        (the damaged frames excluded), up to the database size the last of them
        commits: a page past it is not part of the database those commits leave."""
        newest: dict[int, Frame] = {}
        for f in self._dropped():
            if f.intact:
                newest[f.page] = f
        size = self.dropped_size()
        return {page: self._image(f) for page, f in newest.items() if page <= size}

    def dropped_size(self) -> int:
        """The database size in pages after the last dropped commit (0 if none)."""
        commits = [f.commit for f in self._dropped() if f.commit and f.intact]
        return commits[-1] if commits else 0

    def unknown_pages(self) -> set[int]:
        """Pages whose newest image in the dropped commits is a damaged frame's: what
        those commits left there is not known. 0 stands for a damaged frame whose page
        number is no page of the database (it may have written any page)."""
        size = self.dropped_size()
        newest: dict[int, Frame] = {}
        out: set[int] = set()
        for f in self._dropped():
            if 1 <= f.page <= max(size, f.page if f.intact else 0):
                newest[f.page] = f
            elif not f.intact:
                out.add(0)
        out.update(page for page, f in newest.items() if not f.intact and page <= size)
        return out

    def replayed_page(self, page: int) -> bytes | None:
        """The newest image of ``page`` SQLite replays, if any."""
        found = None
        for f in self.frames[: self.replayed]:
            if f.page == page:
                found = f
        return None if found is None else self._image(found)

    def replayed_images(self) -> dict[int, bytes]:
        """The newest image of each page among the frames SQLite replays."""
        newest = {f.page: f for f in self.frames[: self.replayed]}
        return {page: self._image(f) for page, f in newest.items()}

    def last_commit(self) -> Frame | None:
        """The last commit frame SQLite replays (it sets the database size)."""
        return next((f for f in reversed(self.frames[: self.replayed]) if f.commit), None)

    def _image(self, f: Frame) -> bytes:
        assert self.path is not None
        with open(self.path, "rb") as fh:
            fh.seek(f.offset)
            return fh.read(self.page_size)

    def _dropped(self) -> list[Frame]:
        last_commit = max((f.index for f in self.frames if f.commit and f.intact), default=-1)
        return self.frames[self.replayed : last_commit + 1]

    def notes(self, name: str) -> list[str]:
        out = []
        if self.foreign:
            out.append(
                f"{name}: set aside, it belongs to another database ({self.foreign});"
                " the database file was read alone. SQLite would replay it over the file:"
                " move it away before Hermes opens the database again"
            )
            return out
        if self.ignored:
            out.append(f"{name}: ignored, as SQLite does: {self.ignored}")
        if self.first_bad is not None and not self.ignored:
            f = self.first_bad
            what = (
                "has a damaged header (its salts are not the WAL's, later frames' are)"
                if f.header_damaged
                else f"(page {f.page}) fails its checksum"
            )
            if f.size_repaired:
                what += (
                    f" through its database-size field alone: it reads {f.stored_commit},"
                    f" the checksum proves {f.commit}"
                    + (" (a commit frame, written whole)" if f.commit else "")
                )
            out.append(
                f"{name}: frame {f.index + 1} {what};"
                f" SQLite replays the {self.replayed} frames before it and stops there"
            )
        bad = [f.index + 1 for f in self.frames if f.header_damaged]
        if len(bad) > 1 or (bad and (self.first_bad is None or self.ignored)):
            shown = ", ".join(str(i) for i in bad[:10])
            out.append(f"{name}: frames with a damaged header: {shown}")
        unverified = [f.index + 1 for f in self.frames if f.unverified]
        if unverified:
            shown = ", ".join(str(i) for i in unverified[:10])
            one = len(unverified) == 1
            out.append(
                f"{name}: frame{'' if one else 's'} {shown} follow{'s' if one else ''} a"
                f" damaged frame, so {'its' if one else 'their'} checksum cannot be checked;"
                " taken as current by salts and page number"
            )
        if self.dropped_commits:
            s = "s" if self.dropped_commits != 1 else ""
            out.append(
                f"{name}: {self.dropped_commits} committed transaction{s}"
                f" ({self.dropped_frames} frames) that SQLite does not replay;"
                " their rows are salvaged from the frame images"
            )
        return out


def read_wal(path: Path, db_page_size: int) -> WalFacts:
    """Every frame of the WAL at ``path``, checked on its own (no SQLite involved).
    Page images are read again from ``path`` when asked for: keep the file there."""
    with open(path, "rb") as fh:
        size = Path(path).stat().st_size
        if not size:
            return WalFacts(size=0, path=Path(path))
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _read(data, size, Path(path), db_page_size)


def _read(data: mmap.mmap, size: int, path: Path, db_page_size: int) -> WalFacts:
    facts = WalFacts(size=size, path=path)
    if size < HEADER_BYTES:
        facts.ignored = f"{size} bytes, shorter than a WAL header"
        return facts
    magic, version, page_size, _seq, salt1, salt2, c1, c2 = struct.unpack(">8I", data[:32])
    problems = []
    if magic not in MAGICS:
        problems.append("bad magic number" + (" (zero-filled)" if not any(data[:32]) else ""))
    if version != VERSION:
        problems.append(f"unknown version {version}")
    if not valid_page_size(page_size):
        problems.append(f"invalid page size {page_size}")
        page_size = db_page_size
    orders = [bool(magic & 1)] if magic in MAGICS else [False, True]
    if magic in MAGICS and checksum(data[:24], 0, 0, big_endian=orders[0]) != (c1, c2):
        problems.append("its header checksum does not match")
    facts.page_size = page_size
    facts.ignored = ", ".join(problems) or None
    best: list[Frame] = []
    for big in orders:
        frames = _frames(data, page_size, salt1, salt2, (c1, c2), big_endian=big)
        if sum(f.intact for f in frames) > sum(f.intact for f in best) or not best:
            best = frames
    facts.frames = best
    if facts.ignored is None:
        for f in best:
            if not f.intact or f.size_repaired:
                facts.first_bad = f
                break
        prefix = best if facts.first_bad is None else best[: facts.first_bad.index]
        facts.replayed = max((f.index + 1 for f in prefix if f.commit), default=0)
    dropped = facts._dropped()
    facts.dropped_frames = len(dropped)
    facts.dropped_commits = sum(1 for f in dropped if f.commit and f.intact)
    return facts


def _frames(
    data: mmap.mmap,
    page_size: int,
    salt1: int,
    salt2: int,
    seed: tuple[int, int],
    *,
    big_endian: bool,
) -> list[Frame]:
    """The frames of the current generation, each checked on its own.

    A frame whose salts are not the header's ends the generation only when no later
    frame carries the header's salts: an older generation's frames carry older salts
    (salt 1 grows at each restart, salt 2 is random), so a frame with the current salts
    further on means this one is damaged (a zeroed frame header), not the end.

    The frame right after a frame with a damaged header cannot be checked: its
    checksum is chained from the damaged frame's, which is gone. It is taken as
    intact (``unverified``) when its salts are the current ones and its page number
    is a page of the database (1 up to the largest size any commit frame of this
    generation gives): the same evidence SQLite itself has that a frame belongs to
    this generation. The frames after it are checked again from its stored checksum.
    """
    out: list[Frame] = []
    size = FRAME_HEADER_BYTES + page_size
    prev = seed
    prev_damaged = False
    offset = HEADER_BYTES
    ours = _current_offsets(data, size, salt1, salt2)
    max_pages = max((struct.unpack(">I", data[o + 4 : o + 8])[0] for o in ours), default=0)
    last_ours = ours[-1] if ours else -1
    while offset + size <= len(data) and offset <= last_ours:
        fh = data[offset : offset + FRAME_HEADER_BYTES]
        page, commit, s1, s2, k1, k2 = struct.unpack(">6I", fh)
        index = len(out)
        if (s1, s2) != (salt1, salt2):
            # Damaged: later frames carry the current salts (else the loop has ended).
            out.append(Frame(index, page, commit, False, offset + FRAME_HEADER_BYTES))
            out[-1].header_damaged = True
            prev_damaged = True
            offset += size
            continue
        image = data[offset + FRAME_HEADER_BYTES : offset + size]
        got = checksum(fh[:8], *prev, big_endian=big_endian)
        got = checksum(image, *got, big_endian=big_endian)
        frame = Frame(index, page, commit, page != 0 and got == (k1, k2))
        frame.offset = offset + FRAME_HEADER_BYTES
        if prev_damaged and not frame.intact and 1 <= page <= max_pages:
            frame.intact = True
            frame.unverified = True
        elif not frame.intact and page != 0:
            _try_size(frame, fh, image, prev, big_endian=big_endian)
        out.append(frame)
        prev_damaged = page == 0
        prev = (k1, k2)
        offset += size
    return out


def _try_size(
    frame: Frame, header: bytes, image: bytes, prev: tuple[int, int], *, big_endian: bool
) -> None:
    """A frame that fails its checksum only through its database-size field is intact,
    with the size its checksum proves (``proven_size``): a commit frame whose size was
    damaged is a commit, and its transaction was written whole."""
    size = proven_size(header, image, prev, big_endian=big_endian)
    if size is None:
        return
    frame.stored_commit = frame.commit
    frame.commit = size
    frame.intact = True
    frame.size_repaired = True


def _current_offsets(data: mmap.mmap, size: int, salt1: int, salt2: int) -> list[int]:
    """Offsets of every frame (at a frame boundary) whose salts are the header's."""
    want = struct.pack(">II", salt1, salt2)
    out = []
    offset = HEADER_BYTES
    while offset + size <= len(data):
        if data[offset + 8 : offset + 16] == want:
            out.append(offset)
        offset += size
    return out


def rewrite_commit_size(path: Path, frame: Frame, pages: int) -> None:
    """Write ``pages`` as the database size of commit ``frame`` of the WAL at ``path``
    and chain the checksums again from it for as long as the stored ones held (a frame
    that failed its checksum keeps failing), so that SQLite replays it with that size.
    For a private copy only."""
    with open(path, "r+b") as fh:
        head = fh.read(HEADER_BYTES)
        big = bool(struct.unpack(">I", head[:4])[0] & 1)
        page_size = struct.unpack(">I", head[8:12])[0]
        step = FRAME_HEADER_BYTES + page_size
        at = frame.offset - FRAME_HEADER_BYTES
        if at == HEADER_BYTES:
            sums = struct.unpack(">II", head[24:32])
        else:
            fh.seek(at - step + 16)
            sums = struct.unpack(">II", fh.read(8))
        old = sums
        while True:
            fh.seek(at)
            fhead = bytearray(fh.read(FRAME_HEADER_BYTES))
            image = fh.read(page_size)
            if len(fhead) < FRAME_HEADER_BYTES or len(image) < page_size:
                return
            old = checksum(bytes(fhead[:8]), *old, big_endian=big)
            old = checksum(image, *old, big_endian=big)
            if fhead[8:16] != head[16:24] or old != struct.unpack(">II", fhead[16:24]):
                return  # the chain ended here before: it still does
            if at == frame.offset - FRAME_HEADER_BYTES:
                struct.pack_into(">I", fhead, 4, pages)
            sums = checksum(bytes(fhead[:8]), *sums, big_endian=big)
            sums = checksum(image, *sums, big_endian=big)
            struct.pack_into(">II", fhead, 16, *sums)
            fh.seek(at)
            fh.write(fhead)
            at += step
