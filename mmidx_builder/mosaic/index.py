"""A MosaicML index parsed into one description of a stream: its columns, its shards and how
many samples each holds. Both layouts, checked field by field as they are read.

MDS (``index.json``, mosaicml-streaming's ``Writer._write_index``)::

    {"version": 2, "shards": [{"format": "mds", "version": 2, "samples": N,
      "column_names": [...], "column_encodings": [...], "column_sizes": [size or null, ...],
      "compression": "zstd:7" or null, "hashes": ["sha1", ...], "size_limit": ...,
      "raw_data": {"basename": "shard.00000.mds", "bytes": B, "hashes": {"sha1": HEX}},
      "zip_data": {"basename": "shard.00000.mds.zstd", ...} or null}, ...]}

Composer's legacy ``index.mds`` (``composer/datasets/streaming/format.py``,
``StreamingDatasetIndex.dumps``), little-endian, gzip-compressed as a whole when it is named
``index.mds.gz`` (its shards are then ``000000.mds.gz``)::

    offset                      field
    0                           uint32 magic 0xDA7AD06E, uint32 version 1, uint32 num_shards
    12                          int64 total_samples, int64 total_bytes
    28                          int64 samples_per_shard[num_shards], int64 bytes_per_shard[num_shards]
    28 + 16 * num_shards        int32 format of the sample sizes: 0 (one int64 for all), 1, 2, 4, 8
    +4                          the sample sizes: int64, or total_samples items of that many bytes
    then                        int32 num_fields, int32 name length[num_fields], UTF-8 names

The sizes are *written* with numpy's ``astype(int8)`` (or int16, int32), chosen when every size
fits the unsigned type, so sizes of 128-255 bytes (32,768-65,535, 2**31-2**32) wrap to negative
numbers; Composer's own loader reads them back signed and fails at the first such sample.
The bytes are the sizes' low bits: read unsigned, they are the sizes, and each shard's sizes
must add up to its ``bytes_per_shard`` (checked), so a misread cannot pass.
"""

from __future__ import annotations

import json
import posixpath
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError
from . import codecs
from .encodings import BYTES, Encoding, parse_encoding
from .hashes import known

MDS_INDEX = "index.json"
LEGACY_INDEX = "index.mds"
MDS_VERSION = 2

LEGACY_MAGIC = 0xDA7AD06E
LEGACY_VERSION = 1
_LEGACY_HEAD = struct.Struct("<3I2q")  # magic, version, num_shards, total_samples, total_bytes
_INT32 = struct.Struct("<i")
# bps_format -> how the sample sizes are stored (read unsigned: see the module docstring)
_LEGACY_SIZES = {1: np.dtype("<u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<i8")}


@dataclass(frozen=True)
class Shard:
    """One shard as its index describes it. ``name``: the file to read, uncompressed, relative
    to the index's folder; ``zip_name``: the compressed file when the shard is compressed."""

    name: str
    samples: int
    raw_bytes: int
    raw_hashes: tuple = ()
    zip_name: str | None = None
    zip_bytes: int | None = None
    zip_hashes: tuple = ()
    compression: str | None = None


@dataclass(frozen=True, eq=False)
class StreamIndex:
    """A stream: the index file at ``path``, its layout (``"mds"`` or ``"legacy"``), its columns
    (in the order the samples store them) and shards. ``sample_bytes``: every sample's size,
    for the legacy layout, whose index holds them (MDS shards hold their own offsets)."""

    path: str
    layout: str
    columns: tuple[str, ...]
    encodings: tuple[Encoding, ...]
    shards: tuple[Shard, ...]
    sample_bytes: np.ndarray | None = None

    @property
    def folder(self) -> str:
        return posixpath.dirname(self.path) if "://" in self.path else _local_dirname(self.path)

    @property
    def num_samples(self) -> int:
        return sum(s.samples for s in self.shards)

    @property
    def shard_starts(self) -> np.ndarray:
        """The first sample id of each shard, and the total at the end."""
        return np.concatenate(([0], np.cumsum([s.samples for s in self.shards], dtype=np.int64)))


