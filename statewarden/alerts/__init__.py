"""Alerts: incident changes routed to the people who act on them.

The home of the router (incident changes -> notifications, grouping, reminders,
inhibition), its sinks (journald, Telegram) and the durable outbox between them.
``announce`` is where the daemon hands over every incident update.
"""

from typing import TYPE_CHECKING

from statewarden.public import public_face

# The names other parts use, and the module each lives in ("": the submodule itself).
HOMES = {
    "supervisor": "",
    "Announcer": "announce",
    "Item": "message",
    "Notification": "message",
    "FOLDED_INTO_CORRUPTION": "router",
    "Alerts": "service",
    "SINK_NAMES": "service",
    "outbox_status": "service",
    "routes_of": "service",
    "saved_states": "service",
    "send_test": "service",
    "SilenceFile": "silences",
    "describe": "silences",
    "listing": "silences",
}
__all__ = list(HOMES)
if not TYPE_CHECKING:  # mypy reads each name in its home module, typed
    __getattr__ = public_face(__name__, HOMES)
