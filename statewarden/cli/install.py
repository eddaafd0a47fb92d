"""Installing statewarden as a systemd --user service: the unit files for this installation.

``install`` renders the unit templates (``systemd/`` in the source tree, packaged inside
the wheel) with the folder that holds *this* installation's ``statewarden`` and
``statewardenctl`` (a venv's ``bin/``, a pipx venv, ``/usr/bin``), writes them into the
user's unit folder, records what it wrote in a manifest, and asks the user manager over
D-Bus to reload, enable and start. Running it again changes nothing that is already right.
Beside the units it puts the man pages (statewarden(1), statewardenctl(1),
statewarden.yaml(5)) and the shell completions (bash, zsh, fish) in the user's data
folder (``$XDG_DATA_HOME``, default ``~/.local/share``), where ``man`` and the shells
look for a user's own, unless the installation already has them in its system folders
(the Debian package). ``uninstall`` stops and disables the unit and removes exactly the
files the manifest names (and the folders install made for them, once empty), and only
while they still hold what was written (a file the user edited since is kept, and said
so). Hermes' own units are never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewarden.atomic import write_atomic
from statewarden.config import ALERTMANAGER_CREDENTIAL, APPRISE_CREDENTIAL, HEARTBEAT_CREDENTIAL
from statewarden.errors import InstallError, SystemdCallFailed, SystemdUnavailable, UsageError
from statewarden.manager_socket import FALLBACK
from statewarden.systemd import UserManager

# statewarden/: the wheel keeps the unit templates, man pages and completions beside it.
PACKAGE_DIR = Path(__file__).resolve().parent.parent
UNIT = "statewarden.service"
FAILED_TEMPLATE = "statewarden-failed@.service"
UNIT_FILES = (UNIT, FAILED_TEMPLATE)
MANIFEST_NAME = "install.json"
MANIFEST_VERSION = 1
BINDIR_PLACEHOLDER = "@BINDIR@"
CREDENTIAL = "telegram-token"  # the name alerts.telegram.credential reads by default
# Each secret install can hand the units as a systemd credential (LoadCredential=NAME:PATH,
# read from $CREDENTIALS_DIRECTORY/NAME): its name, and what the config says to read it.
# The heartbeat is the daemon's alone; the others are also the failure alert's.
CREDENTIALS = {
    CREDENTIAL: "alerts.telegram.credential (the default)",
    APPRISE_CREDENTIAL: f"alerts.apprise.credential: {APPRISE_CREDENTIAL}",
    HEARTBEAT_CREDENTIAL: f"alerts.heartbeat.credential: {HEARTBEAT_CREDENTIAL}",
    ALERTMANAGER_CREDENTIAL: f"alerts.alertmanager.credential: {ALERTMANAGER_CREDENTIAL}",
}
COMMANDS = ("statewarden", "statewardenctl")
START_TIMEOUT_S = 90.0
CATALOG = "statewarden.catalog"
# Man pages and completions: source name -> where under the user's data folder
# ($XDG_DATA_HOME, ~/.local/share) it goes, and where a system install (the Debian
# package, relative to the commands' prefix) already has it.
#   man-db adds <dir>/../share/man of every <dir> on PATH to its search path, so
#   ~/.local/share/man is found while ~/.local/bin is on PATH.
#   bash-completion loads $XDG_DATA_HOME/bash-completion/completions/<command>.
#   fish reads $XDG_DATA_HOME/fish/vendor_completions.d (leaving ~/.config/fish to
#   the user). zsh has no user folder of its own: ~/.local/share/zsh/site-functions
#   must be put on fpath before compinit (README: Install).
DATA_FILES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("man/statewarden.1", "man/man1/statewarden.1", ("man/man1/statewarden.1.gz",)),
    ("man/statewardenctl.1", "man/man1/statewardenctl.1", ("man/man1/statewardenctl.1.gz",)),
    ("man/statewarden.yaml.5", "man/man5/statewarden.yaml.5", ("man/man5/statewarden.yaml.5.gz",)),
    (
        "completions/statewardenctl",
        "bash-completion/completions/statewardenctl",
        ("bash-completion/completions/statewardenctl",),
    ),
    (
        "completions/_statewardenctl",
        "zsh/site-functions/_statewardenctl",
        ("zsh/vendor-completions/_statewardenctl",),
    ),
    (
        "completions/statewardenctl.fish",
        "fish/vendor_completions.d/statewardenctl.fish",
        ("fish/vendor_completions.d/statewardenctl.fish",),
    ),
)
DATA_FILE_MODE = 0o644  # read by man and the shells, never secret


@dataclass
class FileChange:
    """One unit file and what ``install`` does (did) to it."""

    name: str
    path: Path
    content: str
    action: str  # "create", "update", "unchanged"


@dataclass
class InstallPlan:
    unit_dir: Path
    bindir: Path
    files: list[FileChange]
    enable: bool
    now: bool
    manifest: Path
    # Man pages and completions (in the user's data folder); empty for a system install.
    data_files: list[FileChange] = field(default_factory=list)
    # Why there are none, when the installation's own folders already hold them.
    data_note: str | None = None

    @property
    def all_files(self) -> list[FileChange]:
        return [*self.files, *self.data_files]


@dataclass
class Outcome:
    """What a run of ``install`` / ``uninstall`` changed, line by line, for the user."""

    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"changes": self.changes, "notes": self.notes}


# -- where things are ------------------------------------------------------------------


def default_unit_dir(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "systemd" / "user"


def default_data_dir(env: dict[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME``, else ``~/.local/share``: where a user's man pages and shell
    completions go."""
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".local/share")
    return Path(base)


