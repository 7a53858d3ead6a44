"""The reader seam every token file is read through, and its local readers.

A ``.bin`` (or a raw token file) is read as runs of fixed-size items at token positions:
``read(start, count)`` and ``gather(starts, lengths, out)``. Behind that seam a memory map
(MemmapBinReader), a file object from an ``open``-like callable (FileBinReader) and remote
ranged reads (remote.RemoteBinReader) are interchangeable; the format layer above sees only
the seam. IndexInMemory is an index file's bytes held in memory (a remote ``.idx``), with the
same ``read``/``entries`` as a local MappedFile.
"""

from __future__ import annotations

import os
import threading
from typing import IO, Callable

import numpy as np

from ..errors import FormatError
from .files import file_identity
from .mapped import MappedFile, gather


class BinReader:
    """The seam behind which a ``.bin`` is read: memory map, plain file or remote ranges."""

    size: int
    remote = False  # True when reads are network round trips (callers may read ahead)

    def read(self, start: int, count: int) -> np.ndarray:
        """``count`` tokens from token position ``start``."""
        raise NotImplementedError

    def gather(self, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
        """Copies the runs ``[starts[i], starts[i] + lengths[i])`` one after another into ``out``."""
        position = 0
        for start, length in zip(starts.tolist(), lengths.tolist()):
            out[position:position + length] = self.read(start, length)
            position += length


class MemmapBinReader(BinReader):
    """A local ``.bin``, memory-mapped and read through :class:`~mmidx_builder.storage.mapped.MappedFile`:
    the kernel copies the runs out of the map, so a file truncated while in use is a
    FormatError, never SIGBUS (mapped.py says why and what it costs). Reads return arrays of
    their own, never views of the map.

    ``expected_identity`` (what :func:`~mmidx_builder.storage.files.stat_identity` said of the file when
    the pair was first opened) makes a reopening refuse a file that was replaced since: a
    worker process that maps the new ``.bin`` under the old index would serve wrong tokens.
    """

    def __init__(self, path: str, dtype: np.dtype, expected_identity: str | None = None):
        self.path = path
        self.dtype = dtype
        # Samples are read in shuffled order: no read-around (MappedFile's random_access).
        self._file = MappedFile(path, expected_identity, random_access=True)
        self.size, self.identity = self._file.size, self._file.identity

    def __getstate__(self):
        # Pickling (datasets' worker processes) must not copy the whole .bin: map it again
        # there, and only if it is still the file this process opened.
        return {"path": self.path, "dtype": self.dtype, "identity": self.identity}

    def __setstate__(self, state):
        self.__init__(state["path"], state["dtype"], state.get("identity"))

    def read(self, start: int, count: int) -> np.ndarray:
        return self._file.read(start * self.dtype.itemsize, count, self.dtype)

    def gather(self, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
        if len(starts) == 0:
            return
        target = out
        if not (out.dtype == self.dtype and out.flags.c_contiguous and out.flags.writeable):
            target = np.empty(out.shape, self.dtype)
        itemsize = self.dtype.itemsize
        gather([self._file], None, np.asarray(starts, np.int64) * itemsize, np.asarray(lengths, np.int64) * itemsize,
               target)
        if target is not out:
            out[...] = target


def opened_size(path: str, opener: Callable[..., IO[bytes]]) -> int:
    """The size of a file reached through ``opener``. fsspec's HTTP filesystem hands out an
    unseekable stream when the server reports size 0 or none; only then are the bytes
    counted by reading them."""
    with opener(path, "rb") as f:
        try:
            return f.seek(0, os.SEEK_END)
        except (ValueError, OSError):
            size = 0
            while chunk := f.read(1 << 20):
                size += len(chunk)
            return size


class FileBinReader(BinReader):
    """Ranged reads through a file object (an ``open``-like callable the caller chose), one
    request per run; remote.RemoteBinReader is the fast way to read remote files."""

    remote = True

    def __init__(self, path: str, dtype: np.dtype, opener: Callable[..., IO[bytes]]):
        self.path = path
        self.dtype = dtype
        self._opener = opener
        self._file = None
        # One file object, one position: remote sources are read ahead from several threads.
        self._lock = threading.Lock()
        self.size = opened_size(path, opener)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_file"] = None  # reopened lazily in the worker process
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def read(self, start: int, count: int) -> np.ndarray:
        itemsize = self.dtype.itemsize
        with self._lock:
            if self._file is None:
                self._file = self._opener(self.path, "rb")
            self._file.seek(start * itemsize)
            data = self._file.read(count * itemsize)
        if len(data) != count * itemsize:
            raise FormatError(self.path, "tokens", f"{count * itemsize} bytes at byte {start * itemsize}",
                              f"{len(data)} bytes", hint="the file changed or the read was cut short")
        return np.frombuffer(data, dtype=self.dtype)

    def gather(self, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
        # Neighbouring runs (consecutive sequences of one document) become one request.
        starts = np.asarray(starts, np.int64)
        lengths = np.asarray(lengths, np.int64)
        if len(starts) == 0:
            return
        breaks = np.flatnonzero(starts[1:] != starts[:-1] + lengths[:-1]) + 1
        group_first = np.concatenate(([0], breaks))
        group_lengths = np.add.reduceat(lengths, group_first)
        super().gather(starts[group_first], group_lengths, out)


class IndexInMemory:
    """An ``.idx`` read whole (a remote one): the same ``read``/``entries`` as a local
    :class:`~mmidx_builder.storage.mapped.MappedFile`, as views of the bytes (nothing can
    truncate them): ``bytes``, or a read-only ``mmap`` of its private copy on disk (a large
    one, remote.index_files)."""

    def __init__(self, data: bytes, path: str):
        self._data, self.path, self.size = memoryview(data), path, len(data)
        self.identity = file_identity(path)  # a URL is its own identity

    def read(self, offset: int, count: int, dtype) -> np.ndarray:
        return np.frombuffer(self._data, dtype, count, offset)

    def entries(self, offset: int, dtype, ids) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        dtype = np.dtype(dtype)
        table = np.frombuffer(self._data, dtype, (self.size - offset) // dtype.itemsize, offset)
        return table[ids]
