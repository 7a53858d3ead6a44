"""The token-source seam: what sampling, blending and assembly need from any data.

A token source is a list of *sequences* of token ids in one dtype (GPTDataset's
"documents" are sequences). Every source kind implements :class:`TokenSource`:
``.bin``/``.idx`` pairs (format.IndexedFile), raw files (rawfiles.RawFiles), their
concatenation (:class:`Concatenated`) and a range of another source's sequences
(:class:`SequenceRange`, Megatron's split ranges). Sampling sees only this protocol.

Reads go through :func:`check_pieces` first, so no source can be asked to read outside a
sequence, whatever the request.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from ..storage.files import file_identity, replaced_error
from ..errors import FormatError, ParameterError


@runtime_checkable
class TokenSource(Protocol):
    """Sequences of token ids, readable in pieces.

    ``sequence_lengths``: tokens per sequence (1-D integers). ``dtype``: the tokens' numpy
    dtype. ``identity``: a string that changes whenever the tokens may have changed (file
    identities, settings), for caches and fingerprints. ``read_pieces(sequence_ids, offsets,
    lengths, out=None)``: tokens ``offsets[k]:offsets[k]+lengths[k]`` of sequence
    ``sequence_ids[k]`` for every k, concatenated (into ``out`` if given). Sources may also
    say ``remote`` (True when reads are network round trips, worth reading ahead; missing
    means False).
    """

    sequence_lengths: np.ndarray
    dtype: np.dtype
    identity: str

    def read_pieces(self, sequence_ids, offsets, lengths, out: np.ndarray | None = None) -> np.ndarray: ...


# The lengths hash reads at most this many sequence lengths (evenly strided): enough to tell
# files apart, cheap for a billion sequences.
HASHED_LENGTHS = 1 << 20


def lengths_fingerprint(lengths: np.ndarray) -> dict:
    """What of a source's lengths decides its samples, in a few numbers: the sequence and token
    counts and a sha256 of up to HASHED_LENGTHS strided lengths (as int64). One pass over the
    lengths; format.IndexedFile records it with its index cache, so a warm open reads none."""
    lengths = np.asarray(lengths)
    step = max(1, -(-len(lengths) // HASHED_LENGTHS))
    digest = hashlib.sha256(f"{len(lengths)}:{step}:".encode())
    digest.update(np.ascontiguousarray(lengths[::step], dtype=np.int64).data)
    return {"num_sequences": int(len(lengths)), "num_tokens": int(lengths.sum(dtype=np.int64)),
            "lengths_sha256": digest.hexdigest()[:16]}


def first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def check_pieces(sequence_lengths: np.ndarray, sequence_ids, offsets, lengths, out: np.ndarray | None,
                 dtype: np.dtype, name) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validates a ``read_pieces`` request against ``sequence_lengths`` in one vectorised pass
    and returns it as int64 arrays, with ``out`` (allocated when None). ``name(k)`` names
    sequence ``k`` in messages."""
    sequence_ids, offsets, lengths = (np.asarray(a, np.int64) for a in (sequence_ids, offsets, lengths))
    if any(a.ndim != 1 for a in (sequence_ids, offsets, lengths)) or not len(sequence_ids) == len(offsets) == len(lengths):
        raise ParameterError("sequence_ids, offsets and lengths must be 1-D arrays of one length, got shapes "
                             f"{sequence_ids.shape}, {offsets.shape}, {lengths.shape}")
    if len(sequence_ids):
        bad = (sequence_ids < 0) | (sequence_ids >= len(sequence_lengths))
        if bad.any():
            k = first_bad(bad)
            raise ParameterError(f"sequence id {int(sequence_ids[k])} out of range [0, {len(sequence_lengths)})")
        # `offsets > length - lengths`, not `offsets + lengths > length`: the sum of two
        # huge requests wraps around in int64 and would pass.
        bad = (offsets < 0) | (lengths < 0) | (offsets > sequence_lengths[sequence_ids] - lengths)
        if bad.any():
            k = first_bad(bad)
            raise ParameterError(f"piece {k} asks for tokens [{int(offsets[k])}, {int(offsets[k]) + int(lengths[k])}) "
                                 f"of {name(int(sequence_ids[k]))}, which has "
                                 f"{int(sequence_lengths[sequence_ids[k]])}")
    total = int(lengths.sum())
    if out is None:
        out = np.empty(total, dtype)
    elif out.shape != (total,):
        raise ParameterError(f"out has shape {out.shape}, expected ({total},)")
    return sequence_ids, offsets, lengths, out


def combined_identity(kind: str, parts: Sequence[str]) -> str:
    digest = hashlib.sha256(kind.encode())
    for part in parts:
        digest.update(b"\0" + part.encode())
    return f"{kind}:{digest.hexdigest()[:32]}"


