"""Progress for long commands (check, recover): a bar on a TTY, JSON lines, or nothing.

``--progress auto`` (the default) draws a rich progress bar on stderr when stderr is a
terminal and stays silent otherwise; ``json`` writes one JSON object per event on stderr
(``{"schema_version": 1, "event": "progress", "phase": ..., "done": ..., "total": ...}``),
so stdout keeps only the command's result, also with ``--json``. The bar has no colour
when ``NO_COLOR`` is set (non-empty) or stderr is not a terminal (``--progress bar``).
No click here: ``check`` runs without it (``cli/quick.py``); the option is in ``_common``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from statewarden.cli._plain import write_line
from statewarden.json_output import json_document

TYPE_CHECKING = False
if TYPE_CHECKING:
    from rich.progress import TaskID

    from statewarden.progress import ProgressFn

PROGRESS_CHOICES = ("auto", "bar", "json", "none")
JSON_MIN_INTERVAL_S = 0.5


@contextmanager
def progress_reporter(mode: str) -> Iterator[ProgressFn | None]:
    if mode == "auto":
        mode = "bar" if sys.stderr.isatty() else "none"
    if mode == "none":
        yield None
        return
    if mode == "json":
        last: dict[str, float] = {}
        muted = [False]

        def emit(phase: str, done: int, total: int) -> None:
            now = time.monotonic()
            if muted[0] or (
                total and done < total and now - last.get(phase, 0.0) < JSON_MIN_INTERVAL_S
            ):
                return
            last[phase] = now
            event = {"event": "progress", "phase": phase, "done": done, "total": total}
            try:
                write_line(json.dumps(json_document(event), default=str), err=True)
            except OSError:
                # Progress nobody can read any more (a closed terminal, a full disk under
                # a redirect) never stops the work it reports on: a copy once failed as
                # "no space" in the folder it copied to, which had 61 GB free.
                muted[0] = True

        yield emit
        return
    # rich (and structlog, through logs) only for a bar: --help and --progress none or
    # json start without them.
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    from statewarden.logs import colour_wanted  # noqa: PLC0415

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(stderr=True, no_color=not colour_wanted(sys.stderr)),
        transient=True,
    ) as bar:
        tasks: dict[str, TaskID] = {}

        def draw(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total or None)
            bar.update(tasks[phase], completed=done, total=total or None)

        yield draw
