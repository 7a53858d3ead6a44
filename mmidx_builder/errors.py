"""The package's errors: one base class, so callers can catch everything we raise.

    MMIdxError                      anything mmidx_builder refuses, with a message saying why
    ├── FormatError                 a .bin/.idx (or raw) file is not what its header promises
    │   ├── MissingPartnerError     a .bin without its .idx, or the other way round (or a MosaicML
    │   │                           shard its index names, or a shard no index names)
    │   └── RemoteChangedError      a remote file changed (ETag or size) since it was opened
    ├── MissingCodecError (ImportError)  a compressed shard whose codec is not installed
    ├── UnsafeEncodingError (ParameterError)  an MDS column whose reading runs code (pkl), not allowed
    ├── RemoteReadError (OSError)   a remote byte range still failing after its retries
    │   └── RemoteRateLimitError    a server asking to wait longer or more often than the bounds
    ├── OutOfSpaceError (OSError)   a write that does not fit in its folder's free space
    ├── UnwritableFolderError (OSError)  a folder load_dataset must write in that cannot be written
    ├── ParameterError (ValueError) a setting cannot work (seq_length < 1, too many samples...)
    │   └── MosaicOrderError        settings, a world or a resume state for which mosaicml-streaming's
    │                               StreamingDataset makes no sample order (mosaic/order/)
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


NO_SUCH_FILE = "no such file"
PAIR_HINT = "a .bin/.idx pair needs both files"


class MissingPartnerError(FormatError):
    """One file of a .bin/.idx pair exists and the other does not (or neither does)."""

    @classmethod
    def of_pair(cls, idx_path: str, bin_path: str, idx_found: str | None, bin_found: str | None,
                hint: str = PAIR_HINT) -> "MissingPartnerError | None":
        """The one wording of a pair that cannot be opened, wherever it is met (a folder, a
        Megatron prefix, ``mmidx inspect``, a remote pair). ``idx_found``/``bin_found`` say what
        is at each path: None for a regular file, else ``NO_SUCH_FILE``, "a dangling link to x",
        "a symbolic link loop", "a directory", ...; None when both are regular files."""
        if idx_found == bin_found == NO_SUCH_FILE:
            prefix = idx_path[:-4] if idx_path.endswith(".idx") else os.path.splitext(idx_path)[0]
            return cls(prefix, "pair", f"{bin_path} and {idx_path}", "neither file",
                       hint="no .bin/.idx pair has this prefix; check it, and the folder it is relative to")
        for path, found, partner, partner_found in ((idx_path, idx_found, bin_path, bin_found),
                                                    (bin_path, bin_found, idx_path, idx_found)):
            if found is None:
                continue
            if partner_found is None:
                return cls(path, "file", f"the partner of {partner}", found, hint=hint)
            return cls(path, "file", "a regular file (one of a .bin/.idx pair)", found)
        return None


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


class RemoteRateLimitError(RemoteReadError):
    """A server that rate-limits (429, or 503 with ``Retry-After``) beyond the bounds of waiting:
    it asked for a wait longer than what is left of ``max_wait``, or for more than
    ``max_waits`` waits. The message names the host, the wait asked and the bound."""


class OutOfSpaceError(MMIdxError, OSError):
    """A write (an Arrow cache, an index cache, saved indices) that does not fit in the free
    space of its folder, found before writing (an estimate) or when a write failed for lack of
    space (ENOSPC, a quota, a file-size limit). Nothing of the write is left behind.

    ``failed`` is the system's words for a write that failed ("No space left on device"); the
    free bytes are then those measured after the failure, once what was written is removed
    (they may well exceed the estimate: a quota or a file-size limit is not free space)."""

    def __init__(self, folder, needed: int | None, free: int | None, what: str, hint: str = "",
                 failed: str | None = None):
        import errno

        self.folder, self.needed, self.free, self.what = os.fspath(folder), needed, free, what
        self.hint, self.failed = hint, failed
        about = f"about {needed:,} bytes" if needed is not None else None
        if failed is None:
            needs = f"it needs {about}" if about else "a write failed for lack of space"
            has = f", {free:,} are free there" if free is not None else ""
        else:
            needs = f"a write failed ({failed})" + (f" on the way to {about}" if about else "")
            has = f"; {free:,} bytes are free there after the failure" if free is not None else ""
        message = (f"{self.folder}: not enough space for {what}: {needs}{has}; nothing of it was left behind "
                   f"(free space there{', or ' + hint if hint else ''})")
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return self.strerror

    def __reduce__(self):  # raised in worker processes: must cross processes whole
        return type(self), (self.folder, self.needed, self.free, self.what, self.hint, self.failed)


class UnwritableFolderError(MMIdxError, OSError):
    """A folder load_dataset must write in (the datasets cache, even with ``streaming=True``)
    that cannot be written (read-only, not ours): names the folder and what to set instead."""

    def __init__(self, folder, errno_: int, reason: str, what: str, fix: str):
        self.folder, self.reason, self.what, self.fix = os.fspath(folder), reason, what, fix
        super().__init__(errno_, f"{self.folder}: {what} cannot be written ({reason}); {fix}")

    def __str__(self) -> str:
        return self.strerror

    def __reduce__(self):
        return type(self), (self.folder, self.errno, self.reason, self.what, self.fix)


class ParameterError(MMIdxError, ValueError):
    """A parameter that cannot work; the message says what to change."""


class MosaicOrderError(ParameterError):
    """Settings, a world or a resume state for which mosaicml-streaming's StreamingDataset would
    refuse (or fail) to make its sample order: ``mosaic/order/`` refuses the same cases, naming
    the setting, what StreamingDataset expects and what it was given."""


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