def _data_source(rel: str) -> Path:
    """The shipped file ``rel`` (``man/statewarden.1``, ``completions/statewardenctl``)."""
    here = PACKAGE_DIR
    kind, name = rel.split("/", 1)
    checkout = {
        "man": here.parent / "docs" / "man",
        "completions": here.parent / "packaging" / "completions",
    }
    for candidate in (here / "_data" / kind / name, checkout[kind] / name):
        if candidate.is_file():
            return candidate
    raise InstallError(f"{rel} is missing from this installation ({here})")


def templates_dir() -> Path:
    """The unit templates: packaged in the wheel, or the source tree's ``systemd/``."""
    here = PACKAGE_DIR
    for candidate in (here / "_systemd", here.parent / "systemd"):
        if (candidate / UNIT).is_file():
            return candidate
    raise InstallError(f"the unit templates are missing from this installation ({here})")


def installation_bindir() -> Path:
    """The folder with this installation's ``statewarden`` and ``statewardenctl``.

    The scripts folder of the running interpreter (a venv's or pipx's ``bin/``, or the
    system's); else the first folder on ``PATH`` that has both.
    """
    scripts = Path(sysconfig.get_path("scripts"))
    if all((scripts / c).is_file() for c in COMMANDS):
        return scripts
    found = shutil.which(COMMANDS[0])
    if found and (Path(found).parent / COMMANDS[1]).is_file():
        return Path(found).parent
    raise InstallError(
        f"cannot find the statewarden commands of this installation (looked in {scripts}"
        " and on PATH); install the package first (pip install .)"
    )


def _unit_safe(path: Path, what: str) -> str:
    text = str(path)
    if any(c.isspace() for c in text) or "%" in text or "\\" in text:
        raise InstallError(
            f"{what} {path} has a space, '%' or backslash in its path, which a unit file"
            " cannot hold as is; use a path without them"
        )
    return text


def check_token_file(path: Path, what: str = "token file") -> Path:
    """A secret file a unit may load (the Telegram token, Apprise URLs, a push or
    Alertmanager URL): absolute, a regular file, not a symlink, readable by its owner only."""
    path = path.expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise InstallError(f"cannot use {path} as the {what}: {exc.strerror}") from exc
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise InstallError(f"the {what} {path} is not a regular file")
    if st.st_mode & 0o077:
        raise InstallError(
            f"the {what} {path} is readable by others (mode {st.st_mode & 0o777:o});"
            f" chmod 600 {path} first"
        )
    return path


def render(
    template: str,
    bindir: Path,
    token_file: Path | None = None,
    credentials: dict[str, Path] | None = None,
) -> str:
    """A unit template for this installation; each credential given (name -> file)
    replaces its commented ``#LoadCredential=NAME:...`` line (a unit without that line
    does not load it)."""
    text = template.replace(BINDIR_PLACEHOLDER, _unit_safe(bindir, "the installation folder"))
    given = dict(credentials or {})
    if token_file is not None:
        given[CREDENTIAL] = token_file
    for name, path in given.items():
        line = f"LoadCredential={name}:{_unit_safe(path, f'the {name} file')}"
        text = re.sub(rf"^#LoadCredential={re.escape(name)}:.*$", line, text, flags=re.M)
    return text


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of a previous install; empty when there is none or it is unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
        return {}
    return data


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"cannot read {path}: {getattr(exc, 'strerror', exc)}") from exc


# -- install ---------------------------------------------------------------------------


