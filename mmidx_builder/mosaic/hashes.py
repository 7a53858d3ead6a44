"""Shard hashes as MDS indexes record them: ``{"sha1": HEX, "xxh64": HEX, ...}`` for the raw and
the compressed file, by the names ``streaming/base/hashing.py`` gives its algorithms (every
``hashlib`` algorithm but the shake ones, and every ``xxhash`` one: xxh32, xxh64, xxh3_64,
xxh3_128, xxh128).
"""

from __future__ import annotations

import hashlib

import xxhash

from ..errors import FormatError


def _algorithm(name: str):
    if not name.startswith("shake_") and name in hashlib.algorithms_available and hasattr(hashlib, name):
        return getattr(hashlib, name)
    if name in xxhash.algorithms_available:
        return getattr(xxhash, name)
    return None


def known(name: str) -> bool:
    return _algorithm(name) is not None


def hasher(name: str):
    """A new hash object of the algorithm ``name`` (``update``, ``hexdigest``): the digest of
    the bytes given to it is what ``streaming.base.hashing.get_hash(name, data)`` writes. None
    for a name neither hashlib nor xxhash has (callers check with :func:`known` first)."""
    algorithm = _algorithm(name)
    return None if algorithm is None else algorithm()


def check_hashes(data, recorded: dict, path: str, what: str = "file") -> int:
    """Compares each hash ``recorded`` for the ``data`` of ``path`` with the data's own; a
    FormatError naming the algorithm and both digests for one that differs, or for an
    algorithm this machine does not have. Returns how many were checked."""
    for name, expected in sorted(recorded.items()):
        algorithm = _algorithm(name)
        if algorithm is None:
            raise FormatError(path, f"{name} hash", "an algorithm of hashlib or xxhash", repr(name),
                              hint="the index names a hash this machine cannot compute")
        found = algorithm(data).hexdigest()
        if found != str(expected).lower():
            raise FormatError(path, f"{name} of the {what}", f"{expected} (recorded in the index)", found,
                              hint="the shard changed after its index was written, or was fetched wrong")
    return len(recorded)


__all__ = ["check_hashes", "hasher", "known"]
