"""``statewardenctl silence add | list | expire``: mute one kind's notifications a while.

The command writes ``<state_dir>/silences.json`` itself (``statewarden.alerts.silences``),
daemon or not, then tells a running daemon over the control socket to read it at once;
with no daemon running, the daemon reads it at its start. Incidents are recorded as
always: only their notifications are muted, and what is still open is notified when the
silence ends.
"""

from __future__ import annotations

import os
import time
from typing import Any

import click

from statewarden.alerts import SilenceFile, describe, listing
from statewarden.cli._common import (
    TEXT,
    config_option,
    echo_line,
    get_config,
    handle_errors,
    json_option,
    print_json,
)
from statewarden.cli._group import CommandGroup
from statewarden.config import parse_duration, runtime_dir, state_dir
from statewarden.daemon import request, socket_path
from statewarden.errors import DaemonNotRunning, UsageError
from statewarden.kinds import KINDS


def _when(ts: float | None) -> str:
    return "-" if not ts else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _tell_daemon(config_path: str | None) -> dict[str, Any] | None:
    """Have a running daemon read the silences now; its answer, or None with no daemon."""
    config = get_config(config_path)
    try:
        answer: dict[str, Any] = request(socket_path(runtime_dir(config)), "silences")
    except DaemonNotRunning:
        return None
    return answer


@click.group("silence", cls=CommandGroup)
def silence_group() -> None:
    """Mute the notifications of one incident kind for a while (incidents are still kept).

    Example: statewardenctl silence add --kind wal_growth --for 2h --reason "bulk import"
    """


@silence_group.command("add")
@click.option("--kind", "kind", type=TEXT, required=True, help="The incident kind to mute.")
@click.option(
    "--db", "db", type=TEXT, default=None, help="Only this state.db (default: every one)."
)
@click.option("--for", "for_", type=TEXT, required=True, help="How long: 30m, 2h, 1d.")
@click.option("--reason", type=TEXT, required=True, help="Why (shown by silence list and alerts).")
@config_option
@json_option
@handle_errors
def add_cmd(  # noqa: PLR0917 - click passes each option as an argument
    kind: str, db: str | None, for_: str, reason: str, config_path: str | None, as_json: bool
) -> None:
    """Mute notifications of KIND (on one database, or all) for a while.

    Example: statewardenctl silence add --kind wal_growth --for 2h --reason "bulk import"
    """
    kinds = tuple(KINDS)
    if kind not in kinds:
        raise UsageError(f"unknown kind {kind!r} (known kinds: {', '.join(kinds)})")
    seconds = parse_duration(for_)
    if seconds is None:
        raise UsageError(f"bad duration {for_!r} for --for (expected 30m, 2h, 1d, ...)")
    if not reason.strip():
        raise UsageError("--reason must say why")
    where = os.path.abspath(os.path.expanduser(db)) if db else None
    config = get_config(config_path)
    silence = SilenceFile(state_dir(config)).add(kind, where, seconds, reason.strip(), time.time())
    told = _tell_daemon(config_path)
    if as_json:
        print_json({**silence.to_json(time.time()), "daemon_told": told is not None})
        return
    echo_line(f"{describe(silence)} until {_when(silence.ends_at)}: {silence.reason}")
    if told is None:
        click.echo("(daemon not running: it reads the silence when it starts)", err=True)


@silence_group.command("list")
@config_option
@json_option
@handle_errors
def list_cmd(config_path: str | None, as_json: bool) -> None:
    """The silences: active ones first, then those ended in the last 7 days.

    Example: statewardenctl silence list --json
    """
    config = get_config(config_path)
    now = time.time()
    rows = listing(SilenceFile(state_dir(config)).read(), now)
    if as_json:
        print_json({"silences": rows})
        return
    if not rows:
        click.echo("no silences")
    for s in rows:
        until = f"until {_when(s['ends_at'])}" if s["state"] == "active" else "ended"
        where = s["db"] or "every database"
        echo_line(f"#{s['id']:<4} {s['state']:<6} {s['kind']:<22} {where}  {until}: {s['reason']}")


@silence_group.command("expire")
@click.argument("silence_id", type=TEXT, metavar="ID")
@config_option
@json_option
@handle_errors
def expire_cmd(silence_id: str, config_path: str | None, as_json: bool) -> None:
    """End silence ID now; what it muted and is still open is notified.

    Example: statewardenctl silence expire 3
    """
    text = silence_id.removeprefix("#")
    if not text.isdigit():
        raise UsageError(f"bad silence ID {silence_id!r} (a number, as silence list shows)")
    config = get_config(config_path)
    silence = SilenceFile(state_dir(config)).expire(int(text), time.time())
    told = _tell_daemon(config_path)
    if as_json:
        print_json({**silence.to_json(time.time()), "daemon_told": told is not None})
        return
    echo_line(f"{describe(silence)} expired")
    if told is None:
        click.echo("(daemon not running: it reads this when it starts)", err=True)
