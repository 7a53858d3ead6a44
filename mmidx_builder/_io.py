"""Small file-system helpers every layer shares: atomic writes, remote paths, file identity.

Atomic writes go to a *hidden* temporary name in the target's folder (``.NAME.tmp-PID-RAND``)
and are renamed into place: a reader never sees half a file, and a temporary file left by a
killed process is invisible to ``datasets`` (which skips hidden files) and to folder scans.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import uuid
from typing import Callable, Iterator

TEMPORARY_MARK = ".tmp-"


def temporary_path(path: str | os.PathLike) -> str:
    """A hidden, unique sibling of ``path`` for writing before the rename."""
    folder, name = os.path.split(os.fspath(path))
    return os.path.join(folder, f".{name}{TEMPORARY_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")


def remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "wb") -> Iterator:
    """``with atomic_output(p) as f: f.write(...)``: ``p`` appears whole or not at all.

    On any failure (a full disk included) the temporary file is removed, even when closing
    it raises again, and the error propagates.
    """
    path = os.fspath(path)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    temporary = temporary_path(path)
    try:
        with open(temporary, mode) as f:
            yield f
        os.replace(temporary, path)
    except BaseException:
        remove_quietly(temporary)
        raise


def write_atomically(path: str | os.PathLike, data: bytes | Callable) -> None:
    """Writes ``data`` (bytes, or a function given the open binary file) atomically."""
    with atomic_output(path) as f:
        if callable(data):
            data(f)
        else:
            f.write(data)


def is_remote(path: str | os.PathLike) -> bool:
    """A URL (``hf://``, ``https://``, ``s3://``...) or datasets' ``hf:`` shorthand, not a local path."""
    path = os.fspath(path)
    return "://" in path or path.startswith("hf:")


def file_identity(path: str | os.PathLike) -> str:
    """What tells a local file's contents apart cheaply: inode, size, mtime and ctime.

    ``os.utime`` (``rsync -t``, restores) can put an old mtime back, but not the ctime,
    which every write or rename moves; a file replaced by another gets another inode. A
    rewrite within one clock tick of the same size is not caught (say so to users). A
    remote path is its own identity (the Hub's revisions and ETags are checked by datasets).
    """
    path = os.fspath(path)
    if is_remote(path):
        return path
    return stat_identity(path, os.stat(path))


def stat_identity(path: str | os.PathLike, stat: os.stat_result) -> str:
    """:func:`file_identity` from a stat already taken, e.g. ``os.fstat`` of a file that is
    open: that names the bytes actually read, even if the path was renamed over since."""
    return f"{os.path.realpath(path)}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ctime_ns}"


def map_readonly(path: str | os.PathLike) -> tuple[mmap.mmap | None, os.stat_result]:
    """A read-only memory map of a local file (None when it is empty: mmap cannot map
    that) and the ``fstat`` of the file it maps.

    The map keeps its own descriptor, so ``map.size()`` is an ``fstat`` of *this* file: it
    tells a truncation of the mapped file (reading a lost page is SIGBUS) from a rename of
    another file over the path (the mapped one lives on, unchanged).
    """
    with open(path, "rb") as f:
        stat = os.fstat(f.fileno())
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if stat.st_size else None
    return mapped, stat


__all__ = ["atomic_output", "file_identity", "is_remote", "map_readonly", "remove_quietly", "stat_identity",
           "temporary_path", "write_atomically"]
