"""Alerts: incident changes routed to the people who act on them.

The home of the router (incident changes -> notifications, grouping, reminders,
inhibition), its sinks (journald, Telegram) and the durable outbox between them.
"""
