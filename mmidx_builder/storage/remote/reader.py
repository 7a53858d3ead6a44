"""A remote ``.bin`` behind the reader seam: every gather's pieces fetched at once."""

from __future__ import annotations

import numpy as np

from ..bin_readers import BinReader
from .access import RemoteAccess
from .block_cache import BlockCache, cache_for
from .objects import RemoteObject
from .planning import read_ranges


class RemoteBinReader(BinReader):
    """A remote ``.bin``: every gather's pieces fetched as merged ranges, all in flight at once.
    Thread-safe (no state changes after opening)."""

    def __init__(self, path: str, dtype: np.dtype, access: RemoteAccess | None = None,
                 obj: RemoteObject | None = None):
        self.path = path
        self.dtype = dtype
        self.access = access or RemoteAccess()
        self.object = obj or self.access.stat(path)
        self.size = self.object.size

    def _whole_cache(self) -> "BlockCache | None":
        """The block cache when it holds every block of this file (reads are then local)."""
        if not self.access.cache_dir:
            return None
        cache = cache_for(self.access)
        return cache if cache.holds_whole(self.object) else None

    @property
    def remote(self) -> bool:
        """Reads are network round trips, worth reading ahead in background threads; not once
        the block cache holds the whole file (a later epoch reads local blocks as fast as
        the caller copies them, and threads would only cost)."""
        return self._whole_cache() is None

    def read(self, start: int, count: int) -> np.ndarray:
        out = np.empty(count, self.dtype)
        self.gather(np.array([start]), np.array([count]), out)
        return out

    def gather(self, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
        if len(starts) == 0:
            return
        itemsize = self.dtype.itemsize
        byte_starts = np.asarray(starts, np.int64) * itemsize
        byte_lengths = np.asarray(lengths, np.int64) * itemsize
        cache = self._whole_cache()
        if cache is not None and out.flags.c_contiguous and out.dtype == self.dtype and out.flags.writeable \
                and cache.copy_pieces(self.object, byte_starts, byte_lengths, memoryview(out.view(np.uint8))):
            return
        keep = byte_lengths > 0
        ends = np.cumsum(byte_lengths)
        pieces = read_ranges(self.access, [self.object], np.zeros(int(keep.sum()), np.int64),
                             byte_starts[keep], (byte_starts + byte_lengths)[keep])
        target = memoryview(out.view(np.uint8)) if out.flags.c_contiguous and out.dtype == self.dtype else None
        buffer = target if target is not None else memoryview(bytearray(int(ends[-1])))
        for end, n, data in zip(ends[keep].tolist(), byte_lengths[keep].tolist(), pieces):
            buffer[end - n:end] = data
        if target is None:
            out[:] = np.frombuffer(buffer, self.dtype)
