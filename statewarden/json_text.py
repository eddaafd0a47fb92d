"""JSON documents that others write (Hermes' manifests and snapshot notes, files in a
folder another user may change), parsed whatever they hold.

``json.loads`` raises ``RecursionError``, not ``ValueError``, for a document nested
deeper than the interpreter's stack (``[[[[...]]]]``, a few kilobytes): a reader that
catches only ``ValueError`` then ends in a traceback. :func:`parse_json` raises
``ValueError`` for every document that is not JSON it can hold.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def parse_json(data: str | bytes) -> Any:
    """``data`` parsed; ``ValueError`` for anything that is not JSON, or nested too deep."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deep") from None


# The last time a date can show (9999-12-31T23:59:59Z): a recorded time above it, or NaN,
# is no time.
LATEST_TIME = 253402300799.0


def typed_record(
    cls: Callable[..., T], data: object, types: Mapping[str, tuple[type, ...]]
) -> T | None:
    """``cls`` made of the JSON object ``data``, each field of ``types`` of one of its JSON
    types (``true`` is no number); None when ``data`` is no object, a field has another
    type, or one ``cls`` needs is missing. Keys ``types`` does not name are left out."""
    if not isinstance(data, dict):
        return None
    values = {k: data[k] for k in types if k in data}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, types[key]):
            return None
    try:
        return cls(**values)
    except TypeError:  # a field missing
        return None
