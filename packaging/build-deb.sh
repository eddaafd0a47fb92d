#!/usr/bin/env bash
# Build a Debian package of statewarden with dpkg-deb alone (no debhelper).
#
#   bash packaging/build-deb.sh [OUTDIR]      -> OUTDIR/statewarden_<version>_<arch>.deb
#
# The package holds its own virtual environment in /opt/statewarden/venv (made from
# Debian's /usr/bin/python3; the Python dependencies are installed into it here, at
# build time, so installing the package needs no network), the commands linked into
# /usr/bin, the user unit in /usr/lib/systemd/user/, the example config in
# /usr/share/doc/statewarden/examples/, the journal message catalogue in
# /usr/lib/systemd/catalog/, the man pages, and copyright and changelog.gz (from
# packaging/debian/) in /usr/share/doc/statewarden/. Its postinst starts nothing for users:
# each user runs `systemctl --user enable --now statewarden` (or `statewardenctl install`).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$here/dist}" && cd "${1:-$here/dist}" && pwd)
PY=/usr/bin/python3
[ -x "$PY" ] || { echo "build-deb: $PY is needed (apt-get install python3 python3-venv)" >&2; exit 1; }
version=$("$PY" -c 'import re,sys; print(re.search(r"__version__ = \"([^\"]+)\"", open(sys.argv[1]).read()).group(1))' "$here/statewarden/__init__.py")
arch=$(dpkg --print-architecture)
pyver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
venv=/opt/statewarden/venv
mkdir -p "$root/opt/statewarden" "$root/usr/bin" "$root/usr/lib/systemd/user" \
    "$root/usr/share/doc/statewarden/examples" "$root/usr/share/man/man1" \
    "$root/usr/lib/systemd/catalog" "$root/DEBIAN" \
    "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
    "$root/usr/share/fish/vendor_completions.d"

# The venv is made at its final path in a private mount namespace, so every path in it
# (script shebangs, pyvenv.cfg) is already right, then copied into the package tree.
made_opt_dir=
[ -d /opt/statewarden ] || { mkdir -p /opt/statewarden; made_opt_dir=1; }
unshare -m --propagation private bash -euc '
    mount -t tmpfs tmpfs /opt/statewarden
    "$0" -m venv '"$venv"'
    '"$venv"'/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir "$1"
    '"$venv"'/bin/python -m pip uninstall -q -y pip setuptools >/dev/null 2>&1 || true
    find '"$venv"' -name __pycache__ -prune -exec rm -rf {} +
    cp -a /opt/statewarden/venv "$2/opt/statewarden/"
