"""A split's ``.bin``/``.idx`` pairs opened, each remote pair once per process, all at once.

The splits of a blend share prefixes: with ``split_ratios`` every prefix is in train,
validation and test, and each split is opened on its own (plans.opened_split). Opened one
after another, each remote prefix cost a HEAD of the ``.bin``, a HEAD and a GET of the
``.idx`` per split, in series: a 50-prefix blend at 100 ms spent ~45 s of round trips before
its first sample. Here a remote pair opened for one split is the same IndexedFile for the
others (it holds no per-split state), and the pairs not yet open are opened together
(IndexedFile.open_all: two round trips for all of them).

Local pairs are shared the same way (issue 43): a 1,000-prefix blend split "969,30,1" opened
each prefix three times (3,000 maps, records and stats), now once. A local pair found open is
taken only while both its paths still name the very files it opened (two stats); a pair
rewritten or replaced since is opened again, never served from the old files.

The opened files are kept while a split holds them (weakly: plans.opened_split's cache
decides how long), keyed by process, paths, the RemoteAccess and the index cache: a remote
file's identity is its URL, as in the plan's identity, and reads check its ETag against the
one seen here.
"""

from __future__ import annotations

import os
import threading
import weakref

from ..parallel import in_threads
from ..sources.indexed import IndexedFile, split_prefix
from ..storage.files import file_identity, is_remote
from .data_files import ranged

_LOCK = threading.Lock()
_OPENED: "weakref.WeakValueDictionary[tuple, IndexedFile]" = weakref.WeakValueDictionary()


def indexed_files(pairs: list[tuple[str, str]], opener, cache_dir=None) -> list[IndexedFile]:
    """The IndexedFile of every ``(idx_path, bin_path)``, in order, each opened at most once per
    process while a split holds it: remote ones through ``ranged(opener)`` (a default
    RemoteAccess without one), those not yet open opened all at once; local ones mapped."""
    opener = ranged(opener) if opener is not None else None
    cache = os.fspath(cache_dir) if cache_dir is not None else None
    keys = [(os.getpid(), idx, bin_, opener if is_remote(bin_) else None, cache) for idx, bin_ in pairs]
    with _LOCK:
        found = {key: _OPENED.get(key) for key in keys}
    found = {key: opened if opened is None or _still_named(opened) else None for key, opened in found.items()}
    missing = [key for key, opened in found.items() if opened is None]  # each pair once, in order
    remote = [key for key in missing if is_remote(key[2])]
    opened_now = IndexedFile.open_all([(idx, bin_) for _, idx, bin_, _, _ in remote], opener=opener,
                                      cache_dir=cache_dir) if remote else []
    # Local pairs side by side: a cold open validates each whole .idx and writes its record
    # (half of a 1,000-prefix blend's first open, one after another).
    opened_now += in_threads(lambda pair: IndexedFile.open(split_prefix(pair[0]), idx_path=pair[0], bin_path=pair[1],
                                                           cache_dir=cache_dir),
                             [(idx, bin_) for _, idx, bin_, _, _ in missing if not is_remote(bin_)])
    for key, opened in zip(remote + [key for key in missing if not is_remote(key[2])], opened_now):
        found[key] = opened
        with _LOCK:
            _OPENED[key] = opened
    return [found[key] for key in keys]


def _still_named(opened: IndexedFile) -> bool:
    """A local pair's paths still name the files it opened (a remote one: its reads check the ETag)."""
    if opened.remote or is_remote(opened.idx_path):
        return True
    try:
        return (file_identity(opened.idx_path), file_identity(opened.bin_path)) == tuple(opened.identities)
    except OSError:
        return False  # gone: opening it again says so


__all__ = ["indexed_files"]
