"""Secrets a sink needs (a push URL, Apprise URLs), never from the YAML.

Read from a file named in the config, or from a systemd credential
(``$CREDENTIALS_DIRECTORY/<name>``, set by ``LoadCredential=``). A file is checked as
``install`` checks the Telegram token file: a regular file (not a symlink, not a FIFO),
owned by this user and readable by its owner only, at most :data:`MAX_SECRET_BYTES`.
A credential is the service manager's (it makes it private), so only read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote

from statewarden.errors import SecretMissing

MAX_SECRET_BYTES = 64 * 1024


def _read_file(path: Path, *, checked: bool) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SecretMissing("no such file") from None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: a symbolic link
            raise SecretMissing("is a symbolic link") from None
        raise SecretMissing(f"cannot read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SecretMissing("is not a regular file")
        if checked and st.st_uid != os.geteuid():
            raise SecretMissing(f"is owned by uid {st.st_uid}, not {os.geteuid()}")
        if checked and st.st_mode & 0o077:
            raise SecretMissing(
                f"is readable by others (mode {st.st_mode & 0o777:o}); chmod 600 {path}"
            )
        if st.st_size > MAX_SECRET_BYTES:
            raise SecretMissing(f"is too large ({st.st_size} bytes)")
        data = os.read(fd, MAX_SECRET_BYTES + 1)
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretMissing("is not UTF-8 text") from None


def read_secret(
    file: Path | None,
    credential: str | None,
    what: str,
    env: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """The secret's text (stripped) and where it came from ("file /x", "credential y")."""
    env = os.environ if env is None else env
    if file is not None:
        source, path, checked = f"file {file}", file, True
    elif credential is not None:
        creds = env.get("CREDENTIALS_DIRECTORY", "")
        if not creds:
            raise SecretMissing(
                f"no {what}: credential {credential}: $CREDENTIALS_DIRECTORY not set"
                " (LoadCredential= in the unit)"
            )
        source, path, checked = f"credential {credential}", Path(creds) / credential, False
    else:
        raise SecretMissing(f"no {what}: neither a file nor a credential is configured")
    try:
        text = _read_file(path, checked=checked).strip()
    except SecretMissing as exc:
        raise SecretMissing(f"no {what}: {source}: {exc}") from None
    if not text:
        raise SecretMissing(f"no {what}: {source}: empty")
    return text, source


MIN_PASSWORD_SCRUB = 3


def url_secrets(url: str) -> list[str]:
    """What to scrub of a URL that is a secret: itself, without its scheme, its whole
    user-info and the password in it whatever its characters or length (from
    :data:`MIN_PASSWORD_SCRUB` on: a one-letter one would blank every such letter), and
    each path or query piece long enough to be a key (a ping UUID, a token)."""
    out = [url]
    rest = url.partition("://")[2]
    if rest:
        out.append(rest)
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in authority:
        userinfo = authority.rpartition("@")[0]
        out.append(userinfo)
        password = userinfo.partition(":")[2]
        for p in (password, unquote(password)):
            if len(p) >= MIN_PASSWORD_SCRUB:
                out.append(p)
    for sep in "/?&=:@#":
        rest = rest.replace(sep, " ")
    out += [piece for piece in rest.split() if len(piece) >= 8 and "." not in piece]
    return out
