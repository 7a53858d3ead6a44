"""A column of token ids as a token source: sample k of a stream is sequence k.

LLM Foundry's ``convert_dataset_hf.py --concat_tokens N`` writes each sample's ids as a
``tokens`` column, ``ndarray:int32`` in current versions (the ids after a small header of
shape in each value) and ``bytes`` of int64 in older ones; Composer's legacy format keeps them
as a field of bytes. Either way each sample's ids are one run of bytes of one dtype inside
its shard, so reading tokens needs, for every sample, where that run starts and how many ids
it holds. That is found once, reading only the samples' headers (a few bytes each), and kept
in the index cache (array_cache) for local streams: later opens map two arrays.

Sampling, blending and assembly see the TokenSource protocol only; reads go through
check_pieces, then one gather of byte runs across the stream's shards (shards.py).
"""

from __future__ import annotations

import hashlib
import os
import warnings

import numpy as np

from ..dtypes import integer_dtype
from ..errors import FormatError, ParameterError
from ..sources.token_source import check_pieces, combined_identity, lengths_fingerprint
from ..storage import array_cache
from ..storage.files import file_identity, is_remote
from .columns import Layout, column_spans, ndarray_form
from .encodings import DTYPE_CODES, Kind
from .shards import ShardFiles

# Bumped when what the cache holds changes: older caches are then not read.
_CACHE_FORMAT = 1
_CACHE_ARRAYS = ("starts", "lengths")
# The widest ndarray value header: a dtype byte, a shape byte, one uint64 dimension.
_NDARRAY_HEAD = 10


def token_encoding_problem(encoding, dtype) -> str | None:
    """Why a column of ``encoding`` cannot be token ids (read as ``dtype`` when given), or None."""
    if encoding.kind is Kind.BYTES:
        return None if dtype is not None else ("its values are bytes: say how to read them with dtype= (LLM "
                                               "Foundry's older token shards hold int64: dtype='int64')")
    if encoding.kind is not Kind.NDARRAY:
        return f"it is encoded {encoding.text!r}; token ids are an ndarray of integers, or bytes read with dtype="
    if encoding.dtype is not None and encoding.dtype.kind not in "iu":
        return f"it holds {encoding.dtype.name} values; token ids are integers"
    if encoding.shape is not None and len(encoding.shape) != 1:
        return f"its values have shape {encoding.shape}; a sample's token ids are one axis"
    return None


