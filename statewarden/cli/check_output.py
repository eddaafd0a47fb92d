"""The text and JSON of ``statewardenctl check``, and the check itself; no click needed.

The click command (:mod:`statewarden.cli.check_cmd`) and the quick entry point
(:mod:`statewarden.cli.quick`) both run :func:`report_check`, so they print the same.
"""

from __future__ import annotations

import json
import os

from statewarden.cli._plain import printable, select_targets, write_line
from statewarden.cli._progress import progress_reporter
from statewarden.errors import UsageError, path_error
from statewarden.json_output import json_document

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from statewarden.recovery import Diagnosis

VERDICTS = {
    "none": "healthy",
    "derived": "derived damage only (indexes, FTS, or a b-tree whose every row still"
    " reads): a lossless rebuild exists",
    "base": "base damage: a table that holds data is damaged; rows may be lost",
    "unreadable": "unreadable: SQLite cannot open it as it is (header, schema or page 1)",
}


def render(d: Diagnosis, max_errors: int | None) -> None:
    _line(f"{d.path}")
    if d.integrity_ok:
        _line("  integrity check: ok")
    else:
        state = "complete" if d.integrity_complete else "stopped early"
        n = d.integrity_errors
        _line(f"  integrity check: {n} error{'s' if n != 1 else ''} (uncapped, {state})")
    for line in d.findings():
        _line(f"  {line}")
    for name, res in d.fts.items():
        if res == "ok":
            _line(f"  {name}: FTS integrity-check ok")
    for name, why in d.unverifiable.items():
        _line(f"  {name}: cannot verify ({why}); not counted as damage")
    if not d.orphans and d.foreign_key_check_complete:
        _line("  foreign keys: no orphan rows")
    if max_errors and d.error_lines:
        _line(f"  first {min(max_errors, len(d.error_lines))} error lines:")
        for line in d.error_lines[:max_errors]:
            _line(f"    {line}")
    _line(f"  damage: {d.damage} ({VERDICTS[d.damage]})")


def work_parent(work_dir: str, option: str = "--work-dir") -> Path:
    """``--work-dir``, made if missing, and tried (a file created and removed) before
    any work: a path that cannot hold the private copy is one line saying why (exit 2).
    A full one passes here: the engine's own room check names it (exit 5)."""
    import errno  # noqa: PLC0415
    import tempfile  # noqa: PLC0415 - see check()
    from pathlib import Path  # noqa: PLC0415

    path = Path(work_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        try:
            os.stat(path)  # a symlink loop, or one to nothing: the real reason
        except OSError as exc:
            raise path_error(path, exc, option=option) from None
        raise UsageError(f"{path}: not a directory ({option})") from None
    except OSError as exc:
        raise path_error(path, exc, option=option) from None
    try:
        fd, name = tempfile.mkstemp(prefix=".statewarden-probe-", dir=path)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return path
        raise path_error(path, exc, option=option) from None
    os.close(fd)
    os.unlink(name)
    return path


def default_work_parent() -> Path:
    """Where the private copy goes without ``--work-dir``: the folder ``$TMPDIR`` (else
    ``$TEMP``, ``$TMP``) names, else /tmp, tried as ``--work-dir`` is. Never another one:
    Python's ``tempfile.gettempdir()`` passes over a folder it cannot write a probe into
    (a full one) for the next candidate, and the whole copy then went to /tmp (or the
    current folder) unasked."""
    for variable in ("TMPDIR", "TEMP", "TMP"):
        folder = os.environ.get(variable, "")
        if folder:
            return work_parent(folder, option=f"${variable}")
    return work_parent("/tmp", option="the default temporary folder")


def report_check(
    config_path: str | None,
    db: str | None,
    profile: str | None,
    *,
    as_json: bool,
    max_errors: int | None,
    work_dir: str | None,
    progress_mode: str,
) -> int:
    """Check each database chosen, print the verdicts; returns the exit code of the worst."""
    if max_errors is not None and max_errors < 0:
        raise UsageError("--max-errors must be 0 or more")
    # The engine only when it runs: `check --help` and a usage error start without it.

    from statewarden.recovery import (  # noqa: PLC0415
        check_database,
        exit_code_for,
        worst,
    )

    targets, note = select_targets(config_path, db, profile)
    if not targets:
        raise UsageError(note or "nothing to check")
    parent = work_parent(work_dir) if work_dir else default_work_parent()
    results = []
    with progress_reporter(progress_mode) as progress:
        for t in targets:
            results.append(check_database(t.db, parent, progress=progress, mapped=True))
    if as_json:
        docs = []
        for r in results:
            doc = r.to_json()
            if max_errors is not None:
                doc["error_lines"] = doc["error_lines"][:max_errors]
            docs.append(doc)
        document = {"databases": docs, "damage": worst(*(r.damage for r in results))}
        write_line(json.dumps(json_document(document), indent=2, default=str))
    else:
        for i, r in enumerate(results):
            if i:
                write_line()
            render(r, max_errors)
    return exit_code_for(worst(*(r.damage for r in results)))


def _line(text: str = "") -> None:
    write_line(printable(text))
