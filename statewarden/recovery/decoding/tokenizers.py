"""FTS tables whose tokenizer this SQLite cannot load.

Hermes main may add ``messages_fts_cjk`` with ``tokenize='cjk_unicode61'``, a tokenizer
from a loadable extension statewarden does not have. Without it FTS5 cannot read the
table's index (``integrity_check`` passes over it silently, its own ``integrity-check``
and any ``MATCH`` fail with "no such tokenizer"), so such a table can be neither
verified nor rebuilt here: check reports it as "cannot verify" (not damage), and
recover carries it over as it is, its shadow tables copied row by row.
"""

from __future__ import annotations

import re

import apsw

from statewarden.recovery.decoding.schema import Schema
from statewarden.sqlite import quote_ident, raise_if_interrupted

_TOKENIZE_RE = re.compile(r"\btokenize\s*=\s*(?:'((?:[^']|'')*)'|\"([^\"]*)\"|(\w+))", re.I)
_PROBE = "statewarden_tokenizer_probe"


def tokenizer_of(sql: str | None) -> str | None:
    """The ``tokenize=`` option of a ``CREATE VIRTUAL TABLE ... USING fts5``, as written."""
    m = _TOKENIZE_RE.search(sql or "")
    if m is None:
        return None
    return next(g for g in m.groups() if g is not None).replace("''", "'")


def unloadable(conn: apsw.Connection, schema: Schema) -> dict[str, str]:
    """FTS5 table -> the error of its tokenizer, for each table whose tokenizer this
    connection cannot create (probed on a throwaway table in the ``temp`` schema)."""
    out: dict[str, str] = {}
    cache: dict[str, str | None] = {}
    for obj in schema.tables():
        tok = tokenizer_of(obj.sql) if obj.module == "fts5" else None
        if tok is None:
            continue
        if tok not in cache:
            cache[tok] = _probe(conn, tok)
        if cache[tok] is not None:
            out[obj.name] = str(cache[tok])
    return out


def _probe(conn: apsw.Connection, tok: str) -> str | None:
    q = quote_ident(_PROBE)
    lit = "'" + tok.replace("'", "''") + "'"
    try:
        conn.execute(f"CREATE VIRTUAL TABLE temp.{q} USING fts5(x, tokenize={lit})")
        conn.execute(f"INSERT INTO temp.{q}(x) VALUES ('probe')")
    except apsw.Error as exc:
        raise_if_interrupted(exc)
        return str(exc).split("\n", 1)[0]
    finally:
        conn.execute(f"DROP TABLE IF EXISTS temp.{q}")
    return None
