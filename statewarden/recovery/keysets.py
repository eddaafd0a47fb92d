"""A set of row keys whose memory does not grow like a Python set's with the row count.

A recovery holds the keys of a damaged table several times over: the rowids the
table's indexes list, the rowids its FTS copies hold, the rows read, the rows a scan
has delivered. As Python sets of ints they cost about 60 bytes a rowid each, so a
Hermes file of a million messages needed over 700 MiB to recover. :class:`KeySet`
keeps rowids (ints) in bitmaps of 65,536 rowids each, one bit a rowid where a table's
rowids are dense (Hermes' tables are ``AUTOINCREMENT``), and in a plain set only
while a stretch of 65,536 holds few of them (a garbled rowid far from the rest costs
what it costs in a set). Keys that are not ints (a table's key columns, as a tuple) go
in a plain set beside them.

It is a :class:`collections.abc.MutableSet`: ``in``, ``len``, iteration (ints in
ascending order, then the other keys), ``|``, ``&``, ``-``, ``==`` and ``<=`` with a
set or another :class:`KeySet` behave as a set's do. Operations between two KeySets
work stretch by stretch, not key by key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableSet
from typing import Any

SHIFT = 16  # a stretch holds 2**16 rowids: a bitmap of 8 KiB
LOW = (1 << SHIFT) - 1
BITMAP_BYTES = 1 << (SHIFT - 3)
# A stretch's rowids stay in a set until there are more of them than this: a set of
# 512 ints costs about as much as the 8 KiB bitmap.
SET_LIMIT = 512
# The bit positions set in each byte value, for iteration.
_BITS = tuple(tuple(i for i in range(8) if b >> i & 1) for b in range(256))
_POPCOUNT = bytes(len(bits) for bits in _BITS)

Stretch = bytearray | set[int]


def _bitmap(rowids: Iterable[int]) -> bytearray:
    bits = bytearray(BITMAP_BYTES)
    for r in rowids:
        low = r & LOW
        bits[low >> 3] |= 1 << (low & 7)
    return bits


def _count(bits: bytearray) -> int:
    return sum(bits.translate(_POPCOUNT))


def _size(stretch: Stretch) -> int:
    return len(stretch) if isinstance(stretch, set) else _count(stretch)


def _copy(stretch: Stretch) -> Stretch:
    return set(stretch) if isinstance(stretch, set) else bytearray(stretch)


def _from_int_bits(bits: int) -> bytearray:
    return bytearray(bits.to_bytes(BITMAP_BYTES, "little"))


def _as_int_bits(stretch: Stretch) -> int:
    return int.from_bytes(stretch if isinstance(stretch, bytearray) else _bitmap(stretch), "little")


def _rowids(high: int, stretch: Stretch) -> Iterator[int]:
    """The rowids of one stretch, ascending."""
    if isinstance(stretch, set):
        yield from sorted(stretch)
        return
    base = high << SHIFT
    for i, byte in enumerate(stretch):
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
    """A set of row keys; rowids are held in bitmaps (see the module's docstring)."""

    __slots__ = ("_others", "_stretches")

    def __init__(self, keys: Iterable[Any] = ()) -> None:
        # Every stretch held is non-empty. The fast paths below spell SHIFT and LOW as
        # 16 and 0xFFFF: a module global costs each call a lookup.
        self._stretches: dict[int, Stretch] = {}
        self._others: set[Any] = set()
        if isinstance(keys, KeySet):
            self._union_keyset(keys)
        else:
            self.update(keys)

    # -- one key ---------------------------------------------------------------

    def __contains__(self, key: object) -> bool:
        if key.__class__ is int:
            stretch = self._stretches.get(key >> 16)
            if stretch.__class__ is bytearray:
                return stretch[(key & 0xFFFF) >> 3] >> (key & 7) & 1 == 1
            return stretch is not None and key in stretch
        k = _as_int(key)
        if k is not None:
            return k in self
        try:
            return key in self._others
        except TypeError:
            return False  # unhashable: no key of a table

    def add(self, key: Any) -> None:
        if key.__class__ is int:
            stretch = self._stretches.get(key >> 16)
            if stretch.__class__ is bytearray:
                stretch[(key & 0xFFFF) >> 3] |= 1 << (key & 7)
                return
        self._add(key)

    def add_new(self, key: Any) -> bool:
        """Add ``key``; True when it was not in the set before."""
        if key.__class__ is int:
            stretch = self._stretches.get(key >> 16)
            if stretch.__class__ is bytearray:
                at, bit = (key & 0xFFFF) >> 3, 1 << (key & 7)
                byte = stretch[at]
                if byte & bit:
                    return False
                stretch[at] = byte | bit
                return True
        if key in self:
            return False
        self._add(key)
        return True

    def _add(self, key: Any) -> None:
        k = _as_int(key)
        if k is None:
            self._others.add(key)
            return
        high = k >> SHIFT
        stretch = self._stretches.get(high)
        if stretch is None:
            self._stretches[high] = {k}
        elif isinstance(stretch, set):
            stretch.add(k)
            if len(stretch) > SET_LIMIT:
                self._stretches[high] = _bitmap(stretch)
        else:
            low = k & LOW
            stretch[low >> 3] |= 1 << (low & 7)

    def discard(self, key: Any) -> None:
        k = _as_int(key)
        if k is None:
            self._others.discard(key)
            return
        high = k >> SHIFT
        stretch = self._stretches.get(high)
        if stretch is None:
            return
        if isinstance(stretch, set):
            stretch.discard(k)
            empty = not stretch
        else:
            low = k & LOW
            stretch[low >> 3] &= ~(1 << (low & 7)) & 0xFF
            empty = not any(stretch)
        if empty:
            del self._stretches[high]

    # -- the whole set ---------------------------------------------------------

    def __len__(self) -> int:
        return sum(_size(s) for s in self._stretches.values()) + len(self._others)

    def __bool__(self) -> bool:
        return bool(self._stretches) or bool(self._others)

    def __iter__(self) -> Iterator[Any]:
        for high in sorted(self._stretches):
            yield from _rowids(high, self._stretches[high])
        yield from self._others

    def __repr__(self) -> str:
        return f"KeySet({len(self)} keys)"

    def update(self, keys: Iterable[Any]) -> None:
        """Add every key of ``keys`` (rowids of one bitmap after another at the cost of
        a few operations each)."""
        if isinstance(keys, KeySet):
            self._union_keyset(keys)
            return
        stretches = self._stretches
        high: int | None = None
        bits = bytearray()
        for key in keys:
            if key.__class__ is int:
                if key >> 16 != high:
                    high = key >> 16
                    stretch = stretches.get(high)
                    if not isinstance(stretch, bytearray):
                        self._add(key)
                        high = None
                        continue
                    bits = stretch
                bits[(key & 0xFFFF) >> 3] |= 1 << (key & 7)
            else:
                self._add(key)

    def copy(self) -> KeySet:
        return KeySet(self)

    def ints(self) -> Iterator[int]:
        """The rowids (int keys), ascending."""
        for high in sorted(self._stretches):
            yield from _rowids(high, self._stretches[high])

    def after(self, lo: int) -> Iterator[int]:
        """The rowids above ``lo``, ascending."""
        first = (lo + 1) >> SHIFT
        for high in sorted(h for h in self._stretches if h >= first):
            for r in _rowids(high, self._stretches[high]):
                if r > lo:
                    yield r

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> KeySet:
        return cls(it)

    def _union_keyset(self, other: KeySet) -> None:
        for high, theirs in other._stretches.items():
            mine = self._stretches.get(high)
            if mine is None:
                self._stretches[high] = _copy(theirs)
                continue
            if isinstance(mine, set) and isinstance(theirs, set):
                mine |= theirs
                if len(mine) > SET_LIMIT:
                    self._stretches[high] = _bitmap(mine)
                continue
            self._stretches[high] = _from_int_bits(_as_int_bits(mine) | _as_int_bits(theirs))
        self._others |= other._others

    def __ior__(self, other: Iterable[Any]) -> KeySet:
        self.update(other)
        return self

    def __or__(self, other: Iterable[Any]) -> KeySet:
        out = KeySet(self)
        out.update(other)
        return out

    __ror__ = __or__

    # -- with another KeySet, stretch by stretch ---------------------------------

    def _combined(self, other: KeySet, keep: str) -> KeySet:
        """``self & other`` (``keep="both"``) or ``self - other`` (``"mine"``)."""
        out = KeySet()
        for high, mine in self._stretches.items():
            theirs = other._stretches.get(high)
            if theirs is None:
                if keep == "mine":
                    out._stretches[high] = _copy(mine)
                continue
            if isinstance(mine, set):
                kept = {r for r in mine if (r in other) == (keep == "both")}
                if kept:
                    out._stretches[high] = kept
                continue
            a, b = int.from_bytes(mine, "little"), _as_int_bits(theirs)
            bits = _from_int_bits(a & b if keep == "both" else a & ~b)
            if any(bits):
                out._stretches[high] = bits
        if keep == "both":
            out._others = self._others & other._others
        else:
            out._others = self._others - other._others
        return out

    def __and__(self, other: Iterable[Any]) -> KeySet:
        if isinstance(other, KeySet):
            return self._combined(other, "both")
        return KeySet(k for k in other if k in self)

    __rand__ = __and__

    def __sub__(self, other: Iterable[Any]) -> KeySet:
        if isinstance(other, KeySet):
            return self._combined(other, "mine")
        if not isinstance(other, set | frozenset | KeySet):
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

    def windows(self, rowids: int) -> list[int]:
        """Rowids at which to start stretches of about ``rowids`` of this set's rowids
        each (at least that many, bar the last; whole bitmaps of 65,536 rowids): for
        work done one stretch at a time."""
        out: list[int] = []
        held = 0
        for high in sorted(self._stretches):
            held += _size(self._stretches[high])
            if held >= rowids:
                out.append((high + 1) << SHIFT)
                held = 0
        return out
