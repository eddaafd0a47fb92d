"""A JSON document others write, nested deeper than the interpreter's stack, is one
malformed document, never a traceback (``json_text.parse_json``).

``json.loads`` raises ``RecursionError`` for ``[[[[...]]]]`` a few kilobytes deep; a
retired WAL capture's ``manifest.json`` in the Hermes home (written by Hermes, or by
anyone who may write there) made ``status --db`` and ``captures`` end in "unexpected
RecursionError", exit 1.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, built_db
from statewarden.json_text import parse_json
from tests.support.cli import run_ctl

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("text", [DEEP, '{"a": ' * 50_000 + "1" + "}" * 50_000])
def test_a_document_too_deep_is_a_value_error(text: str) -> None:
    """Too deep for the parser: ``ValueError``, as for any text that is not JSON."""
    with pytest.raises(ValueError, match="nested too deep"):
        parse_json(text)
    assert parse_json(b'{"main": {"mode": "copied"}}') == {"main": {"mode": "copied"}}


def home_with_deep_capture(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copyfile(built_db(TINY), home / "state.db")
    capture = home / "state.db.retired-wal-20261130-220000-42"
    capture.mkdir()
    shutil.copyfile(built_db(TINY), capture / "state.db")
    (capture / "manifest.json").write_text(DEEP)
    return home / "state.db"


@pytest.mark.parametrize("command", [["status", "--db"], ["captures", "--db"]])
def test_commands_name_a_deep_manifest_and_go_on(tmp_path: Path, command: list[str]) -> None:
    """``status --db`` and ``captures --db`` with a capture whose manifest is nested too
    deep: no "unexpected" error, no traceback; the capture is named."""
    db = home_with_deep_capture(tmp_path)
    done = run_ctl(*command, str(db))
    assert "unexpected" not in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert done.exit_code in (0, 3, 4), done.stderr
    assert "retired-wal-20261130-220000-42" in done.stdout + done.stderr
