"""A split's MosaicML streams: its index files found among the data files, downloaded first,
parsed, and the shards each names downloaded (or, streaming, named by URL); then opened.

Which files are read: each index names its shards by file name relative to its folder (a
merged index, ``streaming.base.util.merge_index``, names them in folders below it: its folders'
own indexes are then not read again). A shard is read from its uncompressed file when a local
folder holds one (StreamingDataset's ``local`` caches hold both), else from its compressed file.
A ``.mds`` file among the data files that no index names is an error naming it, not a file
left out; other files beside the shards (a card, ``compression.txt``, a tokenizer) are not data.
"""

from __future__ import annotations

import os
import posixpath

from ..errors import FormatError, MissingPartnerError, ParameterError
from ..mosaic.index import StreamIndex, index_layout, parse_index
from ..mosaic.shards import ShardFiles
from ..storage.files import file_identity, is_remote, read_small_file
from .pair_downloads import download_many

# An index.json of 100,000 shards is ~60 MB; a larger file is no index.
MAX_INDEX_BYTES = 1 << 30
# Files a MosaicML folder holds beside its shards that are not data.
SHARD_MARK = ".mds"


def holds_mosaic_index(files) -> bool:
    """Whether ``files`` (one split's data files) hold a MosaicML index."""
    return any(index_layout(str(f)) is not None for f in files)


def mosaic_index_of(prefix: str) -> str | None:
    """The index file a Megatron prefix names when it names MosaicML shards: the index file
    itself (local or remote), or a local folder holding one; None for a ``.bin``/``.idx`` prefix."""
    if index_layout(prefix) is not None:
        return prefix
    if is_remote(prefix) or not os.path.isdir(prefix):
        return None
    found = sorted(name for name in os.listdir(prefix) if index_layout(name) is not None)
    return os.path.join(prefix, found[0]) if found else None


def _folder(path: str) -> str:
    return posixpath.dirname(path) if is_remote(path) else os.path.dirname(path)


def _join(folder: str, name: str) -> str:
    return posixpath.join(folder, name) if is_remote(folder) else os.path.join(folder, *name.split("/"))


def index_files(split: str, files: list[str]) -> list[str]:
    """The split's index files, in the given order; a ParameterError when there is none."""
    indexes = [f for f in files if index_layout(f) is not None]
    if not indexes:
        shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        raise ParameterError(f"split {split!r}: no MosaicML index (index.json, or Composer's index.mds) among its "
                             f"data files ({shown}); point load_dataset at the folder that holds the index")
    return indexes


def read_indexes(dl_manager, paths: list[str]) -> list[tuple[StreamIndex, bytes]]:
    """Each index at ``paths`` downloaded and parsed (named by its path as given), with its bytes."""
    downloaded = dl_manager.download(list(paths))
    read = []
    for given, local in zip(paths, downloaded):
        try:
            data = read_small_file(local, MAX_INDEX_BYTES, _opener(dl_manager) if is_remote(local) else None)
        except FileNotFoundError:
            raise MissingPartnerError(given, "file", "a MosaicML index", "no such file") from None
        read.append((parse_index(given, data), data))
    return read


def _opener(dl_manager):
    from datasets.utils.file_utils import xopen

    return lambda path, mode="rb": xopen(path, mode, download_config=dl_manager.download_config)


def streams_of(split: str, files: list[str], indexes: list[StreamIndex]) -> list[StreamIndex]:
    """The indexes that are streams of their own: an index whose every shard a merged index
    already names is left out. A ``.mds`` data file no index names is refused by name."""
    named: set[str] = set()
    streams = []
    for index in sorted(indexes, key=lambda i: (i.path.count("/"), i.path)):
        folder = _folder(index.path)
        own = {_normal(_join(folder, name)) for shard in index.shards for name in (shard.name, shard.zip_name) if name}
        if own and own <= named:
            continue
        named |= own
        streams.append(index)
    order = {index.path: i for i, index in enumerate(indexes)}
    streams.sort(key=lambda i: order[i.path])
    for f in files:
        if index_layout(f) is None and SHARD_MARK in os.path.basename(f) and _normal(f) not in named:
            raise MissingPartnerError(f, "file", "a shard that an index among the data files names",
                                      f"no index of split {split!r} names it",
                                      hint="its index is missing, or it belongs to another dataset: give the folder "
                                           "that holds its index, or leave the file out")
    return streams


def _normal(path: str) -> str:
    return path if is_remote(path) else os.path.normpath(os.path.abspath(path))


def shard_paths(index: StreamIndex, dl_manager, streaming: bool) -> dict[str, str]:
    """{name in the index: where to read it} for each shard: its uncompressed file when a local
    folder holds it, else the compressed one; downloaded unless streaming."""
    folder = _folder(index.path)
    wanted = {}
    for shard in index.shards:
        raw = _join(folder, shard.name)
        if shard.zip_name is None or (not is_remote(raw) and os.path.isfile(raw)):
            wanted[shard.name] = raw
        else:
            wanted[shard.zip_name] = _join(folder, shard.zip_name)
    names = list(wanted)
    if streaming or not any(is_remote(p) for p in wanted.values()):
        return wanted
    try:
        downloaded = download_many(dl_manager, [wanted[n] for n in names])
    except FileNotFoundError as error:
        raise MissingPartnerError(str(error), "file", f"the shards {index.path} names", "a missing shard") from error
    return dict(zip(names, downloaded))


def stream_identity(index: StreamIndex, paths: dict[str, str]) -> list[str]:
    """The identities of a stream's files as read (its index and each shard file)."""
    identities = [file_identity(index.path) if not is_remote(index.path) else index.path]
    for path in paths.values():
        identities.append(path if is_remote(path) else _identity_or_missing(path))
    return identities


def _identity_or_missing(path: str) -> str:
    try:
        return file_identity(path)
    except FileNotFoundError:
        return f"{path}:missing"


def open_streams(plan_streams, opener, unpack_dir: str, verify: bool) -> list[ShardFiles]:
    """The plan's streams (``(index path, index bytes, ((name, path), ...))``) opened."""
    from ..storage.remote import remote_access_for

    opened = []
    for index_path, data, paths in plan_streams:
        index = parse_index(index_path, data)
        paths = dict(paths)
        access = next((a for a in (remote_access_for(opener, p) for p in paths.values()) if a is not None), None)
        files = ShardFiles(index, paths, access, unpack_dir, verify)
        if verify:
            files.open_all()
        opened.append(files)
    return opened


def identity_paths_of(files: list[str]) -> list[str]:
    """For the cache hash: the local index files among ``files`` and every shard they name
    that exists (a data_files pattern naming only the index still keys on its shards)."""
    paths = []
    for f in files:
        if index_layout(f) is None or is_remote(f) or not os.path.isfile(f):
            continue
        try:
            index = parse_index(f, read_small_file(f, MAX_INDEX_BYTES))
        except FormatError:
            continue  # said when the split is planned
        folder = _folder(f)
        for shard in index.shards:
            for name in (shard.name, shard.zip_name):
                if name and os.path.isfile(_join(folder, name)):
                    paths.append(_join(folder, name))
    return paths


__all__ = ["holds_mosaic_index", "mosaic_index_of", "identity_paths_of", "index_files", "open_streams", "read_indexes", "shard_paths",
           "stream_identity", "streams_of"]
