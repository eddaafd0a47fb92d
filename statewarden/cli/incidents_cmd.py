"""``statewardenctl incidents``: list, show (with the evidence timeline) and acknowledge.

Asks the running daemon over the control socket; with no daemon, reads the incident
book and timeline from the state directory (and says so).
"""

from __future__ import annotations

import time
from typing import Any

import click

from statewarden.alerts import saved_states
from statewarden.cli._common import (
    config_option,
    get_config,
    handle_errors,
    json_option,
    print_json,
)
from statewarden.cli._group import CommandGroup
from statewarden.config import Config, runtime_dir, state_dir
from statewarden.daemon import request, socket_path
from statewarden.errors import DaemonNotRunning
from statewarden.incidents import IncidentBook, Timeline, show_incident


def _ask(config: Config, cmd: str, **args: Any) -> tuple[Any, str]:
    """The daemon's answer, or the same computed from the state directory."""
    try:
        return request(socket_path(runtime_dir(config)), cmd, **args), "daemon"
    except DaemonNotRunning:
        pass
    sdir = state_dir(config)
    book = IncidentBook(sdir / "incidents.json")
    if cmd == "incidents":
        states = saved_states(sdir)
        return [
            {**i.to_json(), "notification": states.get(i.id, {"state": "not notified"})}
            for i in book.listing(include_resolved=bool(args.get("all")))
        ], "local"
    if cmd == "ack":
        return book.ack(int(args["id"])).to_json(), "local"
    return show_incident(book, Timeline(sdir / "timeline"), int(args["id"])), "local"


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _note(source: str) -> None:
    if source == "local":
        click.echo("(daemon not running: read from the state directory)", err=True)


@click.group("incidents", cls=CommandGroup, invoke_without_command=True)
@config_option
@click.option("--all", "show_all", is_flag=True, help="Include resolved incidents.")
@json_option
@click.pass_context
@handle_errors
def incidents_group(
    ctx: click.Context, config_path: str | None, show_all: bool, as_json: bool
) -> None:
    """List open incidents (newest problems first by severity).

    Example: statewardenctl incidents --all --json
    """
    if ctx.invoked_subcommand is not None:
        return
    config = get_config(config_path)
    result, source = _ask(config, "incidents", all=show_all)
    if as_json:
        print_json({"source": source, "incidents": result})
        return
    _note(source)
    if not result:
        click.echo("no incidents" if show_all else "no open incidents")
        return
    for inc in result:
        ack = " (acked)" if inc["acked"] else ""
        click.echo(
            f"#{inc['id']:<4} {inc['state']:<8} {inc['severity']:<8} {inc['kind']:<18} "
            f"x{inc['count']:<6} {_when(inc['first_seen'])}  {inc['summary']}{ack}"
        )
        note = inc.get("notification", {}).get("state")
        if note:
            click.echo(f"      alerts: {note}")


@incidents_group.command("show")
@config_option
@click.argument("incident_id", type=int)
@json_option
@handle_errors
def show(config_path: str | None, incident_id: int, as_json: bool) -> None:
    """One incident, its evidence, and the timeline around its first signal.

    Example: statewardenctl incidents show 3
    """
    result, source = _ask(get_config(config_path), "incident", id=incident_id)
    if as_json:
        print_json({"source": source, **result})
        return
    _note(source)
    inc = result["incident"]
    click.echo(f"incident #{inc['id']}: {inc['kind']} ({inc['severity']}, {inc['state']})")
    click.echo(f"  database     {inc['db']}")
    click.echo(f"  summary      {inc['summary']}")
    click.echo(
        f"  first seen   {_when(inc['first_seen'])}; last seen {_when(inc['last_seen'])}; "
        f"{inc['count']} signal(s)"
    )
    if inc["resolved_at"]:
        click.echo(f"  resolved     {_when(inc['resolved_at'])} ({inc['resolution']})")
    if inc["evidence"]:
        click.echo("  evidence:")
        for line in inc["evidence"]:
            for i, part in enumerate(line.splitlines()[:20]):
                click.echo(("    " if i == 0 else "      ") + part)
    click.echo("  timeline around the first signal:")
    for entry in result["timeline"] or [{"line": "(nothing recorded)"}]:
        click.echo(f"    {entry['line']}")


@incidents_group.command("ack")
@config_option
@click.argument("incident_id", type=int)
@handle_errors
def ack(config_path: str | None, incident_id: int) -> None:
    """Acknowledge an incident (it stays open until its condition clears).

    Example: statewardenctl incidents ack 3
    """
    result, source = _ask(get_config(config_path), "ack", id=incident_id)
    _note(source)
    click.echo(f"incident #{result['id']} acknowledged")
