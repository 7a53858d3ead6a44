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

import json
import os
import warnings

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
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except Exception as error:  # noqa: BLE001  a damaged .npy header fails numpy's parser in many ways
            return _damaged(path, f"unreadable: {type(error).__name__}: {error}")
        found = {"dtype": array.dtype.str, "shape": list(array.shape), DIGEST_KEY: _array_digest(array)}
        if found != expected:
            return _damaged(path, f"expected {expected}, found {found}")
        arrays[name] = array
    fields = {k: v for k, v in meta.items() if k not in ("arrays", DIGEST_KEY)}
    return fields, arrays


def _damaged(path: str, problem: str) -> None:
    warnings.warn(f"index cache file {path} is damaged; rebuilding it ({problem})", UserWarning, stacklevel=4)
    return None


__all__ = ["load_arrays", "save_arrays"]
