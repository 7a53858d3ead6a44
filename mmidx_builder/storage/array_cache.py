"""Index arrays cached on disk: ``.npy`` files (no pickle) and a small JSON meta file that
vouches for them.

    KEY-NAME.npy    one array, ``np.save(allow_pickle=False)``; or, for arrays the caller
                    gives one path, all of them in one file ("packed"): a ``.npy`` of bytes
                    (uint8) holding each array at a 64-byte aligned offset of its data
    KEY-meta.json   the caller's fields at the top level, plus
                    "arrays":   {NAME: {"dtype": "<u4", "shape": [...], "xxh3_128": hex}},
                                and "offset" (in the packed file's data) for packed arrays
                    "checked":  {NAME: stat signature} of the files whose digest a load checked,
                                and "checked_at" (Unix time) when that was
                    "xxh3_128": the digest of everything else in this file

Every file is written atomically (hidden temporary name, then rename) and the meta file
last, so its presence says the arrays are complete. A killed writer's temporaries are
removed by the next load in the folder. Arrays come back as read-only memory maps, so every
process (ranks, DataLoader workers, forked or spawned) shares one copy in the page cache.
Packing the arrays a load always takes together makes one file, one map and one stat of them:
a warm open of a 1,000-prefix blend loads two caches a prefix, each of three arrays.

What a load checks (docs/reliability.md says why this schedule):

* always: the meta file's own digest (a few hundred bytes), each array's ``.npy`` header,
  dtype and shape. O(header), whatever the arrays' size.
* the digest of an array's bytes (xxh3, memory speed, ~1 s a GB), when the file is not the
  one a load already checked: its stat signature (inode, size, mtime, ctime, in ns) is not
  the one recorded under "checked". Any write through the filesystem (a bit flipped in
  place, a copy, a truncation) moves ctime, which no user tool can set back, so a file
  written since is checked whole again. A signature is recorded only for files whose last
  change is SETTLE_SECONDS old when checked: a timestamp is as fine as the kernel's clock
  tick, and a write in the tick of the check would keep the signature (git's "racily clean"
  rule). So the first loads after a build check the digests, later ones trust the stat.
* the digest again once the last check is older than RECHECK_SECONDS (a week), for damage
  that no write made (a failing disk); ``MMIDX_CHECK_INDEX_CACHE=1`` checks at every load.

A damaged cache is never served: it is reported with a warning naming the file and rebuilt.
"""

from __future__ import annotations

import ctypes
import errno
import io
import json
import math
import mmap
import os
import re
import time
import warnings
import weakref

import numpy as np
import xxhash

from ..errors import OutOfSpaceError
from .files import (failure_words, free_bytes, out_of_room, remove_quietly, remove_stale_temporaries, temporary_path,
                    write_atomically)

DIGEST_KEY = "xxh3_128"
# A file changed this recently may share its timestamps with a write still to come.
SETTLE_SECONDS = 2.0
# The digests are checked again when the last check is older than this.
RECHECK_SECONDS = 7 * 24 * 3600
CHECK_ALWAYS_VARIABLE = "MMIDX_CHECK_INDEX_CACHE"
# Digests of the arrays handed out, by file: callers key on them without hashing the bytes.
_DIGESTS: dict[tuple[str, str], str] = {}


def array_digest(array: np.ndarray) -> str:
    """xxh3-128 of an array's dtype, shape and bytes (what the meta file records)."""
    digest = digest_of_parts(array.dtype, array.shape)
    flat = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
    for begin in range(0, len(flat), 1 << 26):  # 64 MiB at a time: a memory map is paged in and out
        digest.update(flat[begin:begin + (1 << 26)].data)
    return digest.hexdigest()


def digest_of_parts(dtype, shape) -> "xxhash.xxh3_128":
    """The running digest of an array of ``dtype`` and ``shape`` whose bytes are then given
    in order (``update``): its ``hexdigest()`` is :func:`array_digest` of the whole array, for
    an array read a chunk at a time and never held whole."""
    return xxhash.xxh3_128(f"{np.dtype(dtype).str}:{list(shape)}:".encode())


