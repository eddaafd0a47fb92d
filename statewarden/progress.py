"""Progress of a long step (check, recover): one callable the engines call as they go.

``progress(phase, done, total)``: ``phase`` names the step in the user's words
(``"copy"``, ``"integrity check"``, ``"copy tables"``), ``done`` counts what is finished
and ``total`` what there is to do, or 0 when that is not known in advance. The engines
call it; the CLI draws it (``cli/_progress.py``: a bar, JSON lines, or nothing).
"""

from __future__ import annotations

from collections.abc import Callable

ProgressFn = Callable[[str, int, int], None]
