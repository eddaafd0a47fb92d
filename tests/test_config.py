"""Configuration: loading, precedence, every class of bad input, and the documented example."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from statewarden.config import (
    Config,
    load_config,
    parse_bytes,
    parse_config,
    parse_duration,
    schema_keys,
    to_plain,
)
from statewarden.errors import ConfigError
from tests.support.cli import CtlRun, run_ctl
from tests.support.repo import REPO

pytestmark = pytest.mark.process

EXAMPLE = REPO / "etc" / "statewarden.yaml"


def run_check(path: Path) -> CtlRun:
    return run_ctl("config", "check", "--config", str(path))


class TestLoading:
    def test_no_file_means_defaults(self) -> None:
        """With no file at the default place, every default applies."""
        assert load_config() == Config()

    def test_precedence_flag_over_env_over_xdg(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """--config beats $STATEWARDEN_CONFIG, which beats the XDG default."""
        xdg = Path(os.environ["XDG_CONFIG_HOME"]) / "statewarden"
        xdg.mkdir(parents=True)
        (xdg / "config.yaml").write_text("logging: {level: debug}\n")
        env_file = tmp_path / "env.yaml"
        env_file.write_text("logging: {level: warning}\n")
        flag_file = tmp_path / "flag.yaml"
        flag_file.write_text("logging: {level: error}\n")
        assert load_config().logging.level == "debug"
        monkeypatch.setenv("STATEWARDEN_CONFIG", str(env_file))
        assert load_config().logging.level == "warning"
        assert load_config(flag_file).logging.level == "error"

    def test_durations_and_paths_are_converted(self, tmp_path: Path) -> None:
        """Durations become seconds; ~ in paths is expanded."""
        c = parse_config(
            "discovery:\n  rescan_interval: 250ms\n  hermes_home: ~/h\npaths:\n  state_dir: /s\n"
        )
        assert c.discovery.rescan_interval == 0.25
        assert c.discovery.hermes_home == Path(os.path.expanduser("~/h"))
        assert c.paths.state_dir == Path("/s")

    def test_explicit_targets(self) -> None:
        """An explicit target list is read item by item."""
        c = parse_config("targets:\n  - home: /srv/h\n    name: work\n")
        assert c.targets[0].home == Path("/srv/h")
        assert c.targets[0].name == "work"

    def test_empty_mapping_is_defaults(self) -> None:
        """`{}` is the documented way to say 'all defaults'."""
        assert parse_config("{}\n", source="x") == Config(source="x")

    @pytest.mark.parametrize(
        ("text", "seconds"),
        [("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("2d", 172800.0), ("250ms", 0.25), (7, 7.0)],
    )
    def test_parse_duration(self, text: object, seconds: float) -> None:
        """Every documented duration form is understood."""
        assert parse_duration(text) == seconds

    @pytest.mark.parametrize("bad", ["soon", "-1s", "0", 0, -3, True, None, "5 parsecs", "inf"])
    def test_parse_duration_rejects(self, bad: object) -> None:
        """Nonsense, zero and negative durations are rejected."""
        assert parse_duration(bad) is None

    def test_parse_bytes(self) -> None:
        """Sizes with binary and decimal units."""
        assert parse_bytes("50MiB") == 50 * 2**20
        assert parse_bytes("4KB") == 4000
        assert parse_bytes(4096) == 4096
        assert parse_bytes("lots") is None


BAD_CONFIGS = [
    (
        "unknown key",
        "logging:\n  levle: info\n",
        "{f}:2: logging.levle: unknown key (known keys here: level, format)",
    ),
    (
        "wrong type",
        "discovery:\n  profiles: 3\n",
        "{f}:2: discovery.profiles: expected true or false, got a number (3)",
    ),
    (
        "bad duration",
        "discovery:\n  rescan_interval: soon\n",
        "{f}:2: discovery.rescan_interval: expected a duration above zero such as 30s, 5m, 1h "
        'or 250ms, got a string ("soon")',
    ),
    (
        "yaml syntax",
        "logging: [\n",
        "{f}:2: YAML syntax error: expected the node content, but found '<stream end>'",
    ),
    (
        "tab",
        "logging:\n\tlevel: info\n",
        "{f}:2: a tab character is not allowed in YAML indentation; use spaces",
    ),
    (
        "empty file",
        "",
        "{f}: the file is empty; expected a mapping of sections "
        "(write {{}} to use every default, or delete the file)",
    ),
    (
        "comments only",
        "# nothing\n\n",
        "{f}: the file is empty; expected a mapping of sections "
        "(write {{}} to use every default, or delete the file)",
    ),
    (
        "control character",
        "logging:\n  level: \x1b\n",
        "{f}: YAML cannot contain the character #x001b (offset 18)",
    ),
    (
        "non-mapping",
        "- a\n- b\n",
        "{f}:1: expected a mapping of sections at the top level, got a list",
    ),
    (
        "bad choice",
        "logging:\n  level: loud\n",
        '{f}:2: logging.level: expected one of debug, info, warning, error, got a string ("loud")',
    ),
    (
        "section not a mapping",
        "logging: 5\n",
        "{f}:1: logging: expected a mapping, got a number (5)",
    ),
    (
        "list item key",
        "targets:\n  - home: /x\n    bogus: 1\n",
        "{f}:3: targets[0].bogus: unknown key (known keys here: home, name, db, logs_dir, gateway_unit)",
    ),
    ("missing required", "targets:\n  - name: x\n", "{f}:2: targets[0].home: is required"),
    ("targets not a list", "targets: /x\n", '{f}:1: targets: expected a list, got a string ("/x")'),
]


class TestBadConfig:
    @pytest.mark.parametrize(
        ("case", "text", "expected"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS]
    )
    def test_bad_config_one_line_exit_2(
        self, tmp_path: Path, case: str, text: str, expected: str
    ) -> None:
        """Each class of bad config: exactly one line naming file, line, key and expectation; exit 2."""
        f = tmp_path / "config.yaml"
        f.write_text(text)
        code, out, err = run_check(f)
        assert code == 2
        assert out == ""
        assert err == f"statewardenctl: error: {expected.format(f=f)}\n"

    def test_unreadable_file(self, tmp_path: Path) -> None:
        """A file that cannot be read: one line, exit 2 (as root, without the DAC override)."""
        f = tmp_path / "config.yaml"
        f.write_text("{}\n")
        f.chmod(0)
        cmd = [sys.executable, "-m", "statewarden.cli.ctl", "config", "check", "--config", str(f)]
        if os.geteuid() == 0:
            # Root reads mode-000 files through CAP_DAC_OVERRIDE; drop it for this process.
            cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 2
        assert proc.stderr == f"statewardenctl: error: {f}: cannot read: permission denied\n"

    def test_directory_instead_of_file(self, tmp_path: Path) -> None:
        """A directory named as the config: one line, exit 2."""
        code, _, err = run_check(tmp_path)
        assert code == 2
        assert err == f"statewardenctl: error: {tmp_path}: is a directory, expected a YAML file\n"

    def test_missing_explicit_file(self, tmp_path: Path) -> None:
        """--config naming a file that does not exist is an error (the default place is not)."""
        code, _, err = run_check(tmp_path / "nope.yaml")
        assert code == 2
        assert err == f"statewardenctl: error: {tmp_path / 'nope.yaml'}: no such file\n"

    def test_not_utf8(self, tmp_path: Path) -> None:
        """Binary garbage is reported as not UTF-8."""
        f = tmp_path / "config.yaml"
        f.write_bytes(b"logging:\n  level: \xff\xfe\n")
        code, _, err = run_check(f)
        assert code == 2
        assert err == f"statewardenctl: error: {f}: not UTF-8 text (byte 18 is invalid)\n"

    def test_daemon_refuses_bad_config_without_traceback(self, tmp_path: Path) -> None:
        """`statewarden run` with a bad config exits 2 with one line, as a real process."""
        f = tmp_path / "config.yaml"
        f.write_text("logging:\n  level: loud\n")
        proc = subprocess.run(
            [sys.executable, "-m", "statewarden.cli.daemon_cmd", "run", "--config", str(f)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1
        assert "Traceback" not in proc.stderr
        assert "logging.level: expected one of" in proc.stderr


# Values that are wrong for every typed key (no key accepts a nested list of mappings).
_keys = st.sampled_from(
    [
        "discovery.profiles",
        "discovery.rescan_interval",
        "logging.level",
        "logging.format",
        "paths.state_dir",
        "discovery.hermes_home",
    ]
)
_junk = st.one_of(
    st.lists(
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), min_size=1, max_size=3
    )
)


class TestProperties:
    @settings(max_examples=300, deadline=None)
    @given(st.text(max_size=200))
    def test_any_text_is_config_or_config_error(self, text: str) -> None:
        """Whatever the file holds, the loader returns a Config or raises ConfigError: nothing else."""
        try:
            result = parse_config(text, source="f.yaml")
        except ConfigError as exc:
            assert str(exc).startswith("f.yaml")
            assert "\n" not in str(exc)
        else:
            assert isinstance(result, Config)

    @settings(max_examples=200, deadline=None)
    @given(_keys, _junk)
    def test_wrong_value_names_its_key_and_line(self, key: str, value: object) -> None:
        """A wrong value under any key is reported with that key's dotted path and its line."""
        section, name = key.split(".")
        text = yaml.safe_dump({section: {name: value}})
        with pytest.raises(ConfigError) as info:
            parse_config(text, source="f.yaml")
        assert info.value.key is not None
        assert info.value.key.startswith(key)
        assert info.value.line == 2

    @settings(max_examples=200, deadline=None)
    @given(
        st.dictionaries(st.from_regex(r"[a-z_]{1,12}", fullmatch=True), st.integers(), min_size=1)
    )
    def test_unknown_top_level_keys_rejected(self, data: dict[str, int]) -> None:
        """Any top-level key that is not a section is rejected by name."""
        known = {"targets", "discovery", "paths", "logging"}
        data = {k: v for k, v in data.items() if k not in known}
        if not data:
            return
        with pytest.raises(ConfigError, match="unknown key"):
            parse_config(yaml.safe_dump(data), source="f.yaml")