def _local_dirname(path: str) -> str:
    import os

    return os.path.dirname(path)


def index_layout(name: str) -> str | None:
    """``"mds"``, ``"legacy"`` or None: what the file name says an index file is."""
    base = posixpath.basename(str(name).replace("\\", "/"))
    if base == MDS_INDEX:
        return "mds"
    if base == LEGACY_INDEX or (base.startswith(LEGACY_INDEX + ".") and base[len(LEGACY_INDEX) + 1:] in codecs.FAMILIES):
        return "legacy"
    return None


def parse_index(path: str, data: bytes) -> StreamIndex:
    """The index file at ``path`` (its bytes ``data``, as stored) parsed and checked."""
    layout = index_layout(path)
    if layout == "mds":
        return _parse_mds(path, data)
    if layout == "legacy":
        suffix = posixpath.basename(path)[len(LEGACY_INDEX):]
        if suffix:
            data = codecs.decompress(suffix[1:], data, path)
        return _parse_legacy(path, data, suffix)
    raise FormatError(path, "file name", f"{MDS_INDEX} or {LEGACY_INDEX}[.gz]", posixpath.basename(path))


# --- MDS ---------------------------------------------------------------------------------------

def _parse_mds(path: str, data: bytes) -> StreamIndex:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise FormatError(path, "JSON", "an MDS index (a JSON object)", f"{type(error).__name__}: {error}") from None
    if not isinstance(document, dict) or document.get("version") != MDS_VERSION or not isinstance(
            document.get("shards"), list):
        found = {k: document.get(k) for k in ("version",)} if isinstance(document, dict) else type(document).__name__
        raise FormatError(path, "index", f'{{"version": {MDS_VERSION}, "shards": [...]}} (mosaicml-streaming\'s index)',
                          _short(found))
    shards, columns, encodings = [], None, None
    for i, entry in enumerate(document["shards"]):
        where = f"shards[{i}]"
        if not isinstance(entry, dict):
            raise FormatError(path, where, "a shard's description (a JSON object)", _short(entry))
        if entry.get("format") != "mds":
            raise FormatError(path, f"{where} format", '"mds"', _short(entry.get("format")),
                              hint="mosaicml-streaming's json, csv, tsv and xsv shards are text formats that "
                                   "mmidx_builder does not read")
        if entry.get("version") != MDS_VERSION:
            raise FormatError(path, f"{where} version", str(MDS_VERSION), _short(entry.get("version")))
        names, shard_encodings = _mds_columns(path, where, entry)
        if columns is None:
            columns, encodings = names, shard_encodings
        elif (names, [e.text for e in shard_encodings]) != (columns, [e.text for e in encodings]):
            raise FormatError(path, f"{where} columns", f"the columns of shards[0]: {_columns_text(columns, encodings)}",
                              _columns_text(names, shard_encodings),
                              hint="one stream's shards must share their columns")
        shards.append(_mds_shard(path, where, entry))
    return StreamIndex(path, "mds", tuple(columns or ()), tuple(encodings or ()), tuple(shards))


def _columns_text(names, encodings) -> str:
    return ", ".join(f"{n}: {e.text}" for n, e in zip(names, encodings))


def _mds_columns(path: str, where: str, entry: dict) -> tuple[list[str], list[Encoding]]:
    names, texts, sizes = (entry.get(k) for k in ("column_names", "column_encodings", "column_sizes"))
    if not (isinstance(names, list) and isinstance(texts, list) and isinstance(sizes, list)
            and len(names) == len(texts) == len(sizes) and all(isinstance(n, str) for n in names)):
        raise FormatError(path, f"{where} columns", "column_names, column_encodings and column_sizes: lists of one "
                          "length", _short({k: entry.get(k) for k in ("column_names", "column_encodings", "column_sizes")}))
    if len(set(names)) != len(names):
        raise FormatError(path, f"{where} column_names", "distinct names", _short(names))
    encodings = [parse_encoding(text, path, name) for name, text in zip(names, texts)]
    for name, encoding, size in zip(names, encodings, sizes):
        if size != encoding.size:
            raise FormatError(path, f"{where} column_sizes of {name!r}",
                              f"{encoding.size} (what {encoding.text!r} takes)", _short(size))
    return names, encodings


