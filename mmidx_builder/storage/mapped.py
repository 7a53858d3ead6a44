"""Reading local files that another process may truncate meanwhile, without SIGBUS.

A memory map is the fast way to read a large file at random places, but reading a page of a
map whose file was truncated below it kills the process with SIGBUS (exit -7, no message,
no traceback). A size check before each read narrows that window and cannot close it: the
truncation can come between the check and the copy, or while a read-ahead thread copies.
So a mapped page is touched only where nothing can truncate the file meanwhile. Every read of
a local ``.bin``, ``.idx`` or raw file is a list of byte runs copied into an array of ours,
one of three ways:

* ``memcpy`` out of the map (a ``bytes.join`` of slices of it) while this process holds a
  read lease on the file (read_lease.py): the kernel then makes whoever opens the file for
  writing or truncates it wait until the lease is let go, and the lease is looked at before
  every 1,024 runs and after the last. The fastest by far (``benchmarks/bench_builder.py``:
  the builder's gather at 1.6x the ``np.memmap`` window ceiling, against 0.65x by the
  kernel's copy); granted to the file's owner where no process has it open for writing;
* ``process_vm_readv`` on this very process, reading the map's own addresses, where no lease
  is granted: one system call for up to 1,024 runs, and where a page was truncated away the
  kernel ends the copy there and reports it (a short count, EFAULT) instead of signalling. It
  costs ~0.35 us a run more than a ``memcpy`` from the map (``benchmarks/bench_format.py``),
  so runs close together are copied as a few stretches of the file and taken apart with numpy;
* ``pread`` on the file's descriptor, one call per run, where ``process_vm_readv`` is
  missing or refused (not Linux, a seccomp filter): slower, just as safe.

A run the file no longer holds is a :class:`FormatError` naming the file, the byte offset
and the size the file has now ("truncated while in use"); so is one that a truncation inside
its page turned into zeros (without a lease, the file's size is checked after each copy). No
view of a map is handed out: every array a caller gets is its own, so nothing read here can
fault later.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import threading
import time
import weakref

import numpy as np

from . import read_lease
from .files import open_regular, replaced_error, stat_identity
from ..errors import FormatError, MMIdxError

# The kernel's UIO_MAXIOV: runs per process_vm_readv call.
_RUNS_PER_CALL = 1024


def _process_vm_readv():
    """libc's ``process_vm_readv`` as a ctypes function, or None where there is none."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return None  # the iovec arrays below are pairs of 64-bit words
    try:
        function = ctypes.CDLL(None, use_errno=True).process_vm_readv
    except (AttributeError, OSError):
        return None
    function.restype = ctypes.c_ssize_t
    function.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                         ctypes.c_ulong]
    return function


_READV = _process_vm_readv()
# Errors that say the call cannot be used here (rather than that a page was lost): from then
# on every read takes the pread path.
_UNUSABLE = {errno.ENOSYS, errno.EPERM, errno.EACCES, errno.EINVAL}
# Reads this small take one pread (MappedFile.read).
_SMALL_READ = 4096
# Seconds before a file whose read lease was refused or broke asks for one again.
LEASE_RETRY_SECONDS = 1.0


