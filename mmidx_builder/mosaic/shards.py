"""A stream's shards opened wherever they are, and its samples' bytes read in batches.

Where a sample's bytes lie:

    MDS shard (uncompressed; ``MDSWriter.encode_joint_shard``)
      uint32 count | uint32 offsets[count + 1] | the writer's config (JSON) | samples
      sample i is bytes [offsets[i], offsets[i + 1]) of the file; offsets[count] is its size
    Composer's legacy shard: the samples back to back; their sizes are in the index

A shard is read from its uncompressed file when that is at hand (a local folder, or a
StreamingDataset ``local`` cache, which holds both), else its compressed file is fetched whole,
decompressed into ``unpack_dir`` (once per file version: a content key names it) and read from
there. Every shard's size is checked against its index (local files when the stream is
opened, remote ones when first read), and an MDS shard's header against its index's sample
count and its own size, before any sample of it is read; with ``verify`` the recorded hashes
too. Reads are byte runs: local files through their maps (storage/mapped.py: a file truncated
meanwhile is a FormatError, never SIGBUS), remote ones as ranged requests all in flight at
once (storage/remote). Shards are opened on first use, once per process (thread-safe).
"""

from __future__ import annotations

import hashlib
import os
import threading

import numpy as np

from ..errors import FormatError, MissingPartnerError
from ..storage.files import file_identity, is_remote, open_regular, write_atomically
from ..storage.mapped import MappedFile, gather
from ..storage.remote import RemoteAccess, read_ranges
from . import codecs
from .hashes import check_hashes
from .index import Shard, StreamIndex

_COUNT = np.dtype("<u4")


class _Opened:
    """One shard as opened: its file (a MappedFile or a RemoteObject) and every sample's start
    in it (``offsets``, ``samples + 1`` int64, the last one the end of the last sample)."""

    __slots__ = ("file", "offsets")

    def __init__(self, file, offsets: np.ndarray):
        self.file, self.offsets = file, offsets


