"""Alert figures: a Hermes log line -> a Telegram request at a local Bot API server.

1. Latency: one critical line at a time (a gateway task that died for good, a new
   incident each time: grouping is off for critical), from the write to agent.log to the
   sendMessage request arriving at the local server; p50 and p99. Lines are written
   ``--gap`` apart (above the 1 s per-chat rate limit, which would otherwise add its wait).
2. A burst of ``--burst`` incidents written at once: every one delivered, none twice,
   the rate limit kept (smallest gap between requests), how long until all were
   delivered, and the daemon's peak RSS (VmHWM).

Run: .venv/bin/python -m bench.alerts [--lines 60] [--gap 1.1] [--burst 1000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench._common import start_daemon
from lab.bot_api import BotApi
from lab.hermes_fixtures import TINY, log_line, make_home

TOKEN = "123456789:AAHbenchTokenNotRealAtAll_abcdefghijk"  # noqa: S105 - a fake one
TASK_RE = re.compile(r"gateway task (\w+) died")


def _line(task: str) -> str:
    msg = (
        f"Supervised task {task} died 5 times in rapid succession (last: RuntimeError('x')); "
        "giving up restarts"
    )
    return log_line(dt.datetime.now(), "ERROR", "gateway.run", msg) + "\n"


def _vm(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * p))]


def tasks_in(api: BotApi) -> list[str]:
    return [m for r in list(api.accepted) for m in TASK_RE.findall(r.text)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=60)
    ap.add_argument("--gap", type=float, default=1.1)
    ap.add_argument("--burst", type=int, default=1000)
    args = ap.parse_args()
    api = BotApi()
    tmp = Path(tempfile.mkdtemp(prefix="statewarden-bench-alerts-"))
    home = make_home(tmp / "hermes", TINY)
    cfg = tmp / "cfg" / "statewarden" / "config.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(
        "alerts:\n"
        "  journald: {enabled: false}\n"
        "  telegram:\n"
        "    enabled: true\n"
        '    chat_id: "1"\n'
        f"    api_base: {api.url}\n"
    )
    daemon = start_daemon(tmp, home, STATEWARDEN_TELEGRAM_TOKEN=TOKEN)
    subprocess.Popen(["cat"], stdin=daemon.stderr, stdout=subprocess.DEVNULL)
    log = home / "logs" / "agent.log"
    log.touch()
    try:
        time.sleep(0.5)
        samples = []
        with open(log, "a") as f:
            for i in range(args.lines):
                seen = len(api.accepted)
                t0 = time.monotonic()
                f.write(_line(f"lat{i}"))
                f.flush()
                while len(api.accepted) == seen:
                    time.sleep(0.0005)
                samples.append(api.accepted[seen].at - t0)
                time.sleep(max(0.0, args.gap - (time.monotonic() - t0)))
        print(
            f"log line -> Telegram request over {args.lines} critical lines: "
            f"p50 {statistics.median(samples) * 1000:.1f} ms, p99 {pct(samples, 0.99) * 1000:.1f} ms"
        )

        first = len(api.requests)
        start = time.monotonic()
        with open(log, "a") as f:
            f.write("".join(_line(f"burst{i}") for i in range(args.burst)))
        peak = 0
        want = {f"burst{i}" for i in range(args.burst)}
        while not want <= set(tasks_in(api)):
            peak = max(peak, _vm(daemon.pid, "VmRSS"))
            time.sleep(0.2)
            if time.monotonic() - start > 3600:
                raise SystemExit("burst not delivered within an hour")
        took = time.monotonic() - start
        time.sleep(2.0)  # anything sent twice would arrive now
        got = [t for t in tasks_in(api) if t.startswith("burst")]
        reqs = api.requests[first:]
        gaps = [b.at - a.at for a, b in itertools.pairwise(reqs)]
        print(
            f"burst of {args.burst} incidents: {len(set(got))} delivered, "
            f"{len(got) - len(set(got))} twice, in {len(reqs)} messages over {took:.1f} s; "
            f"smallest gap between requests {min(gaps) if gaps else 0:.3f} s (limit 1 s/chat); "
            f"daemon RSS peak {max(peak, _vm(daemon.pid, 'VmHWM')) / 2**20:.0f} MiB"
        )
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        api.stop()


if __name__ == "__main__":
    main()
