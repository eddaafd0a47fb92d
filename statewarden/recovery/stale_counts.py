"""Sessions of a recovered file whose ``message_count`` disagrees with their messages
(``counts_disagree``): each named in the report's ``count_mismatches`` (``stale``: the
row is older than its messages, a lost write; or ``messages missing``) with the count it
held, and each table's stale rows counted; a row listed stale that the output holds
made good is taken off the list.

Every file ``recover`` writes passes ``check`` (docs/safety.md rule 16), and ``check``
holds a count that disagrees with its session's messages for damage: so each such
count is written. A stale count is written true where the output proves it
(``proven``); any other, as the messages the output holds for the session (all of
them: the highest count an intact file can hold), the count the file held kept in the
report. The loss the disagreement showed stays in the report."""

from __future__ import annotations

from pathlib import Path

import apsw

from statewarden.recovery.building.build import TableCopy
from statewarden.recovery.report import Report
from statewarden.recovery.table_scans import counts_disagree
from statewarden.sqlite import json_value, quote_ident


def settle_counts(built: Path, copies: dict[str, TableCopy], report: Report) -> None:
    """Sessions of the output whose message_count disagrees with their messages: a
    row older than its messages (stale: a lost write) or messages missing. A stale
    count whose true value is known is written (``_true_count``); each stale row is
    counted in its table's ``stale``, with the rows older than their index entries."""
    conn = apsw.Connection(str(built))
    try:
        found = counts_disagree(conn)
        # A row found older than its index entries is stale, whatever its count says.
        stale = {s["rowid"] for s in report.stale_rows if s["table"] == "sessions"}
        for rowid, stored, counted in found:
            what = "stale" if stored < counted or rowid in stale else "messages missing"
            proven = None
            if what == "stale" and rowid not in stale:
                proven = _true_count(conn, copies, rowid, counted)
            if proven is None:
                conn.execute(
                    "UPDATE sessions SET message_count = ? WHERE rowid = ?", (counted, rowid)
                )
            report.count_mismatches.append(
                {
                    "table": "sessions",
                    "rowid": rowid,
                    "message_count": stored,
                    "messages": counted,
                    "what": what,
                    "written": counted,
                    "proven": proven is not None,
                }
            )
    finally:
        conn.close()
    for name, tc in copies.items():
        rowids = {s["rowid"] for s in report.stale_rows if s["table"] == name}
        mismatched = [m for m in report.count_mismatches if m["table"] == name]
        rowids |= {m["rowid"] for m in mismatched if m["what"] == "stale"}
        tc.report.stale = len(rowids)


def _true_count(
    conn: apsw.Connection, copies: dict[str, TableCopy], rowid: int, counted: int
) -> int | None:
    """The message_count Hermes wrote for session ``rowid``, written into the output,
    when the output proves it: Hermes counts each message it stores into its session
    in the same transaction, and only a compaction sets the count (to the active
    messages) and only a rewind makes a message inactive (leaving the count). So with
    every message of the table recovered (nothing lost, unreadable, partial or
    contradicting its witnesses) and every message of the session active, the count
    is its messages. None, and nothing written, otherwise."""
    messages = copies.get("messages")
    if messages is None:
        return None
    r = messages.report
    if r.lost or r.unnamed_lost or r.unreadable_ranges or r.partial or r.unverified:
        return None
    cols = {str(c[1]) for c in conn.execute("PRAGMA main.table_info(messages)")}
    active = "coalesce(active, 1) = 1" if "active" in cols else "1"
    sql = (
        f"SELECT sum({active}), count(*) FROM messages NOT INDEXED"
        " WHERE session_id = (SELECT id FROM sessions WHERE rowid = ?)"
    )
    row = conn.execute(sql, (rowid,)).fetchone()
    if row is None or row[0] is None or int(row[0]) != int(row[1]) or int(row[1]) != counted:
        return None
    conn.execute("UPDATE sessions SET message_count = ? WHERE rowid = ?", (counted, rowid))
    return counted


def drop_rows_made_good(built: Path, report: Report) -> None:
    """Take out of ``stale_rows`` each row the output no longer holds stale: the row
    read at that rowid was a garbled cell set aside, and the row now there (carved, or
    from a leaf no tree reaches) agrees with every index entry the diagnosis held it
    against. The report tells the output's truth, not the source's."""
    if not report.stale_rows:
        return
    conn = apsw.Connection(str(built), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        kept = []
        for s in report.stale_rows:
            cols = list(s["columns"])
            sel = ", ".join(quote_ident(c) for c in cols)
            try:
                row = conn.execute(
                    f"SELECT {sel} FROM {quote_ident(s['table'])} WHERE rowid = ?", (s["rowid"],)
                ).fetchone()
            except apsw.SQLError:
                row = None
            agrees = row is not None and all(
                json_value(v) == s["columns"][c]["indexes"] for c, v in zip(cols, row, strict=True)
            )
            if not agrees:
                kept.append(s)
        report.stale_rows = kept
    finally:
        conn.close()
