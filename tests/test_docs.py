"""The generated reference docs (config, CLI, man pages) match the code that made them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_docs_are_current() -> None:
    """docs/config.md, docs/cli.md and docs/man/*.1 are what docs/generate.py writes today."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "generate.py"), "--check"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr


def test_every_config_key_is_in_the_reference() -> None:
    from statewarden.config import schema_keys

    text = (ROOT / "docs" / "config.md").read_text()
    missing = [k for k in schema_keys() if f"`{k}`" not in text]
    assert missing == []


def test_every_command_is_in_the_reference_and_the_man_page() -> None:
    from statewarden.cli.ctl import main

    cli = (ROOT / "docs" / "cli.md").read_text()
    man = (ROOT / "docs" / "man" / "statewardenctl.1").read_text()
    for name in main.commands:
        assert f"## `statewardenctl {name}`" in cli
        assert f'.SS "statewardenctl {name}"' in man


def test_the_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    """--check can fail: a changed reference is named, and nothing is rewritten."""
    target = ROOT / "docs" / "config.md"
    before = target.read_text()
    try:
        target.write_text(before + "stale line\n")
        r = subprocess.run(
            [sys.executable, str(ROOT / "docs" / "generate.py"), "--check"],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert r.returncode == 1
        assert "stale: docs/config.md" in r.stderr
        assert target.read_text().endswith("stale line\n")
    finally:
        target.write_text(before)


def test_the_runbook_has_a_section_for_every_incident_kind() -> None:
    from statewarden.incidents.signals import KINDS

    runbook = (ROOT / "docs" / "runbook.md").read_text()
    missing = [kind for kind in KINDS if f"\n## {kind}\n" not in runbook]
    assert missing == []
