"""The suite's own rules: under CI a skip fails, with its reason; locally it stays a skip
with a how-to-run reason."""

from __future__ import annotations

import pytest

from tests.support.suite import LONG_TIMEOUT_S, in_ci

SKIPPING = """
import pytest

def test_needs_a_tool() -> None:
    pytest.skip("needs journalctl; install systemd to run it")

@pytest.mark.skipif(True, reason="needs root; run the suite as root")
def test_needs_root() -> None:
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure() -> None:
    raise AssertionError

def test_runs() -> None:
    assert True
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    """An inner suite that uses this project's conftest rules."""
    pytester.makeconftest("from tests.conftest import pytest_runtest_makereport  # noqa: F401")
    pytester.makepyfile(test_inner=SKIPPING)
    return pytester


class TestSkipsUnderCI:
    @pytest.mark.parametrize("value", ["true", "1", "yes"])
    def test_a_skip_is_a_failure_with_its_reason(
        self, inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str
    ) -> None:
        """Under CI (true, 1, yes) a skip in a test body fails it and a skip mark errors its setup,
        each with the skip's reason; an xfail stays an xfail."""
        monkeypatch.setenv("CI", value)
        result = inner.runpytest_inprocess("-p", "no:cacheprovider", "-rf")
        # A skip in the test body fails it; a skip mark fails its setup (an error).
        result.assert_outcomes(passed=1, failed=1, errors=1, xfailed=1)
        result.stdout.fnmatch_lines(
            [
                "*skipped under CI*needs root; run the suite as root",
                "*skipped under CI*needs journalctl; install systemd to run it",
            ]
        )

    @pytest.mark.parametrize("value", [None, "", "false", "0", "no"])
    def test_outside_ci_a_skip_stays_a_skip(
        self, inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str | None
    ) -> None:
        """With CI unset, empty, false, 0 or no, a skip stays a skip with its reason."""
        if value is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", value)
        assert not in_ci()
        result = inner.runpytest_inprocess("-p", "no:cacheprovider", "-rs")
        result.assert_outcomes(passed=1, skipped=2, xfailed=1)
        result.stdout.fnmatch_lines(["*needs root; run the suite as root*"])


def test_systemd_and_slow_tests_get_the_long_timeout(pytester: pytest.Pytester) -> None:
    """A test marked systemd or slow carries the long timeout; others keep the default;
    an explicit timeout mark wins."""
    pytester.makeconftest(
        "from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n"
        "def pytest_configure(config):\n"
        "    for m in ('systemd', 'slow', 'timeout(seconds)'):\n"
        "        config.addinivalue_line('markers', m)\n"
    )
    pytester.makepyfile(
        test_inner=f"""
import pytest

def timeout_of(request):
    mark = request.node.get_closest_marker("timeout")
    return mark.args[0] if mark else None

@pytest.mark.systemd
def test_systemd(request):
    assert timeout_of(request) == {LONG_TIMEOUT_S}

@pytest.mark.slow
def test_slow(request):
    assert timeout_of(request) == {LONG_TIMEOUT_S}

@pytest.mark.slow
@pytest.mark.timeout(7)
def test_explicit(request):
    assert timeout_of(request) == 7

def test_plain(request):
    assert timeout_of(request) is None
"""
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=4)
