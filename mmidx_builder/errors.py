"""The package's errors: one base class, so callers can catch everything we raise.

    MMIdxError                      anything mmidx_builder refuses, with a message saying why
    ├── FormatError                 a .bin/.idx (or raw) file is not what its header promises
    │   ├── MissingPartnerError     a .bin without its .idx, or the other way round (or a MosaicML
    │   │                           shard its index names, or a shard no index names)
    │   └── RemoteChangedError      a remote file changed (ETag or size) since it was opened
    ├── MissingCodecError (ImportError)  a compressed shard whose codec is not installed
    ├── UnsafeEncodingError (ParameterError)  an MDS column whose reading runs code (pkl), not allowed
    ├── RemoteReadError (OSError)   a remote byte range still failing after its retries
    ├── OutOfSpaceError (OSError)   a write that does not fit in its folder's free space
    ├── ParameterError (ValueError) a setting cannot work (seq_length < 1, too many samples...)
    ├── ConvertError                an input record or tokenizer that `mmidx convert` cannot use
    ├── ConcurrentWriteError        another writer holds the output name (a pair's prefix)
    ├── HubError                    an upload that cannot go ahead (not logged in, bad repo id...)
    └── DatasetsVersionError (ImportError)  the installed ``datasets`` lacks an internal the
                                    builders' registration needs (hf/registry.py)

Messages name the file, the field or byte offset, what was expected and what was found.
"""

from __future__ import annotations

import os


class MMIdxError(Exception):
    """Base class of every error mmidx_builder raises on purpose."""


class FormatError(MMIdxError):
    """A file does not hold what the MMIDIDX format (or its own header) says it must.

    The message reads ``"{path}: {field} at byte {offset}: expected {expected}, found {found}"``;
    the parts are kept as attributes for programs.
    """

    def __init__(self, path, field: str, expected, found, offset: int | None = None, hint: str = ""):
        self.path = os.fspath(path) if path is not None else None
        self.field = field
        self.offset = offset
        self.expected = expected
        self.found = found
        where = f"{field} at byte {offset}" if offset is not None else field
        message = f"{self.path}: {where}: expected {expected}, found {found}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)


class MissingPartnerError(FormatError):
    """One file of a .bin/.idx pair exists and the other does not."""


class RemoteChangedError(FormatError):
    """A remote file's ETag or size differs from what it was when opened: reading on would mix
    two versions of the file, so the read stops instead."""


class MissingCodecError(MMIdxError, ImportError):
    """A compressed file (a MosaicML shard) whose codec is not installed: names the file, the
    codec and what to install."""

    def __init__(self, path: str, codec: str, extra: str):
        self.path, self.codec, self.extra = path, codec, extra
        super().__init__(f"{path}: compressed with {codec}, and no {codec} codec is installed here; "
                         f"install one with: pip install '{extra}'")

    def __reduce__(self):  # raised in DataLoader workers: must cross processes whole
        return type(self), (self.path, self.codec, self.extra)


class RemoteReadError(MMIdxError, OSError):
    """A remote byte range that could not be read: retried with backoff, or not retryable
    (e.g. a 403). The message names the file and the byte range."""

    def __init__(self, path: str, start: int, stop: int, reason: str):
        self.path, self.start, self.stop, self.reason = path, start, stop, reason
        super().__init__(f"{path}: bytes [{start}, {stop}): {reason}")

    def __reduce__(self):  # raised in DataLoader workers: must cross processes whole
        return type(self), (self.path, self.start, self.stop, self.reason)


class OutOfSpaceError(MMIdxError, OSError):
    """A write (an Arrow cache, an index cache, saved indices) that does not fit in the free
    space of its folder, found before writing (an estimate) or when a write failed for lack of
    space (ENOSPC, a quota, a file-size limit). Nothing of the write is left behind."""

    def __init__(self, folder, needed: int | None, free: int | None, what: str, hint: str = ""):
        import errno

        self.folder, self.needed, self.free, self.what = os.fspath(folder), needed, free, what
        needs = f"it needs about {needed:,} bytes" if needed is not None else "a write failed for lack of space"
        has = f", {free:,} are free there" if free is not None else ""
        message = (f"{self.folder}: not enough space for {what}: {needs}{has}; nothing of it was left behind "
                   f"(free space there{', or ' + hint if hint else ''})")
        super().__init__(errno.ENOSPC, message)
        self.hint = hint

    def __str__(self) -> str:
        return self.strerror

    def __reduce__(self):  # raised in worker processes: must cross processes whole
        return type(self), (self.folder, self.needed, self.free, self.what, self.hint)


class ParameterError(MMIdxError, ValueError):
    """A parameter that cannot work; the message says what to change."""


class UnsafeEncodingError(ParameterError):
    """An MDS column whose values are pickles (``pkl``): reading one runs whatever code the
    file's author put in it, so it is read only when the caller allows it by name."""


class ConvertError(MMIdxError):
    """An input record, file or tokenizer that conversion cannot use."""


class ConcurrentWriteError(MMIdxError):
    """Another writer (process or thread) is writing the same output name; nothing was written."""


class HubError(MMIdxError):
    """An upload to the Hugging Face Hub that cannot go ahead."""


class DatasetsVersionError(MMIdxError, ImportError):
    """The installed ``datasets`` is outside the supported range: an internal that the
    builders' registration fills in or wraps (hf/registry.py) is missing. The message names
    the installed version, the supported range and what is missing."""
