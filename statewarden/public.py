"""A subpackage's public face: the names other parts may import, loaded when first used.

Each subpackage's ``__init__`` names its API in ``__all__`` and where each name lives::

    HOMES = {"check_database": "check", "recover": "recover", ...}
    __all__ = list(HOMES)
    if not TYPE_CHECKING:  # mypy reads each name in its home module, typed
        __getattr__ = public_face(__name__, HOMES)

so ``statewarden.recovery.check_database`` is the function in
``statewarden.recovery.check``, imported only when asked for (the CLI imports its
commands lazily and stays quick). A home of ``""`` is the submodule of that name itself;
so is a name that is also a submodule's (Python binds a submodule on its package once
imported): ``recover`` is ``statewarden.recovery.recover``, whose ``recover()`` is the
entry.
Other parts import only these names (from the package or from their home module);
``tests/project/test_layers.py`` checks it.
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
        # here, not at the top: importlib imports warnings, and a package that is
        # imported only for one of its modules (`statewardenctl holders`) asks for no name
        import importlib  # noqa: PLC0415

        if home == "":
            return importlib.import_module(f"{package}.{name}")
        return getattr(importlib.import_module(f"{package}.{home}"), name)

    return __getattr__