class Concatenated:
    """Several sources read as one: sequences numbered across them in the given order.

    Over ``.bin``/``.idx`` pairs this is what Megatron's sampling sees over their merge
    (``merge_datasets``), so several pairs in one split sample exactly as their merge would.
    """

    def __init__(self, parts: Sequence[TokenSource]):
        if not parts:
            raise ParameterError("a concatenation needs at least one token source")
        dtypes = {p.dtype for p in parts}
        if len(dtypes) > 1:
            found = ", ".join(f"{getattr(p, 'bin_path', p.identity)}: {p.dtype.name}" for p in parts)
            raise ParameterError(f"files of one split must share a dtype, found {found}; "
                                 "convert them with one tokenizer or put them in separate splits")
        self.parts = list(parts)
        self.dtype = parts[0].dtype
        self._lengths = np.concatenate([p.sequence_lengths for p in parts]) if len(parts) > 1 else None
        # First global sequence id of each part, and the end.
        self.first_sequence = np.cumsum([0] + [len(p.sequence_lengths) for p in parts])
        self.identity = parts[0].identity if len(parts) == 1 else combined_identity(
            "concatenated", [p.identity for p in parts])

    @property
    def sequence_lengths(self) -> np.ndarray:
        # One part: its own array, fetched anew on each use, as a mapped index must be
        # (format.IndexedFile checks for truncation on every fetch).
        return self.parts[0].sequence_lengths if self._lengths is None else self._lengths

    @property
    def files(self) -> list:
        return self.parts

    @property
    def lengths_fingerprint(self) -> dict | None:
        """One part's recorded :func:`lengths_fingerprint` (None: compute it)."""
        return getattr(self.parts[0], "lengths_fingerprint", None) if len(self.parts) == 1 else None

    @property
    def remote(self) -> bool:
        """Some part is read over the network (worth reading ahead)."""
        return any(getattr(p, "remote", False) for p in self.parts)

    @property
    def num_sequences(self) -> int:
        return int(self.first_sequence[-1])

    @property
    def num_tokens(self) -> int:
        # The parts' own counts (an opened .idx knows its count without a pass over its lengths).
        if all(hasattr(p, "num_tokens") for p in self.parts):
            return sum(int(p.num_tokens) for p in self.parts)
        return int(self.sequence_lengths.sum(dtype=np.int64))

    def read_pieces(self, sequence_ids, offsets, lengths, out: np.ndarray | None = None) -> np.ndarray:
        if len(self.parts) == 1:
            return self.parts[0].read_pieces(sequence_ids, offsets, lengths, out)
        sequence_ids, offsets, lengths, out = check_pieces(
            self.sequence_lengths, sequence_ids, offsets, lengths, out, self.dtype,
            lambda k: f"sequence {k} of the concatenation of {[p.identity for p in self.parts]}")
        part_of = np.searchsorted(self.first_sequence, sequence_ids, side="right") - 1
        ends = np.cumsum(lengths)
        begins = ends - lengths
        # Runs of consecutive pieces from one part go to that part in one call.
        breaks = np.flatnonzero(np.diff(part_of)) + 1
        for first, last in zip(np.concatenate(([0], breaks)).tolist(), np.concatenate((breaks, [len(part_of)])).tolist()):
            if first == last:
                continue
            p = int(part_of[first])
            self.parts[p].read_pieces(sequence_ids[first:last] - self.first_sequence[p], offsets[first:last],
                                      lengths[first:last], out[begins[first]:ends[last - 1]])
        return out


class SequenceRange:
    """Sequences ``begin:end`` of another source, renumbered from 0 (a Megatron split range)."""

    def __init__(self, source: TokenSource, begin: int, end: int):
        total = len(source.sequence_lengths)
        if not 0 <= begin <= end <= total:
            raise ParameterError(f"sequence range [{begin}, {end}) does not lie in [0, {total}]")
        self.source, self.begin, self.end = source, int(begin), int(end)
        self.dtype = source.dtype
        self.identity = f"{source.identity}[{begin}:{end}]"

    @property
    def remote(self) -> bool:
        return getattr(self.source, "remote", False)

    @property
    def sequence_lengths(self) -> np.ndarray:
        return self.source.sequence_lengths[self.begin:self.end]  # fetched anew: see Concatenated

    @property
    def lengths_fingerprint(self) -> dict | None:
        """The source's recorded :func:`lengths_fingerprint` when the range is all of it."""
        return getattr(self.source, "lengths_fingerprint", None) if self._whole else None

    @property
    def num_tokens(self) -> int:
        """The source's own count when the range is all of it (an opened .idx knows it without
        a pass over its lengths), else the range's lengths summed."""
        if self._whole and hasattr(self.source, "num_tokens"):
            return int(self.source.num_tokens)
        return int(np.asarray(self.sequence_lengths).sum(dtype=np.int64))

    @property
    def _whole(self) -> bool:
        return self.begin == 0 and self.end == len(self.source.sequence_lengths)

    def read_pieces(self, sequence_ids, offsets, lengths, out: np.ndarray | None = None) -> np.ndarray:
        sequence_ids, offsets, lengths, out = check_pieces(
            self.sequence_lengths, sequence_ids, offsets, lengths, out, self.dtype,
            lambda k: f"sequence {k} of {self.identity}")
        return self.source.read_pieces(sequence_ids + self.begin, offsets, lengths, out)


