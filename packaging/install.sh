#!/usr/bin/env bash
# Install statewarden for the current user: a venv, the package, and the systemd --user units.
#
#   bash packaging/install.sh          install, then enable and start statewarden.service
#                                      (statewardenctl install --enable --now)
#   bash packaging/install.sh --run    install, then run the daemon in the foreground
#
# The venv is ~/.local/share/statewarden/venv; statewarden and statewardenctl are linked
# into ~/.local/bin. As root on Debian, python3-venv is installed first if it is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
data="${XDG_DATA_HOME:-$HOME/.local/share}/statewarden"
venv="$data/venv"
bin="$HOME/.local/bin"

if ! { [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; } \
    && ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
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

mkdir -p "$data" "$bin"
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$here"
ln -sf "$venv/bin/statewarden" "$bin/statewarden"
ln -sf "$venv/bin/statewardenctl" "$bin/statewardenctl"
echo "install: $("$venv/bin/statewarden" --version) in $venv" >&2
# The journal message catalogue (journalctl -x) lives in system folders: root only.
if [ "$(id -u)" = 0 ] && command -v journalctl >/dev/null; then
    install -D -m 0644 "$here/systemd/statewarden.catalog" /usr/local/lib/systemd/catalog/statewarden.catalog
    journalctl --update-catalog
    echo "install: journal catalogue installed (journalctl -x explains statewarden's entries)" >&2
fi
# (Without root, statewardenctl install below says once how to install the catalogue.)
# The commands are linked into ~/.local/bin: say so plainly when this shell cannot find them.
case ":$PATH:" in
    *":$bin:"*) ;;
    *)
        echo "install: $bin is not on your PATH, so the shell will not find statewardenctl;" \
            "add it with: echo 'export PATH=\"\$HOME/.local/bin:\$PATH\"' >> ~/.profile" \
            "(then log in again, or run that export in this shell)" >&2
        ;;
esac

if [ "${1:-}" = "--run" ]; then
    "$venv/bin/statewardenctl" install
    exec "$venv/bin/statewarden" run
fi
if systemctl --user show-environment >/dev/null 2>&1; then
    exec "$venv/bin/statewardenctl" install --enable --now
fi
"$venv/bin/statewardenctl" install
echo "install: no systemd user manager reachable; start it later with: statewardenctl install --enable --now" >&2
