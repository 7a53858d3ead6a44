"""Small file-system helpers every layer shares: atomic writes, remote paths, file identity.

Atomic writes go to a *hidden* temporary name in the target's folder (``.NAME.tmp-PID-RAND``)
and are renamed into place: a reader never sees half a file, and a temporary file left by a
killed process is invisible to ``datasets`` (which skips hidden files) and to folder scans.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import uuid
from typing import Callable, Iterator

TEMPORARY_MARK = ".tmp-"


# Bytes in one file name on Linux, macOS and Windows file systems (NAME_MAX).
NAME_MAX = 255
# What a temporary name adds after its stem: TEMPORARY_MARK, a pid (up to 10 digits), "-", 8 hex digits.
_SUFFIX_BYTES = len(TEMPORARY_MARK) + 10 + 1 + 8


def temporary_stem(path: str | os.PathLike) -> str:
    """What every temporary name of ``path`` starts with: ``.NAME``; for a name too long to
    take the suffix within NAME_MAX (a 240-byte name would fail with ENAMETOOLONG), the name
    cut short and ``~`` and a hash of the whole name."""
    folder, name = os.path.split(os.fspath(path))
    encoded = os.fsencode(name)
    if 1 + len(encoded) + _SUFFIX_BYTES <= NAME_MAX:
        return os.path.join(folder, f".{name}")
    digest = hashlib.sha256(encoded).hexdigest()[:8]
    room = NAME_MAX - _SUFFIX_BYTES - len(digest) - 2  # the leading "." and the "~"
    return os.path.join(folder, f".{os.fsdecode(encoded[:room])}~{digest}")


def temporary_path(path: str | os.PathLike) -> str:
    """A hidden, unique sibling of ``path`` for writing before the rename."""
    return f"{temporary_stem(path)}{TEMPORARY_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"


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


def open_regular(path: str | os.PathLike, mode: str = "rb"):
    """``open(path, "rb")`` for a local file that must be a regular file.

    Why not plain ``open``: a FIFO in a file's place blocks that open forever, a directory
    raises ``IsADirectoryError``, a device reads without end. The open does not block
    (``O_NONBLOCK``) and anything but a regular file raises :class:`FormatError` saying what
    it is. Symbolic links are followed (a Hub snapshot's files are links into ``blobs/``).
    """
    from .errors import FormatError

    if mode != "rb":
        raise ValueError(f"open_regular opens for binary reading only, not {mode!r}")
    path = os.fspath(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            raise FormatError(path, "file", "a regular file", _file_kind(kind))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_small_file(path: str | os.PathLike, limit: int, opener: Callable | None = None) -> bytes:
    """The bytes of a small file, at most ``limit`` (else :class:`FormatError`): a local regular
    file (:func:`open_regular`), or what ``opener`` (``open``'s signature) opens."""
    from .errors import FormatError

    path = os.fspath(path)
    with (opener or open_regular)(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FormatError(path, "size", f"at most {limit:,} bytes", "more")
    return data


def not_a_regular_file(path: str | os.PathLike) -> str | None:
    """What a local ``path`` is when it exists but is no regular file ("a FIFO (named pipe)",
    "a directory"...), else None (a regular file, a link to one, or nothing there)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else _file_kind(mode)


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


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
    stat = os.stat(path)
    return f"{os.path.realpath(path)}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ctime_ns}"


__all__ = ["atomic_output", "file_identity", "is_remote", "not_a_regular_file", "open_regular", "read_small_file",
           "remove_quietly", "temporary_path", "temporary_stem",
           "write_atomically"]