class ShardFiles:
    """The shards of ``index``, read from ``paths`` ({file name in the index: local path or URL}
    for each file of each shard at hand), through ``access`` for remote ones.

    ``unpack_dir``: where compressed shards are decompressed to (needed only when one is read);
    ``verify``: check the hashes the index records for each file read."""

    def __init__(self, index: StreamIndex, paths: dict, access: RemoteAccess | None = None,
                 unpack_dir: str | None = None, verify: bool = False):
        self.index, self.access, self.unpack_dir, self.verify = index, access, unpack_dir, verify
        self.shard_starts = index.shard_starts
        self._sources: list[tuple[str, bool]] = []  # (path or URL, compressed) per shard
        self.identities: list[str] = []
        for number, shard in enumerate(index.shards):
            if shard.name in paths:
                source = (paths[shard.name], False)
            elif shard.zip_name is not None and shard.zip_name in paths:
                source = (paths[shard.zip_name], True)
            else:
                expected = shard.name if shard.zip_name is None else f"{shard.name} or {shard.zip_name}"
                raise MissingPartnerError(_join(index.folder, shard.zip_name or shard.name), "file",
                                          f"shard {number} of {index.path} ({expected})", "no such file",
                                          hint="a shard its index names is missing; fetch it again or remove the "
                                               "index")
            self._sources.append(source)
            path, compressed = source
            if not is_remote(path):
                self._check_local_size(number, shard, path, compressed)
        self._opened: list[_Opened | None] = [None] * len(index.shards)
        self._lock = threading.Lock()

    def __getstate__(self):
        # A worker process opens the shards it reads itself (maps and sockets do not pickle).
        state = dict(self.__dict__)
        state["_opened"] = [None] * len(self._opened)
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def num_samples(self) -> int:
        return int(self.shard_starts[-1])

    @property
    def remote(self) -> bool:
        """Some shard is read over the network (worth reading ahead)."""
        return any(is_remote(path) and not compressed for path, compressed in self._sources)

    def _check_local_size(self, number: int, shard: Shard, path: str, compressed: bool) -> None:
        try:
            identity = file_identity(path)
        except FileNotFoundError:
            raise MissingPartnerError(path, "file", f"shard {number} of {self.index.path}", "no such file") from None
        size = int(identity.rsplit(":", 4)[2])
        expected = shard.zip_bytes if compressed else shard.raw_bytes
        if expected is not None and size != expected:
            raise FormatError(path, "file size", f"{expected} bytes (shard {number} in {self.index.path})",
                              f"{size} bytes", hint="the shard is cut short or was rewritten after its index")
        self.identities.append(identity)

    # --- opening a shard ------------------------------------------------------------------------

    def shard(self, number: int) -> _Opened:
        opened = self._opened[number]
        if opened is None:
            with self._lock:
                opened = self._opened[number]
                if opened is None:
                    opened = self._opened[number] = self._open(number)
        return opened

    def open_all(self, numbers=None) -> None:
        """Opens the shards ``numbers`` (default all) not yet open; remote ones all at once."""
        wanted = [n for n in (range(len(self._opened)) if numbers is None else numbers) if self._opened[n] is None]
        if not wanted:
            return
        remote = [n for n in wanted if is_remote(self._sources[n][0]) and not self._sources[n][1]]
        if len(remote) > 1 and self.access is not None:
            objects = self.access.stat_many([self._sources[n][0] for n in remote])
            headers = self._remote_headers(remote, objects)
            with self._lock:
                for n, obj, offsets in zip(remote, objects, headers):
                    if self._opened[n] is None:
                        self._opened[n] = _Opened(obj, offsets)
        for n in wanted:
            self.shard(n)

    def _open(self, number: int) -> _Opened:
        shard = self.index.shards[number]
        path, compressed = self._sources[number]
        if compressed:
            return self._mapped(number, self._unpacked(number, shard, path))
        if is_remote(path):
            obj = self._access().stat(path)
            return _Opened(obj, self._remote_headers([number], [obj])[0])
        if self.verify:
            with open_regular(path) as f:
                check_hashes(f.read(), dict(shard.raw_hashes), path, "shard")
        return self._mapped(number, path)

    def _access(self) -> RemoteAccess:
        if self.access is None:
            self.access = RemoteAccess()
        return self.access

    def _mapped(self, number: int, path: str) -> _Opened:
        shard = self.index.shards[number]
        file = MappedFile(path)
        if file.size != shard.raw_bytes:
            raise FormatError(path, "file size", f"{shard.raw_bytes} bytes (shard {number} in {self.index.path})",
                              f"{file.size} bytes", hint="the shard is cut short or was rewritten after its index")
        if self.index.layout == "legacy":
            return _Opened(file, self._legacy_offsets(number))
        count = file.read(0, 1, _COUNT)
        table = file.read(_COUNT.itemsize, int(count[0]) + 1, _COUNT) if count[0] == shard.samples else count
        return _Opened(file, self._mds_offsets(number, path, count, table, file.size))

    def _remote_headers(self, numbers: list[int], objects) -> list[np.ndarray]:
        """The sample offsets of remote shards ``numbers`` (opened as ``objects``): every
        header fetched at once, each its count and offsets (the index says how long)."""
        for number, obj in zip(numbers, objects):
            shard = self.index.shards[number]
            if obj.size != shard.raw_bytes:
                raise FormatError(obj.url, "file size", f"{shard.raw_bytes} bytes (shard {number} in {self.index.path})",
                                  f"{obj.size} bytes", hint="the shard is cut short or was rewritten after its index")
        if self.index.layout == "legacy":
            return [self._legacy_offsets(n) for n in numbers]
        heads = [min(obj.size, _COUNT.itemsize * (self.index.shards[n].samples + 2)) for n, obj in zip(numbers, objects)]
        data = read_ranges(self._access(), list(objects), np.arange(len(numbers)), np.zeros(len(numbers), np.int64),
                           np.array(heads, np.int64))
        found = []
        for number, obj, head in zip(numbers, objects, data):
            values = np.frombuffer(head, _COUNT)
            found.append(self._mds_offsets(number, obj.url, values[:1], values[1:], obj.size))
        return found

    def _mds_offsets(self, number: int, path: str, count: np.ndarray, table: np.ndarray, size: int) -> np.ndarray:
        shard = self.index.shards[number]
        if len(count) < 1 or int(count[0]) != shard.samples:
            raise FormatError(path, "sample count", f"{shard.samples} (shard {number} in {self.index.path})",
                              str(int(count[0])) if len(count) else "no header", offset=0)
        offsets = table.astype(np.int64)
        if len(offsets) != shard.samples + 1:
            raise FormatError(path, "sample offsets", f"{shard.samples + 1} offsets", f"{len(offsets)}", offset=4)
        head = _COUNT.itemsize * (shard.samples + 2)
        bad = np.flatnonzero(np.diff(offsets) < 0)
        if offsets[0] < head or offsets[-1] != size or len(bad):
            sample = int(bad[0]) if len(bad) else (0 if offsets[0] < head else shard.samples - 1)
            raise FormatError(path, f"offset of sample {sample}", f"offsets rising from at least {head} to the file's "
                              f"size {size}", f"{offsets[sample]} then {offsets[sample + 1]}" if len(bad) else
                              f"from {offsets[0]} to {offsets[-1]}", offset=4 * (sample + 1))
        return offsets

    def _legacy_offsets(self, number: int) -> np.ndarray:
        first, last = self.shard_starts[number], self.shard_starts[number + 1]
        return np.concatenate(([0], np.cumsum(self.index.sample_bytes[first:last], dtype=np.int64)))

    def _unpacked(self, number: int, shard: Shard, path: str) -> str:
        """The local path of shard ``number``'s decompressed file (compressed at ``path``),
        decompressed now unless an earlier process did it."""
        if is_remote(path):
            obj = self._access().stat(path)
            if shard.zip_bytes is not None and obj.size != shard.zip_bytes:
                raise FormatError(path, "file size", f"{shard.zip_bytes} bytes (shard {number} in {self.index.path})",
                                  f"{obj.size} bytes", hint="the shard is cut short or was rewritten after its index")
            key = obj.content_key
        else:
            obj, key = None, hashlib.sha256(file_identity(path).encode()).hexdigest()[:32]
        if self.unpack_dir is None:
            raise FormatError(path, "compressed shard", "a folder to decompress it into (unpack_dir)", "none given")
        target = os.path.join(self.unpack_dir, f"{key}-{os.path.basename(shard.name)}")
        if os.path.isfile(target) and os.path.getsize(target) == shard.raw_bytes and not self.verify:
            return target
        if obj is not None:
            data = self._access().fetch([obj], [0], [obj.size])[0]
        else:
            with open_regular(path) as f:
                data = f.read()
        if self.verify:
            check_hashes(data, dict(shard.zip_hashes), path, "compressed shard")
        raw = codecs.decompress(shard.compression, data, path)
        if len(raw) != shard.raw_bytes:
            raise FormatError(path, "decompressed size", f"{shard.raw_bytes} bytes (shard {number} in {self.index.path})",
                              f"{len(raw)} bytes")
        if self.verify:
            check_hashes(raw, dict(shard.raw_hashes), path, "decompressed shard")
        write_atomically(target, raw)
        return target

    # --- reading samples --------------------------------------------------------------------------

    def locate(self, sample_ids) -> tuple[np.ndarray, np.ndarray]:
        """``(shard, sample within it)`` of each sample id (in ``[0, num_samples)``: callers check)."""
        ids = np.asarray(sample_ids, np.int64)
        shards = np.searchsorted(self.shard_starts, ids, side="right") - 1
        return shards, ids - self.shard_starts[shards]

    def name_of(self, sample_id: int) -> str:
        """Sample ``sample_id`` of the stream as errors name it: its shard file and number there."""
        shards, within = self.locate([sample_id])
        shard = self.index.shards[int(shards[0])]
        return f"{_join(self.index.folder, shard.name)}: sample {int(within[0])}"

    def spans(self, sample_ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(shard, start, length)`` of each sample's bytes."""
        shards, within = self.locate(sample_ids)
        starts = np.empty(len(shards), np.int64)
        lengths = np.empty(len(shards), np.int64)
        order = np.argsort(shards, kind="stable")
        numbers, firsts = np.unique(shards[order], return_index=True)
        self.open_all(numbers.tolist())
        for number, begin, end in zip(numbers.tolist(), firsts.tolist(), [*firsts[1:].tolist(), len(order)]):
            mine = order[begin:end]
            offsets = self.shard(number).offsets
            starts[mine] = offsets[within[mine]]
            lengths[mine] = offsets[within[mine] + 1] - starts[mine]
        return shards, starts, lengths

    def gather(self, shards: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
        """Byte runs ``[starts[k], starts[k] + lengths[k])`` of shard ``shards[k]`` (opened),
        one after another into ``out`` (uint8, C-contiguous)."""
        if len(shards) == 0:
            return
        at = np.cumsum(lengths) - lengths
        numbers = np.unique(shards).tolist()
        opened = {n: self.shard(n).file for n in numbers}
        local = [n for n in numbers if isinstance(opened[n], MappedFile)]
        remote = [n for n in numbers if not isinstance(opened[n], MappedFile)]
        for group, read in ((local, self._gather_local), (remote, self._gather_remote)):
            if not group:
                continue
            mine = np.isin(shards, group) if len(group) < len(numbers) else slice(None)
            # group is sorted (np.unique): a shard's position in it, for every run
            which = np.searchsorted(group, shards[mine]) if len(group) > 1 else None
            # Every run, one after another: the reader may then copy close runs as stretches.
            places = None if len(group) == len(numbers) else at[mine]
            read([opened[n] for n in group], which, starts[mine], lengths[mine], places, out)

    @staticmethod
    def _gather_local(files, which, starts, lengths, at, out) -> None:
        gather(files, which, starts, lengths, out, at)

    def _gather_remote(self, objects, which, starts, lengths, at, out) -> None:
        which = np.zeros(len(starts), np.int64) if which is None else which
        at = np.cumsum(lengths) - lengths if at is None else at
        pieces = read_ranges(self._access(), objects, which, starts, starts + lengths)
        view = memoryview(out.reshape(-1).view(np.uint8))
        for position, length, data in zip(at.tolist(), lengths.tolist(), pieces):
            view[position:position + length] = data

    def read_samples(self, sample_ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(data, at, lengths)``: the samples' bytes one after another in ``data`` (uint8),
        sample k at ``data[at[k]:at[k] + lengths[k]]``."""
        shards, starts, lengths = self.spans(sample_ids)
        data = np.empty(int(lengths.sum()), np.uint8)
        self.gather(shards, starts, lengths, data)
        return data, np.cumsum(lengths) - lengths, lengths


def _join(folder: str, name: str) -> str:
    return f"{folder.rstrip('/')}/{name}" if is_remote(folder) else os.path.join(folder, name)


__all__ = ["ShardFiles"]
