"""The recovery engine: check a database and build a verified new one from it.

A private copy of the database bundle (``bundle``) is checked without a cap
(``integrity``) and classified (``diagnose``, using the file's own ``schema``); ``recover``
escalates only as far as the damage needs: indexes rebuilt, a fresh file rebuilt row by
row (``scan``, ``rebuild``), rows salvaged from leaf pages (``pages``) and from WAL
frames SQLite does not replay (``wal``), decoded and completed around the build
(``salvage``), rows compared with and rebuilt from their FTS
copies (``copies``); the output is
verified on its own terms (``verify``) and the ``report`` is measured on both files.
The source is only ever read.
"""

from typing import TYPE_CHECKING

from statewarden.public import public_face

# The names other parts use, and the module each lives in ("": the submodule itself).
HOMES = {
    "FREE_SPACE_MARGIN_BYTES": "bundle",
    "WORK_LOCK": "bundle",
    "WORK_PREFIX": "bundle",
    "bundle_bytes": "bundle",
    "make_work_copy": "bundle",
    "read_captures": "captures",
    "remove_abandoned": "bundle",
    "check_database": "check",
    "Diagnosis": "diagnosis",
    "exit_code_for": "diagnose",
    "worst": "diagnosis",
    "recover": "",  # the module: its recover() is the engine's entry
    "Report": "report",
}
__all__ = list(HOMES)
if not TYPE_CHECKING:  # mypy reads each name in its home module, typed
    __getattr__ = public_face(__name__, HOMES)
else:  # the same names, typed, for mypy (tests/project/test_layers.py holds them to HOMES)
    from statewarden.recovery.bundle import FREE_SPACE_MARGIN_BYTES as FREE_SPACE_MARGIN_BYTES
    from statewarden.recovery.bundle import WORK_LOCK as WORK_LOCK
    from statewarden.recovery.bundle import WORK_PREFIX as WORK_PREFIX
    from statewarden.recovery.bundle import bundle_bytes as bundle_bytes
    from statewarden.recovery.bundle import make_work_copy as make_work_copy
    from statewarden.recovery.bundle import remove_abandoned as remove_abandoned
    from statewarden.recovery.captures import read_captures as read_captures
    from statewarden.recovery.check import check_database as check_database
    from statewarden.recovery.diagnose import exit_code_for as exit_code_for
    from statewarden.recovery.diagnosis import Diagnosis as Diagnosis
    from statewarden.recovery.diagnosis import worst as worst
    from statewarden.recovery.report import Report as Report
