#!/usr/bin/env bash
# Install statewarden for the current user and (if a user manager runs) start its unit.
#
#   bash packaging/install.sh          install, enable and start statewarden.service
#   bash packaging/install.sh --run    install, then run the daemon in the foreground
#
# Puts a venv in ~/.local/share/statewarden/venv, links statewarden and statewardenctl
# into ~/.local/bin, and the unit into ~/.config/systemd/user/. As root on Debian it
# first installs python3-venv if it is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
data="${XDG_DATA_HOME:-$HOME/.local/share}/statewarden"
venv="$data/venv"
bin="$HOME/.local/bin"
units="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"

if ! /usr/bin/env python3 -c 'import ensurepip, venv' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    else
        echo "install: python3 with venv is needed (Debian/Ubuntu: sudo apt-get install python3-venv)" >&2
        exit 1
    fi
fi
PY=python3
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null && PY=/usr/bin/python3

mkdir -p "$data" "$bin" "$units"
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$here"
ln -sf "$venv/bin/statewarden" "$bin/statewarden"
ln -sf "$venv/bin/statewardenctl" "$bin/statewardenctl"
sed "s|@VENV@|$venv|g" "$here/systemd/statewarden.service" > "$units/statewarden.service"
echo "install: statewarden $("$venv/bin/statewarden" --version | awk '{print $NF}') in $venv" >&2
# The journal message catalogue (journalctl -x) lives in system folders: root only.
if [ "$(id -u)" = 0 ] && command -v journalctl >/dev/null; then
    install -D -m 0644 "$here/systemd/statewarden.catalog" /usr/local/lib/systemd/catalog/statewarden.catalog
    journalctl --update-catalog
    echo "install: journal catalogue installed (journalctl -x explains statewarden's entries)" >&2
else
    echo "install: for journalctl -x explanations run as root: install -D -m 0644" \
        "$here/systemd/statewarden.catalog /usr/local/lib/systemd/catalog/statewarden.catalog" \
        "&& journalctl --update-catalog" >&2
fi

if [ "${1:-}" = "--run" ]; then
    exec "$venv/bin/statewarden" run
fi
if systemctl --user show-environment >/dev/null 2>&1; then
    systemctl --user daemon-reload
    systemctl --user enable --now statewarden.service
    echo "install: statewarden.service enabled and started; logs: journalctl --user -u statewarden" >&2
else
    echo "install: no systemd user manager reachable; unit installed at $units/statewarden.service" >&2
    echo "install: start it later with: systemctl --user enable --now statewarden.service" >&2
fi
