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
else:  # the same names, typed, for mypy (tests/project/test_layers.py holds them to HOMES)
    from statewarden.incidents.book import Incident as Incident
    from statewarden.incidents.book import IncidentBook as IncidentBook
    from statewarden.incidents.book import Update as Update
    from statewarden.incidents.evidence import EVIDENCE_LINE_MAX_CHARS as EVIDENCE_LINE_MAX_CHARS
    from statewarden.incidents.evidence import cap_evidence as cap_evidence
    from statewarden.incidents.evidence import scrub as scrub
    from statewarden.incidents.recorder import Recorder as Recorder
    from statewarden.incidents.restart import HOLDER_KINDS as HOLDER_KINDS
    from statewarden.incidents.restart import START_KINDS as START_KINDS
    from statewarden.incidents.restart import RestartCheck as RestartCheck
    from statewarden.incidents.show import show_incident as show_incident
    from statewarden.incidents.signals import Found as Found
    from statewarden.incidents.signals import Observation as Observation
    from statewarden.incidents.signals import Signal as Signal
    from statewarden.incidents.timeline import Timeline as Timeline
