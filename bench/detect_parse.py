"""How fast the log tailer and the rules get through a Hermes log: lines per second.

A 100,000-line agent.log in Hermes' format (mostly ordinary INFO lines, 1% WARNING
'database is locked' lines, 0.1% ERROR records with a 5-line traceback saying
'database disk image is malformed', cron session tags) is read from its start by
``LogTailer.poll()`` and every record goes through ``signals_from_log``; then again as
the daemon reads it (256 KiB a poll, each poll's records through one ``SignalBatch``). Printed next
to ``grep -c 'database disk image is malformed'`` on the same file in the same run, the
cheapest thing a user could do instead (it only counts one text; it joins nothing and
decides nothing).

Run: .venv/bin/python -m bench.detect_parse
"""

from __future__ import annotations

import datetime as dt
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench._common import time_it
from lab.hermes_fixtures import log_line
from statewarden.targets import target_for_db
from statewarden.watch.logtail import LogTailer
from statewarden.watch.rules import CronSessions, SignalBatch, signals_from_log

LINES = 100_000
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/opt/hermes/hermes_state.py", line 1402, in append_message\n'
    "    cur.execute(sql, params)\n"
    '  File "/opt/hermes/hermes_state.py", line 388, in _execute_write\n'
    "sqlite3.DatabaseError: database disk image is malformed"
)


def write_log(path: Path) -> int:
    """Write LINES physical lines; return how many records they make."""
    rng = random.Random(5)
    start = dt.datetime(2026, 9, 7, 10, 0, 0)
    written = records = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < LINES:
            when = start + dt.timedelta(milliseconds=37 * written)
            roll = rng.random()
            if roll < 0.001:
                f.write(
                    log_line(
                        when,
                        "ERROR",
                        "gateway.run",
                        "Supervised task flush died: DatabaseError('malformed')",
                    )
                )
                f.write("\n" + TRACEBACK + "\n")
                written += 6
            elif roll < 0.011:
                f.write(
                    log_line(
                        when,
                        "WARNING",
                        "run_agent",
                        "Session DB append_message failed: database is locked",
                        "20260907_100000_a1b2c3",
                    )
                    + "\n"
                )
                written += 1
            else:
                sid = f"cron_job{rng.randrange(50)}_20260907_{rng.randrange(24):02d}0000"
                f.write(
                    log_line(
                        when,
                        "INFO",
                        "agent.loop",
                        f"turn {written}: tool call web_search returned 12 results",
                        sid if roll > 0.9 else None,
                    )
                    + "\n"
                )
                written += 1
            records += 1
    return records


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "home" / "logs"
        logs.mkdir(parents=True)
        log = logs / "agent.log"
        records = write_log(log)
        target = target_for_db(Path(tmp) / "home" / "state.db")
        size_mb = log.stat().st_size / 1e6
        counted: dict[str, int] = {}

        def ours() -> None:
            offsets = Path(tmp) / "offsets.json"
            offsets.unlink(missing_ok=True)
            tailer = LogTailer(logs, offsets, start_at_end=False, idle_flush_s=0.0)
            cron = CronSessions()
            got = tailer.poll()
            while tailer.behind:
                got += tailer.poll()
            got += tailer.flush()
            signals = [s for r in got for s in signals_from_log(r, target, cron=cron)]
            tailer.close()
            counted["records"] = len(got)
            counted["signals"] = len(signals)

        def batched() -> None:
            offsets = Path(tmp) / "offsets.json"
            offsets.unlink(missing_ok=True)
            tailer = LogTailer(
                logs,
                offsets,
                start_at_end=False,
                idle_flush_s=0.0,
                max_poll_bytes=256 << 10,
                save_interval_s=1.0,
            )
            cron = CronSessions()
            found = 0
            while True:
                batch = SignalBatch(target, cron=cron)
                for record in tailer.poll():
                    batch.add(record)
                found += len(batch.signals())
                if not tailer.behind:
                    break
            tailer.close()
            counted["merged"] = found

        ours_s = time_it(ours, repeat=5, warmup=1)
        batched_s = time_it(batched, repeat=5, warmup=1)
        assert counted["records"] == records, (counted, records)
        grep = shutil.which("grep")
        grep_s = None
        if grep:
            cmd = [grep, "-c", "database disk image is malformed", str(log)]
            grep_s = time_it(
                lambda: subprocess.run(cmd, check=False, capture_output=True), repeat=5, warmup=1
            )
        line = (
            f"poll() + signals_from_log on {LINES:,} lines ({size_mb:.1f} MB, {records:,} "
            f"records, {counted['signals']:,} signals/observations): "
            f"{LINES / ours_s:,.0f} lines/s ({ours_s * 1000:.0f} ms)"
        )
        line += (
            f"; in 256 KiB polls with SignalBatch as the daemon reads ({counted['merged']:,} "
            f"merged): {LINES / batched_s:,.0f} lines/s ({batched_s * 1000:.0f} ms)"
        )
        if grep_s is not None:
            line += f"  |  grep -c: {LINES / grep_s:,.0f} lines/s ({grep_s * 1000:.0f} ms)"
        print(line)


if __name__ == "__main__":
    main()