def _check_unit_dir(unit_dir: Path, what: str = "units") -> None:
    """Refuse a folder another user could plant files in (docs/safety.md rule 12):
    one that is a symlink, not ours, or writable by others (sticky or not: a name
    planted there before we write would be followed or taken as ours)."""
    try:
        st = os.lstat(unit_dir)
    except FileNotFoundError:
        return  # created by us, mode from our umask
    if stat.S_ISLNK(st.st_mode):
        st = os.stat(unit_dir)  # ~/.config/systemd/user may be a link the user made
    if not stat.S_ISDIR(st.st_mode):
        raise InstallError(f"{unit_dir}: not a folder")
    if st.st_uid != os.geteuid():
        raise InstallError(
            f"{unit_dir}: owned by uid {st.st_uid}, not by us; refusing to write {what} there"
        )
    if st.st_mode & 0o022:
        raise InstallError(f"{unit_dir}: writable by others; refusing to write {what} there")


def _change(
    path: Path, content: str, ours: dict[str, str], force: bool, *, unit: bool = True
) -> FileChange:
    """What writing ``content`` at ``path`` is: refused for a symlink, or for a file that
    install did not write (its digest is not in the manifest) unless ``force``."""
    if path.is_symlink():
        hint = "remove it or point --unit-dir elsewhere" if unit else "remove it"
        raise InstallError(f"{path} is a symlink; {hint}")
    old = _read_text(path)
    if old is None:
        action = "create"
    elif old == content:
        action = "unchanged"
    elif force or ours.get(str(path)) == _digest(old):
        action = "update"
    else:
        raise InstallError(
            f"{path} exists and was not written by statewardenctl install;"
            " move it away or use --force to replace it"
        )
    return FileChange(path.name, path, content, action)


def system_data_dirs(bindir: Path) -> list[Path]:
    """``share/`` beside the commands' folder (``/usr/share`` for ``/usr/bin``), and
    beside each folder on ``PATH`` whose ``statewardenctl`` is a link to this
    installation's (the Debian package links ``/usr/bin`` into its venv)."""
    out = [bindir.parent / "share"]
    ours = (bindir / COMMANDS[1]).resolve()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        command = Path(folder or ".") / COMMANDS[1]
        with contextlib.suppress(OSError):
            if command.is_symlink() and command.resolve() == ours:
                out.append(Path(folder).parent / "share")
    return out


def plan_data_files(
    data_dir: Path, bindir: Path, ours: dict[str, str], *, force: bool
) -> tuple[list[FileChange], str | None]:
    """The man pages and completions to put under ``data_dir``; none when the
    installation's own ``share/`` already has them (a system package)."""
    for system in system_data_dirs(bindir):
        if all(any((system / r).is_file() for r in where) for _src, _dst, where in DATA_FILES):
            return [], f"man pages and shell completions are installed with the package in {system}"
    changes: list[FileChange] = []
    for src, dst, _where in DATA_FILES:
        path = data_dir / dst
        for folder in _missing_or_own_folders(path.parent, data_dir):
            _check_unit_dir(folder, "man pages or completions")
        text = _data_source(src).read_text(encoding="utf-8")
        changes.append(_change(path, text, ours, force, unit=False))
    return changes, None


def _missing_or_own_folders(folder: Path, top: Path) -> list[Path]:
    """``folder`` and its parents up to ``top``, as far as they exist (each is checked)."""
    out = []
    while True:
        if folder.exists() or folder.is_symlink():
            out.append(folder)
        if folder in (top, folder.parent):
            return out
        folder = folder.parent


def plan_install(
    unit_dir: Path,
    manifest: Path,
    *,
    bindir: Path | None = None,
    enable: bool = False,
    now: bool = False,
    force: bool = False,
    token_file: Path | None = None,
    data_dir: Path | None = None,
    credentials: dict[str, Path] | None = None,
) -> InstallPlan:
    """What ``install`` would write; refuses to overwrite a file it did not write."""
    bindir = bindir or installation_bindir()
    _check_unit_dir(unit_dir)
    tdir = templates_dir()
    ours = read_manifest(manifest).get("files", {})
    files: list[FileChange] = []
    for name in UNIT_FILES:
        content = render((tdir / name).read_text(encoding="utf-8"), bindir, token_file, credentials)
        files.append(_change(unit_dir / name, content, ours, force))
    data_files, data_note = plan_data_files(
        data_dir or default_data_dir(), bindir, ours, force=force
    )
    return InstallPlan(unit_dir, bindir, files, enable, now, manifest, data_files, data_note)