def _mds_shard(path: str, where: str, entry: dict) -> Shard:
    samples = entry.get("samples")
    if not _whole(samples):
        raise FormatError(path, f"{where} samples", "a count of samples (a whole number >= 0)", _short(samples))
    compression = entry.get("compression")
    raw_name, raw_bytes, raw_hashes = _file_info(path, f"{where} raw_data", entry.get("raw_data"))
    zip_data = entry.get("zip_data")
    if compression is None and zip_data is None:
        return Shard(raw_name, samples, raw_bytes, raw_hashes)
    if compression is None or zip_data is None:
        raise FormatError(path, f"{where} compression", "compression and zip_data both given or both null",
                          f"compression {_short(compression)}, zip_data {_short(zip_data)}")
    codec = codecs.family(compression, path)
    zip_name, zip_bytes, zip_hashes = _file_info(path, f"{where} zip_data", zip_data)
    if not zip_name.endswith("." + codec):
        raise FormatError(path, f"{where} zip_data basename", f"a name ending in .{codec} ({compression})", zip_name)
    return Shard(raw_name, samples, raw_bytes, raw_hashes, zip_name, zip_bytes, zip_hashes, compression)


def _file_info(path: str, where: str, info) -> tuple[str, int, tuple]:
    if not isinstance(info, dict):
        raise FormatError(path, where, "{basename, bytes, hashes}", _short(info))
    name, size, hashes = info.get("basename"), info.get("bytes"), info.get("hashes") or {}
    if not isinstance(name, str) or not _whole(size) or not isinstance(hashes, dict):
        raise FormatError(path, where, "{basename: a file name, bytes: a size, hashes: {algorithm: hex}}", _short(info))
    check_shard_name(name, path, f"{where} basename")
    for algorithm in hashes:
        if not known(algorithm):
            raise FormatError(path, f"{where} hashes", "algorithms of hashlib or xxhash", repr(algorithm))
    return name, size, tuple(sorted(hashes.items()))


def check_shard_name(name: str, path: str, field: str) -> None:
    """A shard's name must lie in the index's folder (or a folder below it, as
    ``streaming.base.util.merge_index`` writes them): an index naming ``/etc/passwd`` or
    ``../other/shard`` is refused, whoever wrote it."""
    parts = name.replace("\\", "/").split("/")
    if not name or name.startswith(("/", "\\")) or ":" in parts[0] or any(p in ("", ".", "..") for p in parts):
        raise FormatError(path, field, "a file name inside the index's folder", repr(name))


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


# --- Composer's legacy index.mds -------------------------------------------------------------

