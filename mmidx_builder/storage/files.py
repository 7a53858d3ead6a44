"""Small file-system helpers every layer shares: atomic writes, writer locks, remote paths,
file identity.

Atomic writes go to a *hidden* temporary name in the target's folder (``.NAME.tmp-PID-RAND``)
and are renamed into place: a reader never sees half a file, and a temporary file left by a
killed process is invisible to ``datasets`` (which skips hidden files) and to folder scans.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import functools
import hashlib
import os
import re
import shutil
import stat
import uuid
from typing import Callable, Iterator

from ..errors import NO_SUCH_FILE, ConcurrentWriteError

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
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as error:
        if error.errno != errno.ENAMETOOLONG:  # a name too long to exist has nothing to remove
            raise


_TEMPORARY_PID = re.compile(re.escape(TEMPORARY_MARK) + r"(\d+)-")


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(folder: str, patterns: tuple[str, ...] = ("*",)) -> list[str]:
    """Removes the temporary files in ``folder`` whose names match ``patterns`` (globs of the
    final names, e.g. ``"KEY-*.npy"``) and whose writing process is gone (killed before its
    rename); returns their paths. Hidden names, and the visible ones older writers used."""
    try:  # one listing, then patterns over the few temporary names: a folder of 8,000 cache files
        names = [entry.name for entry in os.scandir(folder or ".") if TEMPORARY_MARK in entry.name]
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for pattern in patterns:
        for shown in (f".{pattern}{TEMPORARY_MARK}*", f"{pattern}{TEMPORARY_MARK}*"):
            for name in fnmatch.filter(names, shown):
                found = _TEMPORARY_PID.search(name)
                if found and not process_alive(int(found.group(1))):
                    path = os.path.join(folder, name)
                    remove_quietly(path)
                    removed.append(path)
                    names.remove(name)
    return removed


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


# What a write that ran out of room fails with: no space, a quota, a file-size limit.
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")


def out_of_room(error: BaseException | None) -> OSError | None:
    """The OSError in ``error``'s chain (causes and contexts) that says a write ran out of
    room, if any (datasets wraps it in its own "An error occurred while generating")."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and (error.errno in _NO_ROOM or (
                # numpy's tofile (np.save to a real file) drops the errno of a short write:
                # "1200 requested and 992 written", which a disk without room is what gives.
                error.errno is None and _SHORT_WRITE.fullmatch(str(error)))):
            return error
        error = error.__cause__ or error.__context__
    return None


def nearest_existing(path: str | os.PathLike) -> str:
    """``path`` (absolute) if it exists, else its nearest parent folder that does: where a
    write that failed and was cleaned up can still be named."""
    folder = os.path.abspath(os.fspath(path))
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder


def failure_words(error: OSError) -> str:
    """The system's words for a failed write; numpy's short write (no errno: the system's words
    are lost) is said as one, with its counts."""
    if error.strerror:
        return error.strerror
    return f"a short write, {error}" if _SHORT_WRITE.fullmatch(str(error)) else str(error)


def free_bytes(path: str | os.PathLike) -> int | None:
    """The bytes free to this user in the file system of ``path`` (or of its nearest existing
    parent folder); None where that cannot be asked."""
    try:
        return shutil.disk_usage(nearest_existing(path)).free
    except OSError:
        return None


def write_atomically(path: str | os.PathLike, data: bytes | Callable) -> None:
    """Writes ``data`` (bytes, or a function given the open binary file) atomically."""
    with atomic_output(path) as f:
        if callable(data):
            data(f)
        else:
            f.write(data)


LOCK_SUFFIX = ".lock"


