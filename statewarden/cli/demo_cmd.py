"""``statewardenctl demo``: the phantom row repaired in a temporary sandbox."""

from __future__ import annotations

import click

from statewarden.cli._common import handle_errors, json_option, print_json
from statewarden.demo import Demo
from statewarden.errors import EXIT_FAILED


@click.command("demo")
@click.option("--keep", is_flag=True, help="Keep the sandbox folder for inspection.")
@json_option
@handle_errors
def demo(*, keep: bool, as_json: bool) -> None:
    """Repair a phantom row in a temporary sandbox, step by step, and clean up.

    Builds a Hermes home whose state.db Hermes itself wrote (shipped with statewarden),
    stores one session twice and damages its search index, starts plain processes that
    hold it as Hermes does (gateway, dashboard, your chat, and an orphaned serve
    --isolated that a desktop-app look-alike keeps respawning), then runs status,
    holders, check, maintenance --yes --force and check again, each with a short
    explanation. Needs neither root nor Hermes. Every process it started is stopped and
    the sandbox removed at the end, on Ctrl-C or on a failure too.

    Exit codes: 0 every step ended as expected, 1 one did not (the output says which),
    130 interrupted.

    Example: statewardenctl demo
    """

    def emit(line: str) -> None:
        if not as_json:
            click.echo(line)

    report = Demo(emit, keep=keep).run()
    if as_json:
        print_json(report.to_json())
    else:
        failed = [s.name for s in report.steps if not s.ok]
        verdict = f"not as expected: {', '.join(failed)}" if failed else "every step as expected"
        click.echo(f"Demo finished: {verdict}.")
    if not report.ok:
        raise SystemExit(EXIT_FAILED)