def apply_install(plan: InstallPlan, address: str | None = None) -> Outcome:
    out = Outcome()
    made: list[str] = list(read_manifest(plan.manifest).get("folders", []))
    try:
        plan.unit_dir.mkdir(parents=True, exist_ok=True)
        for f in plan.files:
            if f.action != "unchanged":
                write_atomic(f.path, f.content)
                out.changes.append(f"{'wrote' if f.action == 'create' else 'updated'} {f.path}")
        _write_data_files(plan, out, made)
    except BaseException:
        # A full disk half way: what was written is still recorded as ours, so the next
        # install (or uninstall) treats it as such.
        with contextlib.suppress(Exception):
            _save_manifest(plan, made)
        raise
    _save_manifest(plan, made)
    if not any(f.action != "unchanged" for f in plan.files):
        out.notes.append(f"unit files in {plan.unit_dir} already up to date")
    if plan.data_note:
        out.notes.append(plan.data_note)
    out.notes.extend(_where_man_looks(plan))
    out.notes.extend(catalogue_note())
    try:
        asyncio.run(_manager_install(plan, out, address))
    except SystemdUnavailable as exc:
        reason = _without_fallback(exc)
        if plan.enable or plan.now:
            raise InstallError(
                f"{reason}; the unit files are written, enable later with:"
                f" systemctl --user enable --now {UNIT}"
            ) from exc
        out.notes.append(f"{reason}; run later: systemctl --user daemon-reload")
    except SystemdCallFailed as exc:
        raise InstallError(f"the user manager refused: {exc}") from exc
    return out


def _write_data_files(plan: InstallPlan, out: Outcome, made: list[str]) -> None:
    """Write the man pages and completions; each folder made for them is added to
    ``made`` (with those an earlier install made), so that uninstall can remove them
    once empty."""
    for f in plan.data_files:
        missing: list[Path] = []
        folder = f.path.parent
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        for folder in reversed(missing):
            folder.mkdir()
            made.insert(0, str(folder))
        if f.action != "unchanged":
            write_atomic(f.path, f.content)
            os.chmod(f.path, DATA_FILE_MODE)
            out.changes.append(f"{'wrote' if f.action == 'create' else 'updated'} {f.path}")


