"""Downtime of a maintenance run against doing the same by hand, with Hermes holding the file.

    sudo .venv/bin/python bench/maintenance.py [--spec large|small] [--settle 2s]

Needs root (a private systemd --user, ``tests/support/systemd_harness.py``). A copy of the
fixture with the phantom row is held by two units (``hermes-gateway.service`` writing
every 0.5 s, ``hermes-dashboard.service``) and a non-unit ``hermes serve``. Figures, one
run each on the same files:

- **stop + start**: stop both units and the process and start them again, doing nothing
  else (the floor any swap has to pay);
- **statewarden**: ``statewardenctl maintenance --yes``: downtime (first stop to last unit
  active), swap time and the path it took, from its report; once with a gateway that
  keeps writing (the source changes, so a catch-up recover runs offline) and once with
  every holder idle after its start (the pre-built file is swapped as is);
- **by hand, VACUUM INTO**: stop all, ``VACUUM INTO`` a new file, ``mv`` it over, start;
- **by hand, .recover**: stop all, ``sqlite3 state.db .recover | sqlite3 new.db``, ``mv``,
  start (Debian's sqlite3 3.40).

Goals: swap under 100 ms; downtime within stop + start + 1 s + settle when nothing was
written since the pre-build, and within stop + start + recover + 1 s + settle otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lab.corruption import phantom_row  # noqa: E402
from lab.hermes_fixtures import LARGE, SMALL, writer_env  # noqa: E402
from statewarden.holders.scan import HolderScanner  # noqa: E402
from tests.support.fake_hermes import WRITE_EVERY_ENV, install_fake_hermes  # noqa: E402
from tests.support.systemd_harness import UserSystemd, unavailable_reason, user_systemd  # noqa: E402

UNITS = ("hermes-gateway.service", "hermes-dashboard.service")
UNIT = """\
[Service]
Environment=HERMES_HOME={home}
Environment=FAKE_HERMES_WRITE_EVERY={every}
ExecStart={bin}/hermes {what}
KillMode=mixed
"""


class Bench:
    def __init__(self, manager: UserSystemd, base: Path, spec: Any, settle: str) -> None:
        self.m = manager
        self.base = base
        self.spec = spec
        self.home = base / "home"
        self.db = self.home / "state.db"
        self.bin = base / "bin"
        install_fake_hermes(self.bin)
        self.proc: subprocess.Popen[str] | None = None
        self.expected = spec.sessions
        self.config = base / "config.yaml"
        exempt = sorted(
            {
                u["comm"]
                for u in HolderScanner([Path("/none/state.db")], watch_opens=False)
                .scan()[0]
                .uninspectable
            }
        )
        self.config.write_text(
            json.dumps({"holders": {"exempt_comms": exempt}, "maintenance": {"settle": settle}})
        )

    def fresh(self, gateway_every: float) -> None:
        """A new damaged copy, the units and the process running on it."""
        self.stop_all()
        shutil.rmtree(self.home, ignore_errors=True)
        case = phantom_row(self.home, self.spec)
        self.expected = self.spec.sessions  # distinct sessions in the damaged copy
        assert case.phantom
        for unit, what, every in (
            (UNITS[0], "gateway run", gateway_every),
            (UNITS[1], "dashboard", 0.0),
        ):
            self.m.write_unit(
                unit, UNIT.format(home=self.home, bin=self.bin, what=what, every=every)
            )
        self.m.daemon_reload()
        self.start_all()

    def start_all(self) -> None:
        r = self.m.systemctl("start", *UNITS)
        assert r.returncode == 0, r.stderr
        env = writer_env(self.home)
        env[WRITE_EVERY_ENV] = "0"
        self.proc = subprocess.Popen(
            [str(self.bin / "hermes"), "serve"], env=env, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while len(HolderScanner([self.db], watch_opens=False).scan()[0].holders) < 3:
            assert time.monotonic() < deadline, "holders did not start"
            time.sleep(0.05)

    def stop_all(self) -> None:
        self.m.systemctl("stop", *UNITS)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait()

    def by_hand(self, how: str) -> float:
        """Stop all, rebuild the file, mv it over, start all: seconds."""
        new = self.home / "new.db"
        t0 = time.perf_counter()
        self.stop_all()
        if how == "vacuum":
            subprocess.run(
                ["sqlite3", str(self.db), f"VACUUM INTO '{new}'"], check=False, capture_output=True
            )
        elif how == "recover":
            dump = subprocess.Popen(["sqlite3", str(self.db), ".recover"], stdout=subprocess.PIPE)
            subprocess.run(
                ["sqlite3", str(new)], stdin=dump.stdout, capture_output=True, check=False
            )
            dump.wait()
        for side in ("-wal", "-shm"):
            Path(f"{self.db}{side}").unlink(missing_ok=True)
        os.replace(new, self.db)
        self.start_all()
        return time.perf_counter() - t0

    def stop_start(self) -> float:
        t0 = time.perf_counter()
        self.stop_all()
        self.start_all()
        return time.perf_counter() - t0

    def maintenance(self) -> dict[str, Any]:
        env = {
            **os.environ,
            "STATEWARDEN_CONFIG": str(self.config),
            "XDG_STATE_HOME": str(self.base / "state"),
            "DBUS_SESSION_BUS_ADDRESS": self.m.bus_address,
        }
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "statewarden.cli.ctl",
                "maintenance",
                "--db",
                str(self.db),
                "--yes",
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            cwd=REPO,
        )
        rep: dict[str, Any] = json.loads(r.stdout)
        # The non-unit process is the user's to start again; do so, as the others were.
        self.start_process_again()
        return rep

    def start_process_again(self) -> None:
        if self.proc is not None:
            self.proc.wait()
        env = writer_env(self.home)
        env[WRITE_EVERY_ENV] = "0"
        self.proc = subprocess.Popen(
            [str(self.bin / "hermes"), "serve"], env=env, stdout=subprocess.PIPE, text=True
        )


def verdict(db: Path, expected: int) -> str:
    """``correct`` when integrity_check is ok, no session is stored twice and none of the
    ``expected`` distinct sessions of the damaged file is missing."""
    import apsw

    try:
        conn = apsw.Connection(
            f"file:{db}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        )
        try:
            ok = conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            ids = [r[0] for r in conn.execute("SELECT id FROM sessions NOT INDEXED")]
        finally:
            conn.close()
    except apsw.Error as exc:
        return f"WRONG ({exc})"
    if ok and len(ids) == len(set(ids)) and len(ids) >= expected:
        return f"correct ({len(ids)} sessions)"
    return (
        f"WRONG (integrity {'ok' if ok else 'failed'}, {len(ids)} rows, {len(set(ids))}"
        f" distinct of {expected} expected)"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--spec", choices=("large", "small"), default="large")
    p.add_argument("--settle", default="2s")
    args = p.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"bench/maintenance.py: {reason}")
    spec = LARGE if args.spec == "large" else SMALL
    base = Path(tempfile.mkdtemp(prefix="statewarden-bench-maint-"))
    try:
        with user_systemd(base / "manager") as manager:
            b = Bench(manager, base, spec, args.settle)
            b.fresh(0.5)
            size = b.db.stat().st_size
            floor = b.stop_start()
            print(f"fixture: {size / 1e6:.0f} MB, phantom row; 2 units + 1 process holding it")
            print(f"stop + start, nothing else: {floor:.2f} s")
            for label, every in (
                ("gateway writing every 0.5 s", 0.5),
                ("holders idle after start", 0.0),
            ):
                b.fresh(every)
                rep = b.maintenance()
                prebuild = next(
                    (s["seconds"] for s in rep["steps"] if s["step"] == "prebuild"), 0.0
                )
                print(
                    f"statewarden maintenance ({label}): {rep['outcome']}, downtime"
                    f" {rep['downtime_s']:.2f} s, swap {rep['swap_s'] * 1000:.1f} ms,"
                    f" pre-build {prebuild:.2f} s while Hermes ran; {rep['path']};"
                    f" {verdict(b.db, b.expected)}"
                )
            for how in ("vacuum", "recover"):
                b.fresh(0.5)
                t = b.by_hand(how)
                name = "VACUUM INTO" if how == "vacuum" else "sqlite3 .recover | sqlite3"
                print(
                    f"by hand, stop + {name} + mv + start: {t:.2f} s of downtime;"
                    f" {verdict(b.db, b.expected)}"
                )
            b.stop_all()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
