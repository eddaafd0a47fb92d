"""``statewardenctl alerts``: the outbox and each sink's health; ``alerts test``.

``alerts`` asks the running daemon; with no daemon it lists the outbox from the state
directory (and says so). ``alerts test`` sends one test notification straight through
each configured sink from this process and prints what each answered.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import click

from statewarden.alerts import SINK_NAMES, outbox_status, routes_of, send_test, supervisor
from statewarden.cli._common import (
    TEXT,
    config_option,
    get_config,
    handle_errors,
    json_option,
    print_json,
)
from statewarden.cli._group import CommandGroup
from statewarden.config import runtime_dir, state_dir
from statewarden.daemon import request, socket_path
from statewarden.errors import EXIT_FAILED, DaemonNotRunning, StatewardenError, UsageError

NO_SINK = "no alert sink is enabled (alerts.journald, .telegram, .alertmanager or .apprise)"


def _when(ts: float | None) -> str:
    return "-" if not ts else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


@click.group("alerts", cls=CommandGroup, invoke_without_command=True)
@config_option
@json_option
@click.pass_context
@handle_errors
def alerts_group(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """The alert outbox (notifications not yet delivered) and each sink's health.

    Example: statewardenctl alerts --json
    """
    if ctx.invoked_subcommand is not None:
        return
    config = get_config(config_path)
    try:
        result: dict[str, Any] = request(socket_path(runtime_dir(config)), "alerts")
        source = "daemon"
    except DaemonNotRunning:
        result = outbox_status(state_dir(config), config.alerts)
        source = "local"
    if as_json:
        print_json({"source": source, **result})
        return
    if source == "local":
        click.echo("(daemon not running: read from the state directory)", err=True)
    if not result["sinks"]:
        click.echo("no alert sink enabled")
    width = max([9, *(len(name) for name in result["sinks"])])
    for name, s in result["sinks"].items():
        enabled = "" if s["enabled"] else " (not enabled)"
        line = f"{name:<{width}} {s['state']:<9} {s['pending']} waiting{enabled}"
        if s.get("last_ok_at"):
            line += f"; last delivered {_when(s['last_ok_at'])}"
        if s.get("errors_in_row"):
            line += f"; {s['errors_in_row']} errors in a row"
        if s.get("restarts"):
            line += f"; delivery restarted {s['restarts']} times"
        if s.get("last_error"):
            line += f"; last error: {s['last_error']}"
        click.echo(line)
    hb = result.get("heartbeat")
    if hb:
        line = f"{'heartbeat':<{width}} {hb['state']:<9}"
        if hb.get("last_ok_at"):
            line += f" last ping {_when(hb['last_ok_at'])} ({hb['signal']})"
        if hb.get("why"):
            line += f"; {hb['why']}"
        if hb.get("pings_failed"):
            line += f"; {hb['pings_failed']} pings failed, {hb['errors_in_row']} in a row"
        if hb.get("last_error"):
            line += f"; last error: {hb['last_error']}"
        click.echo(line)
    for sl in result.get("silences", []):
        if sl["state"] == "active":
            where = sl["db"] or "every database"
            click.echo(
                f"silence #{sl['id']} {sl['kind']} on {where} until {_when(sl['ends_at'])}:"
                f" {sl['reason']}"
            )
    if result.get("silences_error"):
        click.echo(f"silences not read: {result['silences_error']}")
    if result.get("persist_error"):
        click.echo(f"outbox not on disk: {result['persist_error']} (sending from memory)")
    for e in result["outbox"]:
        incidents = ",".join(f"#{i}" for i in e["incidents"]) or "-"
        error = f"  ({e['attempts']} failed: {e['last_error']})" if e["last_error"] else ""
        click.echo(
            f"  {e['seq']:>6} {e['sink']:<9} {e['state']:<8} {incidents:<12} "
            f"{','.join(e['kinds']):<24} queued {_when(e['queued_at'])}{error}"
        )


@alerts_group.command("test")
@config_option
@click.option("--sink", type=click.Choice(SINK_NAMES), default=None, help="Only this sink.")
@json_option
@handle_errors
def test_cmd(config_path: str | None, sink: str | None, as_json: bool) -> None:
    """Send a test notification through each configured sink; print each answer.

    Exit code 1 if a sink did not accept it.

    Example: statewardenctl alerts test --sink telegram
    """
    config = get_config(config_path)
    enabled = routes_of(config.alerts)
    if sink is not None and sink not in enabled:
        raise UsageError(f"the {sink} sink is not enabled (alerts.{sink}.enabled in the config)")
    if not enabled:
        raise UsageError(
            "no alert sink is enabled (alerts.journald / .telegram / .alertmanager / .apprise)"
        )
    results = asyncio.run(send_test(config.alerts, sink))
    if as_json:
        print_json({"sinks": results})
    else:
        for name, r in results.items():
            click.echo(f"{name}: {r['result']}: {r['answer']}")
    failed = [n for n, r in results.items() if r["result"] != "ok"]
    if failed and as_json:
        sys.exit(EXIT_FAILED)
    if failed:
        raise StatewardenError(f"not delivered by {', '.join(failed)}")


@alerts_group.command("supervisor-failed")
@click.argument("unit", default="statewarden.service", type=TEXT)
@config_option
@json_option
@handle_errors
def supervisor_failed_cmd(unit: str, config_path: str | None, as_json: bool) -> None:
    """Alert that UNIT (statewarden itself) has stopped for good, through every sink.

    Run by statewarden-failed@.service, the unit's OnFailure=; it sends one
    supervisor_failed notification (with the unit's last log lines) through each
    enabled sink, whatever their severity and kind filters, retrying a sink that is
    briefly unreachable. Exit code 1 if no sink accepted it.

    Example: statewardenctl alerts supervisor-failed statewarden.service
    """
    config = get_config(config_path)
    if not routes_of(config.alerts):
        raise UsageError(
            "no alert sink is enabled (alerts.journald / .telegram / .alertmanager / .apprise)"
        )
    results = asyncio.run(supervisor.send(config.alerts, unit))
    if as_json:
        print_json({"sinks": results})
    else:
        for name, r in results.items():
            click.echo(f"{name}: {r['result']}: {r['answer']}")
    if not any(r["result"] == "ok" for r in results.values()):
        if as_json:
            sys.exit(EXIT_FAILED)
        raise StatewardenError("the supervisor_failed alert was not delivered by any sink")
