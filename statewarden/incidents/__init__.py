"""Incidents: what watchers signal, turned into incidents a person reads.

``signals`` defines signals and observations and the table of incident kinds; ``book``
opens, updates, resolves and persists incidents; ``timeline`` keeps the bounded evidence
timeline per database; ``recorder`` puts what the watchers find into both; ``show`` is an
incident with the timeline around its first signal.
"""