def lengths_identity(source) -> str:
    """What a source's sequence lengths are read from, through concatenations and ranges: a
    pair's ``.idx`` alone (IndexedFile.lengths_identity), not its ``.bin``, whose bytes change
    no length; any other source's whole identity. Keys the sampling indices (with the lengths'
    own digest and the settings), so a write to a ``.bin`` that keeps its size rebuilds none."""
    if isinstance(source, Concatenated):
        if len(source.parts) == 1:
            return lengths_identity(source.parts[0])
        return combined_identity("concatenated", [lengths_identity(p) for p in source.parts])
    if isinstance(source, SequenceRange):
        return f"{lengths_identity(source.source)}[{source.begin}:{source.end}]"
    return getattr(source, "lengths_identity", None) or source.identity


def index_files(source) -> list[str]:
    """The identities of the local files a source's lengths are read from (a pair's ``.idx``,
    not its ``.bin``; a raw source's files), through concatenations and ranges: recorded with
    the sampling indices, so that ``mmidx cache`` can tell whether any file still has them."""
    if isinstance(source, Concatenated):
        return [identity for part in source.parts for identity in index_files(part)]
    if isinstance(source, SequenceRange):
        return index_files(source.source)
    if getattr(source, "lengths_identity", None) is not None:  # a pair: its .idx
        identities = list(getattr(source, "identities", None) or ())[:1]
    else:
        identities = file_identities(source)
    return [identity for identity in identities if _identity_path(identity) is not None]


def file_identities(source) -> list[str]:
    """The identities (``_io.stat_identity``) of the local files a source opened: a source's
    ``identities``, through concatenations and ranges."""
    if isinstance(source, Concatenated):
        return [identity for part in source.parts for identity in file_identities(part)]
    if isinstance(source, SequenceRange):
        return file_identities(source.source)
    return list(getattr(source, "identities", None) or ())


def _identity_path(identity: str) -> str | None:
    """The path of a local file identity (``path:inode:size:mtime:ctime``), else None."""
    parts = identity.rsplit(":", 4)
    return parts[0] if len(parts) == 5 and all(p.isdigit() for p in parts[1:]) else None


@functools.lru_cache(maxsize=4)
def _named_identities(expected: str) -> dict:
    """path -> identity of a plan's ``|``-joined identities, parsed once per plan: a blend of
    1,000 prefixes checks each of its files against all of them (O(prefixes**2) parses before)."""
    return {_identity_path(e): e for e in expected.split("|")}


def check_opened(source, expected: str) -> None:
    """FormatError unless every local file ``source`` opened, among those that ``expected``
    (a ``|``-joined list of file identities, taken when the dataset was planned) names, is
    the very file named there. (Files it does not name, such as Hub downloads in the cache,
    are checked by their own means.)

    A process that opens the files again (a spawn DataLoader worker, a rerun) must read the
    very files the dataset's row count and sample order were made from: a pair replaced
    since would give another pair's tokens under the old row count."""
    named = _named_identities(expected)
    for found in file_identities(source):
        path = _identity_path(found)  # None: a remote file, its URL as its identity
        if path is not None and named.get(path, found) != found:
            raise replaced_error(path, named[path], found)


def check_still_named(source) -> None:
    """FormatError unless the path of every local file ``source`` opened still names that very
    file (inode, size, mtime, ctime): what :func:`check_opened` is to a process that opens the
    files again by name, this is to one that inherited them open (a fork DataLoader worker),
    so that a pair replaced since is refused by both alike."""
    for opened in file_identities(source):
        path = _identity_path(opened)
        if path is None:
            continue
        try:
            now = file_identity(path)
        except FileNotFoundError:
            raise FormatError(path, "file", "the file opened first", "no such file",
                              hint="the file was removed or renamed since the dataset was opened") from None
        if now != opened:
            raise replaced_error(path, opened, now)


__all__ = ["Concatenated", "SequenceRange", "TokenSource", "check_opened", "check_pieces", "check_still_named",
           "combined_identity", "file_identities", "first_bad", "index_files", "lengths_fingerprint", "lengths_identity"]
