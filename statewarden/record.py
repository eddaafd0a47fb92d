"""Plain records for modules on a command's start-up path: fields in ``__slots__``.

``dataclasses`` costs a command that runs many times a minute (``statewardenctl holders``
next to ``fuser``) more CPU than the rest of its imports together (it imports
``inspect``, ``ast``, ``dis`` and ``tokenize``). The records it reads are written as
classes with ``__slots__`` and an ``__init__`` of their own; :class:`Record` gives them
what a dataclass would: equality and ``repr`` from the fields (``__slots__``, in order),
and :class:`FrozenRecord` a hash and fields that cannot be set again.
"""

from __future__ import annotations

__all__ = ["FrozenRecord", "Record"]


class Record:  # noqa: PLW1641 - unhashable, as a dataclass with eq and not frozen
    """Equality and ``repr`` from the fields named in ``__slots__``; not hashable."""

    __slots__: tuple[str, ...] = ()

    @classmethod
    def _fields(cls) -> tuple[str, ...]:
        """The names equality, hash and ``repr`` read: the slots, unless a record says."""
        return cls.__slots__

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._fields())

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Record)
        return self._values() == other._values()

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields())
        return f"{self.__class__.__qualname__}({fields})"


class FrozenRecord(Record):
    """A :class:`Record` whose fields are set once, in ``__init__`` (through
    :meth:`_set`), and that hashes by them."""

    __slots__ = ()

    def _set(self, **values: object) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of {self.__class__.__qualname__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of {self.__class__.__qualname__}")

    def __hash__(self) -> int:
        return hash(self._values())

    def __setstate__(self, state: tuple[object, dict[str, object]]) -> None:
        # copy and pickle restore the fields of a slotted object through here
        self._set(**state[1])
