"""statewarden: a supervisor for Hermes Agent's state.db."""

from statewarden.errors import ConfigError, StatewardenError

__version__ = "0.1.0"

__all__ = ["ConfigError", "StatewardenError", "__version__"]
