#!/usr/bin/env bash
# Set up .venv (see setup-dev.sh) and run the whole test suite. Extra arguments go to pytest.
# pytest's exit code 5 ("no tests collected") is a failure here.
set -uo pipefail
cd "$(dirname "$0")/.."
bash packaging/setup-dev.sh || exit 1
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure" >&2
    exit 1
fi
exit "$rc"