' "$PY" "$here" "$root"
# Only what runs: the dependencies' own test suites, apsw's extra SQLite tools (never
# loaded by statewarden) and the console scripts of other packages are left out, and
# the compiled modules are stripped of debugging symbols, as dh_strip would.
site=$(echo "$root$venv"/lib/python3*/site-packages)
rm -rf "$site/apsw/sqlite_extra_binaries" "$site"/*/tests
find "$root$venv/include" -depth -type d -empty -delete 2>/dev/null || true
# The wheel's own man pages (share/man beside a pip install's bin/): the package has
# them compressed in /usr/share/man.
rm -rf "$root$venv/share/man"
rmdir "$root$venv/share" 2>/dev/null || true
find "$root$venv/bin" -maxdepth 1 -type f ! -name 'statewarden*' ! -name 'python*' \
    ! -name 'activate*' -delete
find "$root$venv" -name '*.so' -type f -exec strip --strip-unneeded --remove-section=.comment \
    --remove-section=.note {} +
# The newest glibc symbol version the compiled modules need.
glibc=$(find "$root$venv" -name '*.so' -type f -exec objdump -T {} + 2>/dev/null \
    | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
[ -z "$made_opt_dir" ] || rmdir /opt/statewarden 2>/dev/null || true

ln -s "$venv/bin/statewarden" "$root/usr/bin/statewarden"
ln -s "$venv/bin/statewardenctl" "$root/usr/bin/statewardenctl"
for unit in "$here"/systemd/*.service; do
    sed "s|@BINDIR@|/usr/bin|g" "$unit" > "$root/usr/lib/systemd/user/$(basename "$unit")"
done
cp "$here/etc/statewarden.yaml" "$root/usr/share/doc/statewarden/examples/statewarden.yaml"
cp "$here/README.md" "$root/usr/share/doc/statewarden/README.md"
# Debian policy: copyright and (for a native package) changelog.gz in the doc folder;
# the changelog's newest entry must be this version.
head -1 "$here/packaging/debian/changelog" | grep -q "^statewarden ($version) " || {
    echo "build-deb: packaging/debian/changelog has no entry for $version" >&2; exit 1; }
install -m 0644 "$here/packaging/debian/copyright" "$root/usr/share/doc/statewarden/copyright"
gzip -9n < "$here/packaging/debian/changelog" > "$root/usr/share/doc/statewarden/changelog.gz"
install -D -m 0644 "$here/packaging/debian/lintian-overrides" \
    "$root/usr/share/lintian/overrides/statewarden"
for cat in "$here"/systemd/*.catalog; do
    [ -e "$cat" ] && cp "$cat" "$root/usr/lib/systemd/catalog/"
done
for page in "$here"/docs/man/*.[15]; do
    [ -e "$page" ] || continue
    section=${page##*.}
    mkdir -p "$root/usr/share/man/man$section"
    gzip -9n < "$page" > "$root/usr/share/man/man$section/$(basename "$page").gz"
done
# Fleet views (generated from statewarden/fleet.py): Prometheus alerting rules and a
# Grafana dashboard, for the monitoring host to pick up.
install -D -m 0644 "$here/packaging/prometheus/statewarden.rules.yml" \
    "$root/usr/share/statewarden/prometheus/statewarden.rules.yml"
install -D -m 0644 "$here/packaging/grafana/statewarden.json" \
    "$root/usr/share/statewarden/grafana/statewarden.json"
# Shell completion (generated from click by docs/generate.py), where each shell's
# system-wide loader looks.
install -m 0644 "$here/packaging/completions/statewardenctl" \
    "$root/usr/share/bash-completion/completions/statewardenctl"
install -m 0644 "$here/packaging/completions/_statewardenctl" \
    "$root/usr/share/zsh/vendor-completions/_statewardenctl"
install -m 0644 "$here/packaging/completions/statewardenctl.fish" \
    "$root/usr/share/fish/vendor_completions.d/statewardenctl.fish"

size=$(du -sk "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: statewarden
Version: $version
Architecture: $arch
Maintainer: ${DEBFULLNAME:-statewarden} <${DEBEMAIL:-statewarden@localhost}>
Installed-Size: $size
Depends: python3 (>= 3.11), python$pyver, systemd, libc6 (>= $glibc)
Section: admin
Priority: optional
Description: supervisor for Hermes Agent's state.db
 Watches Hermes Agent's SQLite state.db, finds every process holding it, alerts
 through journald and Telegram, and repairs it offline without losing a row that
 can be read. Runs as a systemd --user service; each user enables it with
 systemctl --user enable --now statewarden.
CONTROL
cat > "$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
# Nothing is started for users: each one enables the user unit themselves.
if [ "$1" = configure ] && command -v journalctl >/dev/null 2>&1; then
    journalctl --update-catalog >/dev/null 2>&1 || true
fi
exit 0
POSTINST
cat > "$root/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
# Byte-code written at run time is not in the package's file list.
if [ "$1" = remove ] || [ "$1" = purge ]; then
    rm -rf /opt/statewarden
    if command -v journalctl >/dev/null 2>&1; then
        journalctl --update-catalog >/dev/null 2>&1 || true
    fi
fi
exit 0
POSTRM
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm"
# Checksums of every file, for debsums and dpkg --verify.
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z \
    | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
deb="$out/statewarden_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "build-deb: $deb ($(du -h "$deb" | cut -f1))"
