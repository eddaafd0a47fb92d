#!/usr/bin/env bash
# Install the built package, use it on a real Hermes database, purge it, and check that
# nothing is left. Needs root. Usage: bash packaging/check-deb.sh DEB [PYTHON]
# PYTHON (default .venv/bin/python) writes the test database with hermes-agent's code.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
deb=$1
py=${2:-$here/.venv/bin/python}
[ "$(id -u)" = 0 ] || { echo "check-deb: run as root" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Debian's own checks of the package: nothing at error or warning level (the overrides
# in packaging/debian/lintian-overrides each say why).
if ! lintian --fail-on error,warning "$deb" > "$work/lintian.txt" 2>&1; then
    grep -v 'running with root privileges' "$work/lintian.txt" >&2
    echo "check-deb: lintian found problems" >&2
    exit 1
fi
dpkg -i "$deb" >/dev/null
for doc in copyright changelog.gz; do
    [ -s "/usr/share/doc/statewarden/$doc" ] || { echo "check-deb: /usr/share/doc/statewarden/$doc is missing" >&2; exit 1; }
done
/usr/bin/statewarden --version
# Documentation= included: the package's man pages are where man looks.
[ -z "$(XDG_RUNTIME_DIR="$work" systemd-analyze verify --user /usr/lib/systemd/user/statewarden.service 2>&1)" ] \
    || { XDG_RUNTIME_DIR="$work" systemd-analyze verify --user /usr/lib/systemd/user/statewarden.service; exit 1; }
grep -q '^ExecStart=/usr/bin/statewarden run$' /usr/lib/systemd/user/statewarden.service
# The package's venv carries the man pages and completions (the wheel's _data), and a
# user's `statewardenctl install` leaves them to the package's /usr/share copies.
ls /opt/statewarden/venv/lib/python3*/site-packages/statewarden/_data/man/statewarden.1 >/dev/null
HOME="$work" XDG_CONFIG_HOME="$work/.config" DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent \
    /usr/bin/statewardenctl install --dry-run | grep -q 'installed with the package in /usr/share'
for comp in /usr/share/bash-completion/completions/statewardenctl \
    /usr/share/zsh/vendor-completions/_statewardenctl \
    /usr/share/fish/vendor_completions.d/statewardenctl.fish; do
    [ -s "$comp" ] || { echo "check-deb: $comp is missing" >&2; exit 1; }
done
[ "$(bash --norc -c 'source /usr/share/bash-completion/completions/statewardenctl
    COMP_WORDS=(statewardenctl hol); COMP_CWORD=1; _statewardenctl_completion statewardenctl
    echo "${COMPREPLY[@]}"')" = holders ]
(cd "$here" && "$py" -c 'import sys; from pathlib import Path; from lab.hermes_fixtures import TINY, make_home; make_home(Path(sys.argv[1]), TINY)' "$work/hermes")
HOME="$work" HERMES_HOME="$work/hermes" /usr/bin/statewardenctl status --json > "$work/status.json"
grep -q '"schema_version"' "$work/status.json"
HOME="$work" /usr/bin/statewardenctl config check --config /usr/share/doc/statewarden/examples/statewarden.yaml
# The demo needs nothing but the package: run it as root and as an unprivileged user.
# A demo that does not end as expected prints its whole output here (it would go with
# $work), and is run once more: a second failure fails the check. The first is kept in
# the log: a demo that fails now and then is a defect to find, not one to hide.
demo() {
    local who=$1 out=$2
    shift 2
    local rc=0
    "$@" </dev/null > "$out" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] && return 0
    echo "check-deb: the demo as $who failed (exit $rc); its output:" >&2
    cat "$out" >&2
    echo "check-deb: running the demo as $who once more" >&2
    if "$@" </dev/null > "$out" 2>&1; then return 0; fi
    cat "$out" >&2
    echo "check-deb: the demo as $who failed twice" >&2
    return 1
}
demo root "$work/demo-root.txt" env HOME="$work" /usr/bin/statewardenctl demo
demo "uid 65534" "$work/demo-user.txt" \
    setpriv --reuid=65534 --regid=65534 --clear-groups -- env HOME=/tmp /usr/bin/statewardenctl demo
dpkg --purge statewarden >/dev/null
for left in /usr/bin/statewarden /usr/bin/statewardenctl /opt/statewarden /usr/lib/systemd/user/statewarden.service \
    /usr/share/bash-completion/completions/statewardenctl; do
    if [ -e "$left" ] || [ -L "$left" ]; then
        echo "check-deb: $left is still there after purge" >&2
        exit 1
    fi
done
echo "check-deb: lintian clean; installed, ran status on a Hermes database and the demo (as root and as uid 65534), purged cleanly"
