"""A dbus-fast client of the systemd user manager: units, stop/start with job wait.

Reaches the manager the way ``systemctl --user`` does: first its private socket
``$XDG_RUNTIME_DIR/systemd/private`` (peer-to-peer D-Bus: no bus daemon, no ``Hello``,
no match rules; the manager sends its signals to every such connection), then
``org.freedesktop.systemd1`` on the user's session bus (``$DBUS_SESSION_BUS_ADDRESS``,
else ``$XDG_RUNTIME_DIR/bus``). A bus started on demand (socket activation: a headless
server with lingering, the first client after login) has no ``org.freedesktop.systemd1``
for a moment after the first client connects, until the manager has connected and
taken its name: the client then waits for it with ``StartServiceByName``, up to
``DEFAULT_NAME_WAIT_S``. Everything that goes wrong before the manager answers (no
bus, refused, access denied, no systemd on the bus) is a
:class:`~statewarden.errors.SystemdUnavailable` with one line that says so; holders
are still found through ``/proc`` without it.

Stop and start follow the rule of every D-Bus wait: subscribe first, then act. The
client calls ``Subscribe`` and adds a match for ``JobRemoved`` *before* ``StopUnit`` /
``StartUnit``, records every ``JobRemoved`` it sees, and then waits (with a timeout)
for the one whose job path the call returned, so a job that finishes before the
reply arrives is not missed.

:class:`UserManager` is the asyncio client (for the daemon); the ``*_sync`` functions
wrap it for the CLI. Where it looks for the manager is :mod:`statewarden.manager_socket`'s,
which needs no D-Bus: a command can tell that no manager can answer without importing
this module.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dbus_fast import Message, MessageFlag, MessageType, Variant
from dbus_fast.aio import MessageBus
from dbus_fast.aio.message_bus import _MessageWriter
from dbus_fast.aio.message_reader import build_message_reader
from dbus_fast.errors import AuthError, DBusFastError

from statewarden.errors import SystemdCallFailed, SystemdUnavailable
from statewarden.manager_socket import (
    is_private_socket,
    private_socket_address,
    unavailable,
)
from statewarden.manager_socket import (
    session_bus_address as session_bus_address,  # noqa: PLC0414 - the client's, named here too
)

DEFAULT_UNIT_PATTERNS = ("hermes-gateway*.service", "hermes.service", "hermes-dashboard*.service")
DEFAULT_JOB_TIMEOUT_S = 90.0
DEFAULT_CALL_TIMEOUT_S = 10.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0
# How long a bus without org.freedesktop.systemd1 is given for the manager to take it.
DEFAULT_NAME_WAIT_S = 5.0
_PEER_PINGS = 25
_PEER_PING_S = 0.2

_BUS = "org.freedesktop.DBus"
_BUS_PATH = "/org/freedesktop/DBus"
_SYSTEMD = "org.freedesktop.systemd1"
_PATH = "/org/freedesktop/systemd1"
_MANAGER = "org.freedesktop.systemd1.Manager"
_UNIT = "org.freedesktop.systemd1.Unit"
_SERVICE = "org.freedesktop.systemd1.Service"
_SCOPE = "org.freedesktop.systemd1.Scope"
_PROPS = "org.freedesktop.DBus.Properties"
_PEER = "org.freedesktop.DBus.Peer"
_UNIT_PATH_PREFIX = "/org/freedesktop/systemd1/unit/"
_NOT_THERE = (
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
    "org.freedesktop.DBus.Error.UnknownObject",
)
_SPAWN = "org.freedesktop.DBus.Error.Spawn."
_ACCESS_DENIED = (
    "org.freedesktop.DBus.Error.AccessDenied",
    "org.freedesktop.DBus.Error.AuthFailed",
    "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired",
)
_JOB_REMOVED_RULE = (
    f"type='signal',sender='{_SYSTEMD}',path='{_PATH}',interface='{_MANAGER}',member='JobRemoved'"
)
_PROPERTIES_RULE = (
    f"type='signal',sender='{_SYSTEMD}',interface='{_PROPS}',member='PropertiesChanged',"
    f"path_namespace='{_UNIT_PATH_PREFIX.rstrip('/')}'"
)


@dataclass(frozen=True)
class UnitInfo:
    """One loaded unit of the user manager, with what statewarden needs to act on it."""

    name: str
    description: str
    load_state: str
    active_state: str
    sub_state: str
    main_pid: int
    control_group: str
    n_restarts: int
    path: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "load_state": self.load_state,
            "active_state": self.active_state,
            "sub_state": self.sub_state,
            "main_pid": self.main_pid,
            "control_group": self.control_group,
            "n_restarts": self.n_restarts,
        }


@dataclass(frozen=True)
class JobResult:
    """How a stop or start job ended: systemd's result, or ``timeout`` if we gave up."""

    unit: str
    action: str
    job: str
    result: str  # done, failed, timeout, canceled, dependency, skipped
    waited_s: float
    gave_up: bool = False  # our own wait timed out (result is then "timeout")

    @property
    def ok(self) -> bool:
        return self.result == "done"

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "action": self.action,
            "job": self.job,
            "result": self.result,
            "waited_s": round(self.waited_s, 3),
            "gave_up": self.gave_up,
        }


