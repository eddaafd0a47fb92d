"""Alerts: incident changes routed to the people who act on them.

The home of the router (incident changes -> notifications, grouping, reminders,
inhibition), its sinks (journald, Telegram) and the durable outbox between them.
``announce`` is where the daemon hands over every incident update.
"""
