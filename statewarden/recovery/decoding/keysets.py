"""A set of row keys whose memory does not grow like a Python set's with the row count.

A recovery holds the keys of a damaged table several times over: the rowids the
table's indexes list, the rowids its FTS copies hold, the rows read, the rows a scan
has delivered. As Python sets of ints they cost about 60 bytes a rowid each, so a
Hermes file of a million messages needed over 700 MiB to recover. :class:`KeySet`
keeps rowids (ints) in bitmaps of 65,536 rowids each (a stretch), one bit a rowid,
where a stretch holds many of them, as a table's rowids do when they are dense
(Hermes' tables are ``AUTOINCREMENT``). The other rowids stay in one plain set (a
garbled rowid far from the rest, a table of scattered rowids: no worse than a set);
they move into bitmaps once their stretch is worth one, checked each time that set
has doubled. Keys that are not ints (a table's key columns, as a tuple) go in a plain
set beside them.

It is a :class:`collections.abc.MutableSet`: ``in``, ``len``, iteration (ints in
ascending order, then the other keys), ``|``, ``&``, ``-``, ``==`` and ``<=`` with a
set or another :class:`KeySet` behave as a set's do. Operations between two KeySets
work bitmap by bitmap, not key by key.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, MutableSet
from typing import Any

SHIFT = 16  # a stretch holds 2**16 rowids: a bitmap of 8 KiB
LOW = (1 << SHIFT) - 1
BITMAP_BYTES = 1 << (SHIFT - 3)
# A stretch gets a bitmap once it holds this many rowids: a set of 512 ints costs
# about as much as the 8 KiB bitmap.
SET_LIMIT = 512
# The loose rowids are looked over for stretches worth a bitmap when there are this
# many of them, then each time their number has doubled since.
FIRST_LOOK = 4096
# The bit positions set in each byte value, for iteration.
_BITS = tuple(tuple(i for i in range(8) if b >> i & 1) for b in range(256))
_POPCOUNT = bytes(len(bits) for bits in _BITS)


def _count(bits: bytearray) -> int:
    return sum(bits.translate(_POPCOUNT))


def _from_int_bits(bits: int) -> bytearray:
    return bytearray(bits.to_bytes(BITMAP_BYTES, "little"))


def _bitmap_rowids(high: int, bits: bytearray) -> Iterator[int]:
    """The rowids of one bitmap, ascending."""
    base = high << SHIFT
    for i, byte in enumerate(bits):
        if byte:
            at = base + (i << 3)
            for bit in _BITS[byte]:
                yield at + bit


def _as_int(key: Any) -> int | None:
    """``key`` as the int a set would take it to equal, or None."""
    if type(key) is int:
        return key
    if isinstance(key, int):
        return int(key)  # bool, and int subclasses
    if isinstance(key, float) and key.is_integer():
        return int(key)
    return None


class KeySet(MutableSet[Any]):
    """A set of row keys; rowids are held in bitmaps (see the module's docstring).

    Each rowid is in exactly one place: the bitmap of its stretch when the stretch has
    one (and every bitmap held has a bit set), else ``_loose``.
    """

    __slots__ = ("_bitmaps", "_loose", "_next_look", "_others")

    def __init__(self, keys: Iterable[Any] = ()) -> None:
        # The fast paths below spell SHIFT and LOW as 16 and 0xFFFF: a module global
        # costs each call a lookup.
        self._bitmaps: dict[int, bytearray] = {}
        self._loose: set[int] = set()
        self._others: set[Any] = set()
        self._next_look = FIRST_LOOK
        self.update(keys)

    # -- one key ---------------------------------------------------------------

    def __contains__(self, key: object) -> bool:
        if key.__class__ is int:
            bits = self._bitmaps.get(key >> 16)
            if bits is not None:
                return bits[(key & 0xFFFF) >> 3] >> (key & 7) & 1 == 1
            return key in self._loose
        k = _as_int(key)
        if k is not None:
            return k in self
        try:
            return key in self._others
        except TypeError:
            return False  # unhashable: no key of a table

    def add(self, key: Any) -> None:
        if key.__class__ is int:
            bits = self._bitmaps.get(key >> 16)
            if bits is not None:
                bits[(key & 0xFFFF) >> 3] |= 1 << (key & 7)
                return
            loose = self._loose
            loose.add(key)
            if len(loose) >= self._next_look:
                self._look_over()
            return
        k = _as_int(key)
        if k is None:
            self._others.add(key)
        else:
            self.add(k)

    def add_new(self, key: Any) -> bool:
        """Add ``key``; True when it was not in the set before."""
        if key.__class__ is int:
            bits = self._bitmaps.get(key >> 16)
            if bits is not None:
                at, bit = (key & 0xFFFF) >> 3, 1 << (key & 7)
                byte = bits[at]
                if byte & bit:
                    return False
                bits[at] = byte | bit
                return True
        if key in self:
            return False
        self.add(key)
        return True

    def discard(self, key: Any) -> None:
        k = _as_int(key)
        if k is None:
            self._others.discard(key)
            return
        bits = self._bitmaps.get(k >> SHIFT)
        if bits is None:
            self._loose.discard(k)
            return
        low = k & LOW
        bits[low >> 3] &= ~(1 << (low & 7)) & 0xFF
        if not any(bits):
            del self._bitmaps[k >> SHIFT]

    def _look_over(self) -> None:
        """Move the loose rowids of every stretch holding SET_LIMIT or more of them
        into a bitmap of its own; look again once the loose ones have doubled."""
        per_stretch = Counter(r >> SHIFT for r in self._loose)
        dense = {high for high, n in per_stretch.items() if n >= SET_LIMIT}
        del per_stretch
        if dense:
            kept: set[int] = set()
            for r in self._loose:
                high = r >> SHIFT
                if high in dense:
                    bits = self._bitmaps.get(high)
                    if bits is None:
                        bits = self._bitmaps[high] = bytearray(BITMAP_BYTES)
                    low = r & LOW
                    bits[low >> 3] |= 1 << (low & 7)
                else:
                    kept.add(r)
            self._loose = kept
        self._next_look = max(FIRST_LOOK, 2 * len(self._loose))

    # -- the whole set ---------------------------------------------------------

    def __len__(self) -> int:
        return sum(_count(b) for b in self._bitmaps.values()) + len(self._loose) + len(self._others)

    def __bool__(self) -> bool:
        return bool(self._bitmaps) or bool(self._loose) or bool(self._others)

    def __iter__(self) -> Iterator[Any]:
        yield from self.ints()
        yield from self._others

    def __repr__(self) -> str:
        return f"KeySet({len(self)} keys)"

    def ints(self) -> Iterator[int]:
        """The rowids (int keys), ascending."""
        return self.after(None)

    def after(self, lo: int | None) -> Iterator[int]:
        """The rowids above ``lo`` (all of them for None), ascending."""
        loose = sorted(self._loose if lo is None else (r for r in self._loose if r > lo))
        i = 0
        first = None if lo is None else (lo + 1) >> SHIFT
        for high in sorted(self._bitmaps):
            if first is not None and high < first:
                continue
            start = high << SHIFT
            while i < len(loose) and loose[i] < start:
                yield loose[i]
                i += 1
            for r in _bitmap_rowids(high, self._bitmaps[high]):
                if lo is None or r > lo:
                    yield r
        yield from loose[i:]

    def windows(self, rowids: int) -> list[int]:
        """Rowids at which to start stretches of about ``rowids`` of this set's rowids
        each (at least that many, bar the last; whole bitmaps of 65,536 rowids): for
        work done one stretch at a time."""
        per_stretch = Counter(r >> SHIFT for r in self._loose)
        for high, bits in self._bitmaps.items():
            per_stretch[high] += _count(bits)
        out: list[int] = []
        held = 0
        for high in sorted(per_stretch):
            held += per_stretch[high]
            if held >= rowids:
                out.append((high + 1) << SHIFT)
                held = 0
        return out

    def update(self, keys: Iterable[Any]) -> None:
        """Add every key of ``keys`` (rowids of one bitmap after another at the cost of
        a few operations each)."""
        if isinstance(keys, KeySet):
            self._union_keyset(keys)
            return
        bitmaps, loose = self._bitmaps, self._loose
        high: int | None = None
        bits: bytearray | None = None
        for key in keys:
            if key.__class__ is int:
                if key >> 16 != high:
                    high = key >> 16
                    bits = bitmaps.get(high)
                if bits is not None:
                    bits[(key & 0xFFFF) >> 3] |= 1 << (key & 7)
                    continue
                loose.add(key)
                if len(loose) >= self._next_look:
                    self._look_over()
                    loose, high = self._loose, None  # this stretch may have a bitmap now
            else:
                self.add(key)  # (a float equal to an int may look the loose ones over)
                loose, high = self._loose, None

    def copy(self) -> KeySet:
        return KeySet(self)

    def up_to(self, last: int) -> KeySet:
        """A new set of this set's rowids at most ``last`` (bitmap by bitmap, not rowid
        by rowid); keys that are not ints are left out."""
        out = KeySet()
        top = last >> SHIFT
        for high, bits in self._bitmaps.items():
            if high < top:
                out._bitmaps[high] = bytearray(bits)
            elif high == top:
                keep = (1 << ((last & LOW) + 1)) - 1
                cut = _from_int_bits(int.from_bytes(bits, "little") & keep)
                if any(cut):
                    out._bitmaps[high] = cut
        out._loose = {r for r in self._loose if r <= last}
        out._next_look = max(FIRST_LOOK, 2 * len(out._loose))
        return out

    # -- with another KeySet, bitmap by bitmap -----------------------------------

    def _union_keyset(self, other: KeySet) -> None:
        made = set()
        for high, theirs in other._bitmaps.items():
            mine = self._bitmaps.get(high)
            if mine is None:
                self._bitmaps[high] = bytearray(theirs)
                made.add(high)
            else:
                merged = int.from_bytes(mine, "little") | int.from_bytes(theirs, "little")
                self._bitmaps[high] = _from_int_bits(merged)
        if made and self._loose:
            # Loose rowids of a stretch that has a bitmap now go into it.
            moving = [r for r in self._loose if r >> SHIFT in made]
            for r in moving:
                self._loose.discard(r)
                low = r & LOW
                self._bitmaps[r >> SHIFT][low >> 3] |= 1 << (low & 7)
        for r in other._loose:
            self.add(r)
        self._others |= other._others

    def _combined(self, other: KeySet, both: bool) -> KeySet:
        """``self & other`` (``both``) or ``self - other``."""
        out = KeySet()
        # Their loose rowids in stretches where only this set has a bitmap, as bits.
        loose_bits: dict[int, int] = {}
        for r in other._loose:
            high = r >> SHIFT
            if high in self._bitmaps and high not in other._bitmaps:
                loose_bits[high] = loose_bits.get(high, 0) | 1 << (r & LOW)
        for high, mine in self._bitmaps.items():
            theirs = other._bitmaps.get(high)
            a = int.from_bytes(mine, "little")
            b = int.from_bytes(theirs, "little") if theirs is not None else loose_bits.get(high, 0)
            bits = _from_int_bits(a & b if both else a & ~b)
            if any(bits):
                out._bitmaps[high] = bits
        # Loose in both: a set operation; loose here, in a bitmap there: bit by bit.
        if both:
            out._loose = self._loose & other._loose
            if other._bitmaps:
                out._loose |= {
                    r for r in self._loose if r >> SHIFT in other._bitmaps and r in other
                }
        else:
            out._loose = self._loose - other._loose
            if other._bitmaps:
                out._loose -= {r for r in out._loose if r >> SHIFT in other._bitmaps and r in other}
        out._next_look = max(FIRST_LOOK, 2 * len(out._loose))
        out._others = self._others & other._others if both else self._others - other._others
        return out

    def __ior__(self, other: Iterable[Any]) -> KeySet:
        self.update(other)
        return self

    def __or__(self, other: Iterable[Any]) -> KeySet:
        out = KeySet(self)
        out.update(other)
        return out

    __ror__ = __or__

    def __and__(self, other: Iterable[Any]) -> KeySet:
        if isinstance(other, KeySet):
            return self._combined(other, both=True)
        return KeySet(k for k in other if k in self)

    __rand__ = __and__

    def __sub__(self, other: Iterable[Any]) -> KeySet:
        if isinstance(other, KeySet):
            return self._combined(other, both=False)
        if not isinstance(other, set | frozenset):
            other = set(other)
        return KeySet(k for k in self if k not in other)

    def __rsub__(self, other: Iterable[Any]) -> KeySet:
        return KeySet(k for k in other if k not in self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeySet):
            return len(self) == len(other) and self._others == other._others and not (self - other)
        if isinstance(other, set | frozenset):
            return len(self) == len(other) and all(k in self for k in other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]
