"""The generated reference docs (config, CLI, man pages) match the code that made them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.repo import REPO as ROOT

pytestmark = pytest.mark.process


def test_generated_docs_are_current() -> None:
    """docs/config.md, docs/cli.md and docs/man/*.1 are what docs/generate.py writes today."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


def test_every_config_key_is_in_the_reference() -> None:
    """Every configuration key appears in docs/config.md."""
    from statewarden.config import schema_keys

    text = (ROOT / "docs" / "config.md").read_text()
    missing = [k for k in schema_keys() if f"`{k}`" not in text]
    assert missing == []


def test_every_command_is_in_the_reference_and_the_man_page() -> None:
    """Every statewardenctl command has its section in docs/cli.md and in statewardenctl(1)."""
    from statewarden.cli.ctl import COMMANDS

    cli = (ROOT / "docs" / "cli.md").read_text()
    man = (ROOT / "docs" / "man" / "statewardenctl.1").read_text()
    assert len(COMMANDS) >= 15
    for name in COMMANDS:
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
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert r.returncode == 1
        assert "stale: docs/config.md" in r.stderr
        assert target.read_text().endswith("stale line\n")
    finally:
        target.write_text(before)


def test_the_runbook_has_a_section_for_every_incident_kind() -> None:
    """docs/runbook.md has a section for every incident kind."""
    from statewarden.incidents.signals import KINDS

    runbook = (ROOT / "docs" / "runbook.md").read_text()
    missing = [kind for kind in KINDS if f"\n## {kind}\n" not in runbook]
    assert missing == []


def _reference_blocks() -> dict[str, str]:
    """Command path -> the help block docs/cli.md shows for it."""
    out: dict[str, str] = {}
    text = (ROOT / "docs" / "cli.md").read_text()
    for section in text.split("\n## `")[1:]:
        path, rest = section.split("`\n\n```\n", 1)
        out[path] = rest.split("\n```\n", 1)[0] + "\n"
    return out


def test_the_reference_is_what_each_command_prints_for_help() -> None:
    """Every block of docs/cli.md is byte for byte what the installed command prints for
    `--help` as a whole process (the help option says `-h, --help`, as it does), on a
    wide terminal and on an 80-column one alike."""
    import os

    blocks = _reference_blocks()
    assert len(blocks) >= 30  # every command and subcommand of both programs
    bindir = Path(sys.executable).parent
    for path, block in blocks.items():
        prog, *rest = path.split()
        for columns in ("200", "80"):
            r = subprocess.run(
                [str(bindir / prog), *rest, "--help"],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
                env={**os.environ, "COLUMNS": columns},
            )
            assert r.returncode == 0, r.stderr
            assert r.stdout == block, f"{path} --help (COLUMNS={columns}) differs from docs/cli.md"
        assert "  -h, --help" in block


def test_the_man_page_holds_the_same_help() -> None:
    """statewardenctl(1) carries each command's --help as docs/cli.md does (in roff)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("generate", ROOT / "docs" / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    _roff = generate._roff

    man = (ROOT / "docs" / "man" / "statewardenctl.1").read_text()
    for path, block in _reference_blocks().items():
        if path.startswith("statewardenctl"):
            assert f".nf\n{_roff(block.rstrip())}\n.fi\n" in man, path


def test_the_command_list_shows_each_summary_whole() -> None:
    """`statewardenctl --help` and each group's --help list every command's summary
    whole: no summary is cut short with "..."."""
    from statewarden.cli.ctl import COMMANDS

    blocks = _reference_blocks()
    top = blocks["statewardenctl"]
    flat = " ".join(top.split())
    for name, (_module, _attr, summary) in COMMANDS.items():
        assert f"{name} {summary}" in flat, name
    for path, block in blocks.items():
        commands = block.split("Commands:\n", 1)[1] if "Commands:\n" in block else ""
        assert "..." not in commands, path
