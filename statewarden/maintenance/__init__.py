"""Maintenance: stop every holder, repair, swap, restart.

The home of the plan, the fence around the old file, the swap, the run ledger (the
per-step, crash-safe record of one run) and the maintenance windows.
"""
