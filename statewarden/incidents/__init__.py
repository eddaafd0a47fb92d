"""Incidents: what watchers signal, turned into incidents a person reads.

The one table of incident kinds is ``statewarden.kinds`` (the base: config validates
against it); ``signals`` defines signals and
observations; ``evidence`` is where their text enters, capped and redacted once; ``book``
opens, updates, resolves and persists incidents; ``timeline`` keeps the bounded evidence
timeline per database; ``recorder`` puts what the watchers find into both; ``show`` is an
incident with the timeline around its first signal.
"""

from typing import TYPE_CHECKING

from statewarden.public import public_face

# The names other parts use, and the module each lives in ("": the submodule itself).
HOMES = {
    "Incident": "book",
    "EVIDENCE_LINE_MAX_CHARS": "evidence",
    "cap_evidence": "evidence",
    "scrub": "evidence",
    "IncidentBook": "book",
    "Update": "book",
    "Recorder": "recorder",
    "HOLDER_KINDS": "restart",
    "START_KINDS": "restart",
    "RestartCheck": "restart",
    "show_incident": "show",
    "Found": "signals",
    "Observation": "signals",
    "Signal": "signals",
    "Timeline": "timeline",
}
__all__ = list(HOMES)
if not TYPE_CHECKING:  # mypy reads each name in its home module, typed
    __getattr__ = public_face(__name__, HOMES)
