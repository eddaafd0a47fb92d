"""Loading: the config file found, read within bounds and validated; and the folders
statewarden keeps its own files in (its ``paths`` section, else the XDG defaults).

Where the file is: ``--config`` > ``$STATEWARDEN_CONFIG`` >
``$XDG_CONFIG_HOME/statewarden/config.yaml``. No file at the default place means
every default; a file named explicitly must exist. Reading is bounded: a regular
file only (never a FIFO or a device), at most ``CONFIG_MAX_BYTES``, nested at most
``CONFIG_MAX_DEPTH`` levels, aliases expanding to at most ``CONFIG_MAX_NODES`` values.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from statewarden.config_literals import (
    ENV_CONFIG,
    default_config_path,
    default_state_dir_name,
    runtime_dir_name,
)
from statewarden.config_sections import Config
from statewarden.config_validation import config_from_data, paths_from_data
from statewarden.errors import ConfigError

if TYPE_CHECKING:
    import yaml

# Bounds on what a config file may cost to read: the whole schema needs a few hundred
# values and 4 levels; the limits leave room for long target lists and comments.
CONFIG_MAX_BYTES = 1 << 20
CONFIG_MAX_DEPTH = 32
CONFIG_MAX_NODES = 100_000
_TOO_LARGE = f"too large (a config is at most {CONFIG_MAX_BYTES} bytes)"


def state_dir(config: Config, env: Mapping[str, str] | None = None) -> Path:
    if config.paths.state_dir is not None:
        return config.paths.state_dir
    return Path(default_state_dir_name(env))


def runtime_dir(config: Config, env: Mapping[str, str] | None = None) -> Path:
    if config.paths.runtime_dir is not None:
        return config.paths.runtime_dir
    return Path(runtime_dir_name(str(state_dir(config, env)), env))


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Load the effective configuration; raise :class:`ConfigError` if it is invalid."""
    env = os.environ if env is None else env
    explicit = path is not None or bool(env.get(ENV_CONFIG))
    chosen = (
        Path(path) if path is not None else Path(env.get(ENV_CONFIG) or default_config_path(env))
    )
    source = str(chosen)
    try:
        text = _read_bounded(chosen, source)
    except FileNotFoundError:
        if not explicit:
            return Config()
        raise ConfigError("no such file", source=source) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, expected a YAML file", source=source) from None
    except PermissionError:
        raise ConfigError("cannot read: permission denied", source=source) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start} is invalid)", source=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=source) from None
    return parse_config(text, source=source)


def paths_only(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Every default but the ``paths`` section of a config file that is otherwise invalid,
    when that section is valid (else every default): where a daemon started from an
    earlier, valid version of the file keeps its socket. Never raises."""
    env = os.environ if env is None else env
    chosen = (
        Path(path) if path is not None else Path(env.get(ENV_CONFIG) or default_config_path(env))
    )
    import yaml  # noqa: PLC0415 - only a config file needs it (commands start faster)

    try:
        data = yaml.safe_load(_read_bounded(chosen, str(chosen)))
        section = data.get("paths") if isinstance(data, dict) else None
        if not isinstance(section, dict):
            return Config()
        paths = paths_from_data(section, str(chosen))
    except (OSError, ValueError, RecursionError, ConfigError, yaml.YAMLError):
        return Config()
    return Config(paths=paths)


def _read_bounded(path: Path, source: str) -> str:
    """The file's text, if it is a regular file of at most ``CONFIG_MAX_BYTES``.

    Opened non-blocking and checked with fstat before any read, so a FIFO, a device
    (``/dev/zero``) or a huge file is refused at once instead of blocking or eating
    memory (a reload runs on the daemon's loop).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError("not a regular file, expected a YAML file", source=source)
        if st.st_size > CONFIG_MAX_BYTES:
            raise ConfigError(
                f"too large ({st.st_size} bytes; a config is at most {CONFIG_MAX_BYTES})",
                source=source,
            )
        data = os.read(fd, CONFIG_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > CONFIG_MAX_BYTES:
        raise ConfigError(_TOO_LARGE, source=source)
    return data.decode("utf-8")


def _check_shape(node: yaml.Node, source: str) -> None:
    """Refuse YAML whose alias expansion or nesting is out of bounds.

    Aliases share nodes, so a few lines can stand for billions of values (a "billion
    laughs" file) or for a value that contains itself; walking either without a bound
    exhausts memory or the stack. Every node is counted as often as aliases repeat it.
    """
    import yaml  # noqa: PLC0415 - only a config file needs it (commands start faster)

    budget = CONFIG_MAX_NODES
    stack: list[tuple[yaml.Node, int, frozenset[int]]] = [(node, 0, frozenset())]
    while stack:
        n, depth, above = stack.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError(
                f"expands to more than {CONFIG_MAX_NODES} values (aliases repeat too much)",
                source=source,
            )
        if depth > CONFIG_MAX_DEPTH:
            raise ConfigError(
                f"nested more than {CONFIG_MAX_DEPTH} levels deep",
                source=source,
                line=n.start_mark.line + 1,
            )
        if id(n) in above:
            raise ConfigError(
                "an alias refers to a value that contains it (recursive alias)",
                source=source,
                line=n.start_mark.line + 1,
            )
        inner = above | {id(n)}
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack.append((k, depth + 1, inner))
                stack.append((v, depth + 1, inner))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend((item, depth + 1, inner) for item in n.value)


def parse_config(text: str, *, source: str = "<config>") -> Config:
    """Validate YAML text into a :class:`Config`."""
    if not text.strip() or all(
        not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()
    ):
        raise ConfigError(
            "the file is empty; expected a mapping of sections",
            source=source,
            hint="write {} to use every default, or delete the file",
        )
    if len(text) > CONFIG_MAX_BYTES:
        raise ConfigError(_TOO_LARGE, source=source)
    import yaml  # noqa: PLC0415 - only a config file needs it (commands start faster)

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            _check_shape(node, source)
        data = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(
            f"nested too deeply (at most {CONFIG_MAX_DEPTH} levels)", source=source
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = " ".join((exc.problem or exc.context or "invalid YAML").split())
        if "\t" in problem or "'\\t'" in problem:
            raise ConfigError(
                "a tab character is not allowed in YAML indentation; use spaces",
                source=source,
                line=line,
            ) from None
        raise ConfigError(f"YAML syntax error: {problem}", source=source, line=line) from None
    except yaml.reader.ReaderError as exc:
        raise ConfigError(
            f"YAML cannot contain the character #x{exc.character:04x} (offset {exc.position})",
            source=source,
        ) from None
    except yaml.YAMLError as exc:
        one_line = " ".join(str(exc).split())
        raise ConfigError(f"YAML syntax error: {one_line}", source=source) from None
    return config_from_data(data, source=source, lines=_line_map(node))


def _line_map(node: yaml.Node | None) -> dict[tuple[str | int, ...], int]:
    """Key path -> 1-based line where that key (or list item) starts."""
    import yaml  # noqa: PLC0415 - only a config file needs it (commands start faster)

    lines: dict[tuple[str | int, ...], int] = {}

    def walk(n: yaml.Node, path: tuple[str | int, ...]) -> None:
        if isinstance(n, yaml.MappingNode):
            for key_node, value_node in n.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
                lines[(*path, key)] = key_node.start_mark.line + 1
                walk(value_node, (*path, key))
        elif isinstance(n, yaml.SequenceNode):
            for index, item in enumerate(n.value):
                lines[(*path, index)] = item.start_mark.line + 1
                walk(item, (*path, index))

    if node is not None:
        lines[()] = node.start_mark.line + 1
        walk(node, ())
    return lines
