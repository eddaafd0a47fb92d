"""The parallel pass's order (``tests/support/schedule.py``): the long files of few
tests are handed out first, not last, where one of them ended the pass alone."""

from __future__ import annotations

import pytest

from tests.support.repo import REPO
from tests.support.schedule import LONG, handed_out

COLLECTED = [
    "tests/a/test_many.py::test_1",
    "tests/a/test_many.py::test_2",
    "tests/a/test_many.py::test_3",
    "tests/b/test_long.py::test_only",
    "tests/b/test_two.py::T::test_1",
    "tests/b/test_two.py::T::test_2",
    "tests/c/test_also_two.py::test_1",
    "tests/c/test_also_two.py::test_2",
]


def test_long_files_first_then_most_tests_and_each_file_as_collected() -> None:
    """A file named long comes first though it has one test; then the files with most
    tests, two of the same count as collected; the tests of a file stay in their order."""
    order = [COLLECTED[i] for i in handed_out(COLLECTED, long=("tests/b/test_long.py",))]
    assert order == [
        "tests/b/test_long.py::test_only",
        "tests/a/test_many.py::test_1",
        "tests/a/test_many.py::test_2",
        "tests/a/test_many.py::test_3",
        "tests/b/test_two.py::T::test_1",
        "tests/b/test_two.py::T::test_2",
        "tests/c/test_also_two.py::test_1",
        "tests/c/test_also_two.py::test_2",
    ]
    # Without it, the one-test file is handed out last (xdist's own order by count).
    assert handed_out(COLLECTED, long=())[-1] == COLLECTED.index("tests/b/test_long.py::test_only")


def test_every_long_file_is_a_test_file_of_the_suite() -> None:
    """A name left behind when a file moves or is split would silently stop counting."""
    assert LONG
    for path in LONG:
        assert (REPO / path).is_file(), path
        assert path.startswith("tests/")
        assert path.rsplit("/", 1)[1].startswith("test_")


def test_xdist_keeps_the_collected_order(pytester: pytest.Pytester) -> None:
    """Loaded, the plugin turns xdist's reordering by count off (``--no-loadscope-reorder``)."""
    assert pytester.parseconfigure().option.loadscopereorder is True
    config = pytester.parseconfigure("-p", "tests.support.schedule")
    assert config.option.loadscopereorder is False
