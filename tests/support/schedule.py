"""The order the parallel pass hands out its files (``packaging/test.sh`` loads this with
``-p tests.support.schedule``): the long files of few tests first, then the others, most
tests first, as pytest-xdist would order them on its own.

xdist gives each worker whole files (``--dist loadfile``), one at a time, in the order of
its queue. On its own it puts the files with most tests first, so a file of one or two
long tests (a 300,000-message recovery, the fault suite) was among the last to start
and ended the pass alone while the other workers sat idle. Started first, they run
beside the many short files instead. ``LONG`` names them, longest first, as measured
(``--durations``); a file missing from it costs time, never a test.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

# Files of few tests that take long (seconds summed over their tests, measured with
# --durations on the 2-core machine under load: 40, 38, 57, 49), longest per test first.
LONG = (
    "tests/recovery/test_memory_bounded.py",
    "tests/system/test_fault_suite.py",
    "tests/demo/test_demo.py",
    "tests/daemon/test_handoff.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """xdist hands out the files in the order collected here, not by its own count
    (``--no-loadscope-reorder``; an xdist without that option keeps the order anyway)."""
    config.option.loadscopereorder = False


def handed_out(nodeids: Sequence[str], long: Sequence[str] = LONG) -> list[int]:
    """The indexes of ``nodeids`` in the order they are handed out: by file, those of
    ``long`` first in its order, then the files with most tests (ties as collected);
    within a file, as collected."""
    by_file: dict[str, list[int]] = {}
    for index, nodeid in enumerate(nodeids):
        by_file.setdefault(nodeid.split("::", 1)[0], []).append(index)

    def rank(path: str) -> tuple[int, int]:
        first = list(long).index(path) if path in long else len(long)
        return first, -len(by_file[path])

    return [index for path in sorted(by_file, key=rank) for index in by_file[path]]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The selected tests (after ``-m``), in the order :func:`handed_out` gives."""
    items[:] = [items[i] for i in handed_out([item.nodeid for item in items])]