class WriterLock:
    """An exclusive lock on an output name (a pair's prefix), held while it is written.

    Two writers of one prefix would each rename their files into place, and the folder could
    end with one writer's ``.bin`` beside the other's ``.idx``: a pair that opens cleanly and
    serves wrong tokens. So a writer first takes ``flock`` on a hidden sibling file
    ``.NAME.lock``; a second writer, in this process or another, is refused at once with
    :class:`ConcurrentWriteError` (never made to wait: a convert that waits hours for another
    to finish would then overwrite its output). The kernel drops the lock when its holder
    dies, so a killed writer leaves no stale lock, only the empty file, which the next holder
    removes. Removal and acquisition race safely: the holder unlinks the file while still
    holding the lock, and a newcomer that locked a file since unlinked (its inode is no longer
    the path's) tries again.
    """

    def __init__(self, name: str | os.PathLike):
        import fcntl  # POSIX only; imported here so that importing this module stays portable

        folder = os.path.dirname(os.fspath(name))
        # Hidden, and cut and hashed like a temporary name when NAME.lock would pass NAME_MAX.
        self.path = temporary_stem(name) + LOCK_SUFFIX
        self.name = os.fspath(name)
        if folder:
            os.makedirs(folder, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "another process"
                os.close(fd)
                raise ConcurrentWriteError(f"{self.name}: being written by {holder} (lock {self.path}); "
                                           "wait for it to finish, or write to another name") from None
            except BaseException:
                os.close(fd)
                raise
            try:
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)  # locked a file its holder had just removed: take the new one
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()}".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            remove_quietly(self.path)  # while still locked: see the class docstring
        finally:
            os.close(fd)

    def __enter__(self) -> "WriterLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def open_regular(path: str | os.PathLike, mode: str = "rb"):
    """``open(path, "rb")`` for a local file that must be a regular file.

    Why not plain ``open``: a FIFO in a file's place blocks that open forever, a directory
    raises ``IsADirectoryError``, a device reads without end. The open does not block
    (``O_NONBLOCK``) and anything but a regular file raises :class:`FormatError` saying what
    it is. Symbolic links are followed (a Hub snapshot's files are links into ``blobs/``).
    """
    from ..errors import FormatError

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
    from ..errors import FormatError

    path = os.fspath(path)
    with (opener or open_regular)(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FormatError(path, "size", f"at most {limit:,} bytes", "more")
    return data


def local_kind(path: str | os.PathLike) -> str | None:
    """What a local ``path`` is when it is no regular file (nor a link to one), in words; None
    for a regular file. A dangling link says where it points; a loop of links is named as one
    (the system's ELOOP, which os.path.exists reports as nothing there)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return f"a dangling link to {os.readlink(path)}"
        return NO_SUCH_FILE
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "a loop of symbolic links"
        return f"unreadable ({error.strerror})"
    return None if stat.S_ISREG(mode) else _file_kind(mode)


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
    return stat_identity(path, os.stat(path))


def stat_identity(path: str | os.PathLike, stat: os.stat_result) -> str:
    """:func:`file_identity` from a stat already taken, e.g. ``os.fstat`` of a file that is
    open: that names the bytes actually read, even if the path was renamed over since."""
    return f"{_real_path(path)}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ctime_ns}"


def _real_path(path: str | os.PathLike) -> str:
    """``os.path.realpath(path)``, its folder's part remembered: realpath takes an lstat per
    component (~25 us), and a warm open of a 1,000-prefix blend names 2,000 files in one
    folder seven times each. A file that is itself a link (a Hub snapshot's) is resolved whole."""
    path = os.path.abspath(path)
    if os.path.islink(path):
        return os.path.realpath(path)
    folder, name = os.path.split(path)
    return os.path.join(_real_folder(folder), name)


@functools.lru_cache(maxsize=4096)
def _real_folder(folder: str) -> str:
    # Remembered for the process: a folder link moved to another folder while a dataset is
    # open still names the first one here; the inode, size and times beside it still tell a
    # file read there from the one opened.
    return os.path.realpath(folder)


def replaced_error(path: str, expected: str, found: str):
    """The error for a file that is not the one first opened (identities as :func:`stat_identity`)."""
    from ..errors import FormatError

    return FormatError(path, "file identity", f"the file opened first (inode, size, mtime, ctime "
                       f"{expected.rsplit(':', 4)[1:]})", f"another file ({found.rsplit(':', 4)[1:]})",
                       hint="the file was replaced or rewritten since the dataset was opened; "
                            "open the dataset again to read the new data")


__all__ = ["WriterLock", "atomic_output", "file_identity", "free_bytes", "failure_words", "is_remote", "local_kind", "nearest_existing", "not_a_regular_file", "out_of_room",
           "open_regular", "read_small_file", "remove_quietly", "remove_stale_temporaries", "replaced_error",
           "stat_identity", "temporary_path", "temporary_stem", "write_atomically"]
