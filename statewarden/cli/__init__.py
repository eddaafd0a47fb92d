"""Command-line entry points: ``statewarden`` (the daemon) and ``statewardenctl`` (the client).

Commands are thin: parse options, call one library function, print, and turn
statewarden's errors into one line on stderr and a documented exit code.
"""

# No other part imports the CLI; its entry points are named in pyproject.toml.
__all__: list[str] = []
