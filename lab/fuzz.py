"""The standing fuzz lab: random damage to a Hermes database, ground truth by carving.

A seed draws one to three pieces of damage, each one of:

- ``sector``: a zeroed 512-byte sector (512-aligned, anywhere in a page);
- ``block``: a zeroed 4 KiB block at a random 512-aligned offset (across two pages);
- ``scribble``: random bytes (16 to 512 of them) at a random offset of a page;
- ``torn``: one half of a page replaced by the same half of its older image;
- ``reverted``: a whole page replaced by its older image.

Older images come from an earlier copy of the same file: the fixture as Hermes first
wrote it (``built_db``), while the damaged file is that fixture after Hermes appended
more messages to some of its sessions and opened a new one (``later_db``, cached). Half
the damage goes to pages of the ``sessions`` and ``messages`` b-trees, the rest anywhere
but page 1. With ``hot_journal=True`` the damaged file is that copy after Hermes, in rollback mode,
was killed (SIGKILL) in the middle of a large transaction (``lab/hot_journal.py``): new
pages spilled into the file past its header's size, a hot ``-journal`` beside it; the
truth is then carved from the damaged file as SQLite presents it (rolled back by SQLite
in a copy), and the pristine file is the one SQLite presents before the damage.
With ``page1=True`` the seed also destroys page 1 (drawn from its own
stream, so a seed's other damage stays the same): zeroed whole, header included, or its
b-tree zeroed with the header kept, and in half the seeds every ``sqlite_schema`` page
with it; recover must then infer the page size and the schema.

Ground truth by carving, sharing no code with ``statewarden/recovery/``: a row of a
base table counts as *intact* when its exact cell (payload-size and rowid varints,
record and overflow pointer) still lies where it was in the damaged file, and every
page of its overflow chain is unchanged, so its exact record can still be decoded
from the damaged file's bytes. ``check_run`` then holds ``recover`` to its promises:
no intact row dropped, no wrong row written as a good one (a partial or unverified
row names the columns it cannot vouch for), ``loss_detected`` true whenever a row did
not come back as it was and only when the report lists something lost or unproven,
the source unchanged; and ``check``'s class against what ``recover`` proved.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import struct
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

from lab.hermes_fixtures import (
    FUZZ,
    Spec,
    built_db,
    cached_change,
    later_db,
)
from statewarden.demo.damage import PristineFile, schema_roots, varint, write_at
from statewarden.sidecars import JOURNAL_SUFFIX, sidecar

if TYPE_CHECKING:
    from statewarden.recovery.diagnosis import Diagnosis

KINDS = ("sector", "block", "scribble", "torn", "reverted")
SECTOR = 512
BLOCK = 4096
# Base tables whose rows are held to the promises (FTS tables are derived data).
BASE_TABLES = ("sessions", "messages", "session_model_usage", "gateway_routing")


def view_first_db(spec: Spec = FUZZ) -> Path:
    """``later_db(spec)`` with a view whose name puts it first in SQLite's schema hash
    (``corruption.view_first_in_hash``: the integrity check then skips its page
    accounting), cached next to it."""
    from lab.corruption import view_first_in_hash

    return cached_change(later_db(spec), f"{spec.key()}-later-view-first-v1", view_first_in_hash)


def zero_costs_db(spec: Spec = FUZZ) -> Path:
    """``later_db(spec)`` with every ``session_model_usage`` row a local model's (costs
    0.0, no tokens), one of them padded so that ``recover``'s output lays its sixteen
    zero bytes of costs across a 512-byte boundary (``zero_values.zeros_on_a_boundary``),
    cached next to it: zeros a zeroed-sector search must not take for damage."""
    from lab.zero_values import zeros_on_a_boundary

    def change(db: Path) -> None:
        with tempfile.TemporaryDirectory() as trial:
            zeros_on_a_boundary(db, Path(trial))

    return cached_change(later_db(spec), f"{spec.key()}-later-zero-costs-v1", change)


def hot_journal_db(spec: Spec = FUZZ) -> tuple[Path, Path]:
    """``later_db(spec)`` after Hermes, switched to rollback mode, committed 4 messages
    and was killed in the middle of rewriting a session's transcript with 600 (its
    pages spilled past the header's size), cached next to it: the half-written file
    (its hot ``-journal`` beside it) and the file SQLite presents (rolled back)."""
    from lab.hot_journal import kill_mid_transaction, roll_back_copy, spilled_past_header

    def change(db: Path) -> None:
        kill_mid_transaction(db, spec.hermes, committed=4, uncommitted=600, words=20)
        if not spilled_past_header(db):
            raise RuntimeError("the killed transaction spilled no page past the header's size")
        roll_back_copy(db, db.parent / "rolled-back" / "state.db")

    db = cached_change(later_db(spec), f"{spec.key()}-later-hot-journal-v1", change)
    return db, db.parent / "rolled-back" / "state.db"


@dataclass
class Damage:
    kind: str
    offset: int  # byte offset in the file
    length: int
    page: int

    def describe(self) -> str:
        return f"{self.kind} {self.length} bytes at {self.offset} (page {self.page})"


@dataclass
class FuzzCase:
    db: Path
    pristine: Path  # the file before the damage
    older: Path  # the earlier copy the torn and reverted pages come from
    seed: int
    damage: list[Damage] = field(default_factory=list)
    # table -> rowid -> (values of the pristine row, intact in the damaged file?)
    truth: dict[str, dict[int, tuple[tuple[Any, ...], bool]]] = field(default_factory=dict)

    def describe(self) -> str:
        return f"seed {self.seed}: " + "; ".join(d.describe() for d in self.damage)

    def intact(self, table: str) -> set[int]:
        return {r for r, (_, ok) in self.truth.get(table, {}).items() if ok}


def _base_pages(pf: PristineFile, roots: dict[str, int]) -> list[int]:
    out: list[int] = []
    for name in ("sessions", "messages"):
        interior, leaves = pf.tree_pages(roots[name])
        out.extend(interior + leaves)
    return sorted(out)


def fuzz_case(
    dest_dir: Path,
    seed: int,
    spec: Spec = FUZZ,
    *,
    page1: bool = False,
    view_first: bool = False,
    zero_costs: bool = False,
    hot_journal: bool = False,
    bit_flips: bool = False,
) -> FuzzCase:
    """A copy of ``later_db(spec)`` (``view_first_db`` with ``view_first``,
    ``zero_costs_db`` with ``zero_costs``, the half-written file of ``hot_journal_db``
    with its hot journal, with ``hot_journal``) with the damage ``seed`` draws (and
    page 1 destroyed, with ``page1``), and its truth. With ``bit_flips`` the damage is
    one to three single bits flipped on table and index pages (a cell pointer, a record
    header, a varint: damage that leaves every page parsing)."""
    rnd = random.Random(seed)
    source = None
    if zero_costs:
        pristine = zero_costs_db(spec)
    elif hot_journal:
        source, pristine = hot_journal_db(spec)
    else:
        pristine = view_first_db(spec) if view_first else later_db(spec)
    older = built_db(spec)
    dest_dir.mkdir(parents=True, exist_ok=True)
    db = dest_dir / "state.db"
    shutil.copyfile(source or pristine, db)
    if source is not None:
        shutil.copyfile(sidecar(source, JOURNAL_SUFFIX), sidecar(db, JOURNAL_SUFFIX))
    pf = PristineFile(pristine)
    old = PristineFile(older)
    ps = pf.page_size
    pages = len(pf.data) // ps
    base = _base_pages(pf, schema_roots(pristine))
    case = FuzzCase(db=db, pristine=pristine, older=older, seed=seed)
    for _ in range(rnd.randint(1, 3)):
        if bit_flips:
            page = rnd.choice(base)
            offset = (page - 1) * ps + rnd.randrange(0, ps)
            with open(db, "rb") as f:  # the copy's byte (a hot journal's file differs)
                f.seek(offset)
                flipped = bytes([f.read(1)[0] ^ (1 << rnd.randrange(8))])
            write_at(db, offset, flipped)
            case.damage.append(Damage("bitflip", offset, 1, page))
            continue
        kind = rnd.choice(KINDS)
        page = rnd.choice(base) if rnd.random() < 0.5 else rnd.randint(2, pages)
        start = (page - 1) * ps
        if kind == "sector":
            offset, length = start + rnd.randrange(0, ps, SECTOR), SECTOR
            data = bytes(length)
        elif kind == "block":
            offset = start + rnd.randrange(0, ps, SECTOR)
            length = min(BLOCK, len(pf.data) - offset)
            data = bytes(length)
        elif kind == "scribble":
            length = rnd.randint(16, 512)
            offset = start + rnd.randrange(0, ps - length)
            data = rnd.randbytes(length)
        else:
            image = old.page(page) if page <= len(old.data) // ps else bytes(ps)
            if kind == "torn":
                half = rnd.choice((0, ps // 2))
                offset, length, data = start + half, ps // 2, image[half : half + ps // 2]
            else:
                offset, length, data = start, ps, image
        write_at(db, offset, data)
        case.damage.append(Damage(kind, offset, length, page))
    if page1:
        _destroy_page1(case, pf, random.Random(f"page1-{seed}"))
    presented = db
    if source is not None:
        from lab.hot_journal import roll_back_copy

        presented = dest_dir / "rolled-back" / "state.db"
        roll_back_copy(db, presented)
    case.truth = carve_truth(pristine, presented)
    return case


def _destroy_page1(case: FuzzCase, pf: PristineFile, rnd: random.Random) -> None:
    """Zero page 1 (header included, or all but the header) and, half the time, every
    other page of the ``sqlite_schema`` b-tree."""
    ps = pf.page_size
    keep = rnd.choice((0, 100))
    pages = [1]
    if rnd.random() < 0.5:
        interior, leaves = pf.tree_pages(1)
        pages += sorted(set(interior + leaves) - {1})
    for n in pages:
        start = (n - 1) * ps + (keep if n == 1 else 0)
        write_at(case.db, start, bytes((n - 1) * ps + ps - start))
        case.damage.append(Damage("page1" if n == 1 else "schema", start, ps, n))


def _local_size(usable: int, size: int) -> int:
    """Bytes of a table-leaf payload of ``size`` bytes stored in the cell itself."""
    x = usable - 35
    if size <= x:
        return size
    m = ((usable - 12) * 32 // 255) - 23
    k = m + (size - m) % (usable - 4)
    return k if k <= x else m


def carve_truth(
    pristine: Path, damaged: Path
) -> dict[str, dict[int, tuple[tuple[Any, ...], bool]]]:
    """Every row of the base tables in ``pristine`` and whether its exact cell and
    overflow chain are still in ``damaged`` (byte for byte, where they were)."""
    pf = PristineFile(pristine)
    now = damaged.read_bytes()
    ps = pf.page_size
    usable = ps - pf.data[20]
    roots = schema_roots(pristine)
    out: dict[str, dict[int, tuple[tuple[Any, ...], bool]]] = {}
    for table in BASE_TABLES:
        if table not in roots:
            continue
        values = {int(r[0]): tuple(r) for r in _rows(pristine, table)}
        intact: dict[int, bool] = {}
        for leaf in pf.tree_pages(roots[table])[1]:
            pg = pf.page(leaf)
            base = (leaf - 1) * ps
            for off in pf.cell_offsets(leaf):
                size, pos = varint(pg, off)
                rowid, pos = varint(pg, pos)
                local = _local_size(usable, size)
                end = pos + local + (4 if local < size else 0)
                ok = now[base + off : base + end] == pg[off:end]
                if ok and local < size:
                    (nxt,) = struct.unpack(">I", pg[pos + local : pos + local + 4])
                    left = size - local
                    while ok and nxt and left > 0:
                        o = (nxt - 1) * ps
                        used = 4 + min(usable - 4, left)
                        ok = now[o : o + used] == pf.data[o : o + used]
                        left -= usable - 4
                        (nxt,) = struct.unpack(">I", pf.data[o : o + 4])
                intact[rowid] = ok
        out[table] = {r: (v, intact.get(r, False)) for r, v in values.items()}
    return out


def _rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(
        f"file:{path}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        try:
            return [tuple(r) for r in conn.execute(f"SELECT rowid, * FROM {table} ORDER BY rowid")]
        except UnicodeDecodeError:
            # Text that is not UTF-8 (scribbled bytes): read as bytes, shown with U+FFFD.
            cols = [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]
            sel = ", ".join(
                f"CASE WHEN typeof({c}) = 'text' THEN CAST({c} AS BLOB) ELSE {c} END" for c in cols
            )
            out = []
            for r in conn.execute(f"SELECT rowid, {sel} FROM {table} ORDER BY rowid"):
                out.append(
                    tuple(v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in r)
                )
            return out
    finally:
        conn.close()


def bundle_digest(db: Path) -> str:
    """SHA-256 over the database and its sidecars (to prove the source unchanged)."""
    h = hashlib.sha256()
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(f"{db}{suffix}")
        h.update(suffix.encode())
        h.update(p.read_bytes() if p.exists() else b"<absent>")
    return h.hexdigest()


def _same(have: tuple[Any, ...] | None, want: tuple[Any, ...], masked: int | None) -> bool:
    """Is the row ``have`` the row ``want``, but for the column at ``masked`` (a count
    recover wrote: ``count_mismatches``)?"""
    if have is None or masked is None:
        return have == want
    return have[:masked] + have[masked + 1 :] == want[:masked] + want[masked + 1 :]


def violations(case: FuzzCase, report: dict[str, Any], output: Path | None) -> list[str]:
    """What ``recover``'s report and output break of its promises on this case."""
    out: list[str] = []
    # A partial row's unreadable columns, and those it read but could not vouch for.
    partial = {
        (p["table"], p["rowid"]): set(p["columns"]) | set(p.get("unverified", []))
        for p in report.get("partial_rows", [])
    }
    partial.update(
        {(u["table"], u["rowid"]): set(u["columns"]) for u in report.get("unverified_rows", [])}
    )
    others = {(e["table"], e["rowid"]) for e in report.get("from_other_copies", [])}
    # Rows the report names as older than the rows that depend on them (lost writes).
    others |= {
        (e["table"], e["rowid"]) for e in report.get("count_mismatches", []) if e["what"] == "stale"
    }
    others |= {(e["table"], e["rowid"]) for e in report.get("stale_rows", [])}
    # Sessions whose message_count recover wrote as the messages it recovered (so that
    # the output passes check): the same row but for that count.
    recounted = {
        (e["table"], e["rowid"]) for e in report.get("count_mismatches", []) if not e.get("proven")
    }
    lost_any = False
    for table, rows in case.truth.items():
        try:
            got = {int(r[0]): tuple(r) for r in _rows(output, table)} if output else {}
            cols = _columns(output, table) if output else []
        except apsw.SQLError:  # no such table in the output: none of its rows came back
            got, cols = {}, []
        all_back = True
        at = cols.index("message_count") + 1 if "message_count" in cols else None
        masked = {r: at for t, r in recounted if t == table}
        for rowid, (want, ok) in rows.items():
            have = got.get(rowid)
            if not _same(have, want, masked.get(rowid)):
                lost_any, all_back = True, False
                if ok:
                    why = "missing" if have is None else "changed"
                    out.append(f"{table} rowid {rowid}: intact on disk, {why} in the output")
        unnamed = report.get("tables", {}).get(table, {}).get("unnamed_lost")
        if all_back and unnamed:
            out.append(f"{table}: {unnamed} rows counted lost unnamed, but every row came back")
        for rowid, have in got.items():
            want_row = rows.get(rowid)
            if want_row is not None and _same(have, want_row[0], masked.get(rowid)):
                continue
            if (table, rowid) in others:
                continue
            if (table, rowid) in partial and want_row is not None:
                unreadable = partial[(table, rowid)]
                bad = [
                    c
                    for i, c in enumerate(cols)
                    if c not in unreadable and have[i + 1] != want_row[0][i + 1]
                ]
                if not bad:
                    continue
                out.append(f"{table} rowid {rowid}: partial, but {', '.join(bad)} wrong")
                continue
            what = "never existed" if want_row is None else "differs from the row Hermes wrote"
            out.append(f"{table} rowid {rowid}: written as a good row but {what}")
    out.extend(_lost_but_back(case, report, output))
    # Rows the report lists as not proven (partial, unverified, stale, stretches that
    # could not be read) make loss_detected true even when they happen to be right.
    tables = report.get("tables", {}).values()
    listed = bool(
        report.get("partial_rows")
        or report.get("unverified_rows")
        or report.get("count_mismatches")
        or report.get("stale_rows")
        or report.get("given_out")
        or report.get("schema_rows_lost")
        or report.get("tables_lost")
        or any(
            t.get("unverified") or t.get("unreadable_ranges") or t.get("unnamed_lost")
            for t in tables
        )
    )
    if report.get("loss_detected") is not None and (
        (lost_any and not report["loss_detected"])
        or (report["loss_detected"] and not lost_any and not listed)
    ):
        out.append(
            f"loss_detected is {report.get('loss_detected')} but rows were"
            f" {'lost' if lost_any else 'all recovered, none listed as unproven'}"
        )
    return out


