#!/usr/bin/env bash
# Set up .venv (see setup-dev.sh) and run the whole test suite, in two passes at once: the
# unit and process tiers in parallel (STATEWARDEN_TEST_WORKERS processes, 3 unless set;
# each takes whole files, so a module's fixtures are built once; the files that take
# longest are handed out first, tests/support/schedule.py), and beside them the
# systemd tier one test at a time (each starts a private user manager on the one cgroup
# path they share). The systemd tests mostly wait on their manager, units and journald, so
# the two passes take about as long as the parallel one alone; the systemd pass's output
# is printed after the parallel pass's, and it keeps a pytest cache of its own.
# STATEWARDEN_TEST_WORKERS=0 runs everything in one serial pass. Extra arguments go to
# pytest, in each pass. pytest's exit code 5 ("no tests collected") is a failure here,
# unless the other pass ran tests (arguments that pick tests of one tier only).
set -uo pipefail
cd "$(dirname "$0")/.."
bash packaging/setup-dev.sh || exit 1
# The tree's bytecode, written once (a second): under PYTHONDONTWRITEBYTECODE, with no
# __pycache__ yet (a fresh clone), every daemon, statewardenctl and script a test starts
# compiled each module it imports from source again (a quarter more CPU for the CLI tests).
# A file that does not compile is left to the test that imports it to report.
.venv/bin/python -m compileall -q -j 0 statewarden lab tests bench >/dev/null 2>&1
workers=${STATEWARDEN_TEST_WORKERS:-3}
# tmp_path under a short folder (/tmp/sw.XXXX/p/popen-gw0/, shorter than pytest's own
# /tmp/pytest-of-USER/pytest-N/): under the default, a worker's popen-gw0/ made the daemon's
# control socket path in a test's folder longer than a Unix socket path may be. Removed
# when every test passed; kept for a look otherwise.
base=$(mktemp -d /tmp/sw.XXXX) || exit 1

if [ "$workers" = 0 ]; then
    .venv/bin/python -m pytest --basetemp "$base/s" "$@"
    rc=$?
    parallel=$rc
    serial=5
else
    .venv/bin/python -m pytest -p no:xdist --basetemp "$base/s" -o cache_dir=.pytest_cache/systemd \
        -m systemd "$@" >"$base/systemd.log" 2>&1 &
    systemd_pass=$!
    trap 'kill "$systemd_pass" 2>/dev/null; exit 130' INT TERM
    .venv/bin/python -m pytest -n "$workers" --dist loadfile -p tests.support.schedule \
        --basetemp "$base/p" -m "not systemd" "$@"
    parallel=$?
    wait "$systemd_pass"
    serial=$?
    trap - INT TERM
    echo "== the systemd tier (run beside the tests above)"
    cat "$base/systemd.log"
fi
if [ "$parallel" -eq 5 ] && [ "$serial" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure" >&2
    rm -rf "$base"
    exit 1
fi
for rc in "$parallel" "$serial"; do
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
        echo "test.sh: the tests' folders are kept in $base" >&2
        exit "$rc"
    fi
done
rm -rf "$base"
exit 0
