"""The text and JSON of ``statewardenctl status``; no click needed.

The click command (:mod:`statewarden.cli.status_cmd`) and the quick entry point
(:mod:`statewarden.cli.quick`) both report through here, so they print the same.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from statewarden.byte_sizes import human_bytes
from statewarden.cli._plain import (
    get_config,
    own_folders,
    printable,
    select_targets,
    write_line,
)
from statewarden.config_literals import no_config_file
from statewarden.daemon import request, socket_path
from statewarden.errors import ConfigError, DaemonNotRunning
from statewarden.json_output import json_document
from statewarden.json_text import LATEST_TIME

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from statewarden.recovery_files import RecoveryFile
    from statewarden.watch import DatabaseStatus

# The daemon's record of its verifications in its state folder: the name
# statewarden.daemon.verify gives it (VERIFIED_FILE; a test holds the two equal). That
# module, with all it imports, was most of this command's time.
VERIFIED_RECORD = "verified.json"


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _render(st: DatabaseStatus) -> None:
    _line(f"{st.profile}: {st.path}")
    if st.exists is None:
        _line("  state.db        cannot be looked at (see the problem below)")
    elif not st.exists:
        _line("  state.db        not present")
    else:
        _line(f"  size            {human_bytes(st.size_bytes)}")
        _line(
            f"  pages           {_or_dash(st.page_count)} x {_or_dash(st.page_size)} B,"
            f" {_or_dash(st.freelist_count)} free"
        )
        _line(f"  journal mode    {st.journal_mode or '-'}")
        _line(
            f"  -wal / -shm     {human_bytes(st.wal_bytes)} / {human_bytes(st.shm_bytes)}"
            + (
                f", -journal {human_bytes(st.journal_bytes)}"
                if st.journal_bytes is not None
                else ""
            )
        )
        note = f" ({st.schema_note})" if st.schema_note else ""
        _line(f"  schema_version  {_or_dash(st.schema_version)}{note}")
    if st.filesystem:
        fs = st.filesystem
        verdict = "UNSAFE for WAL" if fs.unsafe_for_wal else "safe for WAL"
        _line(f"  filesystem      {fs.type} on {fs.mount_point} ({verdict})")
    _line(f"  gateway unit    {st.gateway_unit}")
    if st.recovery_files:
        _line(f"  recovery files  {len(st.recovery_files)}, {human_bytes(st.recovery_files_bytes)}")
        for item in st.recovery_files:
            _line(f"    {_recovery_line(item)}")
    for problem in st.problems:
        _line(f"  problem         {problem}")


_WHAT = {
    "retired_wal": "retired WAL capture",
    "pending_spool": "pending messages spool",
    "pre_update_backup": "pre-update backup",
}


def _recovery_line(item: RecoveryFile) -> str:
    size = human_bytes(item.bytes) + ("+" if item.capped else "")
    notes = [_WHAT[item.what]]
    if item.what != "pre_update_backup":
        notes.append(f"{item.files} files")
    if item.partial:
        notes.append("interrupted")
    if item.captured_at:
        notes.append(f"captured {item.captured_at}")
    if item.trigger:
        notes.append(f"trigger {item.trigger}")
    if item.pid is not None:
        notes.append(f"pid {item.pid}")
    if item.main_mode:
        notes.append(f"main image {item.main_mode}")
    if item.problem:
        notes.append(item.problem)
    return f"{size:>10}  {item.name}  ({', '.join(notes)})"


def sink_health(h: dict[str, Any]) -> str:
    """One alert sink's trouble in a line: "retrying, 3 waiting, 2 errors in a row, ..."."""
    parts = [h["state"], f"{h['pending']} waiting"]
    if h["errors_in_row"]:
        parts.append(f"{h['errors_in_row']} errors in a row")
    if h["restarts"]:
        parts.append(f"delivery restarted {h['restarts']} times")
    if h["last_error"]:
        parts.append(f"last error: {h['last_error']}")
    return ", ".join(parts)


def report_status(
    config_path: str | None, db: str | None, profile: str | None, as_json: bool
) -> None:
    """``statewardenctl status`` once: the running daemon's view, else the files read here."""
    daemon = None if (db or profile) else _from_daemon(config_path)
    if daemon is not None:
        _report_daemon(daemon, as_json)
        return
    from statewarden.watch import status_all  # noqa: PLC0415 - apsw: only when read here

    targets, note = select_targets(config_path, db, profile)
    results = status_all(targets)
    verified = _verified_on_record(config_path)
    if as_json:
        databases = [{**r.to_json(), "verified": verified.get(r.path)} for r in results]
        _json({"source": "local", "databases": databases, "note": note or None})
        return
    _line("(daemon not running: computed locally)", err=True)
    if note:
        _line(note)
    for i, st in enumerate(results):
        if i:
            _line()
        _render(st)
        _line(f"  last verified   {_verified_line(verified.get(st.path))}")


