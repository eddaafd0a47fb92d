"""Write ``statewarden/demo/hermes-state.db.gz`` anew with the real Hermes:
``python -m lab.demo_database`` (needs hermes-agent, as the tests do).

:func:`build_demo_database` is also what ``tests/demo/test_demo.py`` compares the shipped
copy with.
"""

from __future__ import annotations

import gzip
import subprocess
import tempfile
from pathlib import Path

from lab.hermes_fixtures import WRITER, hermes_python, writer_env
from statewarden.demo.database import BUILD, SHIPPED


def build_demo_database(home: Path) -> Path:
    """``home/state.db`` written by Hermes' own SessionDB with the demo's arguments."""
    args = [a for pair in BUILD.items() for a in pair]
    subprocess.run(
        [hermes_python(), str(WRITER), "build", "--home", str(home), *args],
        check=True,
        env=writer_env(home),
        stdout=subprocess.DEVNULL,
    )
    for side in ("-wal", "-shm"):
        if (home / f"state.db{side}").exists():
            raise RuntimeError(f"Hermes left state.db{side} behind after close")
    return home / "state.db"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = build_demo_database(Path(tmp) / "home")
        with open(db, "rb") as src, gzip.GzipFile(SHIPPED, "wb", 9, mtime=0) as out:
            out.write(src.read())
    print(f"wrote {SHIPPED}")


if __name__ == "__main__":
    main()
