"""The envelope of every JSON document statewarden writes: ``schema_version`` first.

Commands' ``--json`` output, the JSON lines written as things happen, and the report file
of ``recover --report`` all carry it (README: JSON output).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

SCHEMA_VERSION = 1
"""The version of every JSON document and JSON line statewarden writes.

Within one version keys may be added; none is removed, renamed or given another type.
A change that breaks a reader raises it.
"""


def json_document(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with ``schema_version`` first: what every JSON document statewarden writes is."""
    if "schema_version" in data:
        raise ValueError("a JSON document names its own schema_version")
    return {"schema_version": SCHEMA_VERSION, **data}
