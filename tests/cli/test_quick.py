"""``statewardenctl holders`` without click: same output, same errors, fewer imports.

The installed ``statewardenctl`` runs :mod:`statewarden.cli.quick`; ``holders`` with
plain options is read there and reported through the same code as the click command,
anything else goes on to the click group. Each case here runs both ways, as whole
processes, on a state.db held by Hermes' own writer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, holding, make_home
from statewarden.cli._plain import ENV_DEBUG, errors_as_exit_codes
from statewarden.cli.quick import holders_options
from statewarden.errors import EXIT_FAILED, EXIT_INTERRUPTED, UsageError
from tests.support.quick import CLICK, PROBE, QUICK, loaded, run
from tests.support.repo import REPO


@pytest.fixture
def quiet_env(tmp_path: Path) -> dict[str, str]:
    """No config file and no Hermes home: every default."""
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("STATEWARDEN_CONFIG", None)
    env.pop("HERMES_HOME", None)
    return env


def stable(document: dict[str, object]) -> dict[str, object]:
    """A --json document without what changes from one scan to the next on a busy host."""
    volatile = {"processes", "vanished", "coverage", "uninspectable", "problems", "complete"}
    out: dict[str, object] = {}
    for key, value in document.items():
        if key in volatile:
            continue
        if key == "databases" and isinstance(value, list):
            out[key] = [stable(v) for v in value]
        elif key == "holders" and isinstance(value, list):
            out[key] = sorted((h["pid"], h["kind"], h["via"], h["fds"]) for h in value)
        else:
            out[key] = value
    return out


def scanned(report: str) -> list[str]:
    """A holders report's lines but the note that processes of the machine (any, not only
    holders) exited while /proc was read: two scans of a busy machine differ in it."""
    return [ln for ln in report.splitlines() if not ln.endswith("exited during the scan")]


class TestOptions:
    @pytest.mark.parametrize(
        ("args", "expected"),
        [
            ([], {}),
            (["--db", "/x/state.db"], {"db": "/x/state.db"}),
            (["--db=/x/state.db", "--json"], {"db": "/x/state.db", "as_json": True}),
            (["--db", "a", "--db", "b"], {"db": "b"}),
            (
                ["-v", "--no-systemd", "--config", "c.yaml"],
                {"verbose": True, "no_systemd": True, "config_path": "c.yaml"},
            ),
            (["--profile", "coder", "--verbose"], {"profile": "coder", "verbose": True}),
        ],
    )
    def test_plain_options_are_read(self, args: list[str], expected: dict[str, object]) -> None:
        """Plain options (space or = between name and value, flags, repeats) are read
        here, the last of a repeated option winning as with click."""
        base: dict[str, object] = {
            "config_path": None,
            "db": None,
            "profile": None,
            "as_json": False,
            "no_systemd": False,
            "verbose": False,
        }
        assert holders_options(args) == {**base, **expected}

    @pytest.mark.parametrize(
        "args",
        [
            ["--help"],
            ["-h"],
            ["--watch"],
            ["--count", "2"],
            ["--interval", "1"],
            ["--db"],
            ["--db="],
            ["--db", "--json"],
            ["--db", "-x"],
            ["--bogus"],
            ["--", "--db", "x"],
            ["extra"],
            ["--json=1"],
            ["--jso"],
        ],
    )
    def test_anything_else_goes_to_click(self, args: list[str]) -> None:
        """Help, --watch, a missing or empty value, an unknown or abbreviated option, a
        positional argument: not read here (None), so click answers as it always has."""
        assert holders_options(args) is None


class TestWholeProcess:
    def test_same_report_as_click_for_a_held_database(
        self, tmp_path: Path, quiet_env: dict[str, str]
    ) -> None:
        """Text and --json list the same Hermes writer (pid, kind, descriptors) with
        the same exit code either way; --json carries schema_version."""
        home = make_home(tmp_path / "hermes", TINY)
        db = str(home / "state.db")
        with holding(home) as writer:
            args = ("holders", "--db", db, "--no-systemd")
            quick, slow = run(QUICK, *args, env=quiet_env), run(CLICK, *args, env=quiet_env)
            assert quick.returncode == slow.returncode, (quick.stderr, slow.stderr)
            assert quick.stderr == slow.stderr == ""
            for out in (quick.stdout, slow.stdout):
                assert out.startswith(f"default: {db}\n")
                assert any(line.split()[:1] == [str(writer.pid)] for line in out.splitlines())
            quick_j = run(QUICK, *args, "--json", env=quiet_env)
            slow_j = run(CLICK, *args, "--json", env=quiet_env)
            assert quick_j.returncode == slow_j.returncode
            a, b = json.loads(quick_j.stdout), json.loads(slow_j.stdout)
            assert a["schema_version"] == b["schema_version"] == 1
            assert writer.pid in {h["pid"] for h in a["holders"]}
            assert stable(a) == stable(b)

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (("--db", "{tmp}/nope.db"), "statewardenctl: error: --db {tmp}/nope.db: no such file"),
            (
                ("--db", "{tmp}"),
                "statewardenctl: error: --db {tmp}: is a directory; give the"
                " path of the state.db file",
            ),
            (
                ("--db", "{tmp}/x", "--profile", "p"),
                "statewardenctl: error: --db and --profile cannot be used together",
            ),
            (
                ("--profile", "nope"),
                "statewardenctl: error: no Hermes profile named 'nope' (found: none)",
            ),
            (("--config", "{tmp}/missing.yaml"), "statewardenctl: error: {tmp}/missing.yaml:"),
        ],
    )
    def test_bad_input_is_one_line_and_exit_2_both_ways(
        self, tmp_path: Path, quiet_env: dict[str, str], args: tuple[str, ...], message: str
    ) -> None:
        """A missing file, a directory, --db with --profile, an unknown profile, a
        missing config: the same one line on stderr and exit 2 with or without click."""
        (tmp_path / "x").touch()
        argv = [a.format(tmp=tmp_path) for a in args]
        want = message.format(tmp=tmp_path)
        for base in (QUICK, CLICK):
            r = run(base, "holders", *argv, env=quiet_env)
            assert r.returncode == 2, (base, r.stderr)
            assert r.stdout == ""
            assert r.stderr.count("\n") == 1, r.stderr
            assert r.stderr.startswith(want), r.stderr
            assert "Traceback" not in r.stderr

    def test_click_still_answers_what_quick_does_not_read(
        self, tmp_path: Path, quiet_env: dict[str, str]
    ) -> None:
        """--db without its value and an unknown option get click's usage error (exit 2, one
        line), --help click's help (exit 0), from the installed entry point as before."""
        for args in (("--db",), ("--bogus",)):
            quick = run(QUICK, "holders", *args, env=quiet_env)
            slow = run(CLICK, "holders", *args, env=quiet_env)
            assert quick.returncode == slow.returncode == 2
            # The line names the program as it was started; the error is the same.
            assert quick.stderr.count("\n") == slow.stderr.count("\n") == 1
            assert quick.stderr.startswith("statewardenctl: error: "), quick.stderr
            said = quick.stderr.split(": error: ", 1)[1].split(" (see ", 1)[0]
            assert said == slow.stderr.split(": error: ", 1)[1].split(" (see ", 1)[0]
        helped = run(QUICK, "holders", "--help", env=quiet_env)
        assert helped.returncode == 0
        assert "--watch" in helped.stdout

    def test_quick_holders_imports_no_click(
        self, tmp_path: Path, quiet_env: dict[str, str]
    ) -> None:
        """`holders --db X --json` loads neither click nor the command group, nor YAML,
        apsw or D-Bus when no config file exists and --no-systemd is given; another
        command still loads click."""
        home = make_home(tmp_path / "hermes", TINY)
        r = run(
            [sys.executable, "-c", PROBE],
            "holders",
            "--db",
            str(home / "state.db"),
            "--json",
            "--no-systemd",
            env=quiet_env,
        )
        assert r.returncode == 0, r.stderr
        modules = loaded(r.stderr)
        heavy = [m for m in modules if m.split(".")[0] in ("click", "yaml", "apsw", "dbus_fast")]
        assert heavy == []
        assert "statewarden.cli.ctl" not in modules
        other = run([sys.executable, "-c", PROBE], "status", "--help", env=quiet_env)
        assert "click" in loaded(other.stderr)

    def test_a_held_database_is_reported_without_the_slow_standard_modules(
        self, tmp_path: Path, quiet_env: dict[str, str]
    ) -> None:
        """A whole `holders --db X` run on a database a Hermes writer holds (its kind read
        from gateway_heartbeats, through apsw) loads none of dataclasses, inspect, typing,
        hashlib, contextlib or datetime (its SINCE column is worked out from seconds):
        together more CPU than the rest of the command on a busy host. Nor pathlib, re,
        enum, functools or urllib: a third of what is left."""
        home = make_home(tmp_path / "hermes", TINY)
        with holding(home) as writer:
            r = run(
                [sys.executable, "-c", PROBE],
                "holders",
                "--db",
                str(home / "state.db"),
                "--no-systemd",
                env=quiet_env,
            )
        assert r.returncode == 0, r.stderr
        assert any(line.split()[:1] == [str(writer.pid)] for line in r.stdout.splitlines())
        modules = loaded(r.stderr)
        assert "statewarden.holders.heartbeats" in modules  # the whole path was taken
        slow = {
            "dataclasses",
            "inspect",
            "typing",
            "hashlib",
            "ast",
            "base64",
            "struct",
            "datetime",
            # pathlib and what it imports; re is also what pip's console-script launcher
            # imports, which is why statewardenctl is a script of its own
            "pathlib",
            "re",
            "enum",
            "functools",
            "urllib.parse",
            "fnmatch",
            "warnings",
        }
        assert sorted(slow & set(modules)) == []

    def test_the_installed_launcher_imports_no_re(
        self, tmp_path: Path, quiet_env: dict[str, str]
    ) -> None:
        """The `statewardenctl` the install put next to its interpreter is statewarden's own
        launcher (packaging/bin/statewardenctl), not pip's console script, whose `import re`
        alone costs this command a fifth of fuser's CPU time; run as a user runs it, a
        whole `holders --db X` imports neither re nor pathlib, and reports the database."""
        launcher = Path(sys.executable).with_name("statewardenctl")
        assert launcher.read_text().startswith("#!"), launcher
        assert "import re" not in launcher.read_text()
        home = make_home(tmp_path / "hermes", TINY)
        db = str(home / "state.db")
        env = {**quiet_env, "PYTHONPROFILEIMPORTTIME": "1"}
        r = run([str(launcher)], "holders", "--db", db, "--no-systemd", env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"default: {db}\n"), r.stdout
        modules = {
            line.rsplit("|", 1)[1].strip()
            for line in r.stderr.splitlines()
            if line.startswith("import time:")
        }
        assert "statewarden.cli.holders_output" in modules  # the quick path was taken
        assert sorted({"re", "pathlib", "enum", "functools"} & modules) == []

    def test_without_a_config_file_the_config_module_is_not_imported(
        self, tmp_path: Path, quiet_env: dict[str, str]
    ) -> None:
        """No config file: `holders --db X` runs on the defaults without importing the config
        module; a config file there is read, and its policy applies (other_users: fail
        names the policy in the report)."""
        home = make_home(tmp_path / "hermes", TINY)
        args = ["holders", "--db", str(home / "state.db"), "--json", "--no-systemd"]
        r = run([sys.executable, "-c", PROBE], *args, env=quiet_env)
        assert r.returncode == 0, r.stderr
        modules = loaded(r.stderr)
        assert "statewarden.config" not in modules
        assert json.loads(r.stdout.split("MODULES ", 1)[0])["other_users"] == "locks"
        config = Path(quiet_env["XDG_CONFIG_HOME"]) / "statewarden" / "config.yaml"
        config.parent.mkdir(parents=True)
        config.write_text("holders:\n  other_users: fail\n")
        r = run([sys.executable, "-c", PROBE], *args, env=quiet_env)
        assert "statewarden.config" in loaded(r.stderr)
        assert json.loads(r.stdout)["other_users"] == "fail"
        config.write_text("holders:\n  other_users: sometimes\n")
        bad = run(QUICK, *args, env=quiet_env)
        assert bad.returncode == 2, bad.stderr
        assert "other_users" in bad.stderr

    def test_a_holder_at_risk_gives_exit_3_both_ways(
        self, tmp_path: Path, quiet_env: dict[str, str]
    ) -> None:
        """A process holding a replaced state.db is STALE: the quick path ends with the
        same exit code (3) and the same whole report as the click command."""
        home = make_home(tmp_path / "hermes", TINY)
        db = home / "state.db"
        keep = (
            "import sys; f = open(sys.argv[1], 'rb'); print('ready', flush=True); sys.stdin.read()"
        )
        holder = subprocess.Popen(
            [sys.executable, "-c", keep, str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "ready"
            (tmp_path / "new.db").write_bytes(db.read_bytes())
            os.replace(tmp_path / "new.db", db)
            args = ("holders", "--db", str(db), "--no-systemd")
            quick, slow = run(QUICK, *args, env=quiet_env), run(CLICK, *args, env=quiet_env)
        finally:
            holder.communicate("")
        assert quick.returncode == slow.returncode == 3, (quick.stderr, slow.stderr)
        line = next(ln for ln in quick.stdout.splitlines() if ln.startswith(f"{holder.pid} "))
        assert "STALE(state.db)" in line
        assert quick.stdout.splitlines()[:2] == slow.stdout.splitlines()[:2]
        assert len(scanned(quick.stdout)) == len(scanned(slow.stdout))

    def test_reader_gone_is_a_quiet_exit(self, tmp_path: Path, quiet_env: dict[str, str]) -> None:
        """Output to a closed pipe ends quietly with 141, as a SIGPIPE'd tool would."""
        home = make_home(tmp_path / "hermes", TINY)
        r, w = os.pipe()
        os.close(r)
        try:
            proc = subprocess.run(
                [*QUICK, "holders", "--db", str(home / "state.db"), "--json", "--no-systemd"],
                stdout=w,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
                env=quiet_env,
                check=False,
                timeout=120,
            )
        finally:
            os.close(w)
        assert proc.returncode == 141, proc.stderr
        assert "Traceback" not in proc.stderr

    def test_shell_completion_still_answers(self, quiet_env: dict[str, str]) -> None:
        """The installed script (the quick entry point) still answers the shell
        completion's requests, which come with no arguments and go to click."""
        script = Path(sys.executable).parent / "statewardenctl"
        env = {
            **quiet_env,
            "COMP_WORDS": "statewardenctl hol",
            "COMP_CWORD": "1",
            "_STATEWARDENCTL_COMPLETE": "bash_complete",
        }
        r = subprocess.run(
            [str(script)], capture_output=True, text=True, env=env, check=False, timeout=60
        )
        assert r.returncode == 0, r.stderr
        assert "plain,holders" in r.stdout.splitlines()


class TestErrorsAsExitCodes:
    def test_each_error_is_one_line_and_its_exit_code(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A statewarden error exits with its own code, Ctrl-C with 130, anything else with
        the failure code; each as one line on stderr, never a traceback."""
        monkeypatch.delenv(ENV_DEBUG, raising=False)
        cases: list[tuple[BaseException, int, str]] = [
            (UsageError("--db x: no such file"), 2, "prog: error: --db x: no such file"),
            (KeyboardInterrupt(), EXIT_INTERRUPTED, "prog: error: interrupted"),
            (
                ValueError("bad"),
                EXIT_FAILED,
                f"prog: error: unexpected ValueError: bad (set {ENV_DEBUG}=1 for the traceback)",
            ),
        ]
        for error, code, line in cases:
            with pytest.raises(SystemExit) as ended, errors_as_exit_codes("prog"):
                raise error
            assert ended.value.code == code
            assert capsys.readouterr().err == line + "\n"

    def test_what_it_does_not_handle_goes_on(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """SystemExit, the passthrough types, and with STATEWARDEN_DEBUG any error, go on
        unchanged; a block without an error returns normally."""
        monkeypatch.delenv(ENV_DEBUG, raising=False)
        with pytest.raises(SystemExit) as ended, errors_as_exit_codes("prog"):
            sys.exit(7)
        assert ended.value.code == 7
        with pytest.raises(LookupError), errors_as_exit_codes("prog", (LookupError,)):
            raise KeyError("k")
        monkeypatch.setenv(ENV_DEBUG, "1")
        with pytest.raises(ValueError, match="bad"), errors_as_exit_codes("prog"):
            raise ValueError("bad")
        with errors_as_exit_codes("prog"):
            done = True
        assert done
