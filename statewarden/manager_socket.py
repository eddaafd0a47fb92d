"""Where the systemd user manager is reached, and whether anything can answer there.

The D-Bus client (:mod:`statewarden.systemd`) reaches the manager through its private
socket ``$XDG_RUNTIME_DIR/systemd/private`` first, then through the user's session bus
(``$DBUS_SESSION_BUS_ADDRESS``, else ``$XDG_RUNTIME_DIR/bus``). Those addresses are
found here with nothing but ``os`` and a Unix socket: importing the client (dbus-fast
and asyncio) costs ``statewardenctl holders`` more CPU time than ``fuser`` spends on the
whole scan, and :func:`unreachable_reason` tells before that when no manager can
answer (no private socket, and no bus, or a bus socket nobody listens on).
"""

from __future__ import annotations

import os
import stat

from statewarden.errors import SystemdUnavailable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

PRIVATE_SOCKET = "systemd/private"  # under $XDG_RUNTIME_DIR
UNREACHABLE = "systemd user manager not reachable"
FALLBACK = "holders are still found through /proc"
_UNIX_PATH = "unix:path="


def unavailable(reason: str) -> SystemdUnavailable:
    """The one-line error of a manager that cannot be reached: ``reason`` between the
    words every such line starts and ends with."""
    return SystemdUnavailable(f"{UNREACHABLE}: {reason}; {FALLBACK}")


def session_bus_address(env: Mapping[str, str] | None = None) -> str:
    """The user's bus: ``$DBUS_SESSION_BUS_ADDRESS``, else ``$XDG_RUNTIME_DIR/bus``."""
    env = os.environ if env is None else env
    address = env.get("DBUS_SESSION_BUS_ADDRESS", "").strip()
    if address:
        return address
    runtime = env.get("XDG_RUNTIME_DIR", "").strip()
    if runtime and os.path.exists(os.path.join(runtime, "bus")):
        return f"{_UNIX_PATH}{os.path.join(runtime, 'bus')}"
    raise unavailable(
        "no session bus ($DBUS_SESSION_BUS_ADDRESS is unset and"
        " $XDG_RUNTIME_DIR/bus does not exist)"
    )


def private_socket_address(env: Mapping[str, str] | None = None) -> str | None:
    """The manager's own socket, ``unix:path=$XDG_RUNTIME_DIR/systemd/private``, if it is there."""
    env = os.environ if env is None else env
    runtime = env.get("XDG_RUNTIME_DIR", "").strip()
    if not runtime or not os.path.isabs(runtime):
        return None
    path = os.path.join(runtime, PRIVATE_SOCKET)
    try:
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            return None
    except OSError:
        return None
    return f"{_UNIX_PATH}{path}"


def is_private_socket(address: str) -> bool:
    """Whether ``address`` is a manager's private socket (peer-to-peer, no bus daemon)."""
    return address.startswith(_UNIX_PATH) and address.endswith("/" + PRIVATE_SOCKET)


def unreachable_reason(
    address: str | None = None, env: Mapping[str, str] | None = None
) -> str | None:
    """Why no user manager can answer at ``address`` (None: where the client would look),
    as the one line the client would give; None when one may answer.

    Asks nothing of a manager: a private socket that is there may answer (the client
    tries it first); else the bus must be named, and a plain ``unix:path=`` bus must
    take a connection (closed at once, before a word is sent). What only a D-Bus
    conversation can tell (another uid's bus refusing us, no systemd on the bus) is
    left to the client: this says None.
    """
    if address is None:
        if private_socket_address(env) is not None:
            return None
        try:
            address = session_bus_address(env)
        except SystemdUnavailable as exc:
            return str(exc)
    path = address.removeprefix(_UNIX_PATH)
    if path == address or not path or any(c in path for c in ",;%"):
        return None  # another transport, or options or escapes: the client reads those
    # _socket, not socket: that one imports enum and selectors, which holders spares.
    import _socket  # noqa: PLC0415 - only a bus to try needs it

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        sock.setblocking(False)
        sock.connect(path)
    except PermissionError as exc:
        return str(unavailable(f"access denied to {address} ({exc.strerror})"))
    except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as exc:
        return str(unavailable(f"cannot connect to {address} ({exc.strerror})"))
    except OSError:
        return None  # busy (its backlog full) or stranger: the client's own connect tells
    finally:
        sock.close()
    return None
