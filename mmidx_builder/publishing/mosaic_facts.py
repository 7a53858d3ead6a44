"""What a folder of MosaicML shards holds, as its dataset card and its upload need it.

    splits     the data files ``load_dataset(FOLDER)`` gives each split (datasets' own split
               patterns: a root ``index.json`` is "train", LLM Foundry's ``train/`` and ``val/``
               are "train" and "validation"), every index and shard file in one split
    streams    each split's indexes, found and checked as the builders find them
               (hf/mosaic_streams.py): a shard its index names must be there at the size the
               index records, a ``.mds`` file no index names is refused
    files      every index and shard file with its size and sha256
    rows       each split's rows as the builders count and type them (hf/mmidx_mosaic.py): the
               rows as stored (every column's feature, their Arrow bytes), or with a token
               column its ids per sample (``input_ids``; with ``seq_length``, Megatron's samples)

Every shard is read whole, one at a time: its size, its header and every hash its index
records are checked (a compressed shard is decompressed into a temporary folder, removed once
the shard is read), and its rows are made as ``load_dataset`` makes them, so a card never
describes a folder that does not load. Nothing here writes into the folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import tempfile
from pathlib import Path

import numpy as np

from ..errors import FormatError, ParameterError, UnsafeEncodingError
from ..mosaic.hashes import check_hashes
from ..mosaic.index import StreamIndex, index_layout, parse_index
from ..mosaic.shards import ShardFiles
from ..mosaic.stats import describe_stream
from ..mosaic.tokens import TokenColumn
from ..storage.files import open_regular, read_small_file
from .folder_splits import folder_splits

# The data files of our builders among what datasets lists (load.py filters a folder's files
# so: the module's extensions, then its metadata file names).
_DATA_FILE = re.compile(r".*\.(mds|zip)(\..+)?$")


@dataclasses.dataclass
class FileFacts:
    """One file of a stream: its name relative to the folder ("/"-separated), what it is, its
    size and sha256."""

    name: str
    what: str
    size: int
    sha256: str
    compressed: bool = False


@dataclasses.dataclass
class StreamFacts:
    """One stream: its index (relative name), ``describe_stream``'s numbers and its files
    (the index first, then each shard's files in the index's order)."""

    index_name: str
    numbers: dict
    files: list[FileFacts]

    @property
    def compressed_bytes(self) -> int | None:
        """Bytes of the compressed shard files (Composer's legacy index does not record them)."""
        sizes = [f.size for f in self.files if f.compressed]
        return sum(sizes) if sizes else None


@dataclasses.dataclass
class MosaicSplitFacts:
    """One split: its streams, its data files (relative names, as the card's ``configs`` lists
    them), and its rows: ``features`` (None where a column is ``pkl``: not read here),
    ``num_examples`` and ``num_bytes`` (the Arrow bytes of those rows, as one table) of the
    reading the card's settings ask for. ``lengths``: each sample's ids in the token column,
    or its bytes when there is none (``length_unit`` says which)."""

    name: str
    streams: list[StreamFacts]
    data_files: list[str]
    num_samples: int
    features: object
    num_examples: int
    num_bytes: int
    lengths: np.ndarray = dataclasses.field(repr=False)
    length_unit: str = "bytes"
    token_column: str | None = None
    token_dtype: np.dtype | None = None

    @property
    def num_tokens(self) -> int | None:
        return int(self.lengths.sum(dtype=np.int64)) if self.token_column else None


@dataclasses.dataclass
class Reading:
    """How ``load_dataset`` is to read the files (the card's ``configs``): the rows as stored;
    ``token_column`` (``dtype``: how a bytes column is read, or a cast) as ``input_ids``; with
    ``sampling`` ({seq_length, add_extra_token, num_epochs, num_samples}), Megatron samples."""

    token_column: str | None = None
    dtype: str | None = None
    sampling: dict | None = None


# --- which files, which splits ----------------------------------------------------------------

def holds_mosaic_streams(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` is a folder of MosaicML shards: it (or a folder below it) holds an
    index file, and no ``.bin`` file (a folder of ``.bin``/``.idx`` pairs may hold any JSON).
    Hidden folders (``.git``, caches) are not looked into."""
    found = False
    for _, folders, names in os.walk(directory):
        folders[:] = [f for f in folders if not f.startswith(".")]
        if any(name.endswith(".bin") for name in names):
            return False
        found = found or any(index_layout(name) is not None for name in names)
    return found


def find_mosaic_splits(directory: str | os.PathLike) -> dict[str, list[str]]:
    """``{split: [data files relative to the folder]}``: the index and shard files of each
    split, found as ``load_dataset(FOLDER)`` finds them (datasets' split patterns). A shard or
    index that no split pattern names is refused: the loader would leave it out silently; so is
    a shard that is a dangling link or a FIFO."""
    from ..hf.pair_listing import one_error

    base = os.path.abspath(directory)
    splits, left, dropped = folder_splits(base, _data_file)
    broken = one_error(e for e in dropped if _data_file(e.path))
    if broken is not None:
        raise broken
    if left:
        raise ParameterError(f"{base}: {len(left)} MosaicML file(s) fall in no split ({', '.join(left[:5])}"
                             f"{', ...' if len(left) > 5 else ''}): the split names datasets infers from the folder "
                             f"({', '.join(splits) or 'none'}) do not match them, so load_dataset would skip them. "
                             "Put each stream in a folder named by its split (train/, val/ or validation/, test/), "
                             "or a single stream at the top of the folder")
    if not splits:
        raise ParameterError(f"{base}: no MosaicML index (index.json, or Composer's index.mds) found")
    return splits


def _data_file(path: str) -> bool:
    name = os.path.basename(path)
    return index_layout(name) is not None or bool(_DATA_FILE.match(name))


def split_streams(directory: str | os.PathLike, split: str, names: list[str]) -> list[StreamIndex]:
    """The streams of a split's data files ``names``, as the builders find them: each index
    parsed, an index whose shards a merged index names left out, a ``.mds`` file no index
    names refused (MissingPartnerError)."""
    from ..hf.mosaic_streams import MAX_INDEX_BYTES, index_files, streams_of

    base = os.path.abspath(directory)
    files = [os.path.join(base, *name.split("/")) for name in names]
    indexes = [parse_index(path, read_small_file(path, MAX_INDEX_BYTES)) for path in index_files(split, files)]
    return streams_of(split, files, indexes)


# --- reading every shard ------------------------------------------------------------------------

def _one_shard(index: StreamIndex, number: int) -> StreamIndex:
    """The stream of shard ``number`` alone (a legacy index keeps that shard's sample sizes)."""
    sizes = index.sample_bytes
    if sizes is not None:
        starts = index.shard_starts
        sizes = sizes[starts[number]:starts[number + 1]]
    return dataclasses.replace(index, shards=(index.shards[number],), sample_bytes=sizes)


def _present(index: StreamIndex, number: int) -> dict[str, str]:
    """{name in the index: local path} of shard ``number``'s files that are in its folder."""
    shard = index.shards[number]
    paths = {}
    for name in (shard.name, shard.zip_name):
        path = os.path.join(index.folder, *name.split("/")) if name else None
        if path and os.path.isfile(path):
            paths[name] = path
    return paths


def check_shards(index: StreamIndex) -> None:
    """Every shard ``index`` names is in its folder at the size the index records (else a
    MissingPartnerError or FormatError naming it), as ShardFiles checks a local stream."""
    ShardFiles(index, {name: path for number in range(len(index.shards))
                       for name, path in _present(index, number).items()})


def _file_facts(path: str, base: str, what: str, recorded: dict, compressed: bool = False) -> FileFacts:
    """A file's size and sha256, and the hashes its index records checked against its bytes."""
    with open_regular(path) as f:
        data = f.read()
    check_hashes(data, recorded, path, "file")
    return FileFacts(Path(path).relative_to(base).as_posix(), what, len(data), hashlib.sha256(data).hexdigest(),
                     compressed)


class _Rows:
    """The rows of one split, shard after shard: their features (the first shard's, checked
    against every other's), their count, Arrow bytes and sample lengths."""

    def __init__(self, reading: Reading, index: StreamIndex):
        self.reading = reading
        self.features = None
        self.unsafe = False
        self.num_bytes = 0
        self.lengths: list[np.ndarray] = []
        self.unit = "bytes"
        self.column = reading.token_column
        self.dtype = None
        if self.column is None:
            from ..hf.mmidx_mosaic import default_token_column

            try:
                self.column = default_token_column(index)
            except ParameterError:
                self.column = None  # no column of token ids: the histogram counts bytes

    def add(self, files: ShardFiles, where: str) -> None:
        from ..hf.mmidx_mosaic import columns_split

        count = files.num_samples
        tokens = self._token_lengths(files, where)
        if tokens is not None:
            self.lengths.append(tokens)
        else:
            self.lengths.append(files.spans(np.arange(count))[2] if count else np.zeros(0, np.int64))
        if self.reading.token_column is not None or self.reading.sampling is not None or self.unsafe:
            return  # the rows are ids, not the columns as stored
        try:
            opened = columns_split({"allow_unsafe_types": False}, [files])
        except UnsafeEncodingError:
            self.unsafe = True  # a pkl column: unpickling runs code, and a card does not run it
            return
        if count == 0:
            return
        if self.features is None:
            self.features = opened.features
        elif opened.features != self.features:
            raise FormatError(where, "features", f"{self.features} (the split's first values)", str(opened.features),
                              hint="a column's values change dtype or axes between shards: load_dataset reads every "
                                   "row with the first sample's")
        self.num_bytes += opened.table(np.arange(count)).nbytes

    def _token_lengths(self, files: ShardFiles, where: str) -> np.ndarray | None:
        if self.column is None:
            return None
        try:
            column = TokenColumn(files, self.column, self.reading.dtype)
        except ParameterError:
            if self.reading.token_column is not None:
                raise
            self.column = None  # "tokens" held bytes and no dtype says how to read them
            return None
        if files.num_samples:
            if self.dtype is not None and column.dtype != self.dtype:
                raise FormatError(where, f"column {self.column!r}", f"{self.dtype.name} ids (as the split's first "
                                  "shard)", column.dtype.name)
            self.dtype = column.dtype
        self.unit = "tokens"
        return np.asarray(column.sequence_lengths, np.int64)


def _stream_facts(index: StreamIndex, base: str, rows: _Rows) -> StreamFacts:
    folder = index.folder
    files = [_file_facts(index.path, base, "index", {})]
    check_shards(index)
    for number, shard in enumerate(index.shards):
        present = _present(index, number)
        for name, path in present.items():
            compressed = name == shard.zip_name
            what = f"shard {number}" + (f" ({shard.compression})" if compressed else "")
            files.append(_file_facts(path, base, what, dict(shard.zip_hashes if compressed else shard.raw_hashes),
                                     compressed))
        with tempfile.TemporaryDirectory(prefix="mmidx-card-") as scratch:
            one = ShardFiles(_one_shard(index, number), present, unpack_dir=scratch, verify=True)
            one.open_all()
            rows.add(one, os.path.join(folder, shard.name))
            del one  # its map of the decompressed copy, before the folder goes
    return StreamFacts(Path(index.path).relative_to(base).as_posix(), describe_stream(index), files)


def collect_mosaic(directory: str | os.PathLike, reading: Reading | None = None) -> list[MosaicSplitFacts]:
    """Every split of the MosaicML folder ``directory``: its streams, files and rows (see the
    module docstring). Raises a typed error naming the first problem."""
    from ..hf.mmidx_mosaic import stream_layout
    from ..megatron import sampling

    reading = reading or Reading()
    base = os.path.abspath(directory)
    facts = []
    for split, names in find_mosaic_splits(base).items():
        indexes = split_streams(base, split, names)
        # The columns every stream of a split shares, as the builder asks (a ParameterError).
        stream_layout([_Unopened(index) for index in indexes])
        rows = _Rows(reading, indexes[0])
        streams = [_stream_facts(index, base, rows) for index in indexes]
        lengths = np.concatenate(rows.lengths) if rows.lengths else np.zeros(0, np.int64)
        num_samples = sum(index.num_samples for index in indexes)
        token_column = rows.column if rows.unit == "tokens" else None
        features, num_examples, num_bytes = _rows_of_reading(reading, split, rows, lengths, num_samples, sampling)
        facts.append(MosaicSplitFacts(
            name=split, streams=streams, data_files=names, num_samples=num_samples, features=features,
            num_examples=num_examples, num_bytes=num_bytes, lengths=lengths, length_unit=rows.unit,
            token_column=token_column, token_dtype=rows.dtype))
    return facts


class _Unopened:
    """What stream_layout reads of an opened stream: its index."""

    def __init__(self, index: StreamIndex):
        self.index = index


def _rows_of_reading(reading: Reading, split: str, rows: _Rows, lengths: np.ndarray, num_samples: int, sampling):
    """``(features, num_examples, num_bytes)`` of a split read as ``reading`` asks."""
    import datasets

    from ..hf.tables import sample_features

    if reading.token_column is None and reading.sampling is None:
        return (None if rows.unsafe else rows.features), num_samples, rows.num_bytes
    if rows.unit != "tokens":
        raise ParameterError(f"split {split!r}: no column of token ids to read (give token_column=, and dtype= for a "
                             "column of bytes)")
    dtype = np.dtype(reading.dtype) if reading.dtype else (rows.dtype or np.dtype("int64"))
    if reading.sampling is not None:
        settings = reading.sampling
        length = sampling.sample_length(settings["seq_length"], settings["add_extra_token"])
        count = int(sampling.count_samples(int(lengths.sum(dtype=np.int64)), seq_length=settings["seq_length"],
                                           num_epochs=settings["num_epochs"], num_samples=settings["num_samples"],
                                           add_extra_token=settings["add_extra_token"])[1])
        return sample_features(dtype, length), count, count * length * dtype.itemsize
    fixed = int(lengths[0]) if len(lengths) and (lengths == lengths[0]).all() else None
    values = datasets.Value(dtype.name)
    features = datasets.Features({"input_ids": datasets.List(values, length=fixed) if fixed is not None
                                  else datasets.List(values)})
    offsets = 0 if fixed is not None else 4 * (len(lengths) + 1)
    return features, num_samples, int(lengths.sum(dtype=np.int64)) * dtype.itemsize + offsets


__all__ = ["FileFacts", "MosaicSplitFacts", "Reading", "StreamFacts", "check_shards", "collect_mosaic",
           "find_mosaic_splits", "holds_mosaic_streams", "split_streams"]
