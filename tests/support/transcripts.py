"""Hermes' per-session transcripts (sessions/*.jsonl), written as Hermes writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NEW = "20261130_220000_abcdef"


def write_jsonl(path: Path, rows: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n")
