"""A Hermes database of many messages, quickly: the rows Hermes' own writer wrote to a
cached fixture, copied again and again by SQL until the table holds ``messages`` rows.

Hermes' own triggers fill both FTS tables as the copies go in, and each session's
``message_count`` is set in the same transaction, as Hermes keeps it. Writing a million
messages through Hermes' code takes hours; what a recovery's memory grows with is the
row count, which this reaches in seconds. The copies' text is cut to 40 characters
(``text_chars``), so the file stays small for its rows.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import apsw

from lab.hermes_fixtures import SMALL, AnySpec, built_db


def many_messages(dest: Path, messages: int, spec: AnySpec = SMALL, text_chars: int = 40) -> Path:
    """``dest`` (a new file): ``spec``'s fixture with its messages copied until there are
    ``messages`` of them (checkpointed, in WAL mode as Hermes leaves it)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(built_db(spec), dest)
    conn = apsw.Connection(str(dest))
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        cols = [str(r[1]) for r in conn.execute("PRAGMA table_info(messages)") if r[1] != "id"]
        picked = ", ".join(
            f"substr(content, 1, {int(text_chars)})" if c == "content" else c for c in cols
        )
        names = ", ".join(cols)
        while True:
            have = int(conn.execute("SELECT count(*) FROM messages").get)
            if have >= messages:
                break
            with conn:
                conn.execute(
                    f"INSERT INTO messages({names}) SELECT {picked} FROM messages"
                    f" ORDER BY id LIMIT {min(have, messages - have)}"
                )
                conn.execute(
                    "UPDATE sessions SET message_count ="
                    " (SELECT count(*) FROM messages m WHERE m.session_id = sessions.id)"
                )
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return dest
