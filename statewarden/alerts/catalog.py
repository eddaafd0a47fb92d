"""The journal message catalogue: what each incident kind means and what to do.

``journalctl -x`` shows, under each entry with a catalogued ``MESSAGE_ID``, the text of
that id from the catalogue database (``/var/lib/systemd/catalog/database``, built by
``journalctl --update-catalog`` from the ``*.catalog`` files in
``/usr/local/lib/systemd/catalog/`` and ``/usr/lib/systemd/catalog/``, the only two folders
systemd 252 reads; there is no per-user one). This module writes
``systemd/statewarden.catalog`` (``python -m statewarden.alerts.catalog``; a test keeps the
committed file equal to it); ``packaging/install.sh`` installs it when run as root.
``@STATEWARDEN_DB@``-style names are replaced by the entry's fields. The text of each
kind (subject, meaning, next step) is its entry in ``incidents/kinds.py``.
"""

from __future__ import annotations

from statewarden.alerts.journald_sink import TEST_MESSAGE_ID
from statewarden.kinds import KINDS


def _entry(message_id: str, subject: str, body: str, next_step: str) -> str:
    return (
        f"-- {message_id}\n"
        f"Subject: statewarden: {subject}\n"
        "Defined-By: statewarden\n"
        "\n"
        f"{body}\n"
        "\n"
        "Incident @STATEWARDEN_INCIDENT@ on @STATEWARDEN_DB@ (profile @STATEWARDEN_PROFILE@), "
        "@STATEWARDEN_STATE@.\n"
        "\n"
        f"What to do: {next_step}\n"
    )


def catalog_text() -> str:
    """The whole ``statewarden.catalog`` file."""
    parts = [
        "# statewarden journal message catalogue (generated: python -m "
        "statewarden.alerts.catalog).\n# Installed into /usr/local/lib/systemd/catalog/ "
        "by packaging/install.sh (as root), then: journalctl --update-catalog\n"
    ]
    for kind in KINDS.values():
        step = kind.next_step.format(profile="@STATEWARDEN_PROFILE@")
        parts.append(_entry(kind.message_id, kind.subject, kind.meaning, step))
    parts.append(
        f"-- {TEST_MESSAGE_ID}\n"
        "Subject: statewarden: test notification\n"
        "Defined-By: statewarden\n"
        "\n"
        "Sent by statewardenctl alerts test: alerts from statewarden reach the journal.\n"
    )
    return "\n".join(parts)


if __name__ == "__main__":
    print(catalog_text(), end="")
