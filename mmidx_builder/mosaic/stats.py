"""What ``mmidx inspect`` says of a local MosaicML folder, and its ``--verify``: every shard read
whole, its header checked against the index and every hash the index records compared."""

from __future__ import annotations

import os
import tempfile

import numpy as np

from .columns import Layout, column_spans
from .index import StreamIndex, index_layout, parse_index
from .shards import ShardFiles

MAX_INDEX_BYTES = 1 << 30


def local_index_path(path: str) -> str | None:
    """The index file ``path`` names: the file itself, or the one in a folder; else None."""
    if os.path.isdir(path):
        found = sorted(name for name in os.listdir(path) if index_layout(name) is not None)
        return os.path.join(path, found[0]) if found else None
    return path if index_layout(path) is not None else None


def open_local_stream(path: str, unpack_dir: str | None = None, verify: bool = False) -> ShardFiles:
    """A local folder of MosaicML shards (or its index file) opened: every shard at hand."""
    from ..storage.files import read_small_file

    index = parse_index(path, read_small_file(path, MAX_INDEX_BYTES))
    folder = os.path.dirname(path)
    paths = {}
    for shard in index.shards:
        for name in (shard.name, shard.zip_name):
            if name and os.path.isfile(os.path.join(folder, *name.split("/"))):
                paths[name] = os.path.join(folder, *name.split("/"))
                break
    return ShardFiles(index, paths, unpack_dir=unpack_dir, verify=verify)


def describe_stream(index: StreamIndex) -> dict:
    """The numbers of a stream, from its index alone."""
    compressed = [s for s in index.shards if s.zip_name is not None]
    return {"index": index.path, "layout": "MDS" if index.layout == "mds" else "Composer legacy (StreamingDatasetIndex)",
            "columns": {c: e.text for c, e in zip(index.columns, index.encodings)},
            "shards": len(index.shards), "samples": index.num_samples,
            "raw_bytes": sum(s.raw_bytes for s in index.shards),
            "compressed_bytes": sum(s.zip_bytes or 0 for s in compressed) if compressed else None,
            "compression": sorted({s.compression for s in compressed}) or None,
            "hashes": sorted({name for s in index.shards for name, _ in (*s.raw_hashes, *s.zip_hashes)})}


def verify_stream(path: str) -> int:
    """Reads every shard of the local stream at ``path`` whole: its size, its header and every
    hash its index records checked (a compressed shard is decompressed into a temporary folder,
    and both files' hashes checked). Returns the shards checked; a FormatError names the first
    problem."""
    with tempfile.TemporaryDirectory(prefix="mmidx-verify-") as scratch:
        files = open_local_stream(path, unpack_dir=scratch, verify=True)
        files.open_all()
        index = files.index
        layout = Layout(index.columns, index.encodings, index.layout == "legacy")
        starts = index.shard_starts
        for number, shard in enumerate(index.shards):
            # Every sample's header: its column sizes fill the sample exactly.
            data, at, lengths = files.read_samples(np.arange(starts[number], starts[number + 1]))
            column_spans(layout, data, at, lengths, lambda k, first=int(starts[number]): files.name_of(first + k))
    return len(index.shards)


__all__ = ["describe_stream", "local_index_path", "open_local_stream", "verify_stream"]
