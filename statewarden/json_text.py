"""JSON documents that others write (Hermes' manifests and snapshot notes, files in a
folder another user may change), parsed whatever they hold.

``json.loads`` raises ``RecursionError``, not ``ValueError``, for a document nested
deeper than the interpreter's stack (``[[[[...]]]]``, a few kilobytes): a reader that
catches only ``ValueError`` then ends in a traceback. :func:`parse_json` raises
``ValueError`` for every document that is not JSON it can hold.
"""

from __future__ import annotations

import json
from typing import Any


def parse_json(data: str | bytes) -> Any:
    """``data`` parsed; ``ValueError`` for anything that is not JSON, or nested too deep."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deep") from None
