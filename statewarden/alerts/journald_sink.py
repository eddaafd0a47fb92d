"""The journald sink: one journal entry per incident in a notification.

Each entry has the kind's ``MESSAGE_ID`` (so ``journalctl -x`` shows the catalogue text
from ``systemd/statewarden.catalog``), ``PRIORITY`` from the severity (a "resolved" one
is ``notice``, so ``-p warning`` lists only what is wrong), ``SYSLOG_IDENTIFIER``
``statewarden``, and ``STATEWARDEN_INCIDENT``, ``STATEWARDEN_KIND``, ``STATEWARDEN_DB``,
``STATEWARDEN_STATE`` (firing / resolved / test), ``STATEWARDEN_SEVERITY``,
``STATEWARDEN_PROFILE``, ``STATEWARDEN_CHANGE``, ``STATEWARDEN_COUNT``,
``STATEWARDEN_NOTIFICATION`` (the outbox key). ``MESSAGE`` is the notification's text.

With no journal socket the entry is written to stderr with a ``<N>`` priority prefix
(what journald's stream reader turns back into a priority under systemd).
"""

from __future__ import annotations

import sys
from typing import TextIO

from statewarden.alerts.message import Notification, plain_text
from statewarden.alerts.outbox import Entry
from statewarden.alerts.sink import Progress, Retry
from statewarden.journald import PRIORITY_NOTICE, JournalSender, priority_of

TEST_MESSAGE_ID = "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0aff"
IDENTIFIER = "statewarden"


def entry_fields(n: Notification, index: int) -> dict[str, object]:
    """The journal fields for item ``index`` of ``n`` (a test notification has no items)."""
    if n.state == "test" or not n.items:
        return {
            "MESSAGE": plain_text(n),
            "MESSAGE_ID": TEST_MESSAGE_ID,
            "PRIORITY": PRIORITY_NOTICE,
            "SYSLOG_IDENTIFIER": IDENTIFIER,
            "STATEWARDEN_STATE": "test",
            "STATEWARDEN_NOTIFICATION": n.key,
        }
    item = n.items[index]
    one = Notification(n.key, n.state, n.host, n.created_at, [item], n.dropped)
    return {
        "MESSAGE": plain_text(one),
        "MESSAGE_ID": item.message_id,
        "PRIORITY": PRIORITY_NOTICE if n.state == "resolved" else priority_of(item.severity),
        "SYSLOG_IDENTIFIER": IDENTIFIER,
        "STATEWARDEN_INCIDENT": item.incident,
        "STATEWARDEN_KIND": item.kind,
        "STATEWARDEN_DB": item.db,
        "STATEWARDEN_STATE": n.state,
        "STATEWARDEN_SEVERITY": item.severity,
        "STATEWARDEN_PROFILE": item.profile,
        "STATEWARDEN_CHANGE": item.change,
        "STATEWARDEN_COUNT": item.count,
        "STATEWARDEN_HOST": n.host,
        "STATEWARDEN_NOTIFICATION": n.key,
    }


class JournaldSink:
    name = "journald"

    def __init__(self, sender: JournalSender | None = None, stream: TextIO | None = None) -> None:
        self.sender = sender or JournalSender()
        self.stream = stream

    async def deliver(self, entry: Entry, progress: Progress) -> str:
        n = entry.notification
        count = max(1, len(n.items))
        where = "journal" if self.sender.available else "stderr (no journal socket)"
        for index in range(entry.parts_sent, count):
            fields = entry_fields(n, index)
            if self.sender.available:
                try:
                    self.sender.send(fields)
                except OSError as exc:
                    raise Retry(f"journald: {exc.strerror or exc}") from None
            else:
                stream = self.stream or sys.stderr
                first, *rest = str(fields["MESSAGE"]).splitlines()
                stream.write(f"<{fields['PRIORITY']}>{first}\n")
                for line in rest:
                    stream.write(f"<{fields['PRIORITY']}>{line}\n")
                stream.flush()
            progress(index + 1)
        return f"{count} entr{'y' if count == 1 else 'ies'} written to the {where}"

    async def close(self) -> None:
        self.sender.close()
