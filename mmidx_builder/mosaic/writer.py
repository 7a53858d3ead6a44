"""MDS folders written byte for byte as ``mosaicml-streaming`` 0.13's ``MDSWriter`` writes them
(``streaming/base/format/mds/writer.py`` and ``format/base/writer.py``), for the same samples,
columns, ``size_limit``, compression and hashes; the reader is in shards.py and columns.py.

    shard.NNNNN.mds     uint32 sample count n, uint32 offsets[n + 1] from the file's start,
                        the writer's config (``json.dumps(config, sort_keys=True)``: columns,
                        compression, hashes, size_limit, format, version), then the samples;
                        a sample: a uint32 size for each variable-size column (column order),
                        then each column's value (encodings.py)
    shard.NNNNN.mds.EXT the same, compressed whole (codecs.compressor), when compression is set
    index.json          ``json.dump({"version": 2, "shards": [...]}, sort_keys=True)``: per shard
                        its samples, raw_data and zip_data ({basename, bytes, hashes}) and the config

Where MDSWriter's rules are not obvious, they are kept on purpose:

- columns are stored sorted by name, whatever order they are given in;
- a shard's size counts its header (8 bytes and the config) and 4 bytes a sample beside each
  sample's bytes; a sample that would take the shard *past* ``size_limit`` (``limit < size +
  sample``) starts the next shard, and goes there whatever its size, so a first sample larger
  than the limit leaves a first shard of 0 samples;
- ``size_limit`` is bytes or a size such as ``"64mb"`` (``streaming.base.util.bytes_to_int``:
  kb, mb, ... are powers of 1024), and a false one (None, 0, ``"0kb"``) means one shard, the
  value given still recorded in the config;
- ``hashes`` are recorded as given, sorted (MDSWriter refuses an unsorted list; here they are
  sorted for the caller), each the hex digest of the raw and of the compressed file.

Where MDSWriter would write something unreadable, this writer refuses instead: a shard of 4 GiB
or more (its offsets are uint32 and would wrap), a value outside its encoding's range (numpy
would wrap it), ndarrays in big-endian byte order (written little-endian here).

Files are written under hidden temporary names and renamed when the stream is complete, the
shards first and ``index.json`` last: a folder never holds an index of shards not yet there.
The encodings written: ``bytes``, ``str``, ``int``, the numpy scalars (``uint8`` ... ``int64``,
``float16/32/64``) and ``ndarray`` (with or without a dtype and a shape in the encoding); the
others (images, ``json``, ``pkl``, ``str_int``...) are refused with the list.
"""

from __future__ import annotations

import json
import numbers
import os
import re
from typing import Mapping, Sequence

import numpy as np

from ..errors import ConvertError, FormatError, ParameterError
from ..storage.files import (WriterLock, remove_quietly, remove_stale_temporaries, temporary_path,
                             write_atomically)
from . import codecs
from .encodings import DTYPE_CODES, Encoding, Kind, parse_encoding
from .hashes import hasher, known
from .index import MDS_INDEX, MDS_VERSION

# MDSWriter's default size_limit (1 << 26 bytes, 64 MiB).
DEFAULT_SIZE_LIMIT = 1 << 26
# Bytes a sample adds to its shard beyond its own (its offset: MDSWriter.extra_bytes_per_sample).
_PER_SAMPLE = 4
_UINT32 = np.dtype("<u4")
_OFFSET_LIMIT = 1 << 32
# streaming.base.util.bytes_to_int's units, in the order it tries them.
_UNITS = {"kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40, "pb": 1 << 50, "eb": 1 << 60,
          "zb": 1 << 70, "yb": 1 << 80}
# Compressed shards' names: shard.00000.mds.zstd; a stale shard of an older stream in the folder too.
_SHARD_NAME = re.compile(r"shard\.\d{5,}\.mds(\.[a-z0-9]+)?")
WRITTEN = (Kind.BYTES, Kind.TEXT, Kind.SCALAR, Kind.NDARRAY)
# Encoded samples gathered by write() before they are placed in shards, as one batch.
_BATCH = 4096


def size_limit_bytes(size_limit) -> int | None:
    """``size_limit`` as MDSWriter records it: None for no limit (None, 0 or ""), else bytes
    from an int or from a size such as ``"64mb"`` (``bytes_to_int``: powers of 1024, decimals
    allowed: ``"1.5kb"`` is 1536); a ParameterError for other text, a negative size or one of
    2**32 or more (shard offsets are uint32)."""
    if not size_limit:
        return None
    if isinstance(size_limit, bool):
        raise ParameterError(f"size_limit= must be a number of bytes or a size such as '64mb', got {size_limit!r}")
    if isinstance(size_limit, (numbers.Integral, float)):
        value = int(size_limit)
    elif isinstance(size_limit, str):
        value = _bytes_to_int(size_limit)
    else:
        raise ParameterError(f"size_limit= must be a number of bytes or a size such as '64mb', got {size_limit!r}")
    if value < 0 or value >= _OFFSET_LIMIT:
        raise ParameterError(f"size_limit= must be from 0 to 2**32 - 1 bytes (shard offsets are uint32), got "
                             f"{size_limit!r} ({value:,} bytes)")
    return value


def _bytes_to_int(text: str) -> int:
    """``streaming.base.util.bytes_to_int`` of a string."""
    cleaned = text.lower().strip()
    for suffix, unit in _UNITS.items():
        if cleaned.endswith(suffix):
            try:
                return int(float(cleaned[:-len(suffix)]) * unit)
            except ValueError:
                break
    else:
        if cleaned.endswith("b") and cleaned[:-1].isdigit():
            return int(cleaned[:-1])
        if cleaned.isdigit():
            return int(cleaned)
    raise ParameterError(f"size_limit= {text!r} is not a size: give bytes (67108864, '512b') or a number with one of "
                         f"{', '.join(_UNITS)} ('64mb', '1.5kb'; powers of 1024, as MDSWriter reads them)")


def check_compression(compression) -> str | None:
    """``compression`` as MDSWriter takes it: None (or ""), a family (``"zstd"``) or a family and
    a level it has (``"zstd:7"``); a ParameterError naming the choices otherwise."""
    if not compression:
        return None
    text = str(compression)
    try:
        base = codecs.family(text, "compression=")
    except FormatError:
        base = None
    level = text.partition(":")[2]
    if base is None or (level and str(int(level)) != level):
        raise ParameterError(f"compression={compression!r} is not one MDSWriter writes: give one of "
                             f"{', '.join(codecs.FAMILIES)}, optionally with a level ('zstd:7'; br 0-11, bz2 1-9, "
                             "gz 0-9, zstd 1-22; snappy has none)")
    return text


def check_hashes(hashes) -> list[str]:
    """The hash algorithms, sorted and each once, as MDSWriter records them; a ParameterError
    for a name hashlib and xxhash do not have."""
    if isinstance(hashes, str):
        hashes = [hashes]
    names = sorted(set(hashes or ()))
    unknown = [name for name in names if not isinstance(name, str) or not known(name)]
    if unknown:
        raise ParameterError(f"hashes= {unknown} are not hash algorithms mosaicml-streaming knows: give names of "
                             "hashlib (sha1, md5, sha256, blake2b...) or xxhash (xxh32, xxh64, xxh3_64, xxh128)")
    return names


def column_encodings(columns: Mapping[str, str]) -> tuple[list[str], list[Encoding]]:
    """The columns sorted by name (MDSWriter's order) with their parsed encodings; a
    ParameterError for an encoding this writer does not write."""
    if not isinstance(columns, Mapping) or not columns:
        raise ParameterError(f"columns= must map column names to MDS encodings, e.g. {{'tokens': 'ndarray:int32'}}, "
                             f"got {columns!r}")
    names, encodings = [], []
    for name in sorted(columns):
        if not isinstance(name, str) or not name:
            raise ParameterError(f"columns=: a column name must be a non-empty string, got {name!r}")
        try:
            encoding = parse_encoding(columns[name], "columns=", name)
        except FormatError as error:
            raise ParameterError(f"columns=: column {name!r} has encoding {columns[name]!r}, which is not an MDS "
                                 f"encoding ({error.expected})") from None
        if encoding.kind not in WRITTEN:
            raise ParameterError(f"columns=: column {name!r} is encoded {encoding.text!r}, which this writer does not "
                                 "write; it writes bytes, str, int, uint8 ... int64, float16/32/64 and ndarray[:DTYPE"
                                 "[:SHAPE]] (token shards need no more)")
        names.append(name)
        encodings.append(encoding)
    return names, encodings


# --- one value ----------------------------------------------------------------------------------

def encode_value(encoding: Encoding, value, column: str) -> bytes:
    """``value`` of ``column`` as MDSWriter's ``mds_encode`` encodes it (bytes pass through
    unchanged, whatever the encoding, as there)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    kind = encoding.kind
    if kind is Kind.TEXT and isinstance(value, str):
        return value.encode("utf-8")
    if kind is Kind.SCALAR:
        return _scalar(encoding, value, column)
    if kind is Kind.NDARRAY and isinstance(value, np.ndarray):
        return _ndarray(encoding, value, column)
    wanted = {Kind.BYTES: "bytes", Kind.TEXT: "a str", Kind.NDARRAY: "a numpy array"}[kind]
    raise ParameterError(f"column {column!r} ({encoding.text}): expected {wanted}, got {type(value).__name__}")


def _scalar(encoding: Encoding, value, column: str) -> bytes:
    dtype = encoding.dtype
    if dtype.kind in "iu":
        if not isinstance(value, numbers.Integral):
            raise ParameterError(f"column {column!r} ({encoding.text}): expected an integer, got {value!r}")
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise ParameterError(f"column {column!r} ({encoding.text}): {value} is outside {info.min}..{info.max}")
        return np.array(int(value), dtype).tobytes()
    if not isinstance(value, numbers.Real):
        raise ParameterError(f"column {column!r} ({encoding.text}): expected a number, got {value!r}")
    return np.array(value, dtype).tobytes()


def _ndarray(encoding: Encoding, value: np.ndarray, column: str) -> bytes:
    name = value.dtype.name
    if name not in DTYPE_CODES:
        raise ParameterError(f"column {column!r} ({encoding.text}): arrays of {value.dtype} cannot be stored; MDS "
                             f"ndarrays hold {', '.join(DTYPE_CODES)}")
    if encoding.dtype is not None and name != encoding.dtype.name:
        raise ParameterError(f"column {column!r} ({encoding.text}): expected {encoding.dtype.name} values, got {name}")
    if value.size == 0:
        raise ParameterError(f"column {column!r} ({encoding.text}): an array of 0 elements cannot be stored "
                             "(MDSWriter refuses it: its reader could not tell its shape)")
    parts = []
    if encoding.dtype is None:
        parts.append(bytes([DTYPE_CODES[name]]))
    if encoding.shape is None:
        if value.ndim == 0 or value.ndim >= 64:
            raise ParameterError(f"column {column!r} ({encoding.text}): arrays of 1 to 63 axes are stored, got "
                                 f"{value.ndim}")
        width = _shape_width(max(value.shape))
        parts.append(bytes([(value.ndim << 2) | width]))
        parts.append(np.array(value.shape, f"<u{1 << width}").tobytes())
    elif value.shape != encoding.shape:
        raise ParameterError(f"column {column!r} ({encoding.text}): expected shape {encoding.shape}, got {value.shape}")
    parts.append(np.ascontiguousarray(value, value.dtype.newbyteorder("<")).tobytes())
    return b"".join(parts)


def _shape_width(largest: int) -> int:
    """The code of the narrowest unsigned type of a shape (NDArray._rightsize_shape_dtype)."""
    return 0 if largest < 1 << 8 else 1 if largest < 1 << 16 else 2 if largest < 1 << 32 else 3


# --- many token samples at once -------------------------------------------------------------------

def token_samples(encoding: Encoding, tokens: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(data, sizes)``: samples of one column of ``encoding`` (``bytes`` or an ``ndarray``),
    sample k holding the ids ``tokens[sum(lengths[:k]):sum(lengths[:k + 1])]`` (already of the
    values' dtype), laid end to end in ``data`` (uint8) as MDSWriter encodes each
    ``{column: array}`` (or ``{column: array.tobytes()}`` for ``bytes``); ``sizes`` their bytes.
    Every length must be >= 1 for an ndarray, and the shape's for a fixed shape (callers check)."""
    lengths = np.asarray(lengths, np.int64)
    n = len(lengths)
    itemsize = tokens.dtype.itemsize
    value_bytes = lengths * itemsize
    sized = encoding.size is None
    head = np.zeros((n, 14), np.uint8)  # at most: a size (4), a dtype code, a shape mark, 8 of shape
    used = np.zeros(n, np.int64)
    if sized:
        used += 4
    if encoding.kind is Kind.NDARRAY:
        if encoding.dtype is None:
            head[:, 4 if sized else 0] = DTYPE_CODES[tokens.dtype.name]
            used += 1
        if encoding.shape is None:
            widths = np.select([lengths < 1 << 8, lengths < 1 << 16, lengths < 1 << 32], [0, 1, 2], 3)
            mark = used.copy()
            head[np.arange(n), mark] = (1 << 2) | widths
            shape_bytes = lengths.astype("<u8").view(np.uint8).reshape(n, 8)
            at = mark[:, None] + 1 + np.arange(8)
            head[np.arange(n)[:, None], at] = shape_bytes
            used += 1 + (1 << widths)
    if sized:
        head[:, :4] = (used - 4 + value_bytes).astype(_UINT32).view(np.uint8).reshape(n, 4)
    sizes = used + value_bytes
    values = tokens.reshape(-1).view(np.uint8)
    if n and (used == used[0]).all() and (lengths == lengths[0]).all():
        # One shape for all (LLM Foundry's concatenated samples): a 2-D copy.
        width = int(used[0])
        data = np.empty((n, width + int(value_bytes[0])), np.uint8)
        data[:, :width] = head[:, :width]
        data[:, width:] = values.reshape(n, -1)
        return data.reshape(-1), sizes
    data = np.empty(int(sizes.sum()), np.uint8)
    starts = np.cumsum(sizes) - sizes
    keep = np.arange(head.shape[1]) < used[:, None]
    data[(starts[:, None] + np.arange(head.shape[1]))[keep]] = head[keep]
    value_starts = starts + used
    if n and value_bytes.sum() >= 256 * n:
        position = 0
        for start, size in zip(value_starts.tolist(), value_bytes.tolist()):
            data[start:start + size] = values[position:position + size]
            position += size
    elif n:
        index = np.repeat(value_starts - (np.cumsum(value_bytes) - value_bytes), value_bytes)
        index += np.arange(len(values), dtype=np.int64)
        data[index] = values
    return data, sizes