def _meta_digest(meta: dict) -> str:
    fields = {k: v for k, v in meta.items() if k != DIGEST_KEY}
    return xxhash.xxh3_128(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _meta_text(meta: dict) -> bytes:
    # One line, through json's C encoder: an indent makes json encode in Python, ~0.2 ms a meta
    # file, 2,000 of them at the cold open of a 1,000-prefix blend.
    return json.dumps(meta).encode() + b"\n"


def _signature(stat: os.stat_result) -> str:
    return f"{stat.st_dev}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ctime_ns}"


def settled(stat: os.stat_result, now: float | None = None) -> bool:
    """Whether a file's last change is old enough that a later write would change its stat."""
    now = time.time() if now is None else now
    return now - max(stat.st_mtime, stat.st_ctime) > SETTLE_SECONDS


def recorded_digest(array) -> str | None:
    """The digest (as :func:`save_arrays` records it) of an array :func:`load_arrays` handed
    out, without reading it; None for any other array."""
    filename = getattr(array, "filename", None)
    if filename is None or not isinstance(array, np.memmap):
        return None
    # The offset tells apart arrays of one packed file (a slice keeps its array's offset, and
    # matches only when it is the whole array: its shape is in the key).
    return _DIGESTS.get(_digest_key(filename, array.offset, array))


def _digest_key(filename, offset, array: np.ndarray) -> tuple:
    return os.fspath(filename), offset, array.dtype.str, tuple(array.shape)


def _remember_digest(array: np.memmap, digest: str) -> None:
    """Records the digest of an array handed out (recorded_digest finds it)."""
    _DIGESTS[_digest_key(array.filename, array.offset, array)] = digest


def save_arrays(meta_path: str, array_paths: dict[str, str], arrays: dict[str, np.ndarray],
                fields: dict) -> dict[str, np.ndarray]:
    """Writes ``arrays[name]`` to ``array_paths[name]``, then the meta file with ``fields``;
    returns the arrays as read-only maps of the files written (not read back).
    Arrays given the same path are packed into that one file (see the module doc).

    A write that runs out of room (a full disk, a quota, a file-size limit) removes the arrays
    this call already put in place (without a meta file nothing would ever remove them) and
    raises :class:`OutOfSpaceError` naming the folder, the bytes the cache needs and the bytes
    free there."""
    folder = os.path.dirname(meta_path) or "."
    os.makedirs(folder, exist_ok=True)
    described, written = {}, []
    try:
        for path, names in _by_path(array_paths).items():
            given = {name: np.asarray(arrays[name]) for name in names}
            if len(names) == 1:
                write_atomically(path, lambda f, a=given[names[0]]: np.save(f, a, allow_pickle=False))
                offsets = {names[0]: None}
            else:
                offsets, size = _packed_layout(given)
                write_atomically(path, lambda f: _write_packed(f, given, offsets, size))
            written.append(path)
            for name, array in given.items():
                described[name] = {"dtype": array.dtype.str, "shape": list(array.shape),
                                   DIGEST_KEY: array_digest(array)}
                if offsets[name] is not None:
                    described[name]["offset"] = offsets[name]
        _write_meta(meta_path, fields, described)
    except OSError as error:
        for path in written:
            remove_quietly(path)
        cause = out_of_room(error)
        if cause is None:
            raise
        needed = sum(np.asarray(a).nbytes + 128 for a in arrays.values()) + 4096  # .npy headers, the meta file
        raise OutOfSpaceError(folder, needed, free_bytes(folder), "the index cache",
                              failed=failure_words(cause)) from error
    return _mapped(array_paths, described)


def _write_meta(meta_path: str, fields: dict, described: dict) -> None:
    meta = {**fields, "arrays": described}
    meta[DIGEST_KEY] = _meta_digest(meta)
    write_atomically(meta_path, _meta_text(meta))


def _mapped(array_paths: dict[str, str], described: dict) -> dict[str, np.ndarray]:
    """The arrays just written, as read-only maps of their files (not read back)."""
    mapped = {}
    for path, names in _by_path(array_paths).items():
        whole = map_npy(path)
        for name in names:
            mapped[name] = whole if len(names) == 1 else _packed_array(whole, described[name])
            _remember_digest(mapped[name], described[name][DIGEST_KEY])
    return mapped


class PackedInPlace:
    """:func:`save_arrays` of packed arrays built where they are kept: a cache too large to
    build in the process's own memory (the sampling indices of a billion documents, ~6 GB)
    is made as its file from the start, and its arrays are handed out as writable maps of
    it, file pages the kernel writes back and drops as it needs, not anonymous memory::

        with PackedInPlace(meta_path, path) as packed:
            arrays = packed.allocate({"a": (np.int32, (n,)), ...})
            ... fill arrays ...
            mapped = packed.commit(fields)   # read-only maps, as save_arrays returns

    The file's blocks are reserved first (``posix_fallocate``): a full disk is an
    OutOfSpaceError there, never a SIGBUS at a write through the map. Where the file system
    cannot reserve blocks, :meth:`allocate` returns None and nothing is left behind (the
    caller builds in memory). Until :meth:`commit` the file has a hidden temporary name,
    removed on any failure, so a reader never sees half a cache."""

    def __init__(self, meta_path: str, path: str):
        self.meta_path, self.path = meta_path, path
        self._temporary, self._map, self._described, self._arrays = None, None, None, None

    def __enter__(self):
        return self

    def allocate(self, layout: dict[str, tuple]) -> dict[str, np.ndarray] | None:
        """Writable arrays of ``layout`` (name -> (dtype, shape)), or None (see above)."""
        shapes = {name: (np.dtype(dtype), tuple(int(n) for n in shape)) for name, (dtype, shape) in layout.items()}
        offsets, size = _packed_layout({name: _Nbytes(dtype, shape) for name, (dtype, shape) in shapes.items()})
        folder = os.path.dirname(self.path) or "."
        os.makedirs(folder, exist_ok=True)
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False, "shape": (size,)})
        self._temporary = temporary_path(self.path)
        fd = os.open(self._temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, header.getvalue())
            try:
                if size:
                    os.posix_fallocate(fd, len(header.getvalue()), size)
            except OSError as error:
                if out_of_room(error) is not None:
                    raise OutOfSpaceError(folder, len(header.getvalue()) + size, free_bytes(folder), "the index cache",
                                          failed=failure_words(error)) from error
                if error.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    self._abandon()
                    return None
                raise
        finally:
            os.close(fd)
        self._map = np.memmap(self._temporary, np.uint8, "r+", offset=len(header.getvalue()), shape=(size,))
        self._described = {name: {"dtype": dtype.str, "shape": list(shape), "offset": offsets[name]}
                           for name, (dtype, shape) in shapes.items()}
        flat = np.asarray(self._map)
        self._arrays = {name: flat[offsets[name]:offsets[name] + _Nbytes(dtype, shape).nbytes].view(dtype).reshape(shape)
                        for name, (dtype, shape) in shapes.items()}
        return self._arrays

    def commit(self, fields: dict) -> dict[str, np.ndarray]:
        """Digests the arrays, puts the file in place and writes the meta file; returns the
        arrays as read-only maps."""
        for name, entry in self._described.items():
            entry[DIGEST_KEY] = array_digest(self._arrays[name])
        self._map.flush()  # written back before the file takes its name
        self._map = self._arrays = None  # unmapped with the caller's last writable view
        os.replace(self._temporary, self.path)
        self._temporary = None
        paths = {name: self.path for name in self._described}
        try:
            _write_meta(self.meta_path, fields, self._described)
        except OSError:
            remove_quietly(self.path)
            raise
        return _mapped(paths, self._described)

    def _abandon(self) -> None:
        self._map = self._arrays = None  # its pages go with the file
        if self._temporary is not None:
            remove_quietly(self._temporary)
            self._temporary = None

    def __exit__(self, *exc) -> None:
        self._abandon()


