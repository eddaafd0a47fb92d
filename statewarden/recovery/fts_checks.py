"""Each FTS table's verdict in a diagnosis: from the finished integrity check's lines,
from FTS5's own checks on connections of their own, or from FTS5's check run here
(``fts_integrity``); and the verdicts still to come when a diagnosis is handed back
before those checks end (``FtsPending``), joined into it where they are needed."""

from __future__ import annotations

import time

import apsw

from statewarden.progress import ProgressFn
from statewarden.recovery.decoding.integrity import (
    ErrorGroup,
    IntegrityCheck,
    fts_from_integrity_lines,
    group_errors,
)
from statewarden.recovery.decoding.schema import Schema
from statewarden.recovery.diagnosis import Diagnosis, classify, worst
from statewarden.sqlite import quote_ident, raise_if_interrupted

# integrity_check's line when a read error ended it (the virtual tables' checks may
# not have run).
CHECK_CUT_SHORT = "database disk image is malformed"


class FtsPending:
    """FTS5's own checks of a diagnosed file, still running in a child process on
    connections of its own (``diagnose_ahead_of_fts``)."""

    def __init__(self, check: IntegrityCheck, schema: Schema) -> None:
        self._check = check
        self._schema = schema
        self._apart: bool | None = None
        self._joined: bool | None = None
        # Seconds ``join`` waited for the checks (a stage of the diagnosis).
        self.waited_s = 0.0

    def close(self) -> None:
        """Wait for the checks (their verdicts kept for ``join``)."""
        if self._apart is None:
            self._apart = self._check.wait()

    def stop(self) -> None:
        """End the checks whose verdicts are not wanted any more (an error path)."""
        if self._apart is None:
            self._check.stop()
            self._apart = False

    def join(self, diag: Diagnosis) -> bool:
        """Complete ``diag`` with the FTS checks' verdicts, its class with them: the
        diagnosis that waited for them (``diagnose``). False when their outcome is not
        one this can add alone (a check that did not run in the child or stopped, or a
        line that names something other than an FTS table): ``diag`` is then unchanged
        and the file must be diagnosed again (``diagnose``). Called again, it answers
        as the first time."""
        if self._joined is None:
            started = time.monotonic()
            self.close()
            self.waited_s = time.monotonic() - started
            self._joined = bool(self._apart) and _join_verdicts(diag, self._check, self._schema)
        return self._joined


def _join_verdicts(diag: Diagnosis, check: IntegrityCheck, schema: Schema) -> bool:
    """``diag``, made with the b-trees' lines alone and FTS verdicts "ok" for now,
    completed as ``_verdict`` would have made it with the whole check (see
    ``FtsPending.join``)."""
    lines, complete, _ = check.result()
    if complete != diag.integrity_complete:
        return False  # an FTS check stopped: its note and class are the diagnosis's
    before = group_errors(diag.error_lines, schema)
    # ``_attribute_by_page`` renamed some groups in place, in the same order.
    attributed = {g.object: a for g, a in zip(before, diag.groups, strict=True)}
    groups = []
    for g in group_errors(lines, schema):
        old = next((b for b in before if b.object == g.object), None)
        if old is None and g.kind == "fts":
            groups.append(g)
        elif old is not None and (old.kind, old.errors, old.sample) == (g.kind, g.errors, g.sample):
            groups.append(attributed.pop(g.object))
        else:
            return False  # the FTS checks' lines named or changed another b-tree
    if attributed:
        return False  # pragma: no cover - the b-trees' lines are part of the whole check's
    unverifiable = diag.unverifiable
    fts5 = [o.name for o in schema.tables() if o.module == "fts5" and o.name not in unverifiable]
    cut_short = any(ln.strip() == CHECK_CUT_SHORT for ln in lines)
    if complete and not cut_short and not any(g.kind == "unknown" for g in groups):
        fts = fts_from_integrity_lines(lines, schema)
    else:
        own = check.own_verdicts() or {}
        if not all(name in own for name in fts5):
            return False  # ``_fts_verdicts`` would check them on its own connection
        fts = {name: own[name] for name in fts5}
    fts = {name: res for name, res in fts.items() if name not in diag.unverifiable}
    # A verdict of FTS5's own comes before a note of zeroed sectors (``_add_zeroed_cells``).
    diag.fts.update({name: res for name, res in fts.items() if res != "ok"})
    diag.error_lines = lines
    diag.integrity_errors = len(lines)
    diag.integrity_ok = not lines and complete
    diag.groups = groups
    diag.helper_cpu_s = check.helper_cpu_s
    diag.damage = worst(diag.damage, classify(groups, diag.tables, fts, complete=complete))
    return True


