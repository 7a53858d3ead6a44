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

from ..storage import array_cache
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
    fingerprint = Fingerprint(len(lengths))
    fingerprint.update(lengths[::fingerprint.step])
    return fingerprint.result(int(lengths.sum(dtype=np.int64)))


def fingerprint_stride(num_sequences: int) -> int:
    """Every how many lengths :func:`lengths_fingerprint` hashes one."""
    return max(1, -(-num_sequences // HASHED_LENGTHS))


class Fingerprint:
    """:func:`lengths_fingerprint` made as the lengths are read a chunk at a time: give
    :meth:`update` every ``step``-th length, in order, then :meth:`result` the token count."""

    def __init__(self, num_sequences: int):
        self.num_sequences, self.step = int(num_sequences), fingerprint_stride(num_sequences)
        self._digest = hashlib.sha256(f"{self.num_sequences}:{self.step}:".encode())

    def update(self, strided) -> None:
        self._digest.update(np.ascontiguousarray(strided, dtype=np.int64).data)

    def result(self, num_tokens: int) -> dict:
        return {"num_sequences": self.num_sequences, "num_tokens": int(num_tokens),
                "lengths_sha256": self._digest.hexdigest()[:16]}


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


# A source of at most this many sequences keeps the copy of its lengths it makes (a pair,
# indexed.IndexedFile, or a concatenation); a larger one makes it anew when asked (reads take
# lengths_view, which needs none).
KEPT_LENGTHS = 1 << 20


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
        # First global sequence id of each part, and the end.
        self.first_sequence = np.cumsum([0] + [sequence_count(p) for p in parts])
        self._lengths = None  # kept when small (KEPT_LENGTHS), made by sequence_lengths
        self.identity = parts[0].identity if len(parts) == 1 else combined_identity(
            "concatenated", [p.identity for p in parts])

    @property
    def sequence_lengths(self) -> np.ndarray:
        # The parts' own arrays, fetched anew on each use, as a mapped index must be
        # (format.IndexedFile checks for truncation on every fetch).
        if len(self.parts) == 1:
            return self.parts[0].sequence_lengths
        if self._lengths is not None:
            return self._lengths
        lengths = np.concatenate([p.sequence_lengths for p in self.parts])
        if len(lengths) <= KEPT_LENGTHS:
            self._lengths = lengths
        return lengths

    @property
    def lengths_view(self):
        """The lengths as reads index them (see :func:`lengths_view`), through the parts'."""
        if len(self.parts) == 1:
            return lengths_view(self.parts[0])
        return _ConcatenatedLengths(self)

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

    def tokens_between(self, begin: int, end: int) -> int:
        """Tokens in sequences ``begin:end``: one part's own count (a pair: two pointers)."""
        if len(self.parts) == 1 and hasattr(self.parts[0], "tokens_between"):
            return int(self.parts[0].tokens_between(begin, end))
        return int(np.asarray(self.sequence_lengths[begin:end]).sum(dtype=np.int64))

    def read_pieces(self, sequence_ids, offsets, lengths, out: np.ndarray | None = None) -> np.ndarray:
        if len(self.parts) == 1:
            return self.parts[0].read_pieces(sequence_ids, offsets, lengths, out)
        sequence_ids, offsets, lengths, out = check_pieces(
            self.lengths_view, sequence_ids, offsets, lengths, out, self.dtype,
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
        total = sequence_count(source)
        if not 0 <= begin <= end <= total:
            raise ParameterError(f"sequence range [{begin}, {end}) does not lie in [0, {total}]")
        self.source, self.begin, self.end = source, int(begin), int(end)
        self.dtype = source.dtype
        self.identity = f"{source.identity}[{begin}:{end}]"
        # The range's lengths_fingerprint as its sampling indices recorded it (megatron/splits.py).
        self.recorded_fingerprint = None

    @property
    def remote(self) -> bool:
        return getattr(self.source, "remote", False)

    @property
    def sequence_lengths(self) -> np.ndarray:
        return self.source.sequence_lengths[self.begin:self.end]  # fetched anew: see Concatenated

    @property
    def lengths_view(self):
        """The lengths as reads index them (see :func:`lengths_view`): the source's, shifted."""
        view = lengths_view(self.source)
        if isinstance(view, np.ndarray):
            return view[self.begin:self.end]
        return _ShiftedLengths(view, self.begin, self.end - self.begin)

    @property
    def num_sequences(self) -> int:
        return self.end - self.begin

    @property
    def lengths_fingerprint(self) -> dict | None:
        """The source's recorded :func:`lengths_fingerprint` when the range is all of it, else
        the one recorded with the range's sampling indices (None: compute it)."""
        return getattr(self.source, "lengths_fingerprint", None) if self._whole else self.recorded_fingerprint

    @property
    def num_tokens(self) -> int:
        """The source's own count when the range is all of it (an opened .idx knows it without
        a pass over its lengths), else the range's lengths summed."""
        if self._whole and hasattr(self.source, "num_tokens"):
            return int(self.source.num_tokens)
        if hasattr(self.source, "tokens_between"):  # a pair: two pointers, not a pass over the lengths
            return int(self.source.tokens_between(self.begin, self.end))
        return int(np.asarray(self.sequence_lengths).sum(dtype=np.int64))

    @property
    def _whole(self) -> bool:
        return self.begin == 0 and self.end == sequence_count(self.source)

    def read_pieces(self, sequence_ids, offsets, lengths, out: np.ndarray | None = None) -> np.ndarray:
        sequence_ids, offsets, lengths, out = check_pieces(
            self.lengths_view, sequence_ids, offsets, lengths, out, self.dtype,
            lambda k: f"sequence {k} of {self.identity}")
        return self.source.read_pieces(sequence_ids + self.begin, offsets, lengths, out)


def sequence_count(source) -> int:
    """How many sequences a source has, without a copy of its lengths where it knows."""
    count = getattr(source, "num_sequences", None)
    return int(count) if count is not None else len(source.sequence_lengths)


def lengths_view(source):
    """What reads index a source's lengths with (``len()`` and ``[ids]``, nothing else of
    numpy's): its ``lengths_view`` when it has one (a large pair reads the ``.idx``'s entries
    as asked, IndexedFile.lengths_view), else its ``sequence_lengths``."""
    view = getattr(source, "lengths_view", None)
    return source.sequence_lengths if view is None else view


class _ShiftedLengths:
    """Lengths ``begin:begin + count`` of a lengths view, renumbered from 0."""

    def __init__(self, view, begin: int, count: int):
        self._view, self._begin, self._count = view, begin, count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, ids):
        return self._view[np.asarray(ids, np.int64) + self._begin]


class _ConcatenatedLengths:
    """The lengths of a :class:`Concatenated` read through its parts' views."""

    def __init__(self, source: "Concatenated"):
        self._source = source

    def __len__(self) -> int:
        return self._source.num_sequences

    def __getitem__(self, ids):
        ids = np.asarray(ids, np.int64)
        first = self._source.first_sequence
        part_of = np.searchsorted(first, ids, side="right") - 1
        out = np.empty(ids.shape, np.int64)
        for p in np.unique(part_of).tolist():
            mine = part_of == p
            out[mine] = lengths_view(self._source.parts[p])[ids[mine] - first[p]]
        return out


def lengths_to_build_from(source, folder: str | None):
    """A source's lengths for a build of sampling indices: a large pair's spilled to a mapped,
    unlinked file of ``folder`` (IndexedFile.spilled_lengths: not 4 bytes a sequence of the
    process's memory), through ranges and one-part concatenations; else ``sequence_lengths``."""
    if isinstance(source, Concatenated) and len(source.parts) == 1:
        return lengths_to_build_from(source.parts[0], folder)
    if isinstance(source, SequenceRange):
        return lengths_to_build_from(source.source, folder)[source.begin:source.end]
    spill = getattr(source, "spilled_lengths", None)
    return spill(folder) if spill is not None and folder is not None else source.sequence_lengths


def lengths_digest(source) -> str:
    """array_cache.array_digest of a source's lengths, or a digest that stands for them as
    well: what sampling indices are keyed by. A pair's comes from its validation or its record
    (no pass over the lengths at a warm open); a range's and a concatenation's are made from
    their source's (the range's bounds are in the key's identity too)."""
    if isinstance(source, Concatenated):
        if len(source.parts) == 1:
            return lengths_digest(source.parts[0])
        return combined_identity("concatenated-lengths", [lengths_digest(p) for p in source.parts])
    if isinstance(source, SequenceRange):
        whole = lengths_digest(source.source)
        return whole if source._whole else combined_identity("range-lengths", [whole, f"{source.begin}:{source.end}"])
    known = getattr(source, "lengths_digest", None)
    return known if known is not None else array_cache.array_digest(np.asarray(source.sequence_lengths))


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


__all__ = ["Concatenated", "Fingerprint", "SequenceRange", "TokenSource", "check_opened", "check_pieces", "check_still_named",
           "combined_identity", "file_identities", "fingerprint_stride", "first_bad", "index_files",
           "lengths_digest", "lengths_fingerprint", "lengths_identity", "lengths_to_build_from", "lengths_view",
           "sequence_count"]