class _Nbytes:
    """What _packed_layout asks of an array (its byte count), for arrays not made yet."""

    def __init__(self, dtype, shape):
        self.nbytes = np.dtype(dtype).itemsize * math.prod(shape)


def _by_path(array_paths: dict[str, str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for name, path in array_paths.items():
        grouped.setdefault(os.fspath(path), []).append(name)
    return grouped


_PACK_ALIGN = 64


def _packed_layout(arrays: dict[str, np.ndarray]) -> tuple[dict[str, int], int]:
    """Where each array starts in a packed file's data (aligned), and the data's size."""
    offsets, size = {}, 0
    for name, array in arrays.items():
        offsets[name] = size
        size += _aligned(array.nbytes)
    return offsets, size


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _PACK_ALIGN) * _PACK_ALIGN


def _write_packed(f, arrays: dict[str, np.ndarray], offsets: dict[str, int], size: int) -> None:
    # A .npy of `size` bytes, written array by array: no copy of them all in memory (the
    # indices of a 200M-document prefix are gigabytes).
    np.lib.format.write_array_header_1_0(f, {"descr": "|u1", "fortran_order": False, "shape": (size,)})
    at = 0
    for name, array in arrays.items():
        f.write(b"\0" * (offsets[name] - at))
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        for begin in range(0, len(data), 1 << 26):  # 64 MiB at a time
            f.write(data[begin:begin + (1 << 26)].data)
        at = offsets[name] + array.nbytes
    f.write(b"\0" * (size - at))


def load_arrays(meta_path: str, array_paths: dict[str, str]) -> tuple[dict, dict[str, np.ndarray]] | None:
    """``(fields, arrays)`` (read-only memory maps) of a cache, or None when there is none or
    it is damaged (then with a warning naming the file; the caller rebuilds it)."""
    _clean_once(os.path.dirname(meta_path))
    try:
        with open(meta_path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as error:
        return _damaged(meta_path, f"unreadable: {error}")
    try:
        meta = json.loads(text)
    except ValueError as error:  # UnicodeDecodeError included
        return _damaged(meta_path, f"not JSON: {error}")
    if not isinstance(meta, dict) or meta.get(DIGEST_KEY) != _meta_digest(meta) or not isinstance(
            meta.get("arrays"), dict) or set(meta["arrays"]) != set(array_paths):
        return _damaged(meta_path, "its digest does not match its contents")
    now = time.time()
    checked = meta.get("checked") if isinstance(meta.get("checked"), dict) else {}
    recent = isinstance(meta.get("checked_at"), (int, float)) and now - meta["checked_at"] < RECHECK_SECONDS
    always = os.environ.get(CHECK_ALWAYS_VARIABLE, "") not in ("", "0")
    arrays, signatures, newly_checked = {}, {}, False
    for path, names in _by_path(array_paths).items():
        try:
            mapped = map_npy(path)
            stat = os.stat(path)
        except Exception as error:  # noqa: BLE001  a damaged .npy header fails numpy's parser in many ways
            return _damaged(path, f"unreadable: {type(error).__name__}: {error}")
        signature = _signature(stat)
        check = always or not recent or any(checked.get(name) != signature for name in names)
        if len(names) > 1 and check and not _only_arrays(mapped, [meta["arrays"][name] for name in names]):
            return _damaged(path, "bytes between or after its arrays are not the zeros written there")
        for name in names:
            expected = meta["arrays"][name]
            array = mapped if len(names) == 1 else _packed_array(mapped, expected)
            found = {"dtype": array.dtype.str, "shape": list(array.shape)} if array is not None else None
            if found is None or found != {k: expected.get(k) for k in found}:
                return _damaged(path, f"expected {expected}, found {found or 'no such array in the file'}")
            if check:
                digest = array_digest(array)
                if digest != expected.get(DIGEST_KEY):
                    return _damaged(path, f"expected the digest {expected.get(DIGEST_KEY)}, found {digest}")
                newly_checked = True
            if settled(stat, now):
                signatures[name] = signature
            arrays[name] = array
    if newly_checked and len(signatures) == len(array_paths):
        _record_check(meta_path, meta, signatures, now)
    for name, array in arrays.items():
        _remember_digest(array, meta["arrays"][name][DIGEST_KEY])
    fields = {k: v for k, v in meta.items() if k not in ("arrays", "checked", "checked_at", DIGEST_KEY)}
    return fields, arrays


def _packed_array(mapped: np.ndarray, expected: dict) -> np.ndarray | None:
    """The array ``expected`` (a meta entry) describes in a packed file's bytes, or None when
    the meta's numbers do not fit the file (damaged)."""
    try:
        dtype, shape, offset = np.dtype(expected["dtype"]), tuple(expected["shape"]), expected["offset"]
        nbytes = math.prod(shape) * dtype.itemsize
        fits = (mapped.dtype == np.uint8 and mapped.ndim == 1 and type(offset) is int and offset % _PACK_ALIGN == 0
                and 0 <= offset <= offset + nbytes <= len(mapped) and not dtype.hasobject)
    except (KeyError, TypeError, ValueError):
        return None
    if not fits:
        return None
    # A slice of a memmap without its own mmap object comes back a plain ndarray: made one again.
    array = np.asarray(mapped)[offset:offset + nbytes].view(dtype).reshape(shape).view(np.memmap)
    array.filename = mapped.filename
    array.offset = mapped.offset + offset
    return array


def _only_arrays(mapped: np.ndarray, entries: list[dict]) -> bool:
    """Whether a packed file holds its arrays and nothing else: zeros in the alignment gaps,
    and no byte past the last array's (a bit flipped there is damage the digests do not see)."""
    try:
        spans = sorted((entry["offset"],
                        entry["offset"] + math.prod(entry["shape"]) * np.dtype(entry["dtype"]).itemsize)
                       for entry in entries)
    except (KeyError, TypeError, ValueError):
        return False
    size = _aligned(spans[-1][1])
    if len(mapped) != size:
        return False
    flat = np.asarray(mapped)
    gaps = zip([end for _, end in spans], [begin for begin, _ in spans[1:]] + [size])
    return all(not flat[end:begin].any() for end, begin in gaps)


_CLEANED: set[tuple[int, str]] = set()


def _clean_once(folder: str) -> None:
    """Removes killed writers' temporaries from ``folder``, once per process: a blend of 1,000
    prefixes loads 2,000 caches from one folder of 8,000 files, and a scan at each load would
    cost O(prefixes**2). A writer killed later is cleaned up by the next process."""
    key = (os.getpid(), os.path.abspath(folder))
    if key not in _CLEANED:
        remove_stale_temporaries(folder, ("*.npy", "*.json"))
        _CLEANED.add(key)


def _record_check(meta_path: str, meta: dict, signatures: dict, now: float) -> None:
    """Records that the arrays with these signatures were checked whole (best effort: a cache
    on a read-only disk is checked again next time)."""
    meta = {**meta, "checked": signatures, "checked_at": now}
    meta[DIGEST_KEY] = _meta_digest(meta)
    try:
        write_atomically(meta_path, _meta_text(meta))
    except OSError:
        pass


def _libc_mmap():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mapper, unmapper = libc.mmap, libc.munmap
        # A memoryview over the mapped bytes, where a ctypes array type was made per size:
        # with the one small pread of the header, a map takes ~55 us instead of ~105.
        viewer = ctypes.pythonapi.PyMemoryView_FromMemory
    except (AttributeError, OSError):
        return None
    mapper.restype = ctypes.c_void_p
    mapper.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    unmapper.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    viewer.restype = ctypes.py_object
    viewer.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
    return mapper, unmapper, viewer


_MMAP = _libc_mmap() if os.name == "posix" else None
_PyBUF_READ = 0x100
_MAP_FAILED = ctypes.c_void_p(-1).value
# What a .npy header takes in one read: np.save pads it to a multiple of 64 bytes, and the
# index arrays' are 128 (a longer one is read again whole).
_HEADER_READ = 256


# The header np.save writes for a plain dtype, e.g. {'descr': '<i4', 'fortran_order': False, 'shape': (20000,), }
_PLAIN_HEADER = re.compile(rb"\{'descr': '([<>|=][a-zA-Z]\d*)', 'fortran_order': (True|False), "
                           rb"'shape': \(((?:\d+, ?)*\d*)\), \} *\n")


def _plain_header(head: bytes, more=None) -> tuple[tuple[int, ...], bool, np.dtype, int] | None:
    """``(shape, fortran_order, dtype, data offset)`` of a ``.npy`` file starting with ``head``,
    when its header is one np.save writes for a plain dtype; else None (numpy's reader then).
    ``more(n)``: the file's first ``n`` bytes, when the header is longer than ``head``."""
    if head[:6] != b"\x93NUMPY" or head[6:7] not in (b"\x01", b"\x02", b"\x03"):
        return None
    wide = head[6:7] != b"\x01"
    start = 12 if wide else 10
    length = int.from_bytes(head[8:12] if wide else head[8:10], "little")
    if start + length > len(head) and more is not None:
        head = more(start + length)
    found = _PLAIN_HEADER.fullmatch(head, start, start + length) if start + length <= len(head) else None
    if not found:
        return None
    shape = tuple(int(n) for n in found.group(3).replace(b" ", b"").split(b",") if n)
    return shape, found.group(2) == b"True", np.dtype(found.group(1).decode()), start + length


def _npy_header(f) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of the ``.npy`` file ``f``, left at its data.

    The headers np.save writes for the plain dtypes of the index arrays are read with one
    regular expression: numpy's reader parses them with ``ast.literal_eval``, ~0.25 ms a file,
    which a warm open of a 1,000-prefix blend (6,000 arrays) paid 1.5 s for. Any other header
    goes to numpy's reader."""
    start = f.tell()

    def more(count: int) -> bytes:
        f.seek(start)
        return f.read(count)

    plain = _plain_header(more(_HEADER_READ), more)
    if plain is not None:
        f.seek(start + plain[3])
        return plain[:3]
    f.seek(start)
    version = np.lib.format.read_magic(f)
    return (np.lib.format.read_array_header_1_0(f) if version == (1, 0) else
            np.lib.format.read_array_header_2_0(f))


def map_npy(path: str) -> np.ndarray:
    """A read-only memory map of the ``.npy`` file ``path`` that holds no file descriptor.

    ``np.load(mmap_mode="r")`` keeps one open per array (Python's mmap duplicates the
    descriptor): three per prefix of a blend, 3,000 for 1,000 prefixes, past a ``ulimit -n``
    of 1,024. A map needs no open descriptor, so here the file is mapped through libc and
    closed at once; the map is unmapped when the last array over it is collected. (Where
    libc's mmap is not reachable, np.load's map.) ~55 us a file against np.load's ~200: a
    warm open of a blend maps two files a prefix."""
    if _MMAP is None:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    mapper, unmapper, viewer = _MMAP
    fd = os.open(path, os.O_RDONLY)
    try:
        plain = _plain_header(os.pread(fd, _HEADER_READ, 0), lambda count: os.pread(fd, count, 0))
        if plain is None:
            with os.fdopen(os.dup(fd), "rb") as f:
                shape, fortran, dtype = _npy_header(f)
                offset = f.tell()
        else:
            shape, fortran, dtype, offset = plain
        if dtype.hasobject:
            raise ValueError("an object array (pickled) is refused")
        size = os.fstat(fd).st_size
        count = math.prod(shape)
        if offset + count * dtype.itemsize > size:
            raise ValueError(f"{size} bytes hold less than the header's {shape} of {dtype}")
        address = mapper(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)  # size > 0: it holds a header
        if address in (None, _MAP_FAILED):
            code = ctypes.get_errno()
            raise OSError(code, f"mmap {path}: {os.strerror(code)}")
    finally:
        os.close(fd)
    flat = np.frombuffer(viewer(address, size, _PyBUF_READ), dtype=dtype, count=count, offset=offset)
    # The map lives as long as the memoryview numpy keeps as the array's base (its own view of
    # the one made here, which may go at once); every array derived from it keeps that alive.
    # Not unmapped at interpreter exit: a daemon thread (a read-ahead still making a table) may
    # be reading the map while the interpreter finalizes, and an unmapped page is SIGSEGV. The
    # process's end unmaps it anyway.
    weakref.finalize(flat.base, unmapper, address, size).atexit = False
    array = flat.reshape(shape, order="F" if fortran else "C")
    array.flags.writeable = False
    mapped = array.view(np.memmap)  # what np.load(mmap_mode="r") returns: callers tell a cache hit by it
    mapped.filename = os.path.abspath(path)  # as np.memmap names its file (recorded_digest keys on it)
    mapped.offset = offset  # where the data starts in the file, as np.memmap says
    return mapped


def _damaged(path: str, problem: str) -> None:
    warnings.warn(f"index cache file {path} is damaged; rebuilding it ({problem})", UserWarning, stacklevel=4)
    return None


__all__ = ["PackedInPlace", "array_digest", "digest_of_parts", "load_arrays", "recorded_digest", "save_arrays", "settled"]
