"""Verification of a repaired database, judged on its own terms (docs/stories.md story 4).

What is measured on the output file: ``integrity_check`` is ``ok``; for every table the
planner's count equals a full scan's; ``foreign_key_check`` (orphans are reported, not
a failure: they are kept on purpose); each FTS table passes its ``integrity-check`` and
answers a ``MATCH`` query (one whose tokenizer cannot be loaded is "cannot verify");
Hermes' ``schema_version`` and the journal mode are the source's.

FTS5's own check of a table is skipped only where its result follows by construction:
a table copied whole and unchanged from a work copy whose check of it passed; or a
table with its own content whose index is the one FTS5 keeps from the content it
stores itself: copied whole from a passing check, or made in the output by FTS5's
``'rebuild'`` from its content, then changed only by ordinary ``INSERT``/``DELETE`` on
the FTS table, none of them with a value from a damaged row (FTS5's check compares
exactly that index with exactly that content). The latter is held against its base
table instead: the same rowids in both, one ``_docsize`` row per content row; where
that fails, FTS5's full check runs after all.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.recovery.decoding.integrity import IntegrityCheck
from statewarden.recovery.decoding.schema import Schema, read_schema
from statewarden.recovery.decoding.tokenizers import unloadable
from statewarden.recovery.evidence.copies import Feed
from statewarden.recovery.table_scans import orphan_rows
from statewarden.sqlite import (
    hermes_schema_version,
    quote_ident,
    raise_if_interrupted,
    raise_if_machine,
    read_header,
)

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
    # FTS tables whose index is the source's (its check passed) or FTS5's 'rebuild' of
    # the content the output stores, kept by FTS5 itself through ordinary INSERT/DELETE
    # of rows that read clean, and whose rowids are their base table's: FTS5's check is
    # not run again.
    fts_checked_by_construction: list[str] = field(default_factory=list)

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
    reconciled: Mapping[str, Feed] | None = None,
) -> Verification:
    """Measure ``path`` (closed, ours) and list every way it falls short.

    ``checked_on_source``: FTS tables copied whole from a file whose check of them
    passed and left as they were; their index is not checked again (the b-trees that
    hold it are, and each must still answer a ``MATCH``). ``reconciled``: own-content
    FTS tables copied from a passing check and then changed only by ordinary INSERT
    and DELETE of clean rows, or whose index FTS5's 'rebuild' made from their own
    content in the output (``rebuild.py``), each with its feed: held against their
    base table (:func:`_by_construction`) instead of FTS5's check, unless that fails.

    The connection is read-write only for FTS5's ``integrity-check`` command, an INSERT
    that changes nothing; it is closed before the header is read raw.
    """
    v = Verification()
    conn = apsw.Connection(str(path))
    try:
        # The b-trees and the FTS tables' own checks (most of the time) are checked in
        # threads of their own while the tables are counted (``IntegrityCheck``).
        reconciled = {k: f for k, f in (reconciled or {}).items() if k not in checked_on_source}
        check = IntegrityCheck(conn, skip={*checked_on_source, *reconciled}, background=True)
        v.fts_checked_on_source = sorted(checked_on_source)
        # Whether each reconciled FTS table holds its base table's rows: read while the
        # b-trees are checked, taken below only if they pass.
        agrees: dict[str, bool] = {}
        try:
            schema = read_schema(conn)
            _count_tables(conn, schema, v)
            agrees = {name: _by_construction(conn, feed) for name, feed in reconciled.items()}
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
                if obj.name in reconciled:
                    # Its own check was left out of the integrity check: it is skipped
                    # only when the b-trees passed and the rows agree, else run here.
                    checked = v.integrity == "ok" and agrees.get(obj.name, False)
                    if checked:
                        v.fts_checked_by_construction.append(obj.name)
                else:
                    checked = v.integrity == "ok" or obj.name in checked_on_source
                v.fts[obj.name] = _fts_verdict(conn, obj.name, checked=checked)
                if v.fts[obj.name] != "ok":
                    v.problems.append(f"{obj.name}: {v.fts[obj.name]}")
        try:
            v.schema_version = hermes_schema_version(conn)
        except apsw.Error as exc:
            v.problems.append(f"schema_version unreadable: {exc}")
    except apsw.Error as exc:
        raise_if_machine(exc)  # a full disk or an I/O error says nothing of the file: no verdict
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


def _by_construction(conn: apsw.Connection, feed: Feed) -> bool:
    """Does the reconciled FTS table hold exactly its base table's rows (the rowids
    its insert trigger gives them), each with its ``_docsize`` row where it keeps one?
    Its index needs no check of its own then: it is the source's passing one or
    FTS5's 'rebuild' of its content, kept by FTS5 from that content (``verify_output``)."""
    content = quote_ident(f"{feed.fts}_content")
    base = quote_ident(feed.table)
    rid = feed.rowid_expr
    try:
        extra = _count(
            conn,
            f"SELECT count(*) FROM {content} AS c WHERE NOT EXISTS"
            f" (SELECT 1 FROM {base} AS b WHERE ({rid}) = c.id)",
        )
        lacking = _count(
            conn,
            f"SELECT count(*) FROM {base} AS b WHERE NOT EXISTS"
            f" (SELECT 1 FROM {content} AS c WHERE c.id = ({rid}))",
        )
        if extra or lacking:
            return False
        rows = _count(conn, f"SELECT count(*) FROM {content}")
        docsize = f"{feed.fts}_docsize"
        has_docsize = conn.execute(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (docsize,)
        ).fetchone()
        if has_docsize is None:
            return True
        sizes = _count(conn, f"SELECT count(*) FROM {quote_ident(docsize)}")
        joined = _count(
            conn,
            f"SELECT count(*) FROM {content} AS c JOIN {quote_ident(docsize)} AS d ON d.id = c.id",
        )
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_interrupted(exc)
        return False
    return rows == sizes == joined


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
