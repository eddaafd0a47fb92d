"""The holders engine: who holds a database, and which unit each holder belongs to.

``processes`` reads one process from ``/proc`` and names its kind; ``scan`` finds every
holder of a database (descriptors, maps, ``/proc/locks``, stale inodes), incrementally;
``opens`` turns inotify open events into cheap re-scans; ``report`` holds the records
and their JSON; ``units`` confirms each holder's unit with the user manager.
"""
