"""Warnings given once per process.

Python's default filter shows a warning once per place in the code, but it forgets what it
showed whenever any code changes the filters: every ``warnings.catch_warnings()`` (which torch,
transformers and accelerate enter around their calls) empties the registries. A warning given
each time a shard is read then comes once per shard, hundreds of times a rank. The warnings
that can come again and again (per shard, per worker, per opened file) go through
:func:`warn_once`, which remembers their text for the life of the process.
"""

from __future__ import annotations

import threading
import warnings

_said: set = set()
_lock = threading.Lock()


def warn_once(message: str, category: type[Warning] = UserWarning, stacklevel: int = 1) -> None:
    """``warnings.warn(message, category, stacklevel)``, unless this process gave the same
    warning (category and text) before."""
    with _lock:
        if (category, message) in _said:
            return
        _said.add((category, message))
    warnings.warn(message, category, stacklevel=stacklevel + 1)


__all__ = ["warn_once"]
