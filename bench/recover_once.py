"""One ``recover`` of a file into a fresh folder (removed after), for timing whole
processes A/B: the interpreter that runs it decides which statewarden is timed, so the
same script compares two installs in one run.

    /usr/bin/time -v <other venv>/bin/python bench/recover_once.py DB
    /usr/bin/time -v .venv/bin/python bench/recover_once.py DB   # and again, in turn

Prints the strategy, whether the output verified and the report's phase timings.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from statewarden.recovery.recover import recover


def main() -> None:
    """Recover ``argv[1]`` into a temporary folder and print what the report says."""
    work = Path(tempfile.mkdtemp(prefix="recover-once-"))
    try:
        report = recover(Path(sys.argv[1]), work / "out.db")
        print(report.strategy, report.verified, report.timings)
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
