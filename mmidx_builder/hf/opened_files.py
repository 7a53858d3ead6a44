"""A split's ``.bin``/``.idx`` pairs opened, each remote pair once per process, all at once.

The splits of a blend share prefixes: with ``split_ratios`` every prefix is in train,
validation and test, and each split is opened on its own (plans.opened_split). Opened one
after another, each remote prefix cost a HEAD of the ``.bin``, a HEAD and a GET of the
``.idx`` per split, in series: a 50-prefix blend at 100 ms spent ~45 s of round trips before
its first sample. Here a remote pair opened for one split is the same IndexedFile for the
others (it holds no per-split state), and the pairs not yet open are opened together
(IndexedFile.open_all: two round trips for all of them).

The opened files are kept while a split holds them (weakly: plans.opened_split's cache
decides how long), keyed by process, URLs, the RemoteAccess and the index cache: a remote
file's identity is its URL, as in the plan's identity, and reads check its ETag against the
one seen here. Local pairs are opened per split as before (a map and a cached index record:
no round trips to save).
"""

from __future__ import annotations

import os
import threading
import weakref

from ..sources.indexed import IndexedFile, split_prefix
from ..storage.files import is_remote
from .data_files import ranged

_LOCK = threading.Lock()
_OPENED: "weakref.WeakValueDictionary[tuple, IndexedFile]" = weakref.WeakValueDictionary()


def indexed_files(pairs: list[tuple[str, str]], opener, cache_dir=None) -> list[IndexedFile]:
    """The IndexedFile of every ``(idx_path, bin_path)``, in order: remote ones through
    ``ranged(opener)`` (a default RemoteAccess without one), opened at most once per process
    while a split holds them, and those not yet open opened all at once; local ones mapped."""
    opener = ranged(opener) if opener is not None else None
    keys = [(os.getpid(), idx, bin_, opener, os.fspath(cache_dir) if cache_dir is not None else None)
            if is_remote(bin_) else None for idx, bin_ in pairs]
    with _LOCK:
        found = {key: _OPENED.get(key) for key in keys if key is not None}
    missing = [key for key, opened in found.items() if opened is None]  # each pair once, in order
    if missing:
        for key, opened in zip(missing, IndexedFile.open_all([(idx, bin_) for _, idx, bin_, _, _ in missing],
                                                             opener=opener, cache_dir=cache_dir)):
            found[key] = opened
            with _LOCK:
                _OPENED[key] = opened
    return [found[key] if key is not None else
            IndexedFile.open(split_prefix(idx), idx_path=idx, bin_path=bin_, cache_dir=cache_dir)
            for key, (idx, bin_) in zip(keys, pairs)]


__all__ = ["indexed_files"]
