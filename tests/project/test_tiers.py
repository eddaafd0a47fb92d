"""Every test has exactly one tier (unit, process or systemd), given by a mark or implied by
its fixtures and folder, and a unit test that starts a process fails."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lab.hermes_fixtures import WRITER
from tests.support.repo import REPO
from tests.support.tiers import SPAWN_EVENTS, TIERS, Spawns

PYTEST = (sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist")
# Selects every test with no tier or with more than one.
NOT_ONE_TIER = " or ".join(
    ["not (" + " or ".join(TIERS) + ")"]
    + [f"({a} and {b})" for i, a in enumerate(TIERS) for b in TIERS[i + 1 :]]
)

INNER_CONFTEST = """
from tests.conftest import (  # noqa: F401
    pytest_collection_modifyitems,
    pytest_runtest_logstart,
    pytest_runtest_makereport,
)
import pytest

def pytest_configure(config):
    for m in ("unit", "process", "systemd", "slow", "timeout(seconds)"):
        config.addinivalue_line("markers", m)

@pytest.fixture
def daemon():
    return "a stand-in with the name of the daemon fixture"

@pytest.fixture
def units():
    return "a stand-in with the name of the user manager fixture"
"""

INNER_TESTS = """
import subprocess
import sys

import pytest

def tier(request):
    return [m.name for m in request.node.iter_markers() if m.name in ("unit", "process", "systemd")]

def test_plain(request):
    assert tier(request) == ["unit"]

def test_daemon(request, daemon):
    assert tier(request) == ["process"]

def test_units(request, units):
    assert tier(request) == ["systemd"]

@pytest.mark.process
def test_marked(request):
    assert tier(request) == ["process"]

def test_unit_that_spawns():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.mark.process
def test_process_that_spawns():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


@pytest.mark.process
def test_every_collected_test_has_exactly_one_tier() -> None:
    """Collecting the whole suite, no test is left without a tier or given two."""
    r = subprocess.run(
        [*PYTEST, "--collect-only", "-q", "-m", NOT_ONE_TIER, "tests"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    # Exit 5: every test deselected, none has a tier too few or too many.
    assert r.returncode == 5, r.stdout[-3000:] + r.stderr[-3000:]
    assert " deselected" in r.stdout, r.stdout[-3000:]


@pytest.mark.process
def test_tiers_come_from_marks_fixtures_and_a_unit_test_may_not_spawn(
    pytester: pytest.Pytester,
) -> None:
    """Unmarked tests take the tier their fixtures imply (daemon: process, units: systemd,
    none: unit), a mark wins, and a unit test that starts a process fails naming it while
    the same test marked process passes."""
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-rf")
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ test_unit_that_spawns _*",
            "a unit test started a process (subprocess: *python -c pass); mark it process*",
        ]
    )


def test_two_tier_marks_are_found(pytester: pytest.Pytester) -> None:
    """A test marked with two tiers is selected by the check's expression (so it fails)."""
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(
        test_inner="""
import pytest

pytestmark = pytest.mark.process

@pytest.mark.systemd
def test_two():
    pass

def test_one():
    pass
"""
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "--collect-only", "-q", "-m", NOT_ONE_TIER
    )
    result.stdout.fnmatch_lines(["test_inner.py::test_two", "*1/2 tests collected (1 deselected)*"])


def test_the_fixture_cache_build_is_not_the_tests_process() -> None:
    """The audit sees a process a test starts, and lets through only the fixture cache's build
    (a writer's ``build``, once per machine); the writer's ``hold`` is a real process."""
    spawns = Spawns(audit=False)
    hook = spawns._hook  # the hook is what the interpreter calls
    hook("subprocess.Popen", (sys.executable, [sys.executable, str(WRITER), "build"], None, None))
    assert spawns.take() == []
    hook("subprocess.Popen", (sys.executable, [sys.executable, str(WRITER), "hold"], None, None))
    hook("os.fork", ())
    hook("open", ("/etc/hostname", "r", 0))
    assert spawns.take() == [f"subprocess: {sys.executable} {WRITER} hold", "os.fork"]
    assert {"subprocess.Popen", "os.fork", "os.posix_spawn"} <= SPAWN_EVENTS