def _report_daemon(daemon: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _json({"source": "daemon", **daemon})
        return
    _line(f"daemon: pid {daemon['daemon']['pid']}, {daemon['daemon']['status']}")
    for line in _config_lines(daemon):
        _line(line)
    _line(f"units: {daemon.get('units', '-')}")
    sinks = daemon.get("alerts") or {}
    states = ", ".join(f"{name} {state}" for name, state in sinks.items())
    _line(f"alerts: {states or 'no sink enabled'}")
    if (web := daemon["daemon"].get("web")) and web.get("page"):
        through = f" (through the socket {web['socket']})" if web.get("socket") else ""
        _line(f"web page: {web['page']}{through}")
    for name, why in (daemon.get("inotify") or {}).items():
        if why:
            _line(f"inotify: {name.replace('_', ' ')} polling: {why}")
    for name, h in (daemon.get("alert_sinks") or {}).items():
        if h["state"] != "ok" or h["restarts"]:
            _line(f"  {name}: {sink_health(h)}")
    for d in daemon["databases"]:
        _line()
        _render(_from_json(d))
        _line(f"  open incidents  {d['open_incidents']}")
        _line(f"  last verified   {_verified_line(d.get('verified'))}")
        _line(f"  journal         {d.get('journal', '-')}")
        for w in d["watchers"]:
            if w["errors"]:
                _line(f"  watcher         {w['watcher']}: {w['errors']} errors")


def verdict_line(v: dict[str, Any]) -> str:
    """``healthy``, ``base damage``, ``failed: why``: one verification in a few words."""
    result = v.get("result")
    if result == "none":
        return "healthy"
    if result == "failed":
        return f"failed: {v.get('error')}"
    return f"{result} damage"


def _line(text: str = "", *, err: bool = False) -> None:
    """One line of text output, control characters escaped (:func:`printable`)."""
    write_line(printable(text), err=err)


def _json(data: dict[str, Any]) -> None:
    write_line(json.dumps(json_document(data), indent=2, default=str, sort_keys=False))


# What a verification's ``result`` may be (statewarden.daemon.verify: a damage class of
# check, or "failed"); a record with anything else is no verification.
VERDICTS = frozenset({"none", "derived", "base", "unreadable", "failed"})


def verification(v: object) -> dict[str, Any] | None:
    """``v`` when it is a verification as the daemon records one: a known ``result``,
    ``at`` a time a date can show, ``reason`` and ``error`` text; else None. A record
    damaged or written by hand never makes status report damage check did not find,
    nor stops it (a NaN ``at`` did)."""
    if not isinstance(v, dict) or not isinstance(v.get("result"), str):
        return None
    if v["result"] not in VERDICTS:
        return None
    at = v.get("at")
    if isinstance(at, bool) or not isinstance(at, int | float) or not 0 <= at <= LATEST_TIME:
        return None
    if not all(isinstance(v.get(k, ""), str | None) for k in ("reason", "error")):
        return None
    return v


def _verified_line(v: object) -> str:
    """When the daemon last verified the database, and what it found."""
    running = isinstance(v, dict) and bool(v.get("running"))
    v = verification(v)
    if v is None:
        return "verifying now" if running else "never"
    at = v["at"]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(at)))
    line = f"{when}: {verdict_line(v)} ({v.get('reason', '-')})"
    return line + ("; verifying again now" if running else "")


def _verified_on_record(config_path: str | None) -> dict[str, Any]:
    """The daemon's last verification of each database, as it recorded them (no daemon
    needs to run); empty when there is no record or it cannot be read."""
    path = os.path.join(own_folders(config_path)[0], VERIFIED_RECORD)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {db: v for db, v in data.items() if verification(v) is not None}


def _config_lines(daemon: dict[str, Any]) -> list[str]:
    """The config the daemon runs on, and why the file is not it when a reload (or the
    file as it is now) was rejected."""
    about = daemon.get("daemon") or {}
    lines = [f"config: {about.get('config') or 'defaults'} (running)"]
    rejected = about.get("config_rejected")
    if isinstance(rejected, dict) and rejected.get("error"):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(rejected.get("at", 0))))
        lines.append(f"config reload rejected at {when}, running config kept: {rejected['error']}")
    now = daemon.get("config_file_error")
    if now and (not isinstance(rejected, dict) or now != rejected.get("error")):
        lines.append(f"config file invalid now (not loaded): {now}")
    return lines


def _from_daemon(config_path: str | None) -> dict[str, Any] | None:
    """The running daemon's status, or None when no daemon answers.

    A config file that is invalid now (edited after the daemon started, a reload
    rejected) still finds the daemon: through the file's ``paths`` when they are valid,
    else the defaults; its error is added as ``config_file_error``. With no daemon, the
    error is the command's (exit 2)."""
    rejected: ConfigError | None = None
    if no_config_file(config_path):
        runtime = own_folders(config_path)[1]
    else:
        from statewarden.config import paths_only, runtime_dir  # noqa: PLC0415 - see own_folders

        try:
            config = get_config(config_path)
        except ConfigError as exc:
            rejected, config = exc, paths_only(config_path)
        runtime = str(runtime_dir(config))
    try:
        result = request(socket_path(Path(runtime)), "status")
    except DaemonNotRunning:
        if rejected is not None:
            raise rejected from None
        return None
    if not isinstance(result, dict):
        return None
    return {**result, "config_file_error": str(rejected)} if rejected is not None else result


def _from_json(d: dict[str, Any]) -> DatabaseStatus:
    from statewarden.recovery_files import RecoveryFile  # noqa: PLC0415
    from statewarden.watch import DatabaseStatus, FilesystemFacts  # noqa: PLC0415

    fields = {k: v for k, v in d.items() if k in DatabaseStatus.__dataclass_fields__}
    fs = fields.get("filesystem")
    fields["filesystem"] = FilesystemFacts(**fs) if fs else None
    known = RecoveryFile.__dataclass_fields__
    fields["recovery_files"] = [
        RecoveryFile(**{k: v for k, v in item.items() if k in known})
        for item in fields.get("recovery_files") or []
    ]
    return DatabaseStatus(**fields)
