"""``statewardenctl verify``: the daemon's scheduled verification, asked for now."""

from __future__ import annotations

import os
import time
from typing import Any

import click

from statewarden.cli._common import (
    config_option,
    db_option,
    echo_line,
    get_config,
    handle_errors,
    json_option,
    print_json,
    profile_option,
)
from statewarden.cli.status_output import verdict_line
from statewarden.config import runtime_dir
from statewarden.daemon import request, socket_path
from statewarden.errors import EXIT_FAILED, DaemonNotRunning, NoDaemon

# The daemon answers when the verification is done: wait as long as it may take.
ANSWER_MARGIN_S = 60.0


def _render(v: dict[str, Any]) -> None:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(v["at"])))
    echo_line(f"{v['db']}")
    echo_line(f"  verified  {when}, {v.get('took_s', 0):.1f} s ({v.get('priority') or '-'})")
    echo_line(f"  result    {verdict_line(v)}")
    for line in v.get("findings") or []:
        echo_line(f"  {line}")


@click.command()
@config_option
@db_option
@profile_option
@json_option
@handle_errors
def verify(config_path: str | None, db: str | None, profile: str | None, as_json: bool) -> None:
    """Ask the daemon to verify each database now (as on its schedule) and wait for it.

    What `check` does, run by the daemon at idle priority: damage opens a corruption
    incident. Exit codes: 0 healthy, 1 derived damage, a failed verification or
    the daemon's refusal (the message says why),
    3 base damage, 4 unreadable, 2 usage, 6 no daemon running.

    Example: statewardenctl verify --profile default
    """
    config = get_config(config_path)
    args: dict[str, Any] = {}
    if db:
        args["db"] = os.path.abspath(os.path.expanduser(db))
    if profile:
        args["profile"] = profile
    timeout_s = config.watch.verify_timeout + ANSWER_MARGIN_S
    path = socket_path(runtime_dir(config))
    try:
        results = request(path, "verify", timeout_s=timeout_s, **args)
    except DaemonNotRunning as exc:
        raise NoDaemon(
            f"verify asks the daemon, and none runs ({exc}); start it "
            "(systemctl --user start statewarden) or use statewardenctl check"
        ) from None
    if as_json:
        print_json({"databases": results})
    else:
        for i, v in enumerate(results):
            if i:
                click.echo()
            _render(v)
    if any(v["result"] == "failed" for v in results):
        raise SystemExit(EXIT_FAILED)
    # Only here: ``status`` shows verdicts with verdict_line and needs none of recovery.
    from statewarden.recovery import exit_code_for, worst  # noqa: PLC0415

    code = exit_code_for(worst(*(v["result"] for v in results)))
    if code:
        raise SystemExit(code)