def _fts_verdicts(
    conn: apsw.Connection,
    schema: Schema,
    *,
    checked: tuple[list[str], bool],
    groups: list[ErrorGroup],
    check: IntegrityCheck,
    progress: ProgressFn | None,
    unverifiable: dict[str, str],
) -> dict[str, str]:
    """Each FTS table's verdict: from the finished check's lines, else from its own
    check on a connection of its own, else from FTS5's check run here."""
    lines, complete = checked
    fts5 = [o.name for o in schema.tables() if o.module == "fts5" and o.name not in unverifiable]
    own = check.own_verdicts() or {}
    # A line that names no object ("database disk image is malformed") can end the
    # b-tree check; the FTS tables' own checks ran on connections of their own.
    cut_short = any(ln.strip() == CHECK_CUT_SHORT for ln in lines)
    if complete and not cut_short and not any(g.kind == "unknown" for g in groups):
        return _read_through(conn, schema, fts_from_integrity_lines(lines, schema))
    if all(name in own for name in fts5):
        # Their own checks ran on a connection of their own, whatever stopped the rest.
        return _read_through(conn, schema, {name: own[name] for name in fts5})
    return fts_integrity(conn, schema, progress, skip=set(unverifiable))


def _read_through(
    conn: apsw.Connection, schema: Schema, verdicts: dict[str, str]
) -> dict[str, str]:
    """``verdicts``, each external-content FTS5 table that passed also read once through
    itself: ``integrity_check``'s own FTS5 check never reads the content table, and one
    whose content no longer has the columns it names (a column renamed by hand) passed
    it while no search could run (``SELECT`` failed with "no such column")."""
    out = dict(verdicts)
    for obj in schema.tables():
        if obj.module != "fts5" or not obj.fts_content or out.get(obj.name) != "ok":
            continue
        try:
            conn.execute(f"SELECT * FROM {quote_ident(obj.name)} LIMIT 1").fetchall()
        except apsw.Error as exc:
            raise_if_interrupted(exc)
            out[obj.name] = f"its content does not read through it: {str(exc).split(chr(10))[0]}"
        except UnicodeDecodeError:
            pass  # a value that is not UTF-8 reads as an error in Python only
    return out


def fts_integrity(
    conn: apsw.Connection,
    schema: Schema,
    progress: ProgressFn | None = None,
    *,
    skip: set[str] | None = None,
) -> dict[str, str]:
    """FTS5's own ``integrity-check`` per FTS table ("ok" or its error); with
    ``rank = 1`` for an external-content table, so that its index is also compared
    with the content it is built from. Tables in ``skip`` (their tokenizer cannot be
    loaded) are not checked."""
    out: dict[str, str] = {}
    fts_tables = [o for o in schema.tables() if o.module == "fts5" and o.name not in (skip or ())]
    for i, obj in enumerate(fts_tables):
        if progress:
            progress("FTS check", i, len(fts_tables))
        q = quote_ident(obj.name)
        rank = ", 1" if obj.fts_content else ""
        try:
            conn.execute(
                f"INSERT INTO {q}({q}{', rank' if rank else ''}) VALUES('integrity-check'{rank})"
            )
            out[obj.name] = "ok"
        except apsw.Error as exc:
            raise_if_interrupted(exc)
            out[obj.name] = str(exc).split("\n", 1)[0]
    return out