class MappedFile:
    """A local regular file, mapped, read only through :meth:`gather` (see the module doc).

    ``expected_identity`` (what :func:`~mmidx_builder.storage.files.stat_identity` said of the file when
    it was first opened) refuses another file at the path since. Pickling (worker processes)
    opens the file again by name, refusing it if it is not the same file.

    ``random_access`` tells the kernel (``MADV_RANDOM``) that reads land at random places
    (training samples in shuffled order): each page fault then reads its own page instead of
    the ~128 KiB-2 MiB around it. Measured on a sparse 12 GB ``.bin``: 0.05 ms instead of
    30 ms a cold 8 KiB sample (benchmarks/bench_scale.py); on a real disk the same read-around
    costs bandwidth that shuffled samples never use.
    """

    def __init__(self, path: str | os.PathLike, expected_identity: str | None = None, random_access: bool = False):
        self.path = os.fspath(path)
        self.random_access = random_access
        self._fd, self._map, self._address, self._users = None, None, 0, 0
        # A read lease of this opening (read_lease.py), taken at the first gather; held by the
        # process that opened the file only (a forked child shares the opening, not the lease).
        self.leased, self._opened_by, self._lease_again_at = False, None, 0.0
        self._open(expected_identity)
        _POOL.opened(self)

    def _open(self, expected_identity: str | None, expected_size: int | None = None) -> None:
        try:
            with open_regular(self.path) as f:  # a FIFO in a file's place would block a plain open
                self._fd = os.dup(f.fileno())
        except OSError as error:
            if error.errno in (errno.EMFILE, errno.ENFILE):
                raise OpenFilesLimitError(self.path, error) from None
            raise
        try:
            self._opened_by = os.getpid()
            stat = os.fstat(self._fd)
            self.identity = stat_identity(self.path, stat)
            if expected_identity is not None and self.identity != expected_identity:
                raise replaced_error(self.path, expected_identity, self.identity)
            size = stat.st_size
            self._map = None
            self._address = 0
            if size and _READV is not None:
                try:
                    self._map = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ)
                except ValueError:  # emptied since the fstat: mmap cannot map an empty file
                    self._map = None
                except OSError as error:  # mmap dups the descriptor: the limit can be met here too
                    if error.errno in (errno.EMFILE, errno.ENFILE):
                        raise OpenFilesLimitError(self.path, error) from None
                    raise
                # What was mapped is what the file holds for this opening (callers check sizes).
                size = len(self._map) if self._map is not None else 0
                if self._map is not None:
                    self._address = np.frombuffer(self._map, np.uint8).ctypes.data
                    if self.random_access and hasattr(mmap, "MADV_RANDOM"):
                        self._map.madvise(mmap.MADV_RANDOM)
            if expected_size is not None and size < expected_size:  # reopened after a truncation
                raise FormatError(self.path, "file size", f"{expected_size} bytes, as when it was opened", f"{size} bytes",
                                  hint="the file was truncated while in use; reopen the dataset")
            self.size = size if expected_size is None else expected_size
        except BaseException:
            self._close()
            raise

    def _close(self, _close=os.close, _getpid=os.getpid) -> None:
        """Unmaps and closes (also at interpreter exit, when module globals may be gone)."""
        if self.leased and self._opened_by == _getpid() and self._fd is not None:
            read_lease.release(self._fd)  # else the map would hold it until unmapped
        self.leased = False
        mapped, self._map, self._address = self._map, None, 0
        if mapped is not None:
            try:
                mapped.close()
            except BufferError:  # a view of the map is still alive somewhere: the collector frees it
                pass
        fd, self._fd = self._fd, None
        if fd is not None:
            _close(fd)

    def stat(self) -> os.stat_result:
        """``os.fstat`` of the file this opening reads, held open meanwhile: the pool may close a
        file another thread has just opened (a blend's pairs are opened in threads)."""
        with _POOL.using([self]):
            return os.fstat(self._fd)

    def lease_held(self) -> bool:
        """Whether this process holds a read lease on the file that is not breaking: until it
        is let go, nobody can truncate or write the file (read_lease.py)."""
        return self.leased and self._opened_by == os.getpid() and read_lease.held(self._fd)

    def _take_lease(self) -> None:
        """Takes a read lease if none is held (called with the pool's lock held, before a
        gather). After a refusal (a writer has the file open, the file is not ours) or a lease
        that broke, not again for a second: a writer waiting on a lease must get its turn, and
        a refusal costs a system call. The lease is kept only if the file still holds every
        byte it had when it was opened (with the lease held, it will go on holding them)."""
        if (self.leased or self._fd is None or self._map is None or self._opened_by != os.getpid()
                or not read_lease.USABLE or time.monotonic() < self._lease_again_at):
            return
        if read_lease.take(self._fd) and os.fstat(self._fd).st_size >= self.size:
            self.leased = True
            _WATCH.ensure_running()
            return
        read_lease.release(self._fd)  # none held, or one over a file shorter than it was
        self._lease_again_at = time.monotonic() + LEASE_RETRY_SECONDS

    def _drop_lease(self) -> None:
        """Lets a breaking lease go (pool's lock held, no read in progress)."""
        read_lease.release(self._fd)
        self.leased, self._lease_again_at = False, time.monotonic() + LEASE_RETRY_SECONDS

    @property
    def parked(self) -> bool:
        """Closed by the pool of open files (see _OpenFiles); reopened at the next read."""
        return self._fd is None

    def _reopen(self) -> None:
        self._open(self.identity, self.size)

    def __getstate__(self):
        return {"path": self.path, "identity": self.identity, "random_access": self.random_access}

    def __setstate__(self, state):
        self.__init__(state["path"], state["identity"], state.get("random_access", False))

    def __del__(self):
        # Runs at interpreter exit too, when os and this module's globals may already be None.
        try:
            self._close()
        except Exception:  # noqa: BLE001 - nothing to report to at exit
            pass

    def identity_now(self) -> str:
        """What :func:`~mmidx_builder.storage.files.stat_identity` says of the open file now:
        :attr:`identity` unless it was written since it was opened."""
        return stat_identity(self.path, self.stat())

    def now(self) -> int:
        """The size the file has now (an ``fstat`` of the open file, not of the path)."""
        with _POOL.using([self]):
            return os.fstat(self._fd).st_size

    def read(self, offset: int, count: int, dtype) -> np.ndarray:
        """``count`` items of ``dtype`` from byte ``offset``: a new array."""
        out = np.empty(count, dtype)
        runs = (np.array([offset], np.int64), np.array([out.nbytes], np.int64))
        if 0 < out.nbytes <= _SMALL_READ and offset >= 0 and offset + out.nbytes <= self.size:
            # A header: one pread, none of gather's bookkeeping for many runs (every prefix of
            # a blend reads its .idx header at each open).
            with _POOL.using([self]):
                _gather_pread([self], None, *runs, out, np.zeros(1, np.int64))
            return out
        gather([self], None, *runs, out)
        return out

    def read_through(self, offset: int, count: int, dtype) -> np.ndarray:
        """:meth:`read` with ``pread``, not through the map: for a pass over a large file (the
        validation of an ``.idx``), whose pages then stay out of this process's resident memory
        (a copy out of the map maps every page it reads: the whole file, by the pass's end)."""
        out = np.empty(count, dtype)
        if out.nbytes:
            if offset < 0 or offset + out.nbytes > self.size:
                raise FormatError(self.path, "byte range", f"a range within the {self.size} bytes of the file",
                                  f"{out.nbytes} bytes at byte {offset}", offset=offset)
            with _POOL.using([self]):
                _gather_pread([self], None, np.array([offset], np.int64), np.array([out.nbytes], np.int64), out,
                              np.zeros(1, np.int64))
        return out

    def entries(self, offset: int, dtype, ids) -> np.ndarray:
        """Items ``ids`` of the table of ``dtype`` that starts at byte ``offset``: a new array."""
        ids = np.asarray(ids, np.int64)
        dtype = np.dtype(dtype)
        out = np.empty(ids.shape, dtype)
        starts = ids.reshape(-1) * dtype.itemsize
        starts += offset
        gather([self], None, starts, np.full(starts.size, dtype.itemsize, np.int64), out)
        return out


