"""statewarden.yaml(5) documents every configuration key and is a page man can render."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from statewarden.config import schema_keys

pytestmark = pytest.mark.process

PAGE = Path(__file__).resolve().parents[2] / "docs" / "man" / "statewarden.yaml.5"


def test_every_key_is_in_the_page() -> None:
    """Every configuration key appears in statewarden.yaml(5)."""
    text = PAGE.read_text(encoding="utf-8").replace("\\-", "-")
    missing = [k for k in schema_keys() if k not in text]
    assert missing == []


def test_man_renders_it() -> None:
    """man renders statewarden.yaml(5) without error, with its name line and a key in the text."""
    if shutil.which("man") is None:
        pytest.skip("man is not installed (apt-get install man-db)")
    r = subprocess.run(
        ["man", "-l", str(PAGE)],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "MANPAGER": "cat", "MANWIDTH": "80"},
    )
    assert r.returncode == 0, r.stderr
    assert "statewarden.yaml - configuration of statewarden" in r.stdout
    assert "alerts.telegram.token_file" in r.stdout