def _lost_but_back(case: FuzzCase, report: dict[str, Any], output: Path | None) -> list[str]:
    """Keys a table's report counts lost although the output holds that row as Hermes
    wrote it (the loss over-reported), by the rowid or the primary key."""
    out: list[str] = []
    for table, rows in case.truth.items():
        lost = report.get("tables", {}).get(table, {}).get("lost_keys", [])
        if not lost or output is None:
            continue
        try:
            got = {int(r[0]): tuple(r) for r in _rows(output, table)}
            pk = _primary_key(output, table)
        except apsw.SQLError:
            continue
        back = {r for r, (want, _ok) in rows.items() if got.get(r) == want}
        keys = {tuple(rows[r][0][i + 1] for i in pk): r for r in rows} if pk else {}
        for key in lost:
            rowid = keys.get(tuple(key) if isinstance(key, list) else (key,)) if pk else key
            if rowid not in rows:
                out.append(f"{table}: key {key} counted lost, but no such row existed")
            elif rowid in back:
                out.append(f"{table}: key {key} counted lost, but its row came back as it was")
    return out


def _primary_key(path: Path, table: str) -> list[int]:
    """Positions of the table's declared primary key columns (none: the rowid)."""
    conn = apsw.Connection(
        f"file:{path}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        info = list(conn.execute(f"PRAGMA table_info({table})"))
    finally:
        conn.close()
    keyed = sorted((int(r[5]), i) for i, r in enumerate(info) if int(r[5]) > 0)
    if len(keyed) == 1 and str(info[keyed[0][1]][2]).upper() == "INTEGER":
        return []  # an alias of the rowid
    return [i for _n, i in keyed]


def _columns(path: Path, table: str) -> list[str]:
    conn = apsw.Connection(
        f"file:{path}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        return [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def class_violations(case: FuzzCase, report: dict[str, Any], work: Path) -> list[str]:
    """``check``'s class against what ``recover`` proved: a row of a base table
    damaged on disk is base damage (SQLite, and so Hermes, reads it wrong or not at
    all); a file every row of which came back untouched (nothing lost, restored,
    partial or stale) is not."""
    from statewarden.recovery.check import check_database
    from statewarden.recovery.fts_checks import CHECK_CUT_SHORT

    diag = check_database(case.db, work)
    damage = diag.damage
    # A check that a read error ended with no object named cannot tell what it did
    # not reach: calling that base damage is the careful answer, not a wrong one.
    cut_short = any(ln.strip() == CHECK_CUT_SHORT for ln in diag.error_lines)
    damaged_rows = any(not ok for rows in case.truth.values() for _, ok in rows.values())
    if damaged_rows and damage not in ("base", "unreadable"):
        return [f"check says {damage} though rows of base tables are damaged on disk"]
    touched = (
        report.get("loss_detected")
        or report.get("restored_from_copies")
        or report.get("partial_rows")
        or report.get("count_mismatches")
        or report.get("schema_rows_lost")
        or any(t.get("recovered_from_pages") for t in report.get("tables", {}).values())
    )
    # "unreadable" is always true to SQLite when it is said: the schema or header is
    # what it cannot read, whatever recover makes of the file.
    if not damaged_rows and not touched and damage == "base" and not cut_short:
        return [f"check says {damage} though recover brought every row back as it was"]
    return []


def output_check_violations(output: Path, work: Path, report: dict[str, Any]) -> list[str]:
    """``check`` of a file ``recover`` wrote (the code ``statewardenctl check`` runs, on
    a work copy under ``work``): every such file passes it. With nothing lost it is
    clean (damage none); where the report lists rows lost or unproven, check may name
    what follows from them and nothing else (``_unexplained``)."""
    from statewarden.recovery.check import check_database

    diag = check_database(output, work)
    if diag.damage == "none":
        return []
    if not report.get("loss_detected"):
        why = "; ".join(diag.findings()[:2])
        return [f"check of the output says {diag.damage} though nothing was lost: {why}"]
    if found := _unexplained(diag, report):
        return [f"check of the output says {diag.damage}: {'; '.join(found[:2])}"]
    return []


def _unexplained(diag: Diagnosis, report: dict[str, Any]) -> list[str]:
    """What check says of a recovered file that the report's loss does not explain.

    A file with rows lost keeps what follows from them: messages whose session was lost or whose session id could not be read (the
    report's ``orphans``, measured on the same file), the search-index copies of a
    message lost (its rowid lost) or written partial (listed partial or unverified).
    Anything else check finds is the output's own damage."""
    unproven: dict[str, set[int]] = {}
    for entry in report.get("partial_rows", []) + report.get("unverified_rows", []):
        unproven.setdefault(entry["table"], set()).add(int(entry["rowid"]))
    tables = report.get("tables", {})

    def lost(table: str, rowid: int) -> bool:
        t = tables.get(table, {})
        return rowid in set(t.get("lost_keys", [])) or any(
            lo <= rowid <= hi for lo, hi in t.get("unreadable_ranges", [])
        )

    def some_lost(table: str) -> bool:
        t = tables.get(table, {})
        return bool(
            report.get("lost", {}).get(table) or t.get("unreadable_ranges") or table in unproven
        ) or table in report.get("tables_lost", [])

    # A row whose parent was lost, or whose parent key was unreadable (partial: the
    # column holds a placeholder), has no parent in the output.
    rest = replace(
        diag,
        # (recover writes each count that disagrees: none is left in its output)
        orphans={
            t: n
            for t, n in diag.orphans.items()
            if report.get("orphans", {}).get(t) != n
            or not (some_lost("sessions") or n <= len(unproven.get(t, ())))
        },
        tables=[
            replace(t, missing_rows=[r for r in t.missing_rows if not lost(t.name, r)])
            for t in diag.tables
        ],
        copies=[
            replace(
                c,
                rows_rotted=[
                    r
                    for r in c.rows_rotted
                    if r not in unproven.get(c.table, set()) and not lost(c.table, r)
                ],
                copies_rotted={
                    fts: kept
                    for fts, rowids in c.copies_rotted.items()
                    if (
                        kept := [
                            r
                            for r in rowids
                            if r not in unproven.get(c.table, set()) and not lost(c.table, r)
                        ]
                    )
                },
            )
            for c in diag.copies
        ],
    )
    return rest.findings()


def run_seed(
    work: Path,
    seed: int,
    spec: Spec = FUZZ,
    *,
    page1: bool = False,
    view_first: bool = False,
    zero_costs: bool = False,
    hot_journal: bool = False,
    bit_flips: bool = False,
) -> tuple[FuzzCase, list[str]]:
    """Damage a copy by ``seed`` (page 1 too, with ``page1``; of ``view_first_db`` with
    ``view_first``, of ``zero_costs_db`` with ``zero_costs``, of the half-written file
    of ``hot_journal_db`` with ``hot_journal``), run ``recover`` on it, return the case
    and what broke."""
    from statewarden.errors import StatewardenError
    from statewarden.recovery.recover import recover

    case = fuzz_case(
        work / "db",
        seed,
        spec,
        page1=page1,
        view_first=view_first,
        zero_costs=zero_costs,
        hot_journal=hot_journal,
        bit_flips=bit_flips,
    )
    before = bundle_digest(case.db)
    output = work / "out" / "recovered.db"
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        rep = recover(case.db, output).to_json()
    except StatewardenError as exc:
        return case, [f"recover failed: {exc}"]
    found = violations(case, rep, output if output.exists() else None)
    if output.exists():
        found.extend(output_check_violations(output, work, rep))
    else:
        found.append("recover left no verified output")
    found.extend(class_violations(case, rep, work))
    if bundle_digest(case.db) != before:
        found.append("the source bundle changed")
    return case, found


# Seeds whose damage found a distinct way to break a promise, named for what they do.
# Each broke a promise before the fix its name records; tests/recovery/test_fuzz.py keeps
# them (and a fixed run of seeds) holding.
FINDINGS: dict[str, int] = {
    # A zeroed 4 KiB block ends inside a message's record: it was written out with NUL
    # bytes for text and a timestamp of 0.0 as a good row.
    "zeroed_block_in_a_record": 137,
    # A zeroed sector later partly written over: the zeros left in the record still
    # mark it (they are no longer a whole sector).
    "partly_rewritten_zeroed_sector": 94,
    # A sessions row's title ends in zeros that run on into the next (zeroed) cell.
    "zeros_past_a_records_end": 173,
    # integrity_check stopped at "database disk image is malformed" before the FTS
    # checks ran; a damaged trigram index was copied, the output failed verification
    # and no output was left (every session "dropped").
    "fts_check_cut_short": 142,
    # Random bytes over a message's text: kept with U+FFFD as a good row; now the text
    # comes back from its two agreeing FTS copies.
    "scribbled_text": 111,
    # Random bytes over a message's role and text: the role is unreadable (not UTF-8),
    # the text is restored from the copies.
    "scribbled_role_and_text": 65,
    # Random bytes over a timestamp only: another real, as a good row; the two intact
    # indexes that hold the timestamp agree on the real one.
    "scribbled_real": 113,
    # Random bytes over a record header: the columns that still read are named
    # unverified in the partial row, not passed off as read.
    "scribbled_record_header": 296,
    # A sessions page back to an older image (a lost write): stale sessions were
    # written as good rows; their message_count disagrees with their messages.
    "reverted_sessions_page": 166,
    # Half a sessions page from an older image (torn): the same, for two sessions.
    "torn_sessions_page": 314,
    # The header of the only sessions page (a root leaf) zeroed: every session was
    # dropped; the root is carved too now.
    "zeroed_root_leaf_header": 364,
    # A garbled cell on a sessions leaf whose pointers still read: the scan stopped
    # there and 20 sessions were dropped; the leaf is read by its pointers.
    "garbled_cell_on_a_parsing_leaf": 393,
    # A garbled payload size of about 2**40 made the overflow search run for 40 s, and
    # a garbled cell was written out as session 68776995.
    "garbled_payload_size": 300,
    # A garbled cell read as rowid 2084 in order between garbage: the scan jumped past
    # every later message (31 dropped).
    "garbled_rowid_moves_the_scan": 554,
    # A garbled cell decoded as rowid 21, a real message's, before that message's own
    # cell: the scan stepped over the rowid, not the cell, and the intact message was
    # dropped (the garbled one set aside).
    "garbled_cell_with_a_real_rowid": 7035,
    # The messages root torn (half of it an older image, which no longer names the last
    # leaf) and the first 512 bytes of that leaf zeroed with its header: the leaf was no
    # orphan leaf (no leaf type) and no damaged leaf (no tree reaches it); 22 intact
    # messages dropped. A page nothing reaches whose header is destroyed is carved whole.
    "headerless_leaf_no_tree_reaches": 7068,
    # Random bytes over the only sessions page's cell pointers: one pointer landed on
    # a garbled cell read as rowid 17 (set aside: NULL where Hermes allows none), and
    # the real session 17, carved from the page, was skipped as a rowid already read.
    "garbled_cell_under_a_carved_rows_rowid": 7175,
    # Random bytes over a message's text while both FTS content tables are damaged
    # (no vote): check called it derived and recover bulk-copied the changed text.
    "bad_text_while_the_copies_cannot_vote": 1149,
    # Random bytes over the first messages leaf: a garbled cell read as rowid 246, a
    # rowid that exists, sent the scan past 111 intact messages.
    "garbled_cell_reads_as_a_real_rowid": 1466,
    # An FTS content page back to an older image names rowid 1924145348609: reported
    # as a lost message that never existed.
    "fts_copy_names_a_rowid_past_the_sequence": 605,
    # A zeroed 4 KiB block over the trigram index's config root (its header kept) and its
    # first data leaf: the "Fragmentation ... on page 45" line, no tree named, could not
    # be attributed (SQLite's dbstat fails on the damaged file) and check said base. A
    # page line naming a root page is that root's b-tree's; dbstat walks tree by tree.
    "page_line_on_a_derived_root": 7141,
    # The header of the sqlite_sequence page zeroed: check said base, though the table
    # holds only AUTOINCREMENT's counters, which recover sets from the rows. Derived.
    "zeroed_sequence_header": 7189,
    # A zeroed block over gateway_routing's unique index and the header of the (empty)
    # compression_locks root: "no row can be read" was base, though its two intact
    # indexes list no row (as recover said); and the index root's "Fragmentation" line
    # went to compression_locks, the tree named before it.
    "unreadable_table_its_indexes_list_empty": 7637,
    # A message's record scribbled (its columns do not read) while a trigram content
    # page is malformed: the comparison with the FTS copies failed as a whole and its
    # fallback read stopped at the same row: check said derived. The rows are now read
    # past damage, and a row whose columns do not read is base damage.
    "unreadable_row_while_a_copy_is_malformed": 7297,
}

# The same, for seeds run with single bits flipped (``run_seed(..., bit_flips=True)``);
# tests/recovery/test_record_types.py keeps them holding.
BIT_FLIP_FINDINGS: dict[str, int] = {
    # A bit of a message's text flipped ('checkpoint' read as 'checkpoi~t') while another
    # flip made the table fail a read: the diagnosis could not compare the table with its
    # FTS copies, and the changed text was written out as good. Now the output's rows
    # are held against the copies (``copy_vote.py``) and the text comes back from them.
    "changed_text_beside_a_read_error": 6,
    # The same for 'test' read as 'dest' and 'gateway' as 'eateway'.
    "two_changed_texts_beside_a_read_error": 48,
    # A record header's serial type 8 (the integer 0) read as 12 (an empty blob): the
    # file checked clean and ``compacted`` came back as b'' in a good row. Hermes never
    # writes a blob in an INTEGER column (``column_types.py``): the row is partial.
    "integer_read_as_an_empty_blob": 52,
    # A session's id changed on disk and restored from its two agreeing indexes: the
    # changed id, a key that never existed, was counted a lost session.
    "changed_key_restored_counted_lost": 25,
}
# Seeds whose violation no witness can show (kept here so that a change that makes them
# provable is noticed): a flipped bit leaves valid UTF-8 in a column no index or FTS copy
# holds and whose values Hermes does not restrict. Seed 3: 'user' read as 'useR' in
# ``role`` (Hermes stores whatever role it is given); seed 11: ``tool_call_id``
# 'call_249' read as 'cahl_249'. SQLite's ``.recover`` writes both rows the same way.
BIT_FLIP_UNPROVABLE: dict[str, int] = {"role_letter_case": 3, "tool_call_id_letter": 11}

# The same, for seeds run with page 1 destroyed (``run_seed(..., page1=True)``);
# tests/recovery/test_page1.py keeps them holding.
PAGE1_FINDINGS: dict[str, int] = {
    # A zeroed 4 KiB block over the first 1024 bytes of a messages leaf (header, cell
    # pointers, two cells), page 1 and the schema pages zeroed: the leaf's ten intact
    # cells were carved but dropped, since the new indexes of the rebuilt schema could
    # not list them; the old indexes' pages left in the file do.
    "leaf_start_zeroed_with_the_schema": 22,
    # The same over 1536 bytes of a messages leaf, with a zeroed sector and random bytes
    # on other pages: eight intact messages dropped.
    "leaf_start_zeroed_among_other_damage": 58,
    # A zeroed sector at the start of a messages leaf (header, cell pointers, two cells)
    # and random bytes on another page: nine intact messages dropped.
    "leaf_sector_zeroed_with_the_schema": 96,
    # Half a messages interior page from an older image, page 1 whole and the schema
    # zeroed: the newer leaves no tree reaches were not taken (the freelist is unknown
    # and the rebuilt schema's indexes could not list them); 22 messages dropped.
    "older_interior_half_with_the_schema": 186,
    # A zeroed sector inside a message's record, page 1 and the schema zeroed: its
    # session_id, read with the zeros, was "restored" from the rebuilt schema's indexes,
    # which were filled from that same record, and passed off as read.
    "zeroed_session_id_restored_from_itself": 143,
    # The same on another leaf, with the header kept.
    "zeroed_session_id_with_the_header_kept": 167,
    # The same for a session's title: a zeroed block and sector, random bytes elsewhere.
    "zeroed_title_restored_from_itself": 188,
    # The same after a torn and reverted page elsewhere.
    "zeroed_session_id_among_older_pages": 193,
    # A zeroed block over the only sessions page, page 1 and the schema zeroed: no
    # layout was taken without sessions (exit 4, nothing recovered); now the layout is
    # taken from messages and the other tables and all rows of sessions are a loss.
    "zeroed_sessions_page": 289,
    # The header of the only sessions page zeroed (``FINDINGS["zeroed_root_leaf_header"]``
    # with page 1 and the schema zeroed): no layout was taken; now the page is found by
    # its cells and carved as the sessions root.
    "zeroed_sessions_root_header": 364,
    # Random bytes over a message's timestamp only, page 1 and the schema zeroed: the
    # rebuilt indexes repeat the changed row, and it was written out as good; now the
    # two old indexes that hold the timestamp, their pages left in the file, restore it.
    "scribbled_real_with_the_schema": 113,
    # A sector zeroed over two messages' cell starts, page 1 and the schema zeroed (so no
    # index or FTS copy names them): both cells read as rowid 0, and rowid 0, a key
    # that never existed, was counted a lost message (the two lost were not). Now they
    # count as lost unnamed (``unnamed_lost``).
    "zeroed_cell_starts_read_as_rowid_0": 27,
    # A torn messages leaf whose garbled cells read as rowids far above every message,
    # page 1 and the schema zeroed (no index to list the rows): the second garbled
    # rowid, above the one next to it, was taken as in order and the scan jumped past
    # the 162 intact messages after it. A rowid is in order now only below every cell
    # after it that reads (``scan.LOOK_AHEAD`` of them).
    "garbled_rowids_past_every_message": 7008,
    # The messages root scribbled, page 1 and the schema zeroed: a garbled cell read as
    # rowid 32344945896, only two of its columns readable, was written out as a partial
    # message (empty session and text) and raised the table's AUTOINCREMENT sequence to
    # it. A row with columns that do not read, above the sequence SQLite kept, listed by
    # no witness, is a garbled cell: set aside.
    "garbled_cell_above_the_sequence": 7542,
}

# The same, for seeds run on a copy whose schema hash starts with a view
# (``run_seed(..., view_first=True)``: SQLite's check then skips its page accounting);
# tests/recovery/test_fuzz.py keeps them holding.
VIEW_FIRST_FINDINGS: dict[str, int] = {
    # An older image of the messages root (whole, or half of it): it no longer names
    # the newest leaf, and the check's silence on unused pages was taken for "none":
    # the leaf was never looked for, its messages dropped.
    "older_messages_root": 145,
    "older_half_messages_root": 213,
    "older_half_root_among_other_damage": 157,
    "older_half_root_with_another_torn_page": 186,
    # A zeroed sqlite_schema leaf: no known layout held the view, so the tables the leaf
    # named (gateway_routing and three more) were not brought back, their rows dropped.
    "schema_leaf_beside_a_view": 200,
}


def main(argv: list[str] | None = None) -> int:
    """A short run of the lab from the command line (the long one, timed against
    ``sqlite3 .dump``, is ``bench/fuzz_recover.py``): each seed with a violation is
    printed with its damage; exit 1 if any seed broke a promise."""
    p = argparse.ArgumentParser(
        prog="lab/fuzz.py", description="recover and check against random damage, seed by seed"
    )
    p.add_argument("--seeds", type=int, default=30)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--page1", action="store_true", help="destroy page 1 on every seed too")
    p.add_argument(
        "--view-first", action="store_true", help="a copy whose schema hash starts with a view"
    )
    p.add_argument("--zero-costs", action="store_true", help="a copy whose usage rows cost 0.0")
    p.add_argument(
        "--hot-journal",
        action="store_true",
        help="damage the file Hermes left half-written when killed mid-transaction in"
        " rollback mode, its hot -journal beside it",
    )
    p.add_argument(
        "--bit-flips",
        action="store_true",
        help="one to three single bits flipped on table and index pages instead",
    )
    args = p.parse_args(argv)
    broken = 0
    for seed in range(args.first, args.first + args.seeds):
        with tempfile.TemporaryDirectory() as d:
            case, found = run_seed(
                Path(d),
                seed,
                page1=args.page1,
                view_first=args.view_first,
                zero_costs=args.zero_costs,
                hot_journal=args.hot_journal,
                bit_flips=args.bit_flips,
            )
        if found:
            broken += 1
            print(f"{case.describe()}: {'; '.join(found[:3])}")
    print(f"{args.seeds} seeds run, {broken} with a violation")
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
