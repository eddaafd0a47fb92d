"""The demo's Hermes database, shipped in the package: ``hermes-state.db.gz``.

Hermes is not installed where ``statewardenctl demo`` runs, so the database it damages
was written beforehand by Hermes' own ``hermes_state.SessionDB`` (hermes-agent
``HERMES_VERSION``) through ``lab/hermes_writer.py build`` with the arguments in
``BUILD``, its clock fixed so that every build is the same row for row; then gzipped.
``tests/demo/test_demo.py`` builds it again with the real Hermes and checks that the shipped
copy holds the same schema and the same rows. ``python -m lab.demo_database`` writes
it anew.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

SHIPPED = Path(__file__).resolve().parent / "hermes-state.db.gz"
HERMES_VERSION = "0.19.0"
# lab/hermes_writer.py build arguments: 40 sessions (every 7th a cron session), 700
# messages, ~80 bytes of text each; Hermes' time.time() counts from 2026-08-29.
BUILD: dict[str, str] = {
    "--sessions": "40",
    "--messages": "700",
    "--text-bytes": "80",
    "--seed": "12",
    "--clock": "1788000000",
}


def write_database(dest: Path) -> Path:
    """Unpack the shipped database to ``dest`` (a new file, mode 0644) and return it."""
    tmp = dest.with_name(f".{dest.name}.unpacking")
    with gzip.open(SHIPPED, "rb") as src, open(tmp, "xb") as out:
        shutil.copyfileobj(src, out)
        out.flush()
        os.fsync(out.fileno())
    tmp.chmod(0o644)
    tmp.rename(dest)
    return dest
