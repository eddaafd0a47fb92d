"""The formatter decides the layout of every file: no line is pinned against it."""

from __future__ import annotations

from pathlib import Path

from tests.support.repo import REPO

# Spelled in two parts so this file does not name itself.
PINS = ("fmt: " + "skip", "fmt: " + "off")
PIN = PINS[0]


def pinned_lines(root: Path) -> list[str]:
    """``path:line`` of each line below ``root`` that pins its layout against ruff format."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(p in line for p in PINS):
                out.append(f"{path.relative_to(REPO)}:{n}")
    return out


def test_no_line_is_pinned_against_the_formatter() -> None:
    """statewarden, tests, bench and lab hold no formatter pin (skip or off comment):
    ``ruff format --check`` in CI decides every line."""
    found = [p for d in ("statewarden", "tests", "bench", "lab") for p in pinned_lines(REPO / d)]
    assert found == []


def test_the_check_finds_a_pin(tmp_path: Path) -> None:
    """A pinned line is found and named (the check can fail)."""
    probe = REPO / "tests" / "project" / "_probe_pinned.py"
    probe.write_text(f"x = [1,2]  # {PIN}\n", encoding="utf-8")
    try:
        assert pinned_lines(REPO / "tests" / "project") == ["tests/project/_probe_pinned.py:1"]
    finally:
        probe.unlink()
