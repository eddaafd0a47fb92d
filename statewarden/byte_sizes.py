"""A number of bytes as a person reads it, the same in every command and on the web page."""

from __future__ import annotations


def human_bytes(n: float | None) -> str:
    """``n`` bytes for a person: ``512 B``, ``3.4 MiB``; ``-`` when unknown."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover
