"""Opening the two files of a ``.bin``/``.idx`` pair wherever they are: local files through
their maps, remote ones through the remote reader, or through an ``open``-like callable the
caller chose. This is the one place that picks a local or a remote reader for a path; the
format layer gets the index's bytes and a reader behind the seam (bin_readers.BinReader).
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import NO_SUCH_FILE, MissingPartnerError
from .bin_readers import BinReader, FileBinReader, IndexInMemory, MemmapBinReader
from .files import local_kind, not_a_regular_file
from .mapped import MappedFile
from .remote import RemoteBinReader, remote_access_for


@dataclass
class OpenedPair:
    """An opened pair: ``index`` (a MappedFile, or IndexInMemory for an index read whole) and
    ``bin_reader(dtype)``, the ``.bin``'s reader once the index's header gave its dtype."""

    index: object
    bin_reader: Callable[[np.dtype], BinReader]


def open_pair(idx_path: str, bin_path: str, opener=None,
              expected_identities: tuple[str, str] | None = None) -> OpenedPair:
    """Both files of a pair opened: remote ones (``hf://``, ``s3://``, ``https://``...) by the
    remote reader, through ``opener`` when it is a remote.RemoteAccess (storage options, block
    cache) and with default settings when no opener is given; local ones memory-mapped, and
    refused when replaced since ``expected_identities`` were taken; anything else through
    ``opener``. A missing partner is a MissingPartnerError naming it."""
    return open_pairs([(idx_path, bin_path)], opener, [expected_identities])[0]


def open_pairs(pairs: list[tuple[str, str]], opener=None, expected_identities=None) -> list[OpenedPair]:
    """:func:`open_pair` of every ``(idx_path, bin_path)`` (with ``expected_identities[i]``),
    in order; the remote pairs read by one RemoteAccess are opened all at once (their sizes,
    then their indices, each a round trip for all: RemoteAccess.open_pairs)."""
    expected_identities = list(expected_identities or [None] * len(pairs))
    opened: list[OpenedPair | None] = [None] * len(pairs)
    remote: dict[object, list[int]] = {}
    for i, (idx_path, bin_path) in enumerate(pairs):
        access = remote_access_for(opener, bin_path)
        if access is not None:
            remote.setdefault(access, []).append(i)
    for access, members in remote.items():
        for i, (idx, bin_object) in zip(members, access.open_pairs([pairs[i] for i in members])):
            idx_path, bin_path = pairs[i]
            opened[i] = OpenedPair(IndexInMemory(idx if isinstance(idx, mmap.mmap) else bytes(idx), idx_path),
                                   _remote_reader(bin_path, access, bin_object))
    for i, (idx_path, bin_path) in enumerate(pairs):
        if opened[i] is None:
            opened[i] = _open_local(idx_path, bin_path, opener, expected_identities[i])
    return opened


def _remote_reader(bin_path: str, access, bin_object) -> Callable[[np.dtype], BinReader]:
    return lambda dtype: RemoteBinReader(bin_path, dtype, access, bin_object)


def _open_local(idx_path: str, bin_path: str, opener, expected_identities) -> OpenedPair:
    check_partners(idx_path, bin_path, opener)
    expected_idx, expected_bin = expected_identities or (None, None)
    index = _open_idx(idx_path, opener, expected_idx)
    if opener is None:
        return OpenedPair(index, lambda dtype: MemmapBinReader(bin_path, dtype, expected_bin))
    return OpenedPair(index, lambda dtype: FileBinReader(bin_path, dtype, opener))


def _open_idx(path: str, opener, expected_identity: str | None = None):
    """A local ``.idx`` as a MappedFile, else read whole through ``opener``."""
    if opener is None:
        return MappedFile(path, expected_identity)
    with opener(path, "rb") as f:
        return IndexInMemory(f.read(), path)


def _found(path: str, opener) -> str | None:
    """What is at ``path``: None for a file, else what is there instead (storage.files.local_kind)."""
    if opener is None:
        return local_kind(path)
    try:
        with opener(path, "rb"):
            return None
    except (FileNotFoundError, OSError):
        return NO_SUCH_FILE


def check_partners(idx_path: str, bin_path: str, opener=None) -> None:
    """Both files of a pair are there (through ``opener`` when given), else a
    MissingPartnerError naming what is missing (one file, or both) or what stands in a
    file's place (a FIFO, a directory, a dangling link, a loop of links)."""
    for path in (idx_path, bin_path) if opener is None else ():
        kind = not_a_regular_file(path)
        if kind:  # something is there, but no file to read: said as it is
            raise MissingPartnerError(path, "file", "a regular file (one of a .bin/.idx pair)", kind)
    error = MissingPartnerError.of_pair(idx_path, bin_path, _found(idx_path, opener), _found(bin_path, opener))
    if error is not None:
        raise error
