"""Configuration: one YAML file -> validated, frozen dataclasses.

Where the file is: ``--config`` > ``$STATEWARDEN_CONFIG`` >
``$XDG_CONFIG_HOME/statewarden/config.yaml``. No file at the default place means
every default; a file named explicitly must exist. Every key is documented in
``etc/statewarden.yaml`` and a test keeps that file and this schema in step.

A section is a dataclass field of :class:`Config`; adding one is adding a field.
Every invalid file raises :class:`ConfigError` naming the file, the line when YAML
knows it, the dotted key path and what was expected. Reading is bounded: a regular
file only (never a FIFO or a device), at most ``CONFIG_MAX_BYTES``, nested at most
``CONFIG_MAX_DEPTH`` levels, aliases expanding to at most ``CONFIG_MAX_NODES`` values;
a rejected secret is never echoed.

This module is the config's one name for callers; its parts, each imported whole:

- ``config_sections.py``: each section's dataclass and its named defaults;
- ``config_values.py``: durations, sizes, windows, secrets: how each is written, read
  back and shown, and a duration's floor;
- ``config_validation.py``: YAML data -> the sections, every key checked;
- ``config_loading.py``: the file found and read within bounds; statewarden's folders;
- ``config_show.py``: the config as ``config show`` prints it; the documented keys.

``config_literals.py`` stays apart: what a command needs before (or instead of) reading
the file, without importing this module.
"""

from __future__ import annotations

# Re-exported ("X as X" marks that for mypy): the holders' literals and the file's place,
# defined where a command that starts fast can import them without this module.
from statewarden.config_literals import DEFAULT_OTHER_USERS as DEFAULT_OTHER_USERS  # noqa: PLC0414
from statewarden.config_literals import ENV_CONFIG as ENV_CONFIG  # noqa: PLC0414
from statewarden.config_literals import HolderKind as HolderKind  # noqa: PLC0414
from statewarden.config_literals import OtherUsersPolicy as OtherUsersPolicy  # noqa: PLC0414
from statewarden.config_literals import default_config_path as default_config_path  # noqa: PLC0414
from statewarden.config_literals import xdg_dir as xdg_dir  # noqa: PLC0414

# Every public name of the parts, as before they were parts; and the validation's own
# steps (_convert, _Ctx), for the tests that drive them directly.
from statewarden.config_loading import *  # noqa: F403
from statewarden.config_sections import *  # noqa: F403
from statewarden.config_show import *  # noqa: F403
from statewarden.config_validation import *  # noqa: F403
from statewarden.config_validation import _convert as _convert  # noqa: PLC0414
from statewarden.config_validation import _Ctx as _Ctx  # noqa: PLC0414
from statewarden.config_values import *  # noqa: F403
