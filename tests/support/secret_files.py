"""Secret files (a token, a URL with a password) left the ways statewarden must refuse."""

from __future__ import annotations

from pathlib import Path


def unfit_secret_file(path: Path, how: str, text: str) -> Path:
    """Leave ``path`` as ``how`` says: ``text`` readable by others (mode 0644), a symlink
    to a private file holding ``text`` (beside it), a folder, or missing. Returns ``path``."""
    if how == "readable by others":
        path.write_text(text)
        path.chmod(0o644)
    elif how == "symlink":
        real = path.with_name(f"{path.name}.real")
        real.write_text(text)
        real.chmod(0o600)
        path.symlink_to(real)
    elif how == "folder":
        path.mkdir()
    elif how != "missing":
        raise ValueError(f"no such way to leave a secret file: {how!r}")
    return path