# --- the writer --------------------------------------------------------------------------------

class ShardWriter:
    """Writes an MDS folder as ``streaming.MDSWriter(out=folder, columns=columns,
    compression=compression, hashes=hashes, size_limit=size_limit)`` would, byte for byte.

    ``folder`` must not exist or be empty (MDSWriter's rule) unless ``overwrite``: then the
    stream in it is replaced when this one is complete (its ``index.json`` removed first, its
    shard files after, files of other names left alone)::

        with ShardWriter("out/mds", {"tokens": "ndarray:int32"}, compression="zstd") as writer:
            writer.write({"tokens": np.arange(5, dtype=np.int32)})
    """

    def __init__(self, folder, columns: Mapping[str, str], *, compression: str | None = None,
                 hashes: Sequence[str] | None = None, size_limit=DEFAULT_SIZE_LIMIT, overwrite: bool = False):
        self.folder = os.path.normpath(os.fspath(folder))
        self.column_names, self.encodings = column_encodings(columns)
        self.compression = check_compression(compression)
        self.hashes = check_hashes(hashes)
        self.size_limit = size_limit_bytes(size_limit)
        self._compress = codecs.compressor(self.compression, "compression=") if self.compression else None
        config = {"version": MDS_VERSION, "format": "mds", "compression": self.compression, "hashes": self.hashes,
                  "size_limit": self.size_limit, "column_names": self.column_names,
                  "column_encodings": [e.text for e in self.encodings],
                  "column_sizes": [e.size for e in self.encodings]}
        self._config = config
        self._config_bytes = json.dumps(config, sort_keys=True).encode("utf-8")
        self._shard_head = 2 * _UINT32.itemsize + len(self._config_bytes)
        self.shards: list[dict] = []
        self.samples = 0
        self._chunks: list = []       # the current shard's samples, in pieces of bytes
        self._sizes: list = []        # and their sizes, an array per piece
        self._shard_size = self._shard_head
        self._pending: list[bytes] = []  # write()'s encoded samples not yet placed
        self._written: list[tuple[str, str]] = []  # (temporary, final) of each shard file
        self._closed = False
        self._lock = WriterLock(self.folder)
        try:
            self._check_folder(overwrite)
        except BaseException:
            self._lock.release()
            raise

    def _check_folder(self, overwrite: bool) -> None:
        if os.path.exists(self.folder) and not os.path.isdir(self.folder):
            raise ConvertError(f"{self.folder} is a file; the output of an MDS stream is a folder")
        remove_stale_temporaries(self.folder, ("shard.*", MDS_INDEX))
        if not overwrite and os.path.isdir(self.folder) and os.listdir(self.folder):
            raise ConvertError(f"{self.folder} is not empty (MDSWriter writes into an empty folder); pass "
                               "overwrite=True to replace the MDS stream in it")
        self._made_folder = not os.path.isdir(self.folder)
        os.makedirs(self.folder, exist_ok=True)

    # --- samples in ---------------------------------------------------------------------------

    def write(self, sample: Mapping) -> None:
        """Appends one sample: ``{column: value}`` for every column (others are ignored, as
        MDSWriter ignores them)."""
        self._check_open()
        sizes, values = [], []
        for name, encoding in zip(self.column_names, self.encodings):
            if name not in sample:
                raise ParameterError(f"sample {self.samples + len(self._pending)} has no column {name!r} (columns: "
                                     f"{', '.join(self.column_names)})")
            value = encode_value(encoding, sample[name], name)
            if encoding.size is None:
                sizes.append(len(value))
            elif len(value) != encoding.size:
                raise ParameterError(f"column {name!r} ({encoding.text}): a value of {len(value)} bytes, expected "
                                     f"{encoding.size}")
            values.append(value)
        self._pending.append(np.array(sizes, _UINT32).tobytes() + b"".join(values))
        if len(self._pending) >= _BATCH:
            self._place_pending()

    def write_encoded(self, data, sizes) -> None:
        """Appends samples already encoded as MDS samples of these columns (:func:`token_samples`),
        laid end to end in ``data``, ``sizes`` their bytes."""
        self._check_open()
        self._place_pending()
        self._place(np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray)) else data,
                    np.asarray(sizes, np.int64))

    def _place_pending(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            self._place(np.frombuffer(b"".join(pending), np.uint8), np.array([len(p) for p in pending], np.int64))

    def _place(self, data: np.ndarray, sizes: np.ndarray) -> None:
        """Samples into shards by MDSWriter's rule: a sample that would take the shard past the
        limit flushes it first (even with 0 samples) and opens the next, whatever its size."""
        n = len(sizes)
        if n == 0:
            return
        # cost[k]: bytes samples before k add to a shard (their own and 4 of offset each)
        cost = np.zeros(n + 1, np.int64)
        np.cumsum(sizes + _PER_SAMPLE, out=cost[1:])
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        position = 0
        while position < n:
            if self.size_limit:
                fit = int(np.searchsorted(cost, cost[position] + self.size_limit - self._shard_size, "right"))
                count = fit - 1 - position
                if count <= 0:
                    self._flush()
                    fit = int(np.searchsorted(cost, cost[position] + self.size_limit - self._shard_size, "right"))
                    count = max(fit - 1 - position, 1)
            else:
                count = n - position
            end = position + count
            self._chunks.append(data[offsets[position]:offsets[end]])
            self._sizes.append(sizes[position:end])
            self._shard_size += int(cost[end] - cost[position])
            self.samples += count
            position = end

    # --- shards out ---------------------------------------------------------------------------

    def _flush(self) -> None:
        """The current shard written (to a temporary name) and described."""
        number = len(self.shards)
        sizes = np.concatenate(self._sizes) if self._sizes else np.zeros(0, np.int64)
        count = len(sizes)
        offsets = np.zeros(count + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        offsets += 4 + 4 * (count + 1) + len(self._config_bytes)
        if offsets[-1] >= _OFFSET_LIMIT:
            raise ParameterError(f"{self.folder}: shard {number} would hold {int(offsets[-1]):,} bytes; an MDS shard "
                                 "stays under 4 GiB (its offsets are uint32, and MDSWriter would write them wrapped): "
                                 "give a size_limit= below 4gb")
        parts = [np.array([count], _UINT32).tobytes(), offsets.astype(_UINT32).tobytes(), self._config_bytes,
                 *self._chunks]
        raw_name = f"shard.{number:05}.mds"
        raw_info = self._file_info(raw_name, parts)
        if self._compress is None:
            zip_info, name, out = None, raw_name, parts
        else:
            compressed = self._compress(b"".join(parts))
            name = f"{raw_name}.{codecs.family(self.compression, 'compression=')}"
            zip_info, out = self._file_info(name, [compressed]), [compressed]
        final = os.path.join(self.folder, name)
        temporary = temporary_path(final)
        self._written.append((temporary, final))
        with open(temporary, "wb") as f:
            for part in out:
                f.write(part)
        self.shards.append({"samples": count, "raw_data": raw_info, "zip_data": zip_info, **self._config})
        self._chunks, self._sizes = [], []
        self._shard_size = self._shard_head

    def _file_info(self, basename: str, parts) -> dict:
        digests = {}
        for name in self.hashes:
            digest = hasher(name)
            for part in parts:
                digest.update(part)
            digests[name] = digest.hexdigest()
        return {"basename": basename, "bytes": sum(memoryview(p).nbytes for p in parts), "hashes": digests}

    @property
    def raw_bytes(self) -> int:
        """Bytes of the shards written so far, uncompressed."""
        return sum(s["raw_data"]["bytes"] for s in self.shards)

    @property
    def stored_bytes(self) -> int:
        """Bytes of the shard files written so far, as stored (compressed when compressed)."""
        return sum((s["zip_data"] or s["raw_data"])["bytes"] for s in self.shards)

    def close(self) -> str:
        """Writes the last shard and the index, and renames the files into place (the index
        last); returns the index's path."""
        self._check_open()
        self._closed = True
        try:
            self._place_pending()
            if self._chunks:
                self._flush()
            index = json.dumps({"version": MDS_VERSION, "shards": self.shards}, sort_keys=True).encode("utf-8")
            index_path = os.path.join(self.folder, MDS_INDEX)
            # An older stream here goes first: its index, then its shards (a crash leaves no
            # index naming shards of two streams), then the new shards, then the new index.
            remove_quietly(index_path)
            ours = {os.path.basename(final) for _, final in self._written}
            for name in os.listdir(self.folder):
                if _SHARD_NAME.fullmatch(name) and name not in ours:
                    remove_quietly(os.path.join(self.folder, name))
            for temporary, final in self._written:
                os.replace(temporary, final)
            write_atomically(index_path, index)
        except BaseException:
            self._remove_temporaries()
            raise
        finally:
            self._lock.release()
        return index_path

    def abort(self) -> None:
        """Removes what was written; nothing is left at the final names."""
        if self._closed:
            return
        self._closed = True
        self._remove_temporaries()
        self._lock.release()

    def _remove_temporaries(self) -> None:
        for temporary, _ in self._written:
            remove_quietly(temporary)
        if self._made_folder:
            try:
                os.rmdir(self.folder)  # only when empty: a folder this writer made goes with it
            except OSError:
                pass

    def _check_open(self) -> None:
        if self._closed:
            raise ParameterError(f"{self.folder}: this ShardWriter is closed")

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


__all__ = ["DEFAULT_SIZE_LIMIT", "ShardWriter", "check_compression", "check_hashes", "column_encodings",
           "encode_value", "size_limit_bytes", "token_samples"]
