"""A subpackage's public face: the names other parts may import, loaded when first used.

Each subpackage's ``__init__`` names its API in ``__all__`` and where each name lives::

    HOMES = {"check_database": "check", "recover": "", ...}
    __all__ = list(HOMES)
    if not TYPE_CHECKING:
        __getattr__ = public_face(__name__, HOMES)
    else:  # the same names, typed, for mypy
        from statewarden.recovery.check import check_database as check_database

so ``statewarden.recovery.check_database`` is the function in
``statewarden.recovery.check``, imported only when asked for (the CLI imports its
commands lazily and stays quick). A home of ``""`` is the submodule of that name itself;
so is a name that is also a submodule's (Python binds a submodule on its package once
imported): ``recover`` is ``statewarden.recovery.recover``, whose ``recover()`` is the
entry.
Other parts import only these names, and only from the package; the ``__init__``
imports the same names again in the ``else:`` of that ``if``, which only mypy reads, so
each is typed as its home defines it. ``tests/project/test_layers.py`` checks both.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


def public_face(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: each name of ``homes`` from its module."""

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # __import__ and sys.modules, not importlib (which imports warnings): the quick
        # commands (`statewardenctl holders`, `status`) take their names through here
        import sys  # noqa: PLC0415

        module = f"{package}.{name}" if home == "" else f"{package}.{home}"
        __import__(module)
        found = sys.modules[module]
        return found if home == "" else getattr(found, name)

    return __getattr__
