"""The daemon's table of control requests, asked over the real socket of a real daemon."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from statewarden.daemon.requests import Requests
from statewarden.errors import ControlError
from tests.support.daemon import DaemonProc
from tests.support.waiting import wait_for


def test_the_table_names_every_request() -> None:
    """The README's commands that ask the daemon each have a handler, and only those."""
    table = {
        "status",
        "holders",
        "incidents",
        "incident",
        "check",
        "verify",
        "ack",
        "alerts",
        "maintenance",
        "silences",
        "maintenance_run",
        "maintenance_cancel",
    }

    class _NoDaemon:
        pass

    assert set(Requests(_NoDaemon()).handlers) == table  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["frobnicate", "handle", "__init__", "handlers", ""])
def test_an_unknown_request_is_a_one_line_error(shared_daemon: DaemonProc, name: str) -> None:
    """Names are looked up in the table, never as attributes; the socket keeps serving."""
    with pytest.raises(ControlError, match=f"^{re.escape(f'unknown request {name!r}')}$"):
        shared_daemon.ctl_raw(name)
    status = shared_daemon.ctl_raw("status")["daemon"]["status"]
    assert status == "1 database, 0 open incidents"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (None, "id must be an incident number"),
        (True, "id must be an incident number"),
        ([1], "id must be an incident number"),
        ("seven", "id must be an incident number, got 'seven'"),
        (999, "no incident 999"),
    ],
)
def test_a_bad_incident_id_is_a_one_line_error(
    shared_daemon: DaemonProc, value: object, error: str
) -> None:
    """An incident id that is missing, not a number, or not in the book is a one-line error from the
    incident and ack requests."""
    for request in ("incident", "ack"):
        with pytest.raises(ControlError, match=f"^{re.escape(error)}$"):
            shared_daemon.ctl_raw(request, id=value)


def test_incident_and_ack_by_request(daemon: DaemonProc, hermes_home: Path) -> None:
    """`incident` is the incident with its timeline; `ack` accepts the id as a string too."""
    (hermes_home / "state.db.malformed-backup-20260101_000000").write_bytes(b"x")
    inc = wait_for(lambda: next(iter(daemon.ctl_raw("incidents")), None), what="incident")
    shown = daemon.ctl_raw("incident", id=inc["id"])
    assert shown["incident"]["id"] == inc["id"]
    assert any(
        e["what"] == "incident" and e["line"].endswith(f"incident opened: {inc['summary']}")
        for e in shown["timeline"]
    )
    assert daemon.ctl_raw("ack", id=str(inc["id"]))["acked"] is True
    assert daemon.ctl_raw("incidents")[0]["acked"] is True
