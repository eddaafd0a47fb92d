"""Plain records (``statewarden/record.py``): what the classes that replaced dataclasses
on the start-up path of ``statewardenctl holders`` must still do."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from statewarden.holders.report import LockInfo
from statewarden.holders.scan import HolderScanner
from statewarden.record import FrozenRecord, Record
from statewarden.targets import Target, gateway_unit_for, target_for_db


class Point(FrozenRecord):
    __slots__ = ("x", "y")
    x: int
    y: int

    def __init__(self, x: int, y: int) -> None:
        self._set(x=x, y=y)


class Box(Record):
    __slots__ = ("items",)

    def __init__(self, items: list[int]) -> None:
        self.items = items


def test_frozen_records_compare_and_hash_by_their_fields() -> None:
    """Equal fields make equal records with equal hashes; another class is never equal."""
    assert Point(1, 2) == Point(1, 2)
    assert Point(1, 2) != Point(2, 1)
    assert hash(Point(1, 2)) == hash(Point(1, 2))
    assert len({Point(1, 2), Point(1, 2), Point(3, 4)}) == 2
    assert Point(1, 2) != (1, 2)
    assert repr(Point(1, 2)) == "Point(x=1, y=2)"


def test_frozen_records_refuse_a_change() -> None:
    """A field of a frozen record cannot be set or deleted, nor a new one added."""
    p = Point(1, 2)
    with pytest.raises(AttributeError):
        p.x = 5
    with pytest.raises(AttributeError):
        del p.x
    with pytest.raises(AttributeError):
        p.z = 3
    assert p == Point(1, 2)


def test_copies_are_equal_and_mutable_records_are_unhashable() -> None:
    """copy.copy and deepcopy keep the fields (a frozen record too); a mutable record is
    unhashable, as a dataclass with eq and not frozen is."""
    assert copy.copy(Point(1, 2)) == Point(1, 2)
    assert copy.deepcopy(Point(1, 2)) == Point(1, 2)
    box = Box([1])
    other = copy.copy(box)
    assert other == box
    other.items = [2]
    assert other != box
    with pytest.raises(TypeError):
        hash(box)


def test_lock_info_is_found_in_a_list_by_value() -> None:
    """The scanner adds an OFD lock to a holder's list only when an equal one is not there."""
    owned = [LockInfo("state.db", "OFDLCK", "READ", 128, "128")]
    assert LockInfo("state.db", "OFDLCK", "READ", 128, "128") in owned
    assert LockInfo("state.db", "OFDLCK", "WRITE", 128, "128") not in owned


def test_a_target_names_its_gateway_unit_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A --db target works its gateway unit out on first use, the same name as before;
    one given explicitly is kept; equality reads the unit either way."""
    monkeypatch.setenv("HOME", str(tmp_path))
    db = tmp_path / "elsewhere" / "state.db"
    t = target_for_db(db)
    assert t.gateway_unit == gateway_unit_for(db.parent)
    assert t.gateway_unit.startswith("hermes-gateway-")
    given = Target("default", db.parent, db, db.parent / "logs", gateway_unit_for(db.parent))
    assert given == t
    assert hash(given) == hash(t)
    native = target_for_db(tmp_path / ".hermes" / "state.db")
    assert native.gateway_unit == "hermes-gateway.service"
    assert Target("x", db.parent, db, db.parent, "mine.service").gateway_unit == "mine.service"


def test_a_scanner_still_reports_through_records(tmp_path: Path) -> None:
    """A scan of a file no one holds gives a HolderScan record with its JSON."""
    db = tmp_path / "state.db"
    db.write_bytes(b"")
    scan = HolderScanner([db], watch_opens=False).scan()[0]
    assert scan.holders == []
    assert scan.to_json()["db"] == str(db)
