"""A real Hermes writer, run as a subprocess: ``python lab/hermes_writer.py COMMAND ...``.

Uses the installed hermes-agent's own ``hermes_state.SessionDB`` (0.19.0 in .venv, the
oldest supported release in its own venv; installed ``--no-deps``),
so every byte of the database is written by Hermes code, as in real life. It runs in
its own process because Hermes uses the stdlib ``sqlite3`` and statewarden uses apsw
(docs/safety.md rule 6), and because real writers are other processes.

Commands:
  build --home H --sessions N --messages M --text-bytes B --seed S [--clock EPOCH]
        [--wal-first]
      create a state.db with N sessions (every 7th a ``cron_<job>_<stamp>`` session,
      most with a unique title), M messages spread over them (user / assistant with
      tool calls / tool results), token usage rows and gateway routing entries;
      with --clock, Hermes' ``time.time()`` counts 1 ms per call from EPOCH; with
      --wal-first, Hermes opens an empty file already in WAL mode (and keeps it WAL).
  hold --home H [--write-every SECONDS] [--ofd-guard] [--drop-posix-locks]
      open the database as Hermes does, append one message, print ``ready`` and stay
      open (writing every SECONDS if given) until stdin closes or SIGTERM. With
      --ofd-guard, add open file description locks on SQLite's descriptors as Hermes
      since 0.20 does (``lockguard.py``); with --drop-posix-locks, then open and close
      state.db outside SQLite, which drops the process's POSIX locks (story 7).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import signal
import sys
import threading
import time

WORDS = [
    "the",
    "session",
    "gateway",
    "cron",
    "brief",
    "schedule",
    "memory",
    "agent",
    "sqlite",
    "index",
    "page",
    "checkpoint",
    "writer",
    "reader",
    "telegram",
    "dashboard",
    "container",
    "volume",
    "backup",
    "restore",
    "rotate",
    "token",
    "model",
    "reply",
    "message",
    "tool",
    "call",
    "result",
    "status",
    "device",
    "service",
    "timer",
    "morning",
    "report",
    "weather",
    "calendar",
    "meeting",
    "deploy",
    "review",
    "commit",
    "branch",
    "merge",
    "build",
    "test",
    "release",
    "monitor",
    "alert",
]


def _text(rng: random.Random, n_bytes: int) -> str:
    out: list[str] = []
    size = 0
    while size < n_bytes:
        w = rng.choice(WORDS)
        if rng.random() < 0.05:
            w = f"{w}{rng.randint(0, 99999)}"
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def _open(home: str):  # type: ignore[no-untyped-def]
    os.environ["HERMES_HOME"] = home
    os.makedirs(home, exist_ok=True)
    from hermes_state import SessionDB

    return SessionDB()


def _fixed_clock(start: float) -> None:
    """Make ``time.time()`` a counter (1 ms per call from ``start``), so that a build
    is the same, row for row, every time it runs."""
    calls = iter(range(10**9))
    time.time = lambda: start + next(calls) / 1000


def _wal_first(home: str) -> None:
    """An empty state.db already in WAL mode, for a Hermes that would create DELETE mode
    on a SQLite with the WAL-reset bug (0.22 on SQLite 3.40.1) but keeps a WAL file WAL."""
    import sqlite3

    os.makedirs(home, exist_ok=True)
    conn = sqlite3.connect(os.path.join(home, "state.db"))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()


def build(args: argparse.Namespace) -> None:
    if args.clock is not None:
        _fixed_clock(args.clock)
    rng = random.Random(args.seed)
    if args.wal_first:
        _wal_first(args.home)
    db = _open(args.home)
    base = 1_788_000_000  # 2026-08-29, a fixed start so fixtures are reproducible
    session_ids: list[str] = []
    for i in range(args.sessions):
        stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(base + i * 3607))
        if i % 7 == 3:
            sid = f"cron_{rng.getrandbits(48):012x}_{stamp}"
            source = "cron"
        else:
            sid = f"{stamp}_{rng.getrandbits(24):06x}"
            source = rng.choice(["telegram", "cli", "desktop", "api"])
        try:
            db.create_session(sid, source, model="hermes-4-70b", user_id="u1", cwd="/home/u")
        except TypeError:  # 0.13.0's sessions have no cwd column
            db.create_session(sid, source, model="hermes-4-70b", user_id="u1")
        if i % 5 != 4:
            db.set_session_title(sid, f"{rng.choice(WORDS)} {rng.choice(WORDS)} #{i}")
        db.update_token_counts(
            sid,
            input_tokens=rng.randint(10, 5000),
            output_tokens=rng.randint(10, 2000),
            model="hermes-4-70b",
            api_call_count=1,
        )
        session_ids.append(sid)
    for j in range(args.messages):
        sid = session_ids[j * len(session_ids) // max(args.messages, 1)]
        kind = j % 4
        size = max(16, int(rng.expovariate(1 / args.text_bytes)))
        if kind == 0:
            db.append_message(sid, "user", _text(rng, size))
        elif kind == 1:
            calls = [
                {
                    "id": f"call_{j}",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": json.dumps({"cmd": "ls"})},
                }
            ]
            db.append_message(sid, "assistant", _text(rng, size), tool_calls=calls)
        elif kind == 2:
            db.append_message(
                sid, "tool", _text(rng, size), tool_name="terminal", tool_call_id=f"call_{j - 1}"
            )
        else:
            db.append_message(sid, "assistant", _text(rng, size))
    # 0.13.0's SessionDB has no gateway routing table.
    routing = getattr(db, "save_gateway_routing_entry", None)
    for k in range(min(3, len(session_ids))):
        if routing is not None:
            routing(f"telegram:dm:{1000 + k}", json.dumps({"session_id": session_ids[k]}))
    db.close()
    print(json.dumps({"sessions": len(session_ids), "messages": args.messages}))


def hold(args: argparse.Namespace) -> None:
    # SIGTERM is taken only by the wait between two writes (sigtimedwait), blocked in
    # every thread from the start: a handler setting an Event could run while the loop's
    # own Event.wait held the event's lock and wait for it for ever. The end of stdin
    # sends one.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    db = _open(args.home)
    sid = f"hold_{os.getpid()}"
    db.create_session(sid, "cli")
    db.append_message(sid, "user", "holding the database open")
    db_path = os.path.join(args.home, "state.db")
    if args.ofd_guard:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        lockguard = importlib.import_module("lockguard")  # a sibling: this runs as a script

        if lockguard.arm(db_path) < 2:
            raise SystemExit("hold: the OFD guard found no SQLite descriptor to lock")
        if args.drop_posix_locks:
            lockguard.drop_posix_locks(db_path)

    def wait_stdin() -> None:
        sys.stdin.read()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait_stdin, daemon=True).start()
    print("ready", flush=True)
    n = 0
    while signal.sigtimedwait({signal.SIGTERM}, args.write_every or 3600) is None:
        if args.write_every:
            n += 1
            db.append_message(sid, "assistant", f"tick {n}")
    if args.ofd_guard:
        lockguard.release(db_path)
    db.close()


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--home", required=True)
    b.add_argument("--sessions", type=int, default=10)
    b.add_argument("--messages", type=int, default=40)
    b.add_argument("--text-bytes", type=int, default=200)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--clock", type=float, default=None, help="fixed clock start (epoch s)")
    b.add_argument("--wal-first", action="store_true", help="start from an empty WAL file")
    h = sub.add_parser("hold")
    h.add_argument("--home", required=True)
    h.add_argument("--write-every", type=float, default=0.0)
    h.add_argument("--ofd-guard", action="store_true")
    h.add_argument("--drop-posix-locks", action="store_true")
    args = p.parse_args()
    {"build": build, "hold": hold}[args.cmd](args)


if __name__ == "__main__":
    main()
