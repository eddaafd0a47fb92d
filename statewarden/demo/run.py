"""``statewardenctl demo``: the phantom row of docs/stories.md, repaired step by step.

The steps are the commands a user would run, each run for real (``statewardenctl`` in
a child process, with the sandbox's environment) and shown with its output and a short
explanation before it: ``status``, ``holders``, ``check`` (base damage: exit 3),
``maintenance --yes --force``, ``check`` again (exit 0), ``quarantine list``. When the
maintenance run is rolled back because the desktop app's ``serve --isolated`` kept
coming back (as root the fence cannot keep it out), the demo does what the message
says, closes the desktop app, and runs maintenance again. Each step has the exit codes
it may end with; the demo succeeds when every step did.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from statewarden.demo.sandbox import Sandbox
from statewarden.errors import EXIT_BASE_DAMAGE, EXIT_FAILED, EXIT_OK, SandboxError

STEP_TIMEOUT_S = 600.0
RESPAWNED = "serve --isolated"


def _respawn_abort(output: str) -> bool:
    """A maintenance run rolled back because ``serve --isolated`` kept coming back."""
    return any("aborted" in line and RESPAWNED in line for line in output.splitlines())


@dataclass
class Step:
    """One thing the demo did, and how it ended."""

    name: str
    explanation: str
    command: str | None = None  # as a user types it; None for an action of the user's
    expected: tuple[int, ...] = (EXIT_OK,)
    exit_code: int | None = None
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.command is None or self.exit_code in self.expected

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "explanation": self.explanation,
            "command": self.command,
            "expected_exit_codes": list(self.expected),
            "exit_code": self.exit_code,
            "ok": self.ok,
            "output": self.output,
        }


@dataclass
class DemoReport:
    sandbox: Path
    kept: bool
    setup: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.steps) and all(s.ok for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "sandbox": str(self.sandbox),
            "kept": self.kept,
            "setup": self.setup,
            "steps": [s.to_json() for s in self.steps],
            "error": self.error,
        }


Emit = Callable[[str], None]


@contextmanager
def _signals_unwind() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind the demo (cleaning up) as Ctrl-C does."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Demo:
    """Builds the sandbox, runs the steps, cleans up whatever happens."""

    def __init__(self, emit: Emit, *, keep: bool = False, parent: Path | None = None) -> None:
        self.emit = emit
        self.keep = keep
        self.parent = parent

    def run(self) -> DemoReport:
        with _signals_unwind():
            try:
                sandbox = Sandbox(self.parent)
            except OSError as exc:
                raise SandboxError(f"could not make the sandbox folder: {exc}") from exc
            report = DemoReport(sandbox=sandbox.root, kept=self.keep)
            try:
                self._setup(sandbox, report)
                self._steps(sandbox, report)
            finally:
                self.emit("")
                self.emit(
                    "Cleaning up: stopping every process the demo started"
                    + ("." if self.keep else f" and removing {sandbox.root}.")
                )
                sandbox.close(keep=self.keep)
                if self.keep:
                    self.emit(f"The sandbox is kept for inspection: {sandbox.root}")
        return report

    def _setup(self, sandbox: Sandbox, report: DemoReport) -> None:
        self.emit(f"Building a sandbox in {sandbox.root} (nothing outside it is touched).")
        try:
            damage = sandbox.build()
        except OSError as exc:
            raise SandboxError(f"could not build the sandbox in {sandbox.root}: {exc}") from exc
        self.emit(
            f"  A Hermes home, {sandbox.hermes_home}, whose state.db Hermes itself wrote"
            " (40 sessions, 700 messages)."
        )
        self.emit(
            f"  Damaged while closed, as in the stories: sessions row {damage.phantom_rowid}"
            f" stored twice (a phantom row, page {damage.phantom_leaf}), and"
            f" {damage.fts_pointers} cell pointers of a search-index page"
            f" (page {damage.fts_leaf}) aimed at one cell."
        )
        started = sandbox.start_holders()
        self.emit("  Holders started, plain processes standing in for Hermes' units:")
        for line in started:
            self.emit(f"    {line}")
        report.setup = {
            "hermes_home": str(sandbox.hermes_home),
            "db": str(sandbox.db),
            "damage": damage.to_json(),
            "holders": started,
        }

    def _steps(self, sandbox: Sandbox, report: DemoReport) -> None:
        plan = [
            Step(
                "status",
                "What statewarden sees of the database, read without writing or"
                " locking it (no daemon runs here, so it says so and works locally).",
                "statewardenctl status",
            ),
            Step(
                "holders",
                "Every process holding state.db: the gateway, the dashboard, your"
                " chat, and the orphaned serve --isolated the desktop app keeps alive.",
                "statewardenctl holders",
            ),
            Step(
                "check",
                "An uncapped check of a private copy: the phantom row in sessions is"
                " base damage (exit 3) even though the search-index errors come first.",
                "statewardenctl check",
                (EXIT_BASE_DAMAGE,),
            ),
            Step(
                "maintenance",
                "The repair: the new file is built while Hermes runs, then every"
                " holder is stopped (--force: your chat too), the old file fenced, the new one"
                " swapped in; the original goes to quarantine.",
                "statewardenctl maintenance --yes --force",
                (EXIT_OK, EXIT_FAILED),
            ),
        ]
        for step in plan:
            if not self._run(sandbox, report, step):
                return
        last = report.steps[-1]
        if last.exit_code == EXIT_FAILED and _respawn_abort(last.output):
            report.steps.append(
                Step(
                    "close-desktop-app",
                    "The run was rolled back, the database unchanged: the"
                    " desktop app kept bringing serve --isolated back (as root the fence cannot"
                    " keep it out). As the message says, close the desktop app; the demo stops"
                    " its look-alike.",
                )
            )
            self._show(report.steps[-1])
            sandbox.stop_desktop_app()
            if not self._run(
                sandbox,
                report,
                Step(
                    "maintenance-again",
                    "With the desktop app closed, the same run again.",
                    "statewardenctl maintenance --yes --force",
                ),
            ):
                return
        for step in [
            Step(
                "check-again",
                "The live file now: every distinct session and every"
                " message kept, the duplicate dropped, the search index rebuilt.",
                "statewardenctl check",
            ),
            Step(
                "quarantine",
                "The damaged original is kept, with its checksums, never deleted.",
                "statewardenctl quarantine list",
            ),
        ]:
            if not self._run(sandbox, report, step):
                return

    def _show(self, step: Step) -> None:
        self.emit("")
        self.emit(f"== {step.explanation}")
        if step.command:
            self.emit(f"$ {step.command}")

    def _verdict(self, step: Step) -> None:
        if step.ok:
            self.emit(f"[exit {step.exit_code}: as expected]")
        else:
            expected = " or ".join(map(str, step.expected))
            self.emit(f"[exit {step.exit_code}: expected {expected}; the demo stops here]")

    def _run(self, sandbox: Sandbox, report: DemoReport, step: Step) -> bool:
        """Run ``step``, show its output; False when it did not end as expected."""
        report.steps.append(step)
        self._show(step)
        assert step.command is not None
        step.exit_code, step.output = sandbox.run(step.command.split()[1:], STEP_TIMEOUT_S)
        for line in step.output.rstrip("\n").splitlines():
            self.emit(line)
        if step.exit_code == EXIT_FAILED and not _respawn_abort(step.output):
            step.expected = tuple(c for c in step.expected if c != EXIT_FAILED)
        self._verdict(step)
        return step.ok