@dataclass(frozen=True)
class UnitChange:
    """A ``PropertiesChanged`` signal of one unit, with the values that changed."""

    unit: str
    interface: str
    changed: dict[str, Any]


class _PeerBus(MessageBus):
    """A peer-to-peer D-Bus connection (the manager's private socket).

    dbus-fast's ``connect`` always sends ``Hello`` to a bus daemon and writes nothing
    until it has the unique name that ``Hello`` returns; on a peer-to-peer connection
    there is no bus daemon to answer it. This ``connect`` authenticates, starts the
    reader and sets a placeholder name, so calls go out at once.
    """

    async def connect(self) -> MessageBus:
        (transport, options), *_ = self._bus_address
        sock, stream, address = self._create_socket_for_transport(transport, options)
        try:
            sock.setblocking(False)
            await self._loop.sock_connect(sock, address)
        except BaseException:
            stream.close()
            sock.close()
            raise
        self._sock = sock
        self._stream = stream
        self._fd = sock.fileno()
        self._writer = _MessageWriter(self)
        await self._authenticate()
        self._loop.add_reader(
            self._fd,
            build_message_reader(
                self._sock, self._process_message, self._finalize, self._negotiate_unix_fd
            ),
        )
        self.unique_name = ":peer-to-peer"
        self._writer.schedule_write()
        # systemd 252 reads the first message together with BEGIN when they arrive at
        # once, and then waits for the socket to be readable again before it looks at
        # it: a Ping that gets no answer is followed by another, whose bytes wake it.
        for _ in range(_PEER_PINGS):
            ping = Message(path=_PATH, interface=_PEER, member="Ping")
            try:
                await asyncio.wait_for(self.call(ping), _PEER_PING_S)
                return self
            except TimeoutError:
                continue
        self.disconnect()
        raise TimeoutError


def unit_name_from_path(path: str) -> str:
    """Undo systemd's object-path escaping (``_2d`` is ``-``, ``_2e`` is ``.``).

    ``/org/freedesktop/systemd1/unit/hermes_2dgateway_2eservice`` -> ``hermes-gateway.service``
    """
    raw = path.removeprefix(_UNIT_PATH_PREFIX)
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] == "_" and i + 2 < len(raw):
            try:
                out.append(int(raw[i + 1 : i + 3], 16))
                i += 3
                continue
            except ValueError:
                pass
        out.extend(raw[i].encode())
        i += 1
    return out.decode("utf-8", "replace")


def _unwrap(value: Any) -> Any:
    return value.value if isinstance(value, Variant) else value


