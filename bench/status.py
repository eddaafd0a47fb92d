"""How long `statewardenctl status` takes, on a tiny and on the ~250 MB Hermes database.

Status reads the header and three pragmas, never a table, so its time should not grow
with the database. Printed next to the same facts asked of the sqlite3 shell
(`sqlite3 -readonly db 'PRAGMA page_count; PRAGMA freelist_count; PRAGMA journal_mode'`),
which is what a user would otherwise run, in the same run.

Run: .venv/bin/python -m bench.status   (builds the large fixture once, ~1 min, cached)
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._common import figure, time_it
from lab.hermes_fixtures import LARGE, TINY, built_db
from statewarden.targets import target_for_db
from statewarden.watch.status import database_status


def main() -> None:
    sqlite3_cli = shutil.which("sqlite3")
    with tempfile.TemporaryDirectory() as tmp:
        for label, spec in (("tiny", TINY), ("large", LARGE)):
            src = built_db(spec)
            home = Path(tmp) / label
            home.mkdir()
            db = home / "state.db"
            shutil.copyfile(src, db)
            size_mb = os.path.getsize(db) / 1e6
            target = target_for_db(db)
            ours = time_it(functools.partial(database_status, target), repeat=30)
            other = None
            if sqlite3_cli:
                cmd = [
                    sqlite3_cli,
                    "-readonly",
                    str(db),
                    "PRAGMA page_count; PRAGMA freelist_count; PRAGMA journal_mode;",
                ]
                other = time_it(
                    functools.partial(subprocess.run, cmd, check=True, capture_output=True),
                    repeat=30,
                )
            print(
                figure(
                    f"status on {label} ({size_mb:.0f} MB, in-process)",
                    ours,
                    versus="sqlite3 shell, same pragmas",
                    other_s=other,
                )
            )
            cli = [
                str(Path(sys.executable).parent / "statewardenctl"),
                "status",
                "--db",
                str(db),
                "--json",
            ]
            whole = time_it(
                functools.partial(subprocess.run, cli, check=True, capture_output=True), repeat=10
            )
            print(
                figure(
                    f"statewardenctl status on {label} (whole command, incl. Python start-up)",
                    whole,
                )
            )


if __name__ == "__main__":
    main()
