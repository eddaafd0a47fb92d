"""The daemon: the long-running supervisor behind ``statewarden run``, and its control socket.

``core`` holds the :class:`Daemon`: start-up, the main loop, reload, the watchdog and the
staged shutdown. Each other part receives what it uses (the incident book, the alert
service, the watched databases, the holder scans), never the daemon: ``databases`` (the
databases watched), ``holders`` (when holder scans run), ``health`` (its own health),
``verify`` (each database verified on a schedule), ``vanished`` (sessions that vanish:
a file Hermes moved aside, a new file with far fewer sessions), ``runs`` (maintenance
runs joined to the alerts), ``handoff`` (maintenance runs handed to it by
``statewardenctl maintenance``), ``requests`` (the control requests), ``metrics`` (Prometheus).
``control`` is the socket both ends speak: the daemon serves it, ``statewardenctl`` is
its client.
"""

from typing import TYPE_CHECKING

from statewarden.public import public_face

# The names other parts use, and the module each lives in ("": the submodule itself).
HOMES = {
    "ControlServer": "control",
    "StreamClient": "control",
    "Streamed": "control",
    "request": "control_client",
    "socket_path": "control_client",
    "Daemon": "core",
    "VERIFIED_FILE": "verify",
}
__all__ = list(HOMES)
if not TYPE_CHECKING:  # mypy reads each name in its home module, typed
    __getattr__ = public_face(__name__, HOMES)
else:  # the same names, typed, for mypy (tests/project/test_layers.py holds them to HOMES)
    from statewarden.daemon.control import ControlServer as ControlServer
    from statewarden.daemon.control import StreamClient as StreamClient
    from statewarden.daemon.control import Streamed as Streamed
    from statewarden.daemon.control_client import request as request
    from statewarden.daemon.control_client import socket_path as socket_path
    from statewarden.daemon.core import Daemon as Daemon
    from statewarden.daemon.verify import VERIFIED_FILE as VERIFIED_FILE