class TokenColumn:
    """``column`` of the stream ``files`` as token sequences (the TokenSource protocol).

    ``dtype``: how a ``bytes`` column's values are read (required there); for an ndarray column
    the ids keep the column's dtype (a cast is the builder's ``dtype``). ``cache_dir``: where
    the per-sample token runs are kept (local streams; None: found again at each open)."""

    def __init__(self, files: ShardFiles, column: str, dtype=None, cache_dir: str | None = None):
        index = files.index
        if column not in index.columns:
            raise ParameterError(f"token_column={column!r}: {index.path} has no such column; its columns are "
                                 f"{', '.join(f'{c} ({e.text})' for c, e in zip(index.columns, index.encodings))}")
        self.files, self.column = files, column
        self._position = index.columns.index(column)
        self.encoding = index.encodings[self._position]
        problem = token_encoding_problem(self.encoding, dtype)
        if problem is not None:
            raise ParameterError(f"token_column={column!r} of {index.path}: {problem}")
        if self.encoding.kind is Kind.BYTES:
            self.dtype = integer_dtype(dtype).newbyteorder("<")
        else:
            self.dtype = self.encoding.dtype  # None: learned from the first sample (_layout)
        self.lengths_fingerprint = None
        self._starts, self._lengths = self._cached_or_found(cache_dir)
        self.identity = combined_identity("mosaic-tokens", [*self._file_identities(), column, self.dtype.str])

    # --- the protocol ---------------------------------------------------------------------------

    @property
    def sequence_lengths(self) -> np.ndarray:
        return self._lengths

    @property
    def remote(self) -> bool:
        return self.files.remote

    @property
    def num_tokens(self) -> int:
        return int(self._lengths.sum(dtype=np.int64))

    @property
    def identities(self) -> list[str]:
        """The local files' identities (token_source.check_opened compares them)."""
        return list(self.files.identities)

    def read_pieces(self, sequence_ids, offsets, lengths, out: np.ndarray | None = None) -> np.ndarray:
        sequence_ids, offsets, lengths, out = check_pieces(
            self._lengths, sequence_ids, offsets, lengths, out, self.dtype,
            lambda k: f"sample {k} of {self.files.index.path} (column {self.column!r})")
        keep = lengths > 0
        sequence_ids, offsets, lengths = sequence_ids[keep], offsets[keep], lengths[keep]
        if len(sequence_ids) == 0:
            return out
        shards, _ = self.files.locate(sequence_ids)
        self.files.open_all(np.unique(shards).tolist())
        itemsize = self.dtype.itemsize
        starts = self._starts[sequence_ids] + offsets * itemsize
        target = out if out.dtype == self.dtype and out.flags.c_contiguous else np.empty(out.shape, self.dtype)
        self.files.gather(shards, starts, lengths * itemsize, target.reshape(-1).view(np.uint8))
        if target is not out:
            out[:] = target
        return out

    # --- where each sample's ids lie ------------------------------------------------------------------

    def _file_identities(self) -> list[str]:
        index = self.files.index
        if self.files.identities:
            return [index.path, *self.files.identities]
        return [index.path, *(f"{s.name}:{s.raw_bytes}:{dict(s.raw_hashes)}" for s in index.shards)]

    def _cache_paths(self, cache_dir: str) -> tuple[str, dict[str, str]] | None:
        local = self.files.identities and not is_remote(self.files.index.path)
        if not cache_dir or not local or len(self.files.identities) != len(self.files.index.shards):
            return None
        index_identity = file_identity(self.files.index.path)
        key = hashlib.sha256("|".join([str(_CACHE_FORMAT), index_identity, *self.files.identities, self.column,
                                       self.encoding.text, self.dtype.str if self.dtype is not None else "?"])
                             .encode()).hexdigest()[:32]
        return (os.path.join(cache_dir, f"mosaic-tokens-{key}-meta.json"),
                {name: os.path.join(cache_dir, f"mosaic-tokens-{key}-arrays.npy") for name in _CACHE_ARRAYS})

    def _cached_or_found(self, cache_dir: str | None) -> tuple[np.ndarray, np.ndarray]:
        paths = self._cache_paths(cache_dir)
        if paths is not None:
            loaded = array_cache.load_arrays(*paths)
            n = self.files.num_samples
            if loaded is not None and all(a.shape == (n,) for a in loaded[1].values()) and \
                    loaded[0].get("dtype") is not None:
                fields, arrays = loaded
                self.dtype = np.dtype(fields["dtype"])
                self.lengths_fingerprint = fields.get("fingerprint")
                return arrays["starts"], arrays["lengths"]
        starts, lengths = self._layout()
        self.lengths_fingerprint = lengths_fingerprint(lengths)
        if paths is not None:
            try:
                mapped = array_cache.save_arrays(*paths, {"starts": starts, "lengths": lengths},
                                                 {"format": _CACHE_FORMAT, "dtype": self.dtype.str,
                                                  "fingerprint": self.lengths_fingerprint})
                return mapped["starts"], mapped["lengths"]
            except OSError as error:
                warnings.warn(f"token runs of {self.files.index.path} not cached in {cache_dir}: {error}", stacklevel=3)
        return starts, lengths

    def _layout(self) -> tuple[np.ndarray, np.ndarray]:
        """Every sample's token run: its byte start in its shard and its count of ids, found a
        shard at a time (temporaries of one shard's samples, not of the stream's)."""
        files, index = self.files, self.files.index
        n = files.num_samples
        if n == 0:
            if self.dtype is None:
                raise FormatError(index.path, f"column {self.column!r}", "a sample to learn its ndarray dtype from",
                                  "no samples")
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        starts, lengths = np.empty(n, np.int64), np.empty(n, np.int64)
        firsts = files.shard_starts
        for number in range(len(index.shards)):
            first, last = int(firsts[number]), int(firsts[number + 1])
            if last > first:
                starts[first:last], lengths[first:last] = self._shard_runs(number, first)
        return starts, lengths

    def _shard_runs(self, number: int, first: int) -> tuple[np.ndarray, np.ndarray]:
        """The token runs of shard ``number`` (whose first sample is sample ``first`` of the
        stream): one gather of each sample's leading bytes, its header of sizes and, when only
        fixed-size columns precede the token column, the start of its value too."""
        files, index = self.files, self.files.index
        offsets = files.shard(number).offsets
        sample_starts, sample_lengths = offsets[:-1], np.diff(offsets)
        layout = Layout(index.columns, index.encodings, index.layout == "legacy")
        header = layout.header_bytes
        before = layout.encodings[:self._position]
        fixed_before = all(not layout.legacy and e.size is not None for e in before)
        lead = header + (sum(e.size for e in before) + _NDARRAY_HEAD if fixed_before else 0)
        name = (lambda k: self._name(first + k))
        short = np.flatnonzero(sample_lengths < header)
        if len(short):
            k = int(short[0])
            raise FormatError(name(k), "sample header", f"at least {header} bytes", f"{int(sample_lengths[k])}")
        heads = self._leading_bytes(number, sample_starts, np.minimum(sample_lengths, lead), lead)
        at = np.arange(len(sample_starts), dtype=np.int64) * lead
        column_starts, sizes = column_spans(layout, heads.reshape(-1), at, sample_lengths, name)
        within = column_starts[:, self._position] - at  # the value's offset in its sample
        value_starts, value_sizes = sample_starts + within, sizes[:, self._position]
        if self.encoding.kind is Kind.BYTES:
            itemsize = self.dtype.itemsize
            self._check(value_sizes % itemsize != 0, first, "token bytes",
                        f"a multiple of {itemsize} bytes ({self.dtype.name})", lambda k: f"{int(value_sizes[k])} bytes")
            return value_starts, value_sizes // itemsize
        if self.encoding.size is not None:  # ndarray:DTYPE:N, values only
            return value_starts, np.full(len(value_starts), self.encoding.shape[0], np.int64)
        if fixed_before:
            value_heads = heads[:, lead - _NDARRAY_HEAD:]
        else:
            value_heads = self._leading_bytes(number, value_starts, np.minimum(value_sizes, _NDARRAY_HEAD),
                                              _NDARRAY_HEAD)
        return self._ndarray_runs(first, value_starts, value_sizes, value_heads)

    def _leading_bytes(self, number: int, starts: np.ndarray, sizes: np.ndarray, width: int) -> np.ndarray:
        """Bytes ``[starts[k], starts[k] + sizes[k])`` of shard ``number`` as the rows of a
        (samples, width) array, zero-padded (sizes are at most ``width``)."""
        count = len(starts)
        if (sizes == width).all():  # every sample holds them all: read straight into the rows
            rows = np.empty((count, width), np.uint8)
            self.files.gather(np.full(count, number), starts, sizes, rows.reshape(-1))
            return rows
        packed = np.empty(int(sizes.sum()), np.uint8)
        self.files.gather(np.full(count, number), starts, sizes, packed)
        rows = np.zeros((count, width), np.uint8)
        ends = np.cumsum(sizes)
        for column in range(width):  # width is a few bytes: a pass per byte column, no index per byte
            has = sizes > column
            rows[has, column] = packed[(ends - sizes)[has] + column]
        return rows

    def _ndarray_runs(self, first: int, value_starts, value_sizes, heads) -> tuple[np.ndarray, np.ndarray]:
        """Runs of ndarray values that carry their shape (and maybe dtype) in a small header;
        ``heads``: each value's first bytes (zero-padded)."""
        n = len(value_starts)
        if self.dtype is None:
            form = ndarray_form(self.encoding, heads[0, :int(min(value_sizes[0], _NDARRAY_HEAD))].tobytes(),
                                self._name(first))
            self.dtype = form.dtype
        position = np.zeros(n, np.int64)
        if self.encoding.dtype is None:
            code = DTYPE_CODES[self.dtype.name]
            self._check(heads[:, 0] != code, first, "ndarray dtype", f"{self.dtype.name} (as sample 0)",
                        lambda k: f"code {int(heads[k, 0])}")
            position += 1
        marks = heads[np.arange(n), position]
        self._check(marks >> 2 != 1, first, "ndarray axes", "1 (a sample's token ids are one axis)",
                    lambda k: str(int(marks[k]) >> 2))
        widths = 1 << (marks & 3).astype(np.int64)
        counts = np.zeros(n, np.int64)
        for width in np.unique(widths).tolist():
            mine = np.flatnonzero(widths == width)
            raw = np.ascontiguousarray(heads[mine[:, None], position[mine, None] + 1 + np.arange(width)])
            counts[mine] = raw.view(f"<u{width}").reshape(-1).astype(np.int64)
        header = position + 1 + widths
        self._check(value_sizes - header != counts * self.dtype.itemsize, first, "ndarray values",
                    f"{self.dtype.itemsize} bytes per id of its shape", lambda k: f"{int(value_sizes[k] - header[k])} "
                    f"bytes for {int(counts[k])} ids")
        return value_starts + header, counts

    def _name(self, k: int) -> str:
        return f"{self.files.name_of(k)} (sample {k} of the stream)"

    def _check(self, bad: np.ndarray, first: int, field: str, expected: str, found) -> None:
        """A FormatError for the first sample where ``bad`` (of the shard whose first sample is
        ``first``) is true; ``found(k)`` says what sample k holds."""
        wrong = np.flatnonzero(bad)
        if len(wrong):
            k = int(wrong[0])
            raise FormatError(self._name(first + k), f"column {self.column!r}: {field}", expected, found(k))


__all__ = ["TokenColumn", "token_encoding_problem"]
