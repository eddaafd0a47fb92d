"""``statewardenctl demo``: the phantom row repaired in a sandbox, with no root and no Hermes.

- ``database``: the shipped database Hermes itself wrote (``hermes-state.db.gz``);
- ``damage``: the phantom row and FTS damage, written into a closed file;
- ``hermes_lookalike``, ``desktop_lookalike``: stdlib-only stand-ins for ``hermes`` and
  the desktop app's respawner, copied into the sandbox;
- ``sandbox``: the temporary folder, its environment and processes, and their cleanup;
- ``run``: the steps a user would run, with their output and outcomes.
"""

from statewarden.demo.run import Demo, DemoReport, Step

__all__ = ["Demo", "DemoReport", "Step"]