class UserManager:
    """An asyncio client of the systemd user manager. Use ``async with``."""

    def __init__(
        self,
        address: str | None = None,
        *,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        name_wait_s: float = DEFAULT_NAME_WAIT_S,
    ) -> None:
        self.address = address
        self.name_wait_s = name_wait_s
        self.peer = False  # connected to the manager's private socket
        self.call_timeout_s = call_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._bus: MessageBus | None = None
        self._subscribed = False
        self._removed: dict[str, str] = {}
        self._removed_event = asyncio.Event()
        self._changes: asyncio.Queue[UnitChange] | None = None

    async def __aenter__(self) -> UserManager:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- connection -------------------------------------------------------------

    async def connect(self) -> None:
        """The private socket first (when no address was given), then the bus."""
        if self.address is None:
            private = private_socket_address()
            if private is not None:
                try:
                    await self._connect(private)
                    return
                except SystemdUnavailable:
                    pass  # another uid's manager, a stale socket: the bus may still serve
        await self._connect(self.address or session_bus_address())

    async def _connect(self, address: str) -> None:
        self.address = address
        self.peer = is_private_socket(address)
        try:
            bus = (_PeerBus if self.peer else MessageBus)(bus_address=address)
            self._bus = await asyncio.wait_for(bus.connect(), self.connect_timeout_s)
        except TimeoutError as exc:
            raise self._unavailable(
                f"the bus at {address} did not answer within {self.connect_timeout_s:g} s"
            ) from exc
        except AuthError as exc:
            raise self._unavailable(f"access denied by the bus at {address} ({exc})") from exc
        except PermissionError as exc:
            raise self._unavailable(f"access denied to {address} ({exc.strerror})") from exc
        except (ConnectionResetError, BrokenPipeError, EOFError) as exc:
            # dbus-daemon drops a connection it will not authenticate (another uid's bus).
            raise self._unavailable(
                f"access denied by the bus at {address} (it closed the connection while"
                f" authenticating uid {os.getuid()})"
            ) from exc
        except (OSError, DBusFastError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise self._unavailable(f"cannot connect to {address} ({reason})") from exc
        self._bus.add_message_handler(self._on_message)
        try:
            if not self.peer:
                await self._wait_for_name()
            version = await self.get_property(_PATH, _MANAGER, "Version")
        except SystemdCallFailed as exc:
            self.close()
            if exc.error_name in _NOT_THERE or exc.error_name.startswith(_SPAWN):
                raise self._unavailable(f"no systemd on the bus at {address}") from exc
            if exc.error_name in _ACCESS_DENIED:
                raise self._unavailable(f"access denied by systemd on {address}") from exc
            raise self._unavailable(str(exc)) from exc
        except SystemdUnavailable:
            self.close()
            raise
        self.version = str(version)

    async def _wait_for_name(self) -> None:
        """Wait (up to ``name_wait_s``) until ``org.freedesktop.systemd1`` has an owner.

        ``StartServiceByName`` is the bus's own wait: a bus started by the user manager
        (``dbus-daemon --systemd-activation``) answers it once the manager has taken its
        name; a bus with no systemd behind it answers at once with an error
        (``ServiceUnknown``, or ``Spawn.*`` from Debian's ``Exec=/bin/false`` stub).
        """
        (owned,) = await self._call(
            "NameHasOwner", "s", [_SYSTEMD], interface=_BUS, path=_BUS_PATH, destination=_BUS
        )
        if owned:
            return
        try:
            await self._call(
                "StartServiceByName",
                "su",
                [_SYSTEMD, 0],
                interface=_BUS,
                path=_BUS_PATH,
                destination=_BUS,
                timeout_s=self.name_wait_s,
            )
        except SystemdCallFailed as exc:
            if exc.error_name != "timeout":
                raise
            raise self._unavailable(
                f"no systemd on the bus at {self.address} (waited {self.name_wait_s:g} s"
                " for it to take org.freedesktop.systemd1)"
            ) from None

    def close(self) -> None:
        if self._bus is not None:
            self._bus.disconnect()
            self._bus = None

    @staticmethod
    def _unavailable(reason: str) -> SystemdUnavailable:
        return unavailable(reason)

    # -- calls ------------------------------------------------------------------

    async def _call(
        self,
        member: str,
        signature: str = "",
        body: Sequence[Any] = (),
        *,
        interface: str = _MANAGER,
        path: str = _PATH,
        destination: str = _SYSTEMD,
        timeout_s: float | None = None,
    ) -> list[Any]:
        if self._bus is None:
            raise self._unavailable("not connected")
        # NO_AUTO_START: a session bus without systemd must not try to activate it.
        msg = Message(
            destination=destination,
            path=path,
            interface=interface,
            member=member,
            signature=signature,
            body=list(body),
            flags=MessageFlag.NO_AUTOSTART,
        )
        timeout_s = self.call_timeout_s if timeout_s is None else timeout_s
        try:
            reply = await asyncio.wait_for(self._bus.call(msg), timeout_s)
        except TimeoutError as exc:
            reason = f"no reply within {timeout_s:g} s"
            raise SystemdCallFailed(member, "timeout", reason) from exc
        except (OSError, EOFError, DBusFastError) as exc:
            raise self._unavailable(f"the bus connection failed during {member} ({exc})") from exc
        if reply.message_type == MessageType.ERROR:
            text = str(reply.body[0]) if reply.body else ""
            raise SystemdCallFailed(member, str(reply.error_name), text)
        return list(reply.body)

    async def get_property(self, path: str, interface: str, name: str) -> Any:
        body = await self._call("Get", "ss", [interface, name], interface=_PROPS, path=path)
        return _unwrap(body[0])

    async def get_all(self, path: str, interface: str) -> dict[str, Any]:
        body = await self._call("GetAll", "s", [interface], interface=_PROPS, path=path)
        return {k: _unwrap(v) for k, v in body[0].items()}

    async def list_units(self, patterns: Sequence[str] = DEFAULT_UNIT_PATTERNS) -> list[UnitInfo]:
        """Loaded units whose names match ``patterns`` (shell globs), sorted by name."""
        body = await self._call("ListUnitsByPatterns", "asas", [[], list(patterns)])
        out = []
        for row in body[0]:
            name, description, load, active, sub, _following, path = row[:7]
            out.append(
                await self._unit_info(
                    name, path, description=description, load=load, active=active, sub=sub
                )
            )
        return sorted(out, key=lambda u: u.name)

    async def unit(self, name: str) -> UnitInfo | None:
        """One unit by name, loading it if needed; None if systemd knows no such unit."""
        try:
            body = await self._call("LoadUnit", "s", [name])
        except SystemdCallFailed as exc:
            if exc.error_name.endswith(("NoSuchUnit", "InvalidArgs")):
                return None
            raise
        path = body[0]
        u = await self.get_all(path, _UNIT)
        return await self._unit_info(
            name,
            path,
            description=u.get("Description", ""),
            load=u.get("LoadState", ""),
            active=u.get("ActiveState", ""),
            sub=u.get("SubState", ""),
        )

    async def _unit_info(
        self, name: str, path: str, *, description: str, load: str, active: str, sub: str
    ) -> UnitInfo:
        props: dict[str, Any] = {}
        if name.endswith(".service"):
            props = await self.get_all(path, _SERVICE)
        elif name.endswith(".scope"):
            props = await self.get_all(path, _SCOPE)
        return UnitInfo(
            name=name,
            description=description,
            load_state=load,
            active_state=active,
            sub_state=sub,
            main_pid=int(props.get("MainPID", 0) or 0),
            control_group=str(props.get("ControlGroup", "") or ""),
            n_restarts=int(props.get("NRestarts", 0) or 0),
            path=path,
        )

    async def unit_by_pid(self, pid: int) -> str | None:
        """The unit the manager puts ``pid`` in, or None if it belongs to none of its units."""
        try:
            body = await self._call("GetUnitByPID", "u", [pid])
        except SystemdCallFailed as exc:
            if exc.error_name.endswith(("NoUnitForPID", "UnixProcessIdUnknown", "InvalidArgs")):
                return None
            raise
        return str(await self.get_property(body[0], _UNIT, "Id"))

    # -- jobs ---------------------------------------------------------------------

    async def _subscribe(self) -> None:
        if self._subscribed:
            return
        await self._add_match(_JOB_REMOVED_RULE)
        await self._call("Subscribe")
        self._subscribed = True

    async def _add_match(self, rule: str) -> None:
        if self.peer:
            return  # no bus daemon to filter: the manager sends its signals to each peer
        await self._call("AddMatch", "s", [rule], interface=_BUS, path=_BUS_PATH, destination=_BUS)

    def _on_message(self, msg: Message) -> None:
        if msg.message_type != MessageType.SIGNAL:
            return
        if msg.member == "JobRemoved" and msg.interface == _MANAGER:
            _id, job, _unit, result = msg.body
            self._removed[str(job)] = str(result)
            self._removed_event.set()
        elif (
            msg.member == "PropertiesChanged"
            and self._changes is not None
            and str(msg.path).startswith(_UNIT_PATH_PREFIX)
        ):
            iface, changed, _invalidated = msg.body
            values = {k: _unwrap(v) for k, v in changed.items()}
            self._changes.put_nowait(
                UnitChange(unit_name_from_path(str(msg.path)), str(iface), values)
            )

    async def _job(
        self, action: str, member: str, unit: str, mode: str, timeout_s: float
    ) -> JobResult:
        await self._subscribe()  # before the call, so its JobRemoved cannot be missed
        started = time.monotonic()
        body = await self._call(member, "ss", [unit, mode])
        job = str(body[0])
        deadline = started + timeout_s
        while job not in self._removed:
            left = deadline - time.monotonic()
            if left <= 0:
                return JobResult(unit, action, job, "timeout", time.monotonic() - started, True)
            self._removed_event.clear()
            if job in self._removed:
                break
            try:
                await asyncio.wait_for(self._removed_event.wait(), left)
            except TimeoutError:
                continue
        result = self._removed.pop(job)
        return JobResult(unit, action, job, result, time.monotonic() - started)

    async def stop_unit(
        self, unit: str, *, mode: str = "replace", timeout_s: float = DEFAULT_JOB_TIMEOUT_S
    ) -> JobResult:
        return await self._job("stop", "StopUnit", unit, mode, timeout_s)

    async def start_unit(
        self, unit: str, *, mode: str = "replace", timeout_s: float = DEFAULT_JOB_TIMEOUT_S
    ) -> JobResult:
        return await self._job("start", "StartUnit", unit, mode, timeout_s)

    async def restart_unit(
        self, unit: str, *, mode: str = "replace", timeout_s: float = DEFAULT_JOB_TIMEOUT_S
    ) -> JobResult:
        return await self._job("restart", "RestartUnit", unit, mode, timeout_s)

    # -- unit files -------------------------------------------------------------------

    async def reload(self) -> None:
        """``daemon-reload``: the manager reads the unit files again."""
        await self._call("Reload")

    async def enable_unit_files(self, names: Sequence[str]) -> list[tuple[str, str, str]]:
        """Enable units (their ``[Install]`` links); returns the manager's changes."""
        body = await self._call("EnableUnitFiles", "asbb", [list(names), False, False])
        return [(str(a), str(b), str(c)) for a, b, c in body[1]]

    async def disable_unit_files(self, names: Sequence[str]) -> list[tuple[str, str, str]]:
        """Disable units (remove their ``[Install]`` links); returns the manager's changes."""
        body = await self._call("DisableUnitFiles", "asb", [list(names), False])
        return [(str(a), str(b), str(c)) for a, b, c in body[0]]

    async def unit_file_state(self, name: str) -> str | None:
        """``enabled``, ``disabled``, ``static``, ...; None when there is no such unit file."""
        try:
            body = await self._call("GetUnitFileState", "s", [name])
        except SystemdCallFailed as exc:
            if exc.error_name.endswith(("NoSuchUnit", "FileNotFound", "InvalidArgs")):
                return None
            raise
        return str(body[0])

    # -- watching -------------------------------------------------------------------

    async def watch_units(
        self, patterns: Sequence[str] = DEFAULT_UNIT_PATTERNS
    ) -> AsyncIterator[UnitChange]:
        """Subscribe to ``PropertiesChanged`` of units matching ``patterns``; return the stream.

        The match rule and ``Subscribe`` are in place when this returns, so a caller
        that reads the units' state afterwards cannot miss a change in between.
        """
        if self._changes is None:
            self._changes = asyncio.Queue()
            await self._add_match(_PROPERTIES_RULE)
            await self._subscribe()
        return self._matching(self._changes, tuple(patterns))

    @staticmethod
    async def _matching(
        queue: asyncio.Queue[UnitChange], patterns: tuple[str, ...]
    ) -> AsyncIterator[UnitChange]:
        while True:
            change = await queue.get()
            if any(fnmatch.fnmatchcase(change.unit, p) for p in patterns):
                yield change


# -- from synchronous code (the CLI, maintenance steps in a worker thread) -----------------

T = TypeVar("T")


def call_sync(work: Callable[[UserManager], Awaitable[T]], address: str | None = None) -> T:
    """``work(manager)`` on one connection to the user manager, from synchronous code: the
    connection is opened, ``work`` awaited, the connection closed, its result returned.
    Raises what :class:`UserManager` raises (:class:`SystemdUnavailable`,
    :class:`SystemdCallFailed`). Not from inside a running event loop."""

    async def run() -> T:
        async with UserManager(address) as manager:
            return await work(manager)

    return asyncio.run(run())


def list_units_sync(
    patterns: Sequence[str] = DEFAULT_UNIT_PATTERNS, address: str | None = None
) -> list[UnitInfo]:
    return call_sync(lambda m: m.list_units(patterns), address)


def stop_unit_sync(
    unit: str, *, address: str | None = None, timeout_s: float = DEFAULT_JOB_TIMEOUT_S
) -> JobResult:
    return call_sync(lambda m: m.stop_unit(unit, timeout_s=timeout_s), address)


def start_unit_sync(
    unit: str, *, address: str | None = None, timeout_s: float = DEFAULT_JOB_TIMEOUT_S
) -> JobResult:
    return call_sync(lambda m: m.start_unit(unit, timeout_s=timeout_s), address)