class TestDocumentedExample:
    def test_example_is_valid_and_equals_defaults(self) -> None:
        """etc/statewarden.yaml loads, and what it sets is exactly the defaults."""
        c = load_config(EXAMPLE)
        assert to_plain(c) == to_plain(Config())

    def test_every_key_is_documented_and_nothing_else(self) -> None:
        """Every schema key appears in etc/statewarden.yaml, with a comment above or beside it."""
        text = EXAMPLE.read_text()
        mentioned = set(re.findall(r"^[#\s-]*([a-z_]+):", text, flags=re.MULTILINE))
        leaf_names = {k.rsplit(".", 1)[-1].split("[]")[-1] for k in schema_keys()}
        assert leaf_names - mentioned == set(), "keys missing from etc/statewarden.yaml"
        live = yaml.safe_load(text)
        documented_live: set[str] = set()

        def walk(d: dict[str, object], prefix: str) -> None:
            for k, v in d.items():
                documented_live.add(prefix + k)
                if isinstance(v, dict):
                    walk(v, f"{prefix}{k}.")

        walk(live, "")
        assert documented_live <= set(schema_keys()), "example sets keys the schema lacks"
        assert {k for k in schema_keys() if "[]" not in k} == documented_live


class TestShow:
    def test_show_prints_effective_config(self, tmp_path: Path) -> None:
        """`config show` prints defaults merged with the file, as YAML and JSON."""
        f = tmp_path / "c.yaml"
        f.write_text("logging:\n  level: debug\n")
        r = run_ctl("config", "show", "--config", str(f), "--json")
        assert r.exit_code == 0
        data = json.loads(r.stdout)
        assert data["config"]["logging"] == {"level": "debug", "format": "auto"}
        assert data["config"]["discovery"]["rescan_interval"] == 30.0
        r = run_ctl("config", "show", "--config", str(f))
        assert "level: debug" in r.stdout

    def test_show_prints_durations_and_sizes_as_the_config_writes_them(
        self, tmp_path: Path
    ) -> None:
        """Text `config show` writes `30s`, `90s`, `250ms`, `2h`, `50MB`, never `30.0`;
        --json keeps numbers of seconds and bytes."""
        f = tmp_path / "c.yaml"
        f.write_text(
            "watch:\n  poll_interval: 250ms\n  holders_interval: 90s\n"
            "  wal_warn_bytes: 16MiB\nalerts:\n  repeat_interval: 2h\n"
        )
        r = run_ctl("config", "show", "--config", str(f))
        assert r.exit_code == 0, r.stderr
        shown = yaml.safe_load(r.stdout)
        assert shown["watch"]["poll_interval"] == "250ms"
        assert shown["watch"]["holders_interval"] == "90s"
        assert shown["watch"]["wal_warn_bytes"] == "16MiB"
        assert shown["alerts"]["repeat_interval"] == "2h"
        assert shown["discovery"]["rescan_interval"] == "30s"  # a default
        assert shown["alerts"]["group_wait"] == "30s"
        assert not re.search(r":\s\d+\.\d", r.stdout)  # no 30.0 anywhere
        data = json.loads(run_ctl("config", "show", "--config", str(f), "--json").stdout)
        assert data["config"]["watch"]["poll_interval"] == 0.25
        assert data["config"]["watch"]["wal_warn_bytes"] == 16 * 2**20

    def test_what_show_prints_reads_back_as_the_same_config(self, tmp_path: Path) -> None:
        """The text of `config show` (defaults and all, secrets aside) is itself a valid
        config that means the same: every duration and size reads back to its value."""
        f = tmp_path / "c.yaml"
        f.write_text("watch:\n  poll_interval: 1.5s\n  wal_growth_window: 36h\n")
        r = run_ctl("config", "show", "--config", str(f))
        assert r.exit_code == 0, r.stderr
        again = parse_config(r.stdout, source="shown")
        assert to_plain(again) == to_plain(load_config(f))
        assert "poll_interval: 1500ms" in r.stdout
        assert "wal_growth_window: 36h" in r.stdout

    @given(st.integers(min_value=1, max_value=10**9))
    @settings(max_examples=200, deadline=None)
    def test_a_duration_in_milliseconds_reads_back_exactly(self, ms: int) -> None:
        """format_duration writes any whole number of milliseconds so that parse_duration
        reads the same number back."""
        from statewarden.config import format_duration

        assert parse_duration(format_duration(ms / 1000)) == pytest.approx(ms / 1000, rel=1e-12)


def test_holder_kinds_match_the_classifier() -> None:
    """The kinds the config accepts are exactly the kinds the process classifier gives."""
    from typing import get_args

    from statewarden.config import HolderKind
    from statewarden.holders.processes import KINDS

    assert get_args(HolderKind) == KINDS
