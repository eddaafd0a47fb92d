"""Maintenance: stop every holder, repair, swap, restart.

``plan`` decides how each holder is stopped, ``prebuild`` makes the new file while
Hermes runs, ``quiesce`` stops holders and waits for them to settle, ``fence`` keeps
the old file from being opened again, ``swap`` puts the new file in place and the
original in quarantine, ``ledger`` records each step before it starts, ``run`` is one
run in order (and its roll-back / roll-forward), ``windows`` and ``auto`` are the
daemon's side.
"""
