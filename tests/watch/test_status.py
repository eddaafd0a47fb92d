"""`statewardenctl status`: true facts, read without touching the database."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from lab.hermes_fixtures import TINY, holding, make_home
from statewarden.config import Config, parse_config
from statewarden.mounts import Mount, is_unsafe_for_wal, mount_for, parse_mountinfo
from statewarden.sqlite import read_header
from statewarden.targets import discover, gateway_unit_for
from tests.support.cli import run_ctl

pytestmark = pytest.mark.process


def status_json(*args: str) -> dict[str, Any]:
    r = run_ctl("status", "--json", *args)
    assert r.exit_code == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def fingerprint(path: Path) -> tuple[str, int, int]:
    st = os.stat(path)
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_size


class TestStatusOnLiveHermes:
    def test_facts_with_idle_hermes_writer_and_file_untouched(self, hermes_home: Path) -> None:
        """With a real Hermes process holding the WAL database, status reports the right facts,
        and the database file's bytes and mtime do not change (no checkpoint, no write)."""
        db = hermes_home / "state.db"
        with holding(hermes_home):
            before = fingerprint(db)
            wal_before = (hermes_home / "state.db-wal").stat().st_size
            assert wal_before > 0, "the holder's write should still be in the WAL"
            data = status_json()
            after = fingerprint(db)
            wal_after = (hermes_home / "state.db-wal").stat().st_size
        assert before == after
        assert wal_before == wal_after
        (st,) = data["databases"]
        header = read_header(db)
        assert st["path"] == str(db)
        assert st["profile"] == "default"
        assert st["exists"] is True
        assert st["journal_mode"] == "wal"
        assert st["page_size"] == header.page_size == 4096
        assert st["schema_version"] == 22
        assert st["size_bytes"] == before[2]
        assert st["wal_bytes"] == wal_before
        assert st["shm_bytes"] == 32768
        assert st["journal_bytes"] is None
        # The live page count includes pages still in the WAL, so it is at least the header's.
        assert st["page_count"] >= header.page_count
        assert st["freelist_count"] >= 0
        assert st["filesystem"]["unsafe_for_wal"] is False
        assert st["problems"] == []

    def test_writer_keeps_writing_while_status_runs(self, hermes_home: Path) -> None:
        """A Hermes writer writing every 10 ms is never refused while status is called repeatedly."""
        with holding(hermes_home, write_every_s=0.01) as h:
            for _ in range(30):
                status_json()
            code = h.stop()
        assert code == 0, "the writer hit an error (e.g. database is locked)"

    def test_closed_wal_database_leaves_no_sidecars(self, hermes_home: Path) -> None:
        """On a closed WAL database (no -wal/-shm), status creates no sidecar files."""
        before = fingerprint(hermes_home / "state.db")
        status_json()
        assert sorted(p.name for p in hermes_home.iterdir()) == ["logs", "state.db"]
        assert fingerprint(hermes_home / "state.db") == before

    def test_profiles_are_targets(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Each profiles/<name>/ is a target with its own database and gateway unit."""
        home = make_home(tmp_path / "h", TINY, profiles=("coder", "work"))
        monkeypatch.setenv("HERMES_HOME", str(home))
        data = status_json()
        names = [d["profile"] for d in data["databases"]]
        assert names == ["default", "coder", "work"]
        only = status_json("--profile", "work")
        assert [d["path"] for d in only["databases"]] == [str(home / "profiles/work/state.db")]


class TestStatusOnBadFiles:
    @pytest.mark.parametrize(
        ("content", "problem"),
        [
            (b"", "the file is empty (0 bytes), not a SQLite database"),
            (b"hello, I am a text file\n" * 10, "not a SQLite database (no SQLite header)"),
            (b"\0" * 8192, "the database header is zeroed; the file is unreadable as SQLite"),
            (b"SQLite format", "truncated inside the 100-byte header"),
        ],
        ids=["empty", "text", "zeroed-header", "truncated-header"],
    )
    def test_unreadable_file_is_a_problem_not_a_crash(
        self, tmp_path: Path, content: bytes, problem: str
    ) -> None:
        """A file that is not a database is reported as a problem; exit 0; no traceback."""
        db = tmp_path / "state.db"
        db.write_bytes(content)
        data = status_json("--db", str(db))
        (st,) = data["databases"]
        assert st["problems"] == [f"{db}: {problem}"]
        assert db.read_bytes() == content

    def test_missing_database_is_reported(self, tmp_path: Path) -> None:
        """A home without state.db yet: exists false, one problem line."""
        data = status_json("--db", str(tmp_path / "state.db"))
        (st,) = data["databases"]
        assert st["exists"] is False
        assert st["problems"] == ["state.db does not exist (yet)"]

    def test_no_hermes_home(self) -> None:
        """No Hermes home at all: a plain note, exit 0."""
        r = run_ctl("status")
        assert r.exit_code == 0
        assert r.stdout == "no Hermes home found ($HERMES_HOME or ~/.hermes); nothing to report\n"

    def test_db_and_profile_together_is_usage_error(self, tmp_path: Path) -> None:
        """--db and --profile exclude each other: exit 2, one line."""
        r = run_ctl("status", "--db", "x", "--profile", "y")
        assert r.exit_code == 2
        assert r.stderr == "statewardenctl: error: --db and --profile cannot be used together\n"

    def test_unknown_profile(self, hermes_home: Path) -> None:
        """An unknown profile names the ones that exist: exit 2."""
        r = run_ctl("status", "--profile", "nope")
        assert r.exit_code == 2
        assert (
            r.stderr == "statewardenctl: error: no Hermes profile named 'nope' (found: default)\n"
        )

    def test_human_output(self, hermes_home: Path) -> None:
        """The text form names each fact."""
        r = run_ctl("status")
        assert r.exit_code == 0
        assert f"default: {hermes_home / 'state.db'}" in r.stdout
        assert "journal mode    wal" in r.stdout
        assert "schema_version  22" in r.stdout


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /mnt/My\\040Share rw,relatime - virtiofs myfs rw
41 22 0:36 / /home/u/.hermes rw - 9p hostshare rw,trans=virtio
42 41 0:37 / /home/u/.hermes/profiles/local rw - ext4 /dev/sdb1 rw
43 22 0:38 / /srv/nfs rw shared:5 master:2 - nfs4 srv:/export rw
44 22 0:39 / /mnt/sshfs rw - fuse.sshfs u@h:/ rw
garbage line without separator
"""


class TestMounts:
    def test_parse_decodes_escapes_and_optional_fields(self) -> None:
        """Mount points are decoded (\\040 is a space); optional fields before '-' are skipped."""
        mounts = parse_mountinfo(MOUNTINFO)
        assert [m.mount_point for m in mounts] == [
            "/",
            "/mnt/My Share",
            "/home/u/.hermes",
            "/home/u/.hermes/profiles/local",
            "/srv/nfs",
            "/mnt/sshfs",
        ]
        assert mounts[4].fstype == "nfs4"

    @pytest.mark.parametrize(
        ("path", "fstype"),
        [
            ("/home/u/.hermes/state.db", "9p"),
            ("/home/u/.hermes/profiles/local/state.db", "ext4"),
            ("/home/u/.hermesX/state.db", "ext4"),
            ("/mnt/My Share/state.db", "virtiofs"),
            ("/srv/nfs/a/b/state.db", "nfs4"),
        ],
    )
    def test_longest_prefix_wins(self, path: str, fstype: str) -> None:
        """The mount under a path is the longest mount point that is a whole-component prefix."""
        m = mount_for(Path(path), parse_mountinfo(MOUNTINFO))
        assert m is not None
        assert m.fstype == fstype

    @pytest.mark.parametrize(
        ("fstype", "unsafe"),
        [
            ("virtiofs", True),
            ("9p", True),
            ("fuse.sshfs", True),
            ("nfs", True),
            ("nfs4", True),
            ("cifs", True),
            ("smb3", True),
            ("ceph", True),
            ("glusterfs", True),
            ("ext4", False),
            ("xfs", False),
            ("btrfs", False),
            ("tmpfs", False),
            ("overlay", False),
            ("zfs", False),
        ],
    )
    def test_unsafe_filesystems(self, fstype: str, unsafe: bool) -> None:
        """Network, cross-VM and FUSE filesystems are unsafe for WAL; local ones are not."""
        assert is_unsafe_for_wal(fstype) is unsafe

    def test_status_flags_wal_on_unsafe_mount(self, hermes_home: Path) -> None:
        """A WAL database on an unsafe filesystem is reported as a problem."""
        from statewarden.watch.status import database_status

        (target,) = discover(Config())
        fake = [Mount(str(hermes_home), "virtiofs", "hostshare", "rw")]
        st = database_status(target, fake)
        assert st.filesystem is not None
        assert st.filesystem.unsafe_for_wal
        assert st.problems == [
            "WAL database on virtiofs: locks are not coherent there, WAL can corrupt silently"
        ]


class TestTargets:
    def test_gateway_unit_names(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Unit names follow Hermes: default, profile name, else a sha256 prefix of the path."""
        monkeypatch.setenv("HOME", str(tmp_path))
        assert gateway_unit_for(tmp_path / ".hermes") == "hermes-gateway.service"
        assert (
            gateway_unit_for(tmp_path / ".hermes/profiles/coder") == "hermes-gateway-coder.service"
        )
        other = tmp_path / "data"
        digest = hashlib.sha256(str(other.resolve()).encode()).hexdigest()[:8]
        assert gateway_unit_for(other) == f"hermes-gateway-{digest}.service"

    def test_explicit_targets_disable_discovery(self, tmp_path: Path) -> None:
        """Explicit targets are used as written; nothing is discovered."""
        c = parse_config(f"targets:\n  - home: {tmp_path}/h\n    gateway_unit: my.service\n")
        (t,) = discover(c)
        assert t.db == tmp_path / "h" / "state.db"
        assert t.gateway_unit == "my.service"

    def test_home_appears_later(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Discovery finds nothing before the home exists and finds it once it does."""
        home = tmp_path / "later"
        monkeypatch.setenv("HERMES_HOME", str(home))
        assert discover(Config()) == []
        home.mkdir()
        assert [t.db for t in discover(Config())] == [home / "state.db"]
        shutil.rmtree(home)