def _where_man_looks(plan: InstallPlan) -> list[str]:
    """A note when ``man`` (with this environment) would not find the pages written."""
    pages = [f.path for f in plan.data_files if f.path.suffix in (".1", ".5")]
    manpath = shutil.which("manpath")
    if not pages or manpath is None:
        return []
    try:
        r = subprocess.run([manpath, "-q"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    mandir = pages[0].parent.parent
    searched = r.stdout.strip().split(":")
    # The wheel's own copy beside the program (<prefix>/share/man, found while
    # <prefix>/bin is on PATH) serves as well as the one written here.
    beside = plan.bindir.parent / "share" / "man"
    if str(mandir) in searched or (
        str(beside) in searched and (beside / "man1" / "statewarden.1").is_file()
    ):
        return []
    return [
        f"man does not look in {mandir} with this PATH: put {mandir.parent.parent / 'bin'} on"
        f" PATH (man then finds it) or add {mandir} to MANPATH"
    ]


# Where journalctl --update-catalog reads *.catalog files (systemd's catalog.c).
CATALOGUE_DIRS = (
    Path("/etc/systemd/catalog"),
    Path("/usr/local/lib/systemd/catalog"),
    Path("/usr/lib/systemd/catalog"),
)


def catalogue_note(dirs: tuple[Path, ...] = CATALOGUE_DIRS) -> list[str]:
    """How to get `journalctl -x` explanations, when no catalogue folder has ours: it
    takes root once (systemd keeps one catalogue database for the machine)."""
    if any((d / CATALOG).is_file() for d in dirs):
        return []
    try:
        source = templates_dir() / CATALOG
    except InstallError:
        return []
    return [
        "journalctl -x explains statewarden's entries once root installs the catalogue:"
        f" sudo install -D -m 0644 {source} /usr/local/lib/systemd/catalog/{CATALOG}"
        " && sudo journalctl --update-catalog"
    ]


def _save_manifest(plan: InstallPlan, folders: list[str] | None = None) -> None:
    """Record each planned file that holds what install wrote (or, not rewritten, what
    an earlier install wrote), and the folders made (deepest first)."""
    old = read_manifest(plan.manifest).get("files", {})
    files: dict[str, str] = {}
    for f in plan.all_files:
        try:
            current = None if f.path.is_symlink() else _read_text(f.path)
        except InstallError:
            current = None
        if current == f.content:
            files[str(f.path)] = _digest(f.content)
        elif current is not None and old.get(str(f.path)) == _digest(current):
            files[str(f.path)] = old[str(f.path)]
    data = {
        "version": MANIFEST_VERSION,
        "unit_dir": str(plan.unit_dir),
        "bindir": str(plan.bindir),
        "files": files,
        "folders": sorted(set(folders or []), key=lambda p: (-p.count("/"), p)),
    }
    plan.manifest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(plan.manifest, json.dumps(data, indent=2) + "\n")


async def _manager_install(plan: InstallPlan, out: Outcome, address: str | None) -> None:
    async with UserManager(address) as m:
        await m.reload()
        out.changes.append("reloaded the user manager")
        if plan.enable:
            state = await m.unit_file_state(UNIT)
            if state == "enabled":
                out.notes.append(f"{UNIT} already enabled")
            else:
                for _kind, link, _target in await m.enable_unit_files([UNIT]):
                    out.changes.append(f"enabled {UNIT} ({link})")
        if plan.now:
            info = await m.unit(UNIT)
            if info is not None and info.active_state == "active":
                if any(f.action == "update" for f in plan.files):
                    job = await m.restart_unit(UNIT, timeout_s=START_TIMEOUT_S)
                    _expect_done(job.result, "restart")
                    out.changes.append(f"restarted {UNIT} (its unit file changed)")
                else:
                    out.notes.append(f"{UNIT} already running")
            else:
                job = await m.start_unit(UNIT, timeout_s=START_TIMEOUT_S)
                _expect_done(job.result, "start")
                out.changes.append(f"started {UNIT}")


def _without_fallback(exc: SystemdUnavailable) -> str:
    """The reason, without the holder scan's "found through /proc" remark."""
    return str(exc).replace(f"; {FALLBACK}", "")


def _expect_done(result: str, action: str) -> None:
    if result != "done":
        raise InstallError(
            f"{UNIT} did not {action} (job result: {result});"
            f" see: journalctl --user -u {UNIT} -n 50"
        )


# -- uninstall ---------------------------------------------------------------------------


def uninstall(manifest: Path, address: str | None = None, *, dry_run: bool = False) -> Outcome:
    """Stop and disable the unit, remove the files ``install`` wrote, then the manifest."""
    data = read_manifest(manifest)
    files: dict[str, str] = data.get("files", {})
    if not files:
        raise UsageError(f"nothing to uninstall: no install manifest at {manifest}")
    out = Outcome()
    if dry_run:
        out.changes += [f"would stop and disable {UNIT}"]
        out.changes += [f"would remove {p}" for p in files]
        out.changes += [f"would remove {p} if empty" for p in data.get("folders", [])]
        return out
    try:
        asyncio.run(_manager_uninstall(out, address))
    except SystemdUnavailable as exc:
        out.notes.append(
            f"{_without_fallback(exc)}; the unit was not stopped or disabled through the manager"
        )
    except SystemdCallFailed as exc:
        raise InstallError(f"the user manager refused: {exc}") from exc
    for path_text, digest in files.items():
        path = Path(path_text)
        current = _read_text(path) if not path.is_symlink() else None
        if current is None:
            out.notes.append(f"{path} was already gone")
        elif _digest(current) != digest:
            out.notes.append(f"kept {path}: it was changed since install")
        else:
            path.unlink()
            out.changes.append(f"removed {path}")
    for folder_text in data.get("folders", []):
        folder = Path(folder_text)
        with contextlib.suppress(OSError):  # not empty (or gone): the user's now
            folder.rmdir()
            out.changes.append(f"removed {folder}")
    manifest.unlink(missing_ok=True)
    with contextlib.suppress(SystemdUnavailable, SystemdCallFailed):
        asyncio.run(_reload(address))
    return out


async def _manager_uninstall(out: Outcome, address: str | None) -> None:
    async with UserManager(address) as m:
        info = await m.unit(UNIT)
        if info is not None and info.active_state in ("active", "activating", "reloading"):
            job = await m.stop_unit(UNIT, timeout_s=START_TIMEOUT_S)
            out.changes.append(f"stopped {UNIT} ({job.result})")
        if await m.unit_file_state(UNIT) not in (None, "disabled", "static"):
            for _kind, link, _target in await m.disable_unit_files([UNIT]):
                out.changes.append(f"disabled {UNIT} (removed {link})")


async def _reload(address: str | None) -> None:
    async with UserManager(address) as m:
        await m.reload()