class OpenFilesLimitError(MMIdxError, OSError):
    """The process's limit of open files (``ulimit -n``) was reached opening a file."""

    def __init__(self, path: str, error: OSError):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.path = path
        raise_it = (f"raise it (`ulimit -n {min(hard, max(4 * soft, 4096)):,}` in the shell that starts Python)"
                    if hard == resource.RLIM_INFINITY or hard > soft else
                    f"it is the hard limit too: ask for a higher one")
        super().__init__(error.errno, f"{path}: cannot open: the process already has its limit of {soft:,} open "
                                      f"files (ulimit -n); {raise_it}, or lower MMIDX_MAX_OPEN_FILES (now "
                                      f"{_POOL.limit}), the files this package keeps open at once")

    def __str__(self) -> str:
        return self.strerror

    def __reduce__(self):
        return _limit_error, (self.path, self.errno)


def _limit_error(path, code):
    return OpenFilesLimitError(path, OSError(code, os.strerror(code)))


class _OpenFiles:
    """A bound on the files kept open: a blend of 1,000 prefixes holds 2,000 local files, each
    a descriptor and a map, past the usual ``ulimit -n`` of 1,024. The least recently read
    files past ``MMIDX_MAX_OPEN_FILES`` (default 128) are closed ("parked") and reopened by
    name at their next read, the same file checked by its identity, a shorter one refused as
    truncated. A file in the middle of a read is never parked (a read-ahead thread may hold
    it), so a gather over more files than the bound holds them all until it is done."""

    def __init__(self):
        self.lock = threading.Lock()
        self.files = {}  # id -> weakref to the MappedFile, least recently used first
        self.given = os.environ.get("MMIDX_MAX_OPEN_FILES")

    @property
    def limit(self) -> int:
        """MMIDX_MAX_OPEN_FILES, else 128 files or an eighth of ``ulimit -n`` if that is less
        (each file holds two descriptors: its own and its map's)."""
        if self.given is not None:
            return max(2, int(self.given))
        try:
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (ImportError, OSError, ValueError):
            return 128
        return 128 if soft == resource.RLIM_INFINITY else max(2, min(128, soft // 8))

    @limit.setter
    def limit(self, value: int) -> None:
        self.given = str(value)

    def opened(self, file: "MappedFile") -> None:
        with self.lock:
            self.files[id(file)] = weakref.ref(file, lambda _, key=id(file): self.files.pop(key, None))
            self._park_beyond_limit()

    def _park_beyond_limit(self) -> None:
        excess = len(self.files) - self.limit
        if excess <= 0:
            return
        for key, ref in list(self.files.items()):
            file = ref()
            if file is None:
                self.files.pop(key, None)
            elif file._users == 0 and not file.parked:
                file._close()
                self.files.pop(key, None)
                excess -= 1
            if excess <= 0:
                return

    @contextlib.contextmanager
    def using(self, files, lease: bool = False):
        """``files`` open (reopened if parked) and not parked until the block ends; with
        ``lease``, each also takes a read lease where it can (the gathers)."""
        with self.lock:
            taken = []
            try:
                for file in files:
                    if file.parked:
                        file._reopen()
                        self.files[id(file)] = weakref.ref(file, lambda _, key=id(file): self.files.pop(key, None))
                    else:  # most recently used last
                        self.files[id(file)] = self.files.pop(id(file), None) or weakref.ref(file)
                    if lease:
                        file._take_lease()
                    file._users += 1
                    taken.append(file)
                self._park_beyond_limit()
            except BaseException:
                for file in taken:
                    file._users -= 1
                raise
        try:
            yield
        finally:
            with self.lock:
                for file in taken:
                    file._users -= 1

    def leased(self) -> list:
        """The open files holding a read lease (lock held)."""
        return [file for ref in list(self.files.values()) if (file := ref()) is not None and file.leased]


_POOL = _OpenFiles()
_WATCH = read_lease.LeaseWatch(_POOL.lock, _POOL.leased, lambda file: file._users > 0, MappedFile._drop_lease)


def _after_fork_in_child() -> None:
    # The child has only the thread that forked: no file is in the middle of a read there.
    # A file the parent read under a lease is closed here (not its lease, which is the
    # parent's) and opened again at the child's first read of it: an opening of its own, which
    # can hold a lease of its own.
    for ref in list(_POOL.files.values()):
        file = ref()
        if file is not None:
            file._users = 0
            if file.leased:
                file.leased = False
                file._close()
    _POOL.lock.release()


# A fork (DataLoader workers) while another thread (a table made ahead) held the pool's lock
# gave a child whose lock stayed held by a thread it does not have: its first read waited
# forever. The fork waits for the lock instead, and the child starts with it free.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_POOL.lock.acquire, after_in_parent=_POOL.lock.release,
                        after_in_child=_after_fork_in_child)


def gather(files, which, starts, lengths, out: np.ndarray, at=None) -> None:
    """:func:`_gather` with ``files`` open for its duration (see _OpenFiles)."""
    if len(starts) == 0:
        return
    with _POOL.using(files if which is None or len(files) == 1 else
                     [files[i] for i in np.unique(np.asarray(which, np.int64)).tolist()], lease=True):
        _gather(files, which, starts, lengths, out, at)


def _gather(files, which, starts, lengths, out: np.ndarray, at=None) -> None:
    """Copies byte run ``k`` (``lengths[k]`` bytes from byte ``starts[k]`` of
    ``files[which[k]]``, or of ``files[0]`` when ``which`` is None) into ``out`` (a
    C-contiguous, writable array): at byte ``at[k]`` of it, or when ``at`` is None one run
    after another, filling ``out`` exactly. Runs that continue each other in one file (and
    in ``out``) are copied as one."""
    starts = np.asarray(starts, np.int64)
    lengths = np.asarray(lengths, np.int64)
    if len(starts) == 0:
        return
    stops = starts + lengths
    packed = at is None
    if packed:
        at = np.cumsum(lengths)
        fits = int(at[-1]) == out.nbytes
        at -= lengths
    else:
        at = np.asarray(at, np.int64)
        fits = at.min() >= 0 and int((at + lengths).max()) <= out.nbytes
    if not (fits and out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("gather needs a C-contiguous, writable out that holds the runs")
    if which is not None:
        which = np.asarray(which, np.int64)
    # Every run inside its file as opened: a run past it would make process_vm_readv copy
    # whatever memory follows the map, so this is checked here, not only by the callers.
    limits = files[0].size if which is None else np.array([f.size for f in files], np.int64)[which]
    if starts.min() < 0 or (stops.max() > limits if which is None else (stops > limits).any()):
        k = int(np.flatnonzero((starts < 0) | (stops > limits))[0])
        f = files[int(which[k]) if which is not None else 0]
        raise FormatError(f.path, "byte range", f"a range within the {f.size} bytes of the file",
                          f"{int(lengths[k])} bytes at byte {int(starts[k])}", offset=int(starts[k]))
    if len(starts) > 1:
        # One run for neighbours: consecutive sequences of a document, a file read in order.
        breaks = starts[1:] != stops[:-1]
        if not packed:
            breaks |= at[1:] != at[:-1] + lengths[:-1]
        if which is not None:
            breaks |= which[1:] != which[:-1]
        ends = np.flatnonzero(breaks)
        if len(ends) < len(starts) - 1:
            first = np.concatenate(([0], ends + 1))
            starts, stops, at = starts[first], stops[np.append(ends, len(breaks))], at[first]
            lengths = stops - starts
            which = which[first] if which is not None else None
    if _copied_under_leases(files, which, starts, lengths, out, at, packed):
        return
    if which is None and packed and _staged(files[0], starts, lengths, stops, out):
        return
    if not _gather_mapped(files, which, starts, lengths, stops, out, at):
        _gather_pread(files, which, starts, lengths, out, at)


# What the kernel takes per run (pinning its pages: ~0.4 us) and per byte copied (~0.1 ns),
# and what numpy takes per byte to place a staged byte (~2 ns); measured by
# benchmarks/bench_format.py. Runs closer than _GAP bytes are copied as one stretch.
_RUN_NS, _COPY_NS, _PLACE_NS = 400, 0.1, 2
_GAP = int(_RUN_NS / _COPY_NS)


def _staged(file: MappedFile, starts, lengths, stops, out) -> bool:
    """Many short runs close together (a small file, short documents read in order): the
    stretches of the file that hold them are copied in a few runs, and the runs are taken
    from there, when that is cheaper than a run each. False when it is not (nothing read)."""
    count = len(starts)
    if count < 16 or out.nbytes * _PLACE_NS > count * _RUN_NS:
        return False
    order = np.argsort(starts, kind="stable")
    first, last = starts[order], np.maximum.accumulate(stops[order])
    opens = np.concatenate(([True], first[1:] > last[:-1] + _GAP))
    begins = np.flatnonzero(opens)
    spans = np.append(begins[1:], count) - 1
    stretch_starts, stretch_stops = first[begins], last[spans]
    stretch_lengths = stretch_stops - stretch_starts
    cost = len(begins) * _RUN_NS + int(stretch_lengths.sum()) * _COPY_NS + out.nbytes * _PLACE_NS
    if cost >= count * _RUN_NS:
        return False
    stretch_at = np.cumsum(stretch_lengths) - stretch_lengths
    staging = np.empty(int(stretch_lengths.sum()), np.uint8)
    if not _gather_mapped([file], None, stretch_starts, stretch_lengths, stretch_stops, staging, stretch_at):
        _gather_pread([file], None, stretch_starts, stretch_lengths, staging, stretch_at)
    # Where each run begins in the staging buffer, in the runs' own order.
    stretch = np.cumsum(opens) - 1
    where = np.empty(count, np.int64)
    where[order] = stretch_at[stretch] + (first - stretch_starts[stretch])
    index = np.repeat(where - (np.cumsum(lengths) - lengths), lengths)
    index += np.arange(out.nbytes, dtype=np.int64)
    np.take(staging, index, out=out.reshape(-1).view(np.uint8))
    return True


# Runs copied between two looks at the leases (read_lease.py): a copy of this many runs ends
# long before a breaking lease is taken back, even from a slow disk. Also the memoryview
# slices alive at once, which the cyclic garbage collector counts: past its first threshold
# (700) a collection started in the middle of a chunk and moved the slices to an older
# generation, and every few passes a full collection ran (~0.09 s with datasets and pyarrow
# loaded; one pass of four over 100M tokens took 0.21 s instead of 0.12). With 1,024 runs a
# look, 123 collections a pass; with 512, 3.
_RUNS_PER_LOOK = 512


def _copied_under_leases(files, which, starts, lengths, out, at, packed: bool) -> bool:
    """Copies the runs straight out of the maps (``memcpy``), a chunk at a time, while every
    file a chunk reads holds its read lease; False (and ``out`` to be filled again by the
    kernel's copy) when a file holds none, or a lease began to break before a chunk or was
    lost by the end."""
    used = [0] if which is None else np.unique(which).tolist()
    if not all(files[i].leased for i in used):
        return False
    maps = {i: memoryview(files[i]._map) for i in used}
    target = memoryview(out.reshape(-1).view(np.uint8))
    try:
        for first in range(0, len(starts), _RUNS_PER_LOOK):
            last = min(first + _RUNS_PER_LOOK, len(starts))
            chunk_files = used if which is None else np.unique(which[first:last]).tolist()
            if not all(files[i].lease_held() for i in chunk_files):
                return False
            begins, ends = starts[first:last].tolist(), (starts[first:last] + lengths[first:last]).tolist()
            sources = [maps[0]] * (last - first) if which is None else [maps[i] for i in which[first:last].tolist()]
            if packed:
                _copy_joined(target, int(at[first]), [m[b:e] for m, b, e in zip(sources, begins, ends)],
                             at[first:last] + lengths[first:last] - at[first])
            else:
                for m, b, e, position in zip(sources, begins, ends, at[first:last].tolist()):
                    target[position:position + e - b] = m[b:e]
        return all(files[i].lease_held() for i in used)
    finally:
        target.release()
        for view in maps.values():
            view.release()


# Bytes joined at once before they are copied into the gather's output. One join a chunk
# (~1.6 MB) kept the chunk before it alive while it was made: the two did not fit the heap
# the C library kept, which grew for them and gave the memory back to the kernel after, so
# every join wrote freshly faulted pages (~37,000 faults a 200 MB pass), out of the caches by
# the time they were copied. Joins this small reuse memory that stays in the core's cache:
# read_pieces of 2,049-token samples ran at 1.81-2.10x numpy's copies of the same pieces
# instead of 1.30-1.60x, and pieces of 4,096 tokens at 0.91-1.06x instead of 0.62-0.77x
# (benchmarks/bench_format.py, three runs each).
_JOIN_BYTES = 64 << 10


def _copy_joined(target: memoryview, position: int, pieces: list, ends: np.ndarray) -> None:
    """Copies ``pieces`` one after another into ``target`` from ``position``: those that end
    in the same ``_JOIN_BYTES`` of it joined first (one Python call for many short runs), a
    piece alone in its stretch straight from its map. ``ends[k]``: where piece ``k`` ends,
    counted from ``position``."""
    if ends[-1] <= _JOIN_BYTES:  # a chunk of short runs: one join, no numpy calls (pieces of 4-16
        bounds = [0, len(pieces)]  # tokens: 1.70-1.96x numpy's copies with this, 1.62-1.82x without)
    else:
        stretch = (ends - 1) // _JOIN_BYTES
        bounds = [0, *(np.flatnonzero(stretch[1:] != stretch[:-1]) + 1).tolist(), len(pieces)]
    for low, high in zip(bounds[:-1], bounds[1:]):
        data = pieces[low] if high - low == 1 else b"".join(pieces[low:high])
        target[position:position + len(data)] = data
        position += len(data)


_disabled = threading.Event()  # set once process_vm_readv proved unusable here


def _gather_mapped(files, which, starts, lengths, stops, out, at) -> bool:
    """The process_vm_readv path; False when it cannot be used (then nothing was read)."""
    used = [files[0]] if which is None else [files[i] for i in np.unique(which).tolist()]
    if _READV is None or _disabled.is_set() or any(f._map is None for f in used):
        return False
    count = len(starts)
    iovecs = np.empty((2, count, 2), np.uint64)  # struct iovec {base, length}: remote runs, then local
    if which is None:
        np.add(starts, files[0]._address, out=iovecs[0, :, 0], casting="unsafe")
    else:
        np.add(starts, np.array([f._address for f in files], np.int64)[which], out=iovecs[0, :, 0], casting="unsafe")
    np.add(at, out.ctypes.data, out=iovecs[1, :, 0], casting="unsafe")
    iovecs[:, :, 1] = lengths
    remote, local = iovecs[0].ctypes.data, iovecs[1].ctypes.data
    pid = os.getpid()
    for first in range(0, count, _RUNS_PER_CALL):
        last = min(first + _RUNS_PER_CALL, count)
        wanted = int(lengths[first:last].sum())
        done = _READV(pid, local + 16 * first, last - first, remote + 16 * first, last - first, 0)
        if done == wanted:
            continue
        if done < 0:
            code = ctypes.get_errno()
            if code in _UNUSABLE and first == 0:
                _disabled.set()
                return False
            if code != errno.EFAULT:
                raise OSError(code, f"process_vm_readv: {os.strerror(code)}")
            done = 0
        # The run where the copy stopped: a page truncated away.
        k = first + int(np.searchsorted(np.cumsum(lengths[first:last]), done, side="right"))
        _raise_truncated(files, which, starts, lengths, min(k, last - 1))
    # A truncation inside a page leaves the rest of that page mapped, reading as zeros: the
    # copy above cannot tell. The file's size after the copy can: a file that still holds
    # every byte read held them while they were copied.
    if which is None:
        if files[0].now() < int(stops.max()):
            _raise_truncated(files, which, starts, lengths, int(np.flatnonzero(stops > files[0].now())[0]))
        return True
    needed = np.zeros(len(files), np.int64)
    np.maximum.at(needed, which, stops)
    for i, f in enumerate(files):
        if needed[i] == 0:  # not read here (and maybe parked)
            continue
        now = f.now()
        if now < needed[i]:
            _raise_truncated(files, which, starts, lengths, int(np.flatnonzero((which == i) & (stops > now))[0]))
    return True


def _gather_pread(files, which, starts, lengths, out, at) -> None:
    target = memoryview(out.reshape(-1).view(np.uint8))
    for k, (start, length, position) in enumerate(zip(starts.tolist(), lengths.tolist(), at.tolist())):
        f = files[int(which[k]) if which is not None else 0]
        done = 0
        while done < length:
            got = os.preadv(f._fd, [target[position + done:position + length]], start + done)
            if got <= 0:
                _raise_truncated(files, which, starts, lengths, k)
            done += got


def _raise_truncated(files, which, starts, lengths, k: int):
    f = files[int(which[k]) if which is not None else 0]
    start, length = int(starts[k]), int(lengths[k])
    raise FormatError(f.path, "file size", f"{f.size} bytes, as when it was opened (to read {length} bytes "
                      f"at byte {start})", f"{f.now()} bytes", offset=start,
                      hint="the file was truncated while in use; reopen the dataset")


__all__ = ["MappedFile", "OpenFilesLimitError", "gather"]
