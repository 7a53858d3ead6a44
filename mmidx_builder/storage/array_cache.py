"""Index arrays cached on disk: ``.npy`` files (no pickle) and a small JSON meta file that
vouches for them.

    KEY-NAME.npy    one array per name, ``np.save(allow_pickle=False)``
    KEY-meta.json   the caller's fields at the top level, plus
                    "arrays":  {NAME: {"dtype": "<u4", "shape": [...], "xxh3_128": hex}}
                    "xxh3_128": the digest of everything else in this file

Every file is written atomically (hidden temporary name, then rename) and the meta file
last, so its presence says the arrays are complete. A load checks the meta's own digest,
then each array's dtype, shape and the digest of its bytes: a cache damaged in any bit
(a disk error, a copy cut short) is never served; it is reported with a warning naming the
file and rebuilt. A killed writer's temporaries are removed by the next load in the folder.
xxh3 reads at memory speed, so checking a cache costs far less than building it.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import warnings
import weakref

import numpy as np
import xxhash

from ..errors import OutOfSpaceError
from .files import free_bytes, out_of_room, remove_quietly, remove_stale_temporaries, write_atomically

DIGEST_KEY = "xxh3_128"


def _array_digest(array: np.ndarray) -> str:
    digest = xxhash.xxh3_128(f"{array.dtype.str}:{list(array.shape)}:".encode())
    digest.update(np.ascontiguousarray(array).view(np.uint8).reshape(-1).data)
    return digest.hexdigest()


def _meta_digest(meta: dict) -> str:
    fields = {k: v for k, v in meta.items() if k != DIGEST_KEY}
    return xxhash.xxh3_128(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def save_arrays(meta_path: str, array_paths: dict[str, str], arrays: dict[str, np.ndarray], fields: dict) -> None:
    """Writes ``arrays[name]`` to ``array_paths[name]``, then the meta file with ``fields``.

    A write that runs out of room (a full disk, a quota, a file-size limit) removes the arrays
    this call already put in place (without a meta file nothing would ever remove them) and
    raises :class:`OutOfSpaceError` naming the folder, the bytes the cache needs and the bytes
    free there."""
    folder = os.path.dirname(meta_path) or "."
    os.makedirs(folder, exist_ok=True)
    described, written = {}, []
    try:
        for name, path in array_paths.items():
            array = np.asarray(arrays[name])
            write_atomically(path, lambda f, a=array: np.save(f, a, allow_pickle=False))
            written.append(path)
            described[name] = {"dtype": array.dtype.str, "shape": list(array.shape),
                               DIGEST_KEY: _array_digest(array)}
        meta = {**fields, "arrays": described}
        meta[DIGEST_KEY] = _meta_digest(meta)
        write_atomically(meta_path, json.dumps(meta, indent=1).encode())
    except OSError as error:
        for path in written:
            remove_quietly(path)
        if out_of_room(error) is None:
            raise
        needed = sum(np.asarray(a).nbytes + 128 for a in arrays.values()) + 4096  # .npy headers, the meta file
        raise OutOfSpaceError(folder, needed, free_bytes(folder), "the index cache") from error


def load_arrays(meta_path: str, array_paths: dict[str, str]) -> tuple[dict, dict[str, np.ndarray]] | None:
    """``(fields, arrays)`` (read-only memory maps) of a cache, or None when there is none or
    it is damaged (then with a warning naming the file; the caller rebuilds it)."""
    remove_stale_temporaries(os.path.dirname(meta_path), ("*.npy", "*.json"))
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
    arrays = {}
    for name, path in array_paths.items():
        expected = meta["arrays"][name]
        try:
            array = map_npy(path)
        except Exception as error:  # noqa: BLE001  a damaged .npy header fails numpy's parser in many ways
            return _damaged(path, f"unreadable: {type(error).__name__}: {error}")
        found = {"dtype": array.dtype.str, "shape": list(array.shape), DIGEST_KEY: _array_digest(array)}
        if found != expected:
            return _damaged(path, f"expected {expected}, found {found}")
        arrays[name] = array
    fields = {k: v for k, v in meta.items() if k not in ("arrays", DIGEST_KEY)}
    return fields, arrays


def _libc_mmap():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mapper, unmapper = libc.mmap, libc.munmap
    except (AttributeError, OSError):
        return None
    mapper.restype = ctypes.c_void_p
    mapper.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    unmapper.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return mapper, unmapper


_MMAP = _libc_mmap() if os.name == "posix" else None


def map_npy(path: str) -> np.ndarray:
    """A read-only memory map of the ``.npy`` file ``path`` that holds no file descriptor.

    ``np.load(mmap_mode="r")`` keeps one open per array (Python's mmap duplicates the
    descriptor): three per prefix of a blend, 3,000 for 1,000 prefixes, past a ``ulimit -n``
    of 1,024. A map needs no open descriptor, so here the file is mapped through libc and
    closed at once; the map is unmapped when the last array over it is collected. (Where
    libc's mmap is not reachable, np.load's map.)"""
    if _MMAP is None:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    mapper, unmapper = _MMAP
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        shape, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0) else
                                 np.lib.format.read_array_header_2_0(f))
        if dtype.hasobject:
            raise ValueError("an object array (pickled) is refused")
        offset, size = f.tell(), os.fstat(f.fileno()).st_size
        count = int(np.prod(shape, dtype=np.int64))
        if offset + count * dtype.itemsize > size:
            raise ValueError(f"{size} bytes hold less than the header's {shape} of {dtype}")
        address = mapper(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
        if address in (None, ctypes.c_void_p(-1).value):
            code = ctypes.get_errno()
            raise OSError(code, f"mmap {path}: {os.strerror(code)}")
    buffer = (ctypes.c_char * size).from_address(address)
    weakref.finalize(buffer, unmapper, address, size)
    array = np.frombuffer(buffer, dtype=dtype, count=count, offset=offset).reshape(shape, order="F" if fortran else "C")
    array.flags.writeable = False
    return array.view(np.memmap)  # what np.load(mmap_mode="r") returns: callers tell a cache hit by it


def _damaged(path: str, problem: str) -> None:
    warnings.warn(f"index cache file {path} is damaged; rebuilding it ({problem})", UserWarning, stacklevel=4)
    return None


__all__ = ["load_arrays", "save_arrays"]
