"""Verification of a repaired database, judged on its own terms (docs/stories.md story 4).

What is measured on the output file: ``integrity_check`` is ``ok``; for every table the
planner's count equals a full scan's; ``foreign_key_check`` (orphans are reported, not
a failure: they are kept on purpose); each FTS table passes its ``integrity-check`` and
answers a ``MATCH`` query (one whose tokenizer cannot be loaded is "cannot verify");
Hermes' ``schema_version`` and the journal mode are the source's.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.recovery.diagnose import orphan_rows
from statewarden.recovery.integrity import IntegrityCheck
from statewarden.recovery.schema import Schema, read_schema
from statewarden.recovery.tokenizers import unloadable
from statewarden.sqlite import hermes_schema_version, quote_ident, read_header

_WORD_RE = re.compile(r"[A-Za-z0-9]{3,}")


@dataclass
class Verification:
    integrity: str = "not run"
    counts_agree: bool = False
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    orphans: dict[str, int] = field(default_factory=dict)
    fts: dict[str, str] = field(default_factory=dict)
    schema_version: int | None = None
    schema_version_preserved: bool = False
    journal_mode: str | None = None
    journal_mode_preserved: bool = False
    problems: list[str] = field(default_factory=list)
    # FTS tables copied whole and unchanged whose index check is the source's (passed).
    fts_checked_on_source: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def verify_output(
    path: Path,
    *,
    source_schema_version: int | None,
    source_journal_mode: str,
    checked_on_source: Collection[str] = (),
) -> Verification:
    """Measure ``path`` (closed, ours) and list every way it falls short.

    ``checked_on_source``: FTS tables copied whole from a file whose check of them
    passed and left as they were; their index is not checked again (the b-trees that
    hold it are, and each must still answer a ``MATCH``).

    The connection is read-write only for FTS5's ``integrity-check`` command, an INSERT
    that changes nothing; it is closed before the header is read raw.
    """
    v = Verification()
    conn = apsw.Connection(str(path))
    try:
        # The b-trees are checked now; the FTS tables' own checks (most of the time) go
        # on in a thread while the tables are counted (``IntegrityCheck``).
        check = IntegrityCheck(conn, skip=checked_on_source)
        v.fts_checked_on_source = sorted(checked_on_source)
        try:
            schema = read_schema(conn)
            _count_tables(conn, schema, v)
        finally:
            # Its verdict comes first, even when counting stopped on a damaged page.
            lines, complete, abort = check.result()
            if complete and not lines:
                v.integrity = "ok"
            else:
                v.integrity = "; ".join(lines[:5] + ([abort] if abort else []))
                v.problems.insert(0, f"integrity_check: {v.integrity}")
        cannot_load = unloadable(conn, schema)
        for obj in schema.tables():
            if obj.name in cannot_load:
                # Carried over unchecked (rebuild.py "carry"); not a failure.
                v.fts[obj.name] = f"cannot verify ({cannot_load[obj.name]})"
            elif obj.module == "fts5":
                checked = v.integrity == "ok" or obj.name in checked_on_source
                v.fts[obj.name] = _fts_verdict(conn, obj.name, checked=checked)
                if v.fts[obj.name] != "ok":
                    v.problems.append(f"{obj.name}: {v.fts[obj.name]}")
        try:
            v.schema_version = hermes_schema_version(conn)
        except apsw.Error as exc:
            v.problems.append(f"schema_version unreadable: {exc}")
    except apsw.Error as exc:
        v.problems.append(f"verification stopped: {exc}")
    finally:
        conn.close()
    v.schema_version_preserved = v.schema_version == source_schema_version
    if not v.schema_version_preserved:
        v.problems.append(
            f"schema_version {v.schema_version}, the source has {source_schema_version}"
        )
    v.journal_mode = read_header(path).journal_mode
    v.journal_mode_preserved = v.journal_mode == source_journal_mode
    if not v.journal_mode_preserved:
        v.problems.append(f"journal mode {v.journal_mode}, the source's is {source_journal_mode}")
    return v


def _count_tables(conn: apsw.Connection, schema: Schema, v: Verification) -> None:
    """Planner and full-scan counts of every table, and its orphans, into ``v``."""
    v.counts_agree = True
    for obj in schema.base_tables():
        q = quote_ident(obj.name)
        planner = _count(conn, f"SELECT count(*) FROM {q}")
        scan = _count(conn, f"SELECT count(*) FROM {q} NOT INDEXED")
        v.counts[obj.name] = {"planner": planner, "scan": scan}
        if planner != scan:
            v.counts_agree = False
            v.problems.append(f"{obj.name}: planner counts {planner}, full scan {scan}")
        n = orphan_rows(conn, obj.name)
        if n:
            v.orphans[obj.name] = n


def _count(conn: apsw.Connection, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0


def _fts_verdict(conn: apsw.Connection, name: str, *, checked: bool) -> str:
    """FTS5 ``integrity-check`` (already part of a passing ``integrity_check`` since
    SQLite 3.44, so only run again when that failed) and one ``MATCH`` that must hit."""
    q = quote_ident(name)
    if not checked:
        try:
            conn.execute(f"INSERT INTO {q}({q}) VALUES('integrity-check')")
        except apsw.Error as exc:
            return f"integrity-check failed: {exc}"
    try:
        row = conn.execute(f"SELECT * FROM {q} LIMIT 1").fetchone()
    except UnicodeDecodeError:  # text kept byte for byte from the source
        return "ok (integrity-check passed; its first row is not valid UTF-8 to MATCH on)"
    if row is None:
        return "ok"  # empty: nothing to match
    word = next(
        (m.group(0) for v in row if isinstance(v, str) for m in [_WORD_RE.search(v)] if m), None
    )
    if word is None:
        return "ok"
    hits = conn.execute(f"SELECT count(*) FROM {q} WHERE {q} MATCH ?", (f'"{word}"',)).fetchone()
    if not hits or int(hits[0]) == 0:
        return f"MATCH {word!r} found nothing"
    return "ok"