def _parse_legacy(path: str, data: bytes, suffix: str) -> StreamIndex:
    reader = _Bytes(path, data)
    magic, version, num_shards, total_samples, total_bytes = reader.unpack(_LEGACY_HEAD, "header")
    if magic != LEGACY_MAGIC:
        raise FormatError(path, "magic", f"0x{LEGACY_MAGIC:08X} (Composer's StreamingDatasetIndex)", f"0x{magic:08X}",
                          offset=0)
    if version != LEGACY_VERSION:
        raise FormatError(path, "version", str(LEGACY_VERSION), str(version), offset=4)
    samples_per_shard = reader.array("<i8", num_shards, "samples_per_shard")
    bytes_per_shard = reader.array("<i8", num_shards, "bytes_per_shard")
    for field, values in (("samples_per_shard", samples_per_shard), ("bytes_per_shard", bytes_per_shard)):
        if (values < 0).any():
            raise FormatError(path, field, "counts >= 0", str(int(values.min())))
    if total_samples != int(samples_per_shard.sum()):
        raise FormatError(path, "total_samples", f"{int(samples_per_shard.sum())} (samples_per_shard's sum)",
                          str(total_samples), offset=12)
    if total_bytes != int(bytes_per_shard.sum()):
        raise FormatError(path, "total_bytes", f"{int(bytes_per_shard.sum())} (bytes_per_shard's sum)",
                          str(total_bytes), offset=20)
    where = reader.position
    (bps_format,) = reader.unpack(_INT32, "sample sizes format")
    if bps_format == 0:
        (size,) = reader.array("<i8", 1, "the sample size")
        # A view, not total_samples copies: the count is only the index's claim until the
        # shards are opened (and checked against their sizes).
        sample_bytes = np.broadcast_to(np.int64(size), (total_samples,))
    elif bps_format in _LEGACY_SIZES:
        sample_bytes = reader.array(_LEGACY_SIZES[bps_format], total_samples, "bytes_per_sample").astype(np.int64)
    else:
        raise FormatError(path, "sample sizes format", "0, 1, 2, 4 or 8", str(bps_format), offset=where)
    (num_fields,) = reader.unpack(_INT32, "num_fields")
    lengths = reader.array("<i4", max(num_fields, 0), "field name lengths")
    if num_fields < 1 or (lengths < 0).any():
        raise FormatError(path, "fields", "at least one field, names of >= 0 bytes", f"{num_fields} field(s)")
    fields = []
    for length in lengths.tolist():
        raw = reader.take(length, "field name")
        try:
            fields.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise FormatError(path, "field name", "UTF-8", repr(raw), offset=reader.position - length) from None
    if reader.position != len(data):
        raise FormatError(path, "end of index", f"{reader.position} bytes", f"{len(data)} bytes (trailing data)")
    if len(set(fields)) != len(fields):
        raise FormatError(path, "fields", "distinct names", repr(fields))
    too_small = (sample_bytes[:1] if bps_format == 0 else sample_bytes) < 8 * num_fields
    if too_small.any():
        k = int(np.flatnonzero(too_small)[0])
        raise FormatError(path, f"bytes_per_sample of sample {k}",
                          f"at least {8 * num_fields} (an int64 size per field)", str(int(sample_bytes[k])))
    if bps_format == 0:
        sums = samples_per_shard * int(sample_bytes[0]) if total_samples else np.zeros(num_shards, np.int64)
    else:
        running = np.concatenate(([0], np.cumsum(sample_bytes)))
        ends = np.cumsum(samples_per_shard)
        sums = running[ends] - running[ends - samples_per_shard]
    for shard in np.flatnonzero(sums != bytes_per_shard).tolist()[:1]:
        raise FormatError(path, f"bytes_per_shard of shard {shard}", f"{int(sums[shard])} (its samples' sizes added up)",
                          str(int(bytes_per_shard[shard])))
    codec = suffix[1:] or None
    shards = tuple(Shard(f"{i:06}.mds", int(n), int(b), (), f"{i:06}.mds{suffix}" if codec else None, None, (), codec)
                   for i, (n, b) in enumerate(zip(samples_per_shard.tolist(), bytes_per_shard.tolist())))
    return StreamIndex(path, "legacy", tuple(fields), tuple(BYTES for _ in fields), shards, sample_bytes)


class _Bytes:
    """A cursor over an index's bytes: every read checked against the end, named in errors."""

    def __init__(self, path: str, data: bytes):
        self.path, self.data, self.position = path, data, 0

    def take(self, count: int, field: str) -> bytes:
        if count < 0 or self.position + count > len(self.data):
            raise FormatError(self.path, field, f"{count} more bytes", f"{len(self.data) - self.position} "
                              f"(the index has {len(self.data)} bytes)", offset=self.position)
        chunk = self.data[self.position:self.position + count]
        self.position += count
        return chunk

    def unpack(self, layout: struct.Struct, field: str) -> tuple:
        return layout.unpack(self.take(layout.size, field))

    def array(self, dtype, count: int, field: str) -> np.ndarray:
        dtype = np.dtype(dtype)
        if count < 0:
            raise FormatError(self.path, field, "a count >= 0", str(count), offset=self.position)
        return np.frombuffer(self.take(count * dtype.itemsize, field), dtype).copy()


__all__ = ["LEGACY_INDEX", "MDS_INDEX", "Shard", "StreamIndex", "check_shard_name", "index_layout", "parse_index"]
