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
else:  # the same names, typed, for mypy (tests/project/test_layers.py holds them to HOMES)
    from statewarden.alerts.announce import Announcer as Announcer
    from statewarden.alerts.message import Item as Item
    from statewarden.alerts.message import Notification as Notification
    from statewarden.alerts.router import FOLDED_INTO_CORRUPTION as FOLDED_INTO_CORRUPTION
    from statewarden.alerts.service import SINK_NAMES as SINK_NAMES
    from statewarden.alerts.service import Alerts as Alerts
    from statewarden.alerts.service import outbox_status as outbox_status
    from statewarden.alerts.service import routes_of as routes_of
    from statewarden.alerts.service import saved_states as saved_states
    from statewarden.alerts.service import send_test as send_test
    from statewarden.alerts.silences import SilenceFile as SilenceFile
    from statewarden.alerts.silences import describe as describe
    from statewarden.alerts.silences import listing as listing
