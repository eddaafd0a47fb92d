"""What the tests share, each defined here once: no test module imports another.

The line between ``lab/`` and here: ``lab/`` makes real Hermes material (databases written
by real Hermes code, damage, writers and holders, bot and push servers) and works without
pytest, from the command line and from the benches; it never imports ``tests``.
``tests/support/`` holds what only the tests (and a bench that drives the same harness) use:
pytest marks and fixtures, the tiers and their check (``tiers.py``), the CLI runner, a
daemon subprocess, waiting, stand-ins installed as commands (``fake_hermes.py``,
``fake_litestream.py``, ``respawner.py``, ``ns_holders.py``) and a private systemd --user
manager (``systemd_harness.py``). It may import ``lab``; ``lab`` never imports it.

A fixture that tests in more than one folder use is registered in ``tests/conftest.py``'s
``pytest_plugins`` rather than imported into each module.
"""
