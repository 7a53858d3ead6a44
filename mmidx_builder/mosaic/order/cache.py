"""One epoch array per node instead of one per worker: the first worker to ask builds it and
saves it as ``.npy`` in a folder the node's workers share; every worker then maps it read-only,
so the page cache holds one copy per node (StreamingDataset's local leader shares its epoch
in shared memory for the same reason; megatron-core's index caches are ``.npy`` files mapped
by every rank and worker).

The build runs under an exclusive ``flock`` of a lock file beside the array, so the workers
that ask meanwhile wait for it rather than build it too; the array is written to a temporary
file and renamed, so a file under the final name is always whole. Files are named by a digest
of everything that decides the array, and never removed here (one epoch's file is the epoch's
size x 8 bytes: the caller chooses the folder and clears it).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable

import numpy as np

FORMAT = "mosaic-order-epoch-1"  # changes when what a cached array holds changes


def epoch_key(kind: str, *parts) -> str:
    """A file name for the array of ``kind`` decided by ``parts`` (numpy arrays by their
    bytes and dtype, anything else by its repr: frozen dataclasses here)."""
    digest = hashlib.sha256(f"{FORMAT}\0{kind}".encode())
    for part in parts:
        if isinstance(part, np.ndarray):
            digest.update(f"\0{part.dtype.str}{part.shape}".encode())
            digest.update(np.ascontiguousarray(part).tobytes())
        else:
            digest.update(f"\0{part!r}".encode())
    return f"{kind}-{digest.hexdigest()[:32]}.npy"


def shared_epoch(folder: str, name: str, build: Callable[[], np.ndarray]) -> np.ndarray:
    """The array saved as ``folder/name``, mapped read-only; built by ``build`` and saved
    first if no process has yet."""
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process ends
            if not os.path.exists(path):
                _save(path, build())
    return np.load(path, mmap_mode="r", allow_pickle=False)


def _save(path: str, array: np.ndarray) -> None:
    temporary = f"{path}.{os.getpid()}.part"
    try:
        with open(temporary, "wb") as f:
            np.save(f, array, allow_pickle=False)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
