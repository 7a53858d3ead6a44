"""The optional local block cache of remote files (``remote_cache_dir``)."""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections import OrderedDict

import numpy as np

from ..files import remove_quietly, temporary_path
from .objects import RemoteObject

logger = logging.getLogger(__name__)
_LOCK = threading.Lock()

# The block cache: blocks of this size, one file each, named by content (URL, ETag, size).
CACHE_BLOCK_BYTES = 2 << 20
DEFAULT_MAX_CACHE_BYTES = 16 << 30
CACHE_BATCH_BYTES = 128 << 20  # blocks fetched (and held in memory) at once on a cold cache
_OPEN_BLOCKS = 1024  # block files kept memory-mapped per process
_CACHES: dict = {}


def cache_for(access) -> "BlockCache":
    """The process's cache for ``access``'s cache_dir and bound."""
    key = (os.getpid(), access.cache_dir, access.max_cache_bytes)
    with _LOCK:
        cache = _CACHES.get(key)
        if cache is None:
            cache = _CACHES[key] = BlockCache(access.cache_dir, access.max_cache_bytes)
        return cache


class BlockCache:
    """Blocks of remote files on local disk: ``folder/<content key>/<block number>``.

    The content key hashes the URL, size and version (ETag) seen when the file was opened, so
    a changed file never reads old blocks. Blocks are written to a temporary name and renamed
    (readers in any process see a whole block or none; no locks), read through memory maps,
    and evicted oldest first (by mtime, set when a process first uses a block) once the folder
    holds more than ``max_bytes``. Cold blocks are fetched ``CACHE_BATCH_BYTES`` at a time.
    """

    def __init__(self, folder: str, max_bytes: int | None = None, block_bytes: int = CACHE_BLOCK_BYTES):
        self.folder = os.path.abspath(os.path.expanduser(folder))
        self.max_bytes = DEFAULT_MAX_CACHE_BYTES if max_bytes is None else int(max_bytes)
        self.block_bytes = block_bytes
        self._maps: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._written_since_scan = None  # None: not scanned yet in this process
        # content key -> block numbers this process saw on disk (its folder is listed once,
        # then blocks mapped or stored are added): holds_whole without a stat per block.
        self._present: dict[str, set] = {}
        # (content key, block) -> the _Fetching of the thread fetching it now: a block missing
        # for two threads at once (a read-ahead and the reader, two workers' gathers) is
        # fetched once, and the other thread takes its bytes.
        self._fetching: dict[tuple[str, int], _Fetching] = {}

    def _blocks(self, obj: RemoteObject) -> int:
        return -(-obj.size // self.block_bytes)

    def _seen(self, obj: RemoteObject, block: int) -> None:
        with self._lock:
            present = self._present.get(obj.content_key)
            if present is not None:
                present.add(block)

    def holds_whole(self, obj: RemoteObject) -> bool:
        """Whether every block of ``obj`` is on disk, as far as this process knows (another
        process may evict one meanwhile: its read then fetches it again)."""
        with self._lock:
            present = self._present.get(obj.content_key)
        if present is None:
            present = {int(e.name) for e in _scandir(os.path.dirname(self._block_path(obj, 0))) if e.name.isdigit()}
            with self._lock:
                present = self._present.setdefault(obj.content_key, present)
        return len(present) >= self._blocks(obj)

    def copy_pieces(self, obj: RemoteObject, starts: np.ndarray, lengths: np.ndarray, target: memoryview) -> bool:
        """Bytes ``[starts[i], starts[i] + lengths[i])`` of ``obj``, one after another, into
        ``target`` from the mapped blocks, a memcpy per piece (and per block a piece crosses);
        False, with ``target`` partly written, when a block is missing."""
        block = self.block_bytes
        first = starts // block
        last = (starts + lengths - 1) // block
        views = {}
        for b in np.unique(np.concatenate([first, last])[np.tile(lengths > 0, 2)]).tolist():
            views[b] = self._mapped(obj, b)
            if views[b] is None:
                return False
        position = 0
        for start, n, b, e in zip(starts.tolist(), lengths.tolist(), first.tolist(), last.tolist()):
            offset = start - b * block
            if n == 0:
                continue
            if b == e:
                target[position:position + n] = views[b][offset:offset + n]
            else:  # a piece across blocks (rare: blocks are 2 MiB, pieces a document or less)
                done = 0
                while done < n:
                    b, offset = divmod(start + done, block)
                    if b not in views:
                        views[b] = self._mapped(obj, b)
                        if views[b] is None:
                            return False
                    take = min(n - done, block - offset)
                    target[position + done:position + done + take] = views[b][offset:offset + take]
                    done += take
            position += n
        return True

    def _block_path(self, obj: RemoteObject, block: int) -> str:
        return os.path.join(self.folder, obj.content_key, str(block))

    def _block_length(self, obj: RemoteObject, block: int) -> int:
        return min(self.block_bytes, obj.size - block * self.block_bytes)

    def _mapped(self, obj: RemoteObject, block: int):
        """The block's bytes from disk, or None when it is not cached."""
        path = self._block_path(obj, block)
        with self._lock:
            view = self._maps.get(path)
            if view is not None:
                self._maps.move_to_end(path)
                return view
        try:
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size != self._block_length(obj, block):
                    return None
                view = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
            os.utime(path)  # recently used: evicted last
        except (FileNotFoundError, ValueError, OSError):
            return None
        with self._lock:
            self._maps[path] = view
            while len(self._maps) > _OPEN_BLOCKS:
                self._maps.popitem(last=False)
        self._seen(obj, block)
        return view

    def _store(self, obj: RemoteObject, block: int, data) -> None:
        path = self._block_path(obj, block)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = temporary_path(path)
        try:
            with open(temporary, "wb") as f:
                f.write(data)
            os.replace(temporary, path)
        except OSError as error:  # a full disk or a removed folder: the read goes on uncached
            remove_quietly(temporary)
            logger.warning(f"remote cache: cannot write {path}: {error}")
            return
        self._seen(obj, block)
        self._after_write(len(data))

    def fetch(self, access, objects, starts, stops) -> list[bytes]:
        block = self.block_bytes
        outputs = [bytearray(int(b) - int(a)) for a, b in zip(starts, stops)]
        # (object index, block) -> [(output, offset in output, offset in block, length)]
        segments: dict[tuple[int, int], list] = {}
        unique = {}
        for i, (obj, start, stop) in enumerate(zip(objects, starts, stops)):
            o = unique.setdefault(obj, len(unique))
            position = int(start)
            while position < stop:
                b = position // block
                n = min(int(stop), (b + 1) * block) - position
                segments.setdefault((o, b), []).append((i, position - int(start), position - b * block, n))
                position += n
        objs = list(unique)
        keys = sorted(segments)
        per_batch = max(1, CACHE_BATCH_BYTES // block)
        for first in range(0, len(keys), per_batch):
            batch = keys[first:first + per_batch]
            data = {k: self._mapped(objs[k[0]], k[1]) for k in batch}
            missing = [k for k in batch if data[k] is None]
            while missing:
                mine, theirs = self._claim(objs, missing)
                try:
                    self._fetch_blocks(access, objs, mine, data)
                finally:
                    self._release(objs, mine, data)
                for k, fetching in theirs.items():
                    fetching.done.wait()
                    data[k] = fetching.data if fetching.data is not None else self._mapped(objs[k[0]], k[1])
                # A block whose fetcher failed (or was dropped) is this thread's to fetch.
                missing = [k for k in theirs if data[k] is None]
            for k in batch:
                source = data[k]
                for i, at, offset, n in segments[k]:
                    outputs[i][at:at + n] = source[offset:offset + n]
        return outputs

    def _claim(self, objs, missing) -> tuple[list, dict]:
        """Splits ``missing`` blocks into those this thread fetches (now marked as fetching)
        and those another thread is fetching (key -> its _Fetching)."""
        mine, theirs = [], {}
        with self._lock:
            for k in missing:
                key = (objs[k[0]].content_key, k[1])
                if key in self._fetching:
                    theirs[k] = self._fetching[key]
                else:
                    self._fetching[key] = _Fetching()
                    mine.append(k)
        return mine, theirs

    def _release(self, objs, mine, data) -> None:
        """Hands the blocks this thread fetched (``data[k]``, None if its fetch failed) to the
        threads waiting for them."""
        with self._lock:
            fetchings = [self._fetching.pop((objs[k[0]].content_key, k[1])) for k in mine]
        for k, fetching in zip(mine, fetchings):
            fetching.data = data.get(k)
            fetching.done.set()

    def _fetch_blocks(self, access, objs, keys, data) -> None:
        """Fetches the blocks ``keys`` into ``data`` and the cache; neighbouring blocks of one
        file are one request."""
        if not keys:
            return
        block = self.block_bytes
        members = []
        for k in keys:
            if members and members[-1][-1][0] == k[0] and members[-1][-1][1] == k[1] - 1:
                members[-1].append(k)
            else:
                members.append([k])
        fetched = access.fetch_remote(
            [objs[g[0][0]] for g in members], [g[0][1] * block for g in members],
            [min(objs[g[-1][0]].size, (g[-1][1] + 1) * block) for g in members])
        for group, payload in zip(members, fetched):
            view = memoryview(payload)
            for j, k in enumerate(group):
                data[k] = view[j * block:j * block + self._block_length(objs[k[0]], k[1])]
                self._store(objs[k[0]], k[1], data[k])

    def _after_write(self, size: int) -> None:
        with self._lock:
            if self._written_since_scan is not None:
                self._written_since_scan += size
                if self._written_since_scan < self.max_bytes // 16:
                    return
            self._written_since_scan = 0
        self.evict()

    def evict(self) -> int:
        """Removes the oldest blocks until the folder holds at most 90% of ``max_bytes`` (when
        it holds more than ``max_bytes``); returns the bytes removed. Any process may run this
        while others read: a block removed under a reader's memory map stays readable there."""
        entries, total = [], 0
        for folder in _scandir(self.folder):
            if not folder.is_dir():
                continue
            for entry in _scandir(folder.path):
                try:
                    stat = entry.stat()
                except FileNotFoundError:
                    continue
                total += stat.st_size
                if not entry.name.startswith("."):  # temporary files are their writer's
                    entries.append((stat.st_mtime, stat.st_size, entry.path))
        removed = 0
        if total > self.max_bytes:
            entries.sort()
            for _, size, path in entries:
                if total - removed <= self.max_bytes * 0.9:
                    break
                remove_quietly(path)
                removed += size
        return removed


class _Fetching:
    """A block one thread is fetching: ``done`` is set when it ends, with ``data`` its bytes
    (None when the fetch failed)."""

    def __init__(self):
        self.done = threading.Event()
        self.data = None


def _scandir(path: str) -> list:
    try:
        with os.scandir(path) as entries:
            return list(entries)
    except (FileNotFoundError, NotADirectoryError):
        return []
