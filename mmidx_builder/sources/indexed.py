"""The MMIDIDX ``.bin``/``.idx`` pair: byte layout, a validating reader, and a writer.

``PREFIX.bin`` holds every sequence's token ids back to back in one dtype, little-endian,
with no header. ``PREFIX.idx`` says where each sequence starts. Two flavours share the
magic and differ after the sequence count (all integers little-endian):

    field               type    count   Megatron-core   fairseq
    magic               bytes   9       yes             yes      b"MMIDIDX\\x00\\x00"
    version             u64     1       yes             yes      always 1
    dtype code          u8      1       yes             yes      see the tables below
    sequence count N    u64     1       yes             yes
    document count D    u64     1       yes             -        documents + 1
    sequence lengths    int32   N       yes             yes      tokens per sequence
    sequence pointers   int64   N       yes             yes      byte offset in .bin
    document indices    int64   D       yes             -        first 0, last N
    sequence modes      int8    N       multimodal only -

A Megatron document is the run of sequences ``document_indices[i]:document_indices[i+1]``
(several with ``--split-sentences``, none for a document that tokenized to nothing). In the
fairseq flavour every sequence is its own document. The flavour is told by the file size,
which only one of ``26 + 12N`` and ``34 + 12N + 8D (+ N)`` can match.

Megatron's own reader trusts every pointer; this one validates the whole index on open,
with vectorised checks, so that no file, however damaged, makes it read outside the files.
Given an index cache (``cache_dir``), it does so once per file identity (:class:`OpeningRecord`).
"""

from __future__ import annotations

import array
import glob
import hashlib
import os
import shutil
import struct
from dataclasses import dataclass
from typing import IO, Callable, Iterable, Sequence

import numpy as np

from .. import progress
from ..warnings_once import warn_once
from ..storage import array_cache
from ..storage.bin_readers import BinReader, MemmapBinReader
from ..storage.files import (TEMPORARY_MARK, WriterLock,  # noqa: F401  (TEMPORARY_MARK: tests read it here)
                            file_identity, remove_quietly, temporary_path, temporary_stem)
from ..storage.files import remove_stale_temporaries as remove_stale_files
from ..storage.mapped import MappedFile, gather
from ..storage.pairs import OpenedPair, check_partners, open_pair, open_pairs  # noqa: F401  (check_partners: callers find it here)
from ..dtypes import DTYPE_TABLES, FAIRSEQ_DTYPES, MEGATRON_DTYPES, Flavour, dtype_code, smallest_dtype, writer_dtype  # noqa: F401
from ..errors import FormatError, MissingPartnerError, ParameterError
from .token_source import KEPT_LENGTHS, Fingerprint, check_pieces, combined_identity, first_bad

MAGIC = b"MMIDIDX\x00\x00"
# The provenance sidecar beside a pair (provenance.py): it describes one generation of the
# pair, so a writer replacing the pair removes it first.
SIDECAR_SUFFIX = ".mmidx-info"
VERSION = 1

# magic, version, dtype code, sequence count: the part both flavours share.
PREAMBLE = struct.Struct("<9sQBQ")
DOCUMENT_COUNT = struct.Struct("<Q")
FAIRSEQ_HEADER_SIZE = PREAMBLE.size
MEGATRON_HEADER_SIZE = PREAMBLE.size + DOCUMENT_COUNT.size
_VERSION_OFFSET = len(MAGIC)
_DTYPE_CODE_OFFSET = _VERSION_OFFSET + 8
_SEQUENCE_COUNT_OFFSET = _DTYPE_CODE_OFFSET + 1

LENGTH_DTYPE = np.dtype("<i4")
POINTER_DTYPE = np.dtype("<i8")
DOCUMENT_INDEX_DTYPE = np.dtype("<i8")
MODE_DTYPE = np.dtype("<i1")
# Bytes the index spends per sequence and per document entry.
_PER_SEQUENCE = LENGTH_DTYPE.itemsize + POINTER_DTYPE.itemsize
_PER_DOCUMENT = DOCUMENT_INDEX_DTYPE.itemsize


def split_prefix(path: str | os.PathLike) -> str:
    """``data/x.bin``, ``data/x.idx`` and ``data/x`` all name the pair ``data/x``."""
    path = os.fspath(path)
    root, ext = os.path.splitext(path)
    return root if ext in (".bin", ".idx") else path


@dataclass(frozen=True)
class Header:
    flavour: Flavour
    dtype: np.dtype
    dtype_code: int
    num_sequences: int
    document_count: int | None  # Megatron's D (documents + 1); None for fairseq
    multimodal: bool

    @property
    def size(self) -> int:
        return MEGATRON_HEADER_SIZE if self.flavour is Flavour.MEGATRON else FAIRSEQ_HEADER_SIZE


def parse_header(head: bytes, file_size: int, path) -> Header:
    """Reads the fixed fields from the first bytes of an ``.idx`` and tells the flavour.

    ``head`` needs at most ``MEGATRON_HEADER_SIZE`` bytes; ``file_size`` is the whole file's.
    """
    if file_size < PREAMBLE.size or len(head) < PREAMBLE.size:
        raise FormatError(path, "header", f"at least {PREAMBLE.size} bytes",
                          f"a file of {file_size} bytes", offset=0, hint="truncated header")
    magic, version, code, count = PREAMBLE.unpack_from(head)
    if magic != MAGIC:
        raise FormatError(path, "magic", repr(MAGIC), repr(magic), offset=0,
                          hint="not an MMIDIDX index; Megatron's older 'cached'/'lazy' "
                               "formats and fairseq's Huffman format are not supported")
    if version != VERSION:
        raise FormatError(path, "version", VERSION, version, offset=_VERSION_OFFSET)

    fairseq_size = FAIRSEQ_HEADER_SIZE + _PER_SEQUENCE * count
    if file_size == fairseq_size:
        flavour, documents, multimodal = Flavour.FAIRSEQ, None, False
    else:
        documents = None
        if file_size >= MEGATRON_HEADER_SIZE and len(head) >= MEGATRON_HEADER_SIZE:
            (documents,) = DOCUMENT_COUNT.unpack_from(head, PREAMBLE.size)
            megatron_size = MEGATRON_HEADER_SIZE + _PER_SEQUENCE * count + _PER_DOCUMENT * documents
        if documents is not None and file_size in (megatron_size, megatron_size + count):
            flavour, multimodal = Flavour.MEGATRON, file_size != megatron_size
        else:
            expected = f"{fairseq_size} bytes (fairseq flavour, N={count})"
            hint = ("the sequence/document counts in the header do not match the file size; the file is "
                    "truncated or the counts are damaged")
            if documents is not None:
                expected += f" or {megatron_size} bytes (Megatron flavour, N={count}, D={documents})"
            else:  # the file ends before a Megatron header's document count: no Megatron size to offer
                expected += f" or at least {MEGATRON_HEADER_SIZE} bytes (Megatron flavour, whose header ends there)"
                hint = (f"a Megatron .idx cut at {file_size} bytes, inside its {MEGATRON_HEADER_SIZE}-byte header, "
                        "or a fairseq .idx whose size does not match its count: the file is truncated")
            raise FormatError(path, "file size", expected, f"{file_size} bytes", hint=hint)

    table = DTYPE_TABLES[flavour]
    if code not in table:
        raise FormatError(path, "dtype code", f"one of {sorted(table)} ({flavour.value} flavour)",
                          code, offset=_DTYPE_CODE_OFFSET)
    return Header(flavour, np.dtype(table[code]).newbyteorder("<"), code, count, documents, multimodal)


# Sequences validated per step on open: bounds the temporaries (~36 bytes a sequence) to ~9 MiB.
_VALIDATE_CHUNK = 1 << 18
# Once the lengths are copied, where each sequence starts is kept as the start of its block of
# 2**_BLOCK_BITS sequences (int64) plus its distance from there (uint32): 4 bytes a sequence
# instead of the index's 8, for two fancy indexes a read (a start computed from the lengths at
# each read costs ~10 us more per call: benchmarks/bench_format.py).
_BLOCK_BITS = 8
# An index of at most this many sequences keeps a copy of its lengths (and the starts made
# from them) from its first read on: 8 MiB at most, and a read indexes arrays. A larger one
# reads, at each read, the pointers of the .idx its pieces need (one gather, _spans_of):
# a copy of its lengths would be 4 bytes a sequence in every rank (0.8 GB at 200M), and a
# copy kept in the index cache would make that cache larger than megatron-core's (issue 43).
_COPY_BELOW = KEPT_LENGTHS


def _first_off_running_offsets(pointers: np.ndarray, lengths: np.ndarray, start: int, itemsize: int) -> int | None:
    """The first ``k`` where ``pointers[k]`` is not ``start + itemsize * sum(lengths[:k])``, or
    None. Checked as steps (each pointer's step from the one before is its predecessor's
    length in bytes) rather than against a running sum: numpy's cumsum goes one element at a
    time, a difference many at once (for 200M sequences, 1.3-1.4 s against 2.1-2.3 s on a
    machine of L3 105 MiB: docs/benchmarks.md). The two agree exactly, wrap-around included:
    with the first pointer right, steps equal modulo 2^64 make pointers equal modulo 2^64."""
    if len(pointers) == 0:
        return None
    if pointers[0] != start:
        return 0
    steps = np.diff(pointers)
    sizes = lengths[:-1].astype(np.int64)
    sizes *= itemsize
    if np.array_equal(steps, sizes):
        return None
    return first_bad(steps != sizes) + 1


class IndexedFile:
    """One validated ``.bin``/``.idx`` pair.

    Token access (``read_pieces``, ``sequence``, ``document``) returns arrays of its own,
    copied from the memory-mapped ``.bin`` (fetched when read remotely).

    Open with :meth:`open`; pass ``opener`` (an ``open``-like callable, e.g. the one
    ``datasets`` patches for streaming, or ``fsspec.open``) to read anything that is not
    a local path.

    Memory and truncation. A mapped file truncated while in use kills the process with
    SIGBUS at the next read of a lost page, and no check before a read can rule that out;
    so neither file is read through its map: every read is a copy the kernel makes and
    reports a lost page to (mapped.py), a FormatError. Opening validates the index in bounded
    chunks and keeps nothing per sequence, so an index of 2**28 sequences opens in a few MiB.
    :attr:`sequence_lengths` is a copy (4 bytes a sequence: building sampling indices reads all
    of them), kept for an index of up to ``_COPY_BELOW`` sequences, with the starts of the
    sequences made from it (see ``_BLOCK_BITS``); a larger index makes it anew when asked and
    keeps none. Reads (:attr:`lengths_view`) use the kept copy, or fetch just the entries of
    their pieces. Pointers and document indices are copies made when asked.
    """

    def __init__(self, prefix: str, header: Header, index, bin_reader: BinReader, idx_path: str, bin_path: str,
                 cache_dir: str | None = None):
        self.prefix = prefix
        self.cache_dir = cache_dir
        self.idx_path = idx_path
        self.bin_path = bin_path
        self.header = header
        self.idx_size = index.size
        self.bin_size = bin_reader.size
        self._bin = bin_reader
        self._index = index  # storage.mapped.MappedFile, or storage.bin_readers.IndexInMemory for a remote .idx
        n = header.num_sequences
        self._lengths_at = header.size
        self._pointers_at = self._lengths_at + LENGTH_DTYPE.itemsize * n
        self._documents_at = self._pointers_at + POINTER_DTYPE.itemsize * n
        documents = header.document_count if header.flavour is Flavour.MEGATRON else 0
        self._modes_at = self._documents_at + DOCUMENT_INDEX_DTYPE.itemsize * documents
        self._lengths = None  # the kept copy (_COPY_BELOW), made by sequence_lengths
        self._block_starts = self._offsets = None  # where sequences start (_BLOCK_BITS), made after it
        self._spans_memo = None  # _spans_of's last answer
        # What opening_record found or recorded: the lengths' fingerprint (provenance).
        self.lengths_fingerprint = None
        # array_cache.array_digest of the lengths, made as the validation reads them or taken
        # from the record: what sampling indices are keyed by, with no pass over the lengths.
        self.lengths_digest = None
        record = opening_record(self, cache_dir) if cache_dir is not None else None
        if record is not None and record.load():
            self._num_tokens = record.num_tokens
        else:
            self._num_tokens = self._validate(keep_lengths=n <= _COPY_BELOW)
            if record is not None:
                record.save()
        self.identities = (index.identity, getattr(bin_reader, "identity", None) or file_identity(bin_path))
        self.identity = combined_identity("mmidx", list(self.identities))
        # What the lengths (and so the sampling indices) come from: the .idx alone. A write to
        # the .bin that keeps its size changes no length; one that changes its size is refused
        # above (the size is checked against the index's token count at every open).
        self.lengths_identity = combined_identity("mmidx-index", [self.identities[0]])

    @property
    def remote(self) -> bool:
        """Tokens are read over the network (remote.py): worth reading ahead."""
        return self._bin.remote

    @classmethod
    def open(cls, path: str | os.PathLike, *, opener: Callable[..., IO[bytes]] | None = None,
             idx_path: str | None = None, bin_path: str | None = None,
             expected_identities: tuple[str, str] | None = None, cache_dir: str | os.PathLike | None = None
             ) -> "IndexedFile":
        """Opens and validates ``PREFIX`` (or ``PREFIX.bin`` / ``PREFIX.idx``).

        ``cache_dir`` (local files only): validate the whole index once per file identity and
        keep its lengths and starts there as shared memory maps (:class:`OpeningRecord`);
        without it, every opening validates the whole index and copies the lengths.

        ``idx_path`` / ``bin_path`` override where the two files are read from, for
        downloads that lost their names. ``expected_identities`` (another opening's
        ``identities``) refuses local files replaced since. Raises :class:`FormatError`
        for anything malformed. A remote ``.bin`` (``hf://``, ``s3://``, ``https://``...) is
        read by remote.RemoteBinReader, through ``opener`` when it is a remote.RemoteAccess
        (storage options, block cache) and with default settings when no opener is given.
        """
        prefix = split_prefix(path)
        idx_path, bin_path = idx_path or prefix + ".idx", bin_path or prefix + ".bin"
        return cls._of_opened(prefix, open_pair(idx_path, bin_path, opener, expected_identities), idx_path,
                              bin_path, cache_dir)

    @classmethod
    def open_all(cls, pairs: list[tuple[str, str]], *, opener=None, cache_dir: str | os.PathLike | None = None
                 ) -> list["IndexedFile"]:
        """:meth:`open` of every ``(idx_path, bin_path)``, in order, the remote ones all at once:
        their sizes, then their indices, each one round trip for the lot (storage.pairs.open_pairs),
        where opening them one by one waited for each in turn."""
        return [cls._of_opened(split_prefix(idx_path), opened, idx_path, bin_path, cache_dir)
                for opened, (idx_path, bin_path) in zip(open_pairs(pairs, opener), pairs)]

    @classmethod
    def _of_opened(cls, prefix: str, opened: OpenedPair, idx_path: str, bin_path: str, cache_dir) -> "IndexedFile":
        head = min(opened.index.size, MEGATRON_HEADER_SIZE)
        header = parse_header(opened.index.read(0, head, np.uint8).tobytes(), opened.index.size, idx_path)
        index, reader = opened.index, opened.bin_reader(header.dtype)
        cache_dir = os.fspath(cache_dir) if cache_dir is not None else None
        return cls(prefix, header, index, reader, idx_path, bin_path, cache_dir)

    def __reduce__(self):
        # A copy in another process (spawn workers) maps the files again, and only the very
        # files this one opened: never the old index's numbers over a new .bin.
        # A remote reader's RemoteAccess (storage options, block cache) travels as its opener.
        opener = getattr(self._bin, "_opener", None) or getattr(self._bin, "access", None)
        return (_reopen, (self.prefix, self.idx_path, self.bin_path, opener,
                          self.identities if opener is None else None, self.cache_dir))

    def _table(self, offset: int, dtype: np.dtype, begin: int, end: int) -> np.ndarray:
        """Items ``begin:end`` of the index's table of ``dtype`` at byte ``offset``, for a pass
        over the whole table: read past the map where the index can (MappedFile.read_through),
        so that a pass leaves none of the file's pages in this process's resident memory."""
        read = getattr(self._index, "read_through", self._index.read)
        return read(offset + dtype.itemsize * begin, end - begin, dtype)

    def _validate(self, keep_lengths: bool = False) -> int:
        """Checks the whole index, a chunk of sequences at a time; returns the token count and
        sets :attr:`lengths_digest` and :attr:`lengths_fingerprint`. ``keep_lengths``: the lengths read are kept as
        :attr:`sequence_lengths`'s copy."""
        h, itemsize = self.header, self.dtype.itemsize
        tokens = 0  # before the chunk
        previous = None  # the last pointer of the chunk before, for the message
        kept = np.empty(h.num_sequences, LENGTH_DTYPE) if keep_lengths else None
        digest = array_cache.digest_of_parts(LENGTH_DTYPE, (h.num_sequences,))
        fingerprint = Fingerprint(h.num_sequences)
        # A bar for an index that takes a while (a billion sequences: a minute), once it has.
        shown = progress.bar(total=h.num_sequences, delay=progress.Steps.DELAY_SECONDS, unit=" sequences",
                             unit_scale=True, desc=f"{self.prefix}: checking the index", leave=False,
                             ) if h.num_sequences > _COPY_BELOW else None
        for begin in range(0, h.num_sequences, _VALIDATE_CHUNK):
            end = min(begin + _VALIDATE_CHUNK, h.num_sequences)
            if shown is not None:
                shown.update(end - begin)
            chunk = self._table(self._lengths_at, LENGTH_DTYPE, begin, end)
            digest.update(chunk.data)
            fingerprint.update(chunk[-begin % fingerprint.step::fingerprint.step])
            if kept is not None:
                kept[begin:end] = chunk
            if chunk.min() < 0:
                i = begin + first_bad(chunk < 0)
                raise FormatError(self.idx_path, f"sequence_lengths[{i}]", "a length >= 0", int(chunk[i - begin]),
                                  offset=self._lengths_at + 4 * i)
            # Pointers must be the running byte offsets of the lengths, starting at 0: that is
            # what both writers produce, and it keeps every read inside the .bin.
            found = self._table(self._pointers_at, POINTER_DTYPE, begin, end)
            k = _first_off_running_offsets(found, chunk, tokens * itemsize, itemsize)
            if k is not None:
                expected = (np.cumsum(chunk[:k + 1], dtype=np.int64) - chunk[:k + 1] + tokens) * itemsize
                i = begin + k
                before = found[k - 1] if k else previous
                hint = ("pointers are not increasing" if i and found[k] < before
                        else "the pointer step does not match the previous sequence's length")
                hint += f"; read as the {h.flavour.value} flavour, whose size the file has"
                raise FormatError(self.idx_path, f"sequence_pointers[{i}]", int(expected[k]), int(found[k]),
                                  offset=self._pointers_at + 8 * i, hint=hint)
            previous = found[-1]
            tokens += int(chunk.sum(dtype=np.int64))
        if shown is not None:
            shown.close()
        if self.bin_size != tokens * itemsize:
            raise FormatError(self.bin_path, "file size",
                              f"{tokens * itemsize} bytes ({tokens} tokens of {self.dtype.name} "
                              f"as {self.idx_path} says)", f"{self.bin_size} bytes")
        if h.flavour is Flavour.MEGATRON:
            self._validate_documents(h.document_count)
        if kept is not None:
            kept.flags.writeable = False
            self._lengths = kept
        self.lengths_digest = digest.hexdigest()
        self.lengths_fingerprint = fingerprint.result(tokens)
        return tokens

    def _validate_documents(self, count: int) -> None:
        at = self._documents_at
        if count == 0:
            raise FormatError(self.idx_path, "document count", "at least 1 (documents + 1)", 0, offset=PREAMBLE.size)
        last = None  # the last entry of the chunk before
        for begin in range(0, count, _VALIDATE_CHUNK):
            chunk = self._table(at, DOCUMENT_INDEX_DTYPE, begin, min(begin + _VALIDATE_CHUNK, count))
            if begin == 0 and chunk[0] != 0:
                raise FormatError(self.idx_path, "document_indices[0]", 0, int(chunk[0]), offset=at)
            steps = chunk if last is None else np.concatenate(([last], chunk))
            falling = steps[1:] < steps[:-1]
            if falling.any():
                k = first_bad(falling)
                i = begin + k + (0 if last is None else -1) + 1
                raise FormatError(self.idx_path, f"document_indices[{i}]",
                                  f">= document_indices[{i - 1}] = {int(steps[k])}", int(steps[k + 1]),
                                  offset=at + 8 * i, hint="not increasing")
            last = chunk[-1]
        if last != self.num_sequences:
            raise FormatError(self.idx_path, f"document_indices[{count - 1}]",
                              f"the sequence count {self.num_sequences}", int(last),
                              offset=at + 8 * (count - 1), hint="document index out of range")

    # --- the index's arrays: copies, never views of the mapped file ---------------------
    @property
    def sequence_lengths(self) -> np.ndarray:
        """Tokens per sequence (int32, read-only): a copy of the index's, kept for an index of
        up to ``_COPY_BELOW`` sequences, made anew at each call for a larger one (reads take
        :attr:`lengths_view`, which needs no copy)."""
        if self._lengths is None:
            lengths = self._table(self._lengths_at, LENGTH_DTYPE, 0, self.num_sequences)
            # The file may have been rewritten in place since it was validated: the lengths
            # must still be those that keep every read inside the .bin.
            if len(lengths) and (lengths.min() < 0 or int(lengths.sum(dtype=np.int64)) != self._num_tokens):
                raise self._lengths_rewritten()
            lengths.flags.writeable = False
            if self.num_sequences > _COPY_BELOW:
                return lengths
            self._lengths = lengths
        return self._lengths

    def spilled_lengths(self, folder: str) -> np.ndarray:
        """:attr:`sequence_lengths` for a build of sampling indices, without 4 bytes a sequence
        of this process's memory for a large index: copied a chunk at a time into a file of
        ``folder`` that is mapped read-only and unlinked at once (file pages the kernel writes
        back and drops as it needs; nothing is left behind, whatever ends the process)."""
        if self._lengths is not None or self.num_sequences <= _COPY_BELOW:
            return self.sequence_lengths
        path = temporary_path(os.path.join(folder, "lengths.npy"))
        try:
            os.makedirs(folder, exist_ok=True)
            with open(path, "wb") as f:
                intact = self._copy_lengths_to(f)
            lengths = np.memmap(path, LENGTH_DTYPE, "r", shape=(self.num_sequences,)) if intact else None
        except OSError as error:  # a folder that takes no file, or no more: the copy in memory
            warn_once(f"lengths of {self.idx_path} copied in memory, not in {folder}: {error}", stacklevel=3)
            return self.sequence_lengths
        finally:
            remove_quietly(path)
        if lengths is None:
            raise self._lengths_rewritten()
        return lengths

    def _lengths_rewritten(self) -> FormatError:
        return FormatError(self.idx_path, "sequence_lengths", f"lengths >= 0 adding up to the {self._num_tokens} "
                           "tokens validated on open", "other lengths", offset=self._lengths_at,
                           hint="the index was rewritten while in use; reopen it")

    def _copy_lengths_to(self, f) -> bool:
        """Writes the lengths to ``f`` a chunk at a time; False when they are not those validated
        on open (a negative one, or another total: the file was rewritten in place since)."""
        total = 0
        for begin in range(0, self.num_sequences, _VALIDATE_CHUNK):
            chunk = self._table(self._lengths_at, LENGTH_DTYPE, begin, min(begin + _VALIDATE_CHUNK, self.num_sequences))
            if chunk.min() < 0:
                return False
            total += int(chunk.sum(dtype=np.int64))
            f.write(chunk.data)
        return total == self._num_tokens

    @property
    def lengths_view(self):
        """The lengths as reads index them (``len()`` and ``[ids]``): the kept copy, made here
        for an index of up to ``_COPY_BELOW`` sequences, else the ``.idx``'s entries read as
        asked (no copy of 4 bytes a sequence)."""
        if self._lengths is None and self.num_sequences <= _COPY_BELOW:
            self.sequence_lengths  # noqa: B018 - made and kept
        return self._lengths if self._lengths is not None else _LengthEntries(self)

    @property
    def sequence_pointers(self) -> np.ndarray:
        """Byte offset of each sequence in the ``.bin`` (int64, a new array)."""
        return self._table(self._pointers_at, POINTER_DTYPE, 0, self.num_sequences)

    @property
    def document_indices(self) -> np.ndarray:
        """Sequence ids where documents start, then the sequence count (int64, a new array;
        for fairseq, one sequence per document, ``0..N``)."""
        if self.flavour is not Flavour.MEGATRON:
            return np.arange(self.num_sequences + 1, dtype=np.int64)
        return self._table(self._documents_at, DOCUMENT_INDEX_DTYPE, 0, self.header.document_count)

    @property
    def sequence_modes(self) -> np.ndarray | None:
        """Multimodal Megatron indexes only: the mode of each sequence (a new array)."""
        if not self.header.multimodal:
            return None
        return self._table(self._modes_at, MODE_DTYPE, 0, self.num_sequences)

    @property
    def sequence_starts(self) -> np.ndarray:
        """Token position of each sequence start, then the token count (int64, a new array of
        ``N + 1``: reads compute the starts they need instead)."""
        starts = np.zeros(self.num_sequences + 1, np.int64)
        np.cumsum(self.sequence_lengths, out=starts[1:])
        return starts

    def _spans_of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(starts, lengths) in tokens of sequences ``ids`` (int64, each in [0, N)) from the
        ``.idx``'s pointers: each sequence's pointer and the next (or the ``.bin``'s end), one
        16-byte run a sequence, so a table's lengths (sample_pieces, then read_pieces' check)
        and starts are one gather. The last call's answer is kept for a call with the same
        ids. None for an index read whole in memory (a remote one: its entries cost nothing)."""
        if not isinstance(self._index, MappedFile):
            return None
        memo = self._spans_memo
        if memo is not None and memo[0].shape == ids.shape and np.array_equal(memo[0], ids):
            return memo[1], memo[2]
        n, itemsize = self.num_sequences, self.dtype.itemsize
        count = len(ids)
        pointers = np.empty((count, 2), POINTER_DTYPE)
        pointers[:, 1] = self._num_tokens * itemsize  # the .bin's end, for the last sequence
        runs = np.full(count, 16, np.int64)
        runs[ids == n - 1] = 8  # no pointer after the last one (a fairseq .idx ends there)
        gather([self._index], None, self._pointers_at + 8 * ids, runs, pointers, np.arange(count, dtype=np.int64) * 16)
        # Pointers that a write in place changed may still lie inside the .bin (checked below
        # only as far as that goes): any write to the .idx since it was opened is refused.
        now = self._index.identity_now()
        if now != self._index.identity:
            raise FormatError(self.idx_path, "file", f"the index opened as {self._index.identity}", now,
                              hint="the index was rewritten while in use; reopen it")
        begins, ends = pointers[:, 0], pointers[:, 1]
        bad = (begins % itemsize != 0) | (ends % itemsize != 0) | (begins < 0) | (begins > ends) | (
            ends > self._num_tokens * itemsize)
        if bad.any():  # validated on open: the file was rewritten in place since
            k = first_bad(bad)
            raise FormatError(self.idx_path, f"sequence_pointers[{int(ids[k])}]", "the pointer validated on open",
                              int(begins[k]), offset=self._pointers_at + 8 * int(ids[k]),
                              hint="the index was rewritten while in use; reopen it")
        starts = begins // itemsize
        lengths = (ends - begins) // itemsize
        self._spans_memo = (ids.copy(), starts, lengths)
        return starts, lengths

    def _starts_of(self, ids: np.ndarray) -> np.ndarray:
        """Token positions where sequences ``ids`` (int64, each < N) start."""
        if self._lengths is None:  # no copy: the pointers of just these sequences
            spans = self._spans_of(ids)
            if spans is not None:
                return spans[0].copy()  # the caller adds to it
            pointers = self._index.entries(self._pointers_at, POINTER_DTYPE, ids)
            starts = pointers // self.dtype.itemsize
            bad = (pointers % self.dtype.itemsize != 0) | (starts < 0) | (starts > self._num_tokens)
            if bad.any():  # validated on open: the file was rewritten in place since
                k = first_bad(bad)
                raise FormatError(self.idx_path, f"sequence_pointers[{int(ids[k])}]", "the pointer validated on open",
                                  int(pointers[k]), offset=self._pointers_at + 8 * int(ids[k]),
                                  hint="the index was rewritten while in use; reopen it")
            return starts
        if self._offsets is None:  # made at the first read after the copy (inspect needs none)
            self._block_starts, self._offsets = _block_starts(self._lengths)
        starts = self._block_starts[ids >> _BLOCK_BITS]
        starts += self._offsets[ids]
        return starts

    def tokens_between(self, begin: int, end: int) -> int:
        """Tokens in sequences ``begin:end`` (0 <= begin <= end <= N), from where they start
        (both starts in one read of the .idx; the start of N is the token count)."""
        if begin >= end:
            return 0
        inside = [sequence for sequence in (begin, end) if sequence < self.num_sequences]
        starts = self._starts_of(np.array(inside, np.int64)).tolist() + [self._num_tokens]
        return int(starts[1] - starts[0])

    def _start_of(self, sequence: int) -> int:
        """Token position where sequence ``sequence`` starts (the token count for N)."""
        if sequence >= self.num_sequences:
            return self._num_tokens
        return int(self._starts_of(np.array([sequence], np.int64))[0])

    # --- sizes -----------------------------------------------------------------------
    @property
    def flavour(self) -> Flavour:
        return self.header.flavour

    @property
    def dtype(self) -> np.dtype:
        return self.header.dtype

    @property
    def num_sequences(self) -> int:
        return self.header.num_sequences

    @property
    def num_documents(self) -> int:
        return self.num_sequences if self.flavour is not Flavour.MEGATRON else self.header.document_count - 1

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    def document_lengths(self) -> np.ndarray:
        """Tokens per document (a document is a run of sequences): int64, or for fairseq (one
        sequence a document) the int32 lengths themselves. Megatron's are made a chunk of
        documents at a time from the pointers where they start: ``mmidx inspect`` of a
        2**28-sequence index must not need gigabytes beyond its answer."""
        if self.flavour is not Flavour.MEGATRON:
            return self.sequence_lengths
        out = np.empty(self.num_documents, np.int64)
        count, itemsize = self.header.document_count, self.dtype.itemsize
        for begin in range(0, len(out), _VALIDATE_CHUNK):
            chunk = self._table(self._documents_at, DOCUMENT_INDEX_DTYPE, begin, min(begin + _VALIDATE_CHUNK + 1, count))
            bounds = np.full(len(chunk), self._num_tokens * itemsize, np.int64)
            inside = chunk < self.num_sequences
            bounds[inside] = self._index.entries(self._pointers_at, POINTER_DTYPE, chunk[inside])
            np.floor_divide(np.diff(bounds), itemsize, out=out[begin:begin + len(chunk) - 1])
        return out

    # --- tokens ----------------------------------------------------------------------
    def sequence(self, i: int) -> np.ndarray:
        """The tokens of sequence ``i``."""
        i = _check_index(i, self.num_sequences, "sequence", self.idx_path)
        return self.read_pieces([i], [0], [self._lengths_of(np.array([i]))[0]])

    def document(self, i: int) -> np.ndarray:
        """The tokens of document ``i``: its sequences, which are contiguous in ``.bin``."""
        i = _check_index(i, self.num_documents, "document", self.idx_path)
        first, last = i, i + 1  # fairseq: one sequence per document
        if self.flavour is Flavour.MEGATRON:
            first, last = self._index.entries(self._documents_at, DOCUMENT_INDEX_DTYPE, [i, i + 1]).tolist()
            if not 0 <= first <= last <= self.num_sequences:  # validated on open: rewritten since
                raise FormatError(self.idx_path, f"document_indices[{i}:{i + 2}]", "the entries validated on open",
                                  [first, last], offset=self._documents_at + 8 * i,
                                  hint="the index was rewritten while in use; reopen it")
        begin, end = self._start_of(first), self._start_of(last)
        if not 0 <= begin <= end <= self._num_tokens:
            raise FormatError(self.idx_path, f"document {i}", "a token range inside the .bin", [begin, end],
                              hint="the index was rewritten while in use; reopen it")
        return self._bin.read(begin, end - begin)

    def _lengths_of(self, ids) -> np.ndarray:
        if self._lengths is not None:
            return self._lengths[ids]
        ids = np.asarray(ids, np.int64)
        if ids.ndim == 1 and len(ids) and ids.min() >= 0 and ids.max() < self.num_sequences:
            spans = self._spans_of(ids)
            if spans is not None:
                return spans[1].copy()  # the memo's own stays as read
        return self._index.entries(self._lengths_at, LENGTH_DTYPE, ids)

    def read_pieces(self, sequence_ids, offsets, lengths, out: np.ndarray | None = None) -> np.ndarray:
        """Tokens ``offsets[k] : offsets[k] + lengths[k]`` of sequence ``sequence_ids[k]``,
        for every k, concatenated into one 1-D array (``out`` if given).

        One vectorised bounds check, then one gather; never reads outside a sequence.
        """
        sequence_ids, offsets, lengths, out = check_pieces(
            self.lengths_view, sequence_ids, offsets, lengths, out, self.dtype, lambda k: f"sequence {k} of {self.idx_path}")
        starts = self._starts_of(sequence_ids)
        if self._lengths is None:  # lengths read from the file now: the pieces must still fit the .bin
            bad = starts > self._num_tokens - offsets - lengths
            if bad.any():
                k = first_bad(bad)
                raise FormatError(self.idx_path, f"sequence {int(sequence_ids[k])}", "a sequence inside the .bin",
                                  f"tokens from {int(starts[k])} of {self._num_tokens}",
                                  hint="the index was rewritten while in use; reopen it")
        starts += offsets
        self._bin.gather(starts, lengths, out)
        return out

    def __repr__(self) -> str:
        return (f"IndexedFile({self.prefix!r}, flavour={self.flavour.value}, dtype={self.dtype.name}, "
                f"sequences={self.num_sequences}, documents={self.num_documents}, tokens={self.num_tokens})")


def _block_starts(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start of each block of 2**_BLOCK_BITS sequences, each sequence's distance from its
    block's start): uint32 distances, or int64 in the rare index where a block spans 2**32
    tokens or more. Made a chunk at a time: no temporary of 8 bytes a sequence."""
    count, size = len(lengths), 1 << _BLOCK_BITS
    block_starts = np.zeros(-(-count // size), np.int64)
    offsets = np.empty(count, np.uint32)
    before = 0  # tokens before the chunk
    step = size << 10  # sequences per chunk: whole blocks
    for begin in range(0, count, step):
        chunk = lengths[begin:begin + step]
        blocks = -(-len(chunk) // size)
        if len(chunk) % size:  # the last block, short: zeros after it change no start
            chunk = np.concatenate((chunk, np.zeros(blocks * size - len(chunk), chunk.dtype)))
        # One row a block: the starts within a block are a running sum along its row.
        grid = chunk.reshape(blocks, size)
        within = np.cumsum(grid, axis=1, dtype=np.int64)
        totals = within[:, -1].copy()
        within -= grid
        if within[:, -1].max() > np.iinfo(np.uint32).max:  # a row's last start is its largest
            offsets = np.zeros(count, np.int64)
            np.cumsum(lengths[:-1], dtype=np.int64, out=offsets[1:])
            return np.zeros_like(block_starts), offsets
        stop = min(begin + step, count)
        offsets[begin:stop] = within.reshape(-1)[:stop - begin]
        first_blocks = block_starts[begin // size:begin // size + blocks]
        np.cumsum(totals, out=first_blocks)
        first_blocks -= totals
        first_blocks += before
        before += int(totals.sum())
    return block_starts, offsets


class _LengthEntries:
    """The sequence lengths of an index whose copy is not made, read entry by entry: what
    :func:`~mmidx_builder.source.check_pieces` needs for a few pieces of a large index."""

    def __init__(self, indexed: IndexedFile):
        self._indexed = indexed

    def __len__(self) -> int:
        return self._indexed.num_sequences

    def __getitem__(self, ids):
        return self._indexed._lengths_of(ids)


def _reopen(prefix, idx_path, bin_path, opener, identities, cache_dir=None) -> IndexedFile:
    return IndexedFile.open(prefix, opener=opener, idx_path=idx_path, bin_path=bin_path,
                            expected_identities=identities, cache_dir=cache_dir)


# Bump when what an opening record holds changes. 2: its arrays packed in one file.
# 3: keyed by the .idx's identity alone (the .bin's size is checked at each load).
# 4: no arrays (the lengths and starts are the .idx's own), the lengths' digest instead.
_RECORD_FORMAT = 4


RECORD_PREFIX = "opened-"


def record_key(idx_stat: os.stat_result) -> str:
    """The key of the record of an ``.idx`` with this stat (OpeningRecord)."""
    return hashlib.sha256(f"{_RECORD_FORMAT}|{array_cache._signature(idx_stat)}".encode()).hexdigest()[:32]


def opening_record(indexed: "IndexedFile", cache_dir: str) -> "OpeningRecord | None":
    """The record of this pair's validation in ``cache_dir``, for a local pair (None otherwise)."""
    if not isinstance(indexed._index, MappedFile) or not isinstance(indexed._bin, MemmapBinReader):
        return None
    return OpeningRecord(indexed, cache_dir)


class OpeningRecord:
    """A pair validated once per file identity, its arrays shared by every process.

    The whole-index validation (every length and pointer, every document index: O(N) reads of
    the ``.idx``) runs once for a given identity of the ``.idx``: device, inode, size, mtime and
    ctime in ns (the path is not in it: another spelling of the same file finds the record; the
    ``.bin`` is not in it either: nothing recorded is read from it, and its size is checked
    against the recorded token count at every load). Its outcome is written into the index
    cache beside the sampling indices: one small meta file (array_cache, with no arrays) of the
    header's numbers, the token count, the lengths' fingerprint and digest. No array is kept:
    the lengths and starts are the ``.idx``'s own, read entry by entry as reads need them, so
    the cache holds what megatron-core's holds and no more. A later opening of files with that
    identity checks the header against the record and the ``.bin``'s size against the token
    count, and reads nothing else of the ``.idx``.

    What is trusted, and why: an in-place rewrite of the ``.idx`` moves its ctime (no user tool
    can set it back), so it has another identity and is validated again; a record is written only
    for an ``.idx`` whose last change is array_cache.SETTLE_SECONDS old (a rewrite within the
    clock tick of the validation would keep the identity). The ``.bin`` is still read as before
    (mapped.py: a truncation is a FormatError, never SIGBUS); the cached arrays are our own files,
    replaced only by rename (docs/reliability.md says what that does not cover).
    """

    def __init__(self, indexed: "IndexedFile", cache_dir: str):
        self.indexed = indexed
        self.cache_dir = cache_dir
        idx_stat = indexed._index.stat()
        self._idx_stat = idx_stat
        # Keyed by the .idx alone: what is recorded (the header's numbers, the lengths, the
        # starts) is read from it. The .bin is checked against it at every load (its size
        # against the token count), so a write to the .bin that keeps its size validates
        # nothing again, and one that does not is refused (load).
        key = record_key(idx_stat)
        self.meta_path = os.path.join(cache_dir, f"{RECORD_PREFIX}{key}-meta.json")
        self.num_tokens = None

    def _expected_fields(self) -> dict:
        h = self.indexed.header
        return {"format": _RECORD_FORMAT, "flavour": h.flavour.value, "dtype_code": h.dtype_code,
                "num_sequences": h.num_sequences, "document_count": h.document_count, "multimodal": h.multimodal,
                "idx_size": self.indexed.idx_size}

    def load(self) -> bool:
        """Takes the record when there is one for these files (True), else leaves all as it is."""
        if not os.path.isfile(self.meta_path):
            return False
        loaded = array_cache.load_arrays(self.meta_path, {})
        if loaded is None:
            return False
        fields, _ = loaded
        if ({k: fields.get(k) for k in self._expected_fields()} != self._expected_fields()
                or not isinstance(fields.get("num_tokens"), int) or not isinstance(fields.get("fingerprint"), dict)
                or not isinstance(fields.get("lengths_digest"), str)):
            return False
        num_tokens = fields["num_tokens"]
        indexed = self.indexed
        if indexed.bin_size != num_tokens * indexed.dtype.itemsize:
            raise FormatError(indexed.bin_path, "file size",
                              f"{num_tokens * indexed.dtype.itemsize} bytes ({num_tokens} tokens of "
                              f"{indexed.dtype.name} as {indexed.idx_path} says)", f"{indexed.bin_size} bytes")
        self.num_tokens = num_tokens
        indexed.lengths_fingerprint = fields["fingerprint"]
        indexed.lengths_digest = fields["lengths_digest"]
        return True

    def will_save(self) -> bool:
        """Whether :meth:`save` would write the record (the ``.idx`` is settled)."""
        return array_cache.settled(self._idx_stat)

    def save(self) -> None:
        """Records a validation that just passed (best effort: a cache that cannot be written
        leaves this opening as it was, with a warning)."""
        if not self.will_save():
            return  # changed within the last seconds: validate again next time
        indexed = self.indexed
        # idx_path: which file the record is of, for `mmidx cache` (megatron/cache_folder.py)
        # to tell whether any file still has the identity it is keyed by.
        fields = {**self._expected_fields(), "num_tokens": indexed.num_tokens,
                  "fingerprint": indexed.lengths_fingerprint, "lengths_digest": indexed.lengths_digest,
                  "idx_path": os.path.abspath(indexed.idx_path)}
        try:
            array_cache.save_arrays(self.meta_path, {}, {}, fields)
        except OSError as error:
            warn_once(f"index of {indexed.idx_path} not recorded in {self.cache_dir}: {error}", stacklevel=4)


def _check_index(i: int, count: int, what: str, path: str) -> int:
    i = int(i)
    if i < 0:
        i += count
    if not 0 <= i < count:
        raise ParameterError(f"{path}: {what} {i} out of range: the file has {count} {what}s")
    return i


def _check_sequence_lengths(lengths: Sequence[int]) -> None:
    # The index stores lengths as int32; a longer sequence would wrap silently (megatron-core's
    # writer raises OverflowError there). Split such a document into several sequences.
    longest = max(lengths, default=0)
    if longest > np.iinfo(LENGTH_DTYPE).max:
        raise ParameterError(f"a sequence of {longest} tokens does not fit the index's int32 length field "
                             f"(at most {np.iinfo(LENGTH_DTYPE).max}); split the document into sequences")


def remove_stale_temporaries(prefix: str) -> list[str]:
    """Removes temporary files that a killed writer of ``prefix`` left (its process is gone);
    returns their paths. Current writers use hidden names; older ones wrote visible ones."""
    folder, name = os.path.split(prefix)
    names = [name + ext for ext in (".bin", ".idx")]
    # A name near NAME_MAX takes a cut and hashed temporary stem (storage.files.temporary_stem): those too.
    stems = [os.path.basename(temporary_stem(os.path.join(folder, n)))[1:] for n in names]
    return remove_stale_files(folder, tuple(dict.fromkeys(glob.escape(n) for n in names + stems)))


class IndexedFileWriter:
    """Writes a ``.bin``/``.idx`` pair, byte-identical to megatron-core's
    ``IndexedDatasetBuilder`` (or fairseq's ``MMapIndexedDatasetBuilder``) for the same
    documents and dtype.

    Both files are written under hidden temporary names and renamed only by :meth:`close`
    (an old ``.idx`` and provenance sidecar removed first, the new ``.idx`` renamed last), so
    an interrupted write never leaves a pair that looks valid, and a killed writer's
    leftovers are invisible to loading and removed by the next writer of the same prefix.
    The writer holds a :class:`~mmidx_builder.storage.files.WriterLock` on the prefix from start to
    close: a second writer of the same prefix is refused with ``ConcurrentWriteError``
    (pass ``lock`` to write under a lock the caller already holds)::

        with IndexedFileWriter("out/corpus_text_document", vocab_size=50257) as w:
            w.add_document([1, 2, 3])
            w.add_document([4, 5, 6, 7], sequence_lengths=[2, 2])
    """

    def __init__(self, prefix: str | os.PathLike, *, dtype=None, vocab_size: int | None = None,
                 flavour: Flavour | str = Flavour.MEGATRON, lock: WriterLock | None = None):
        self.prefix = split_prefix(prefix)
        self.flavour = Flavour(flavour)
        if dtype is None:
            if vocab_size is None:
                raise ParameterError("give the writer a dtype or a vocab_size to choose one from")
            dtype = writer_dtype(vocab_size, self.flavour)
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self._code = dtype_code(self.dtype, self.flavour)
        self._lengths = array.array("q")
        self._document_indices = array.array("q", [0])
        parent = os.path.dirname(self.prefix)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._own_lock = None if lock is not None else WriterLock(self.prefix)
        self._closed = False
        try:
            remove_stale_temporaries(self.prefix)
            self._bin_tmp = temporary_path(self.prefix + ".bin")
            self._idx_tmp = temporary_path(self.prefix + ".idx")
            self._bin = open(self._bin_tmp, "wb")
        except BaseException:
            self._release()
            raise

    def add_sequence(self, tokens: Sequence[int] | np.ndarray) -> None:
        """Appends one sequence to the current document (Megatron's ``add_item``)."""
        data = self._as_tokens(tokens)
        _check_sequence_lengths([data.size])
        self._bin.write(data.tobytes())
        self._lengths.append(data.size)

    def end_document(self) -> None:
        """Closes the current document (it may hold no sequence)."""
        self._document_indices.append(len(self._lengths))

    def add_document(self, tokens: Sequence[int] | np.ndarray, sequence_lengths: Iterable[int] | None = None) -> None:
        """Appends one document, split into sequences of ``sequence_lengths`` if given."""
        data = self._as_tokens(tokens)
        lengths = [data.size] if sequence_lengths is None else [int(n) for n in sequence_lengths]
        if sum(lengths) != data.size or min(lengths, default=0) < 0:
            raise ParameterError(f"sequence_lengths {lengths} do not add up to the document's {data.size} tokens")
        _check_sequence_lengths(lengths)
        self._bin.write(data.tobytes())
        self._lengths.extend(lengths)
        self.end_document()

    def add_documents(self, tokens: np.ndarray, lengths) -> None:
        """Appends ``len(lengths)`` documents of one sequence each, document k the next
        ``lengths[k]`` ids of ``tokens`` (Megatron's ``add_item`` then ``end_document`` for
        each): one write for many short documents."""
        data = self._as_tokens(tokens)
        lengths = np.asarray(lengths, np.int64)
        if lengths.ndim != 1 or (len(lengths) and lengths.min() < 0) or int(lengths.sum()) != data.size:
            raise ParameterError(f"lengths (1-D, each >= 0) must add up to the {data.size} tokens given, got "
                                 f"{int(lengths.sum())}")
        _check_sequence_lengths([int(lengths.max())] if len(lengths) else [])
        self._bin.write(data.tobytes())
        base = len(self._lengths)
        self._lengths.frombytes(lengths.astype(np.int64).tobytes())
        self._document_indices.frombytes(np.arange(base + 1, base + len(lengths) + 1, dtype=np.int64).tobytes())

    def add_file(self, prefix: str | os.PathLike) -> None:
        """Appends every document of another pair (Megatron's ``add_index``, i.e. merge)."""
        other = IndexedFile.open(prefix)
        if other.dtype != self.dtype:
            raise ParameterError(f"{other.idx_path} holds {other.dtype.name} tokens but this writer writes "
                                 f"{self.dtype.name}; merge files of one dtype")
        base = len(self._lengths)
        self._lengths.extend(other.sequence_lengths.astype(np.int64).tolist())
        self._document_indices.extend((other.document_indices[1:] + base).tolist())
        with open(other.bin_path, "rb") as f:
            shutil.copyfileobj(f, self._bin)

    def _as_tokens(self, tokens) -> np.ndarray:
        if not isinstance(tokens, np.ndarray) and self.dtype.kind in "iu":
            # Straight to the file's dtype: np.asarray on a list of Python ints above 2**63
            # would pick float64 and lose the low bits without a word.
            try:
                tokens = np.asarray(tokens, dtype=self.dtype)
            except (OverflowError, ValueError, TypeError) as error:
                raise ParameterError(f"token ids do not fit {self.dtype.name} ({error}); "
                                     "give a larger dtype or the real vocab_size") from None
        data = np.asarray(tokens)
        if data.dtype.kind == "f" and self.dtype.kind in "iu" and data.size and not np.array_equal(data, np.trunc(data)):
            raise ParameterError(f"token ids must be whole numbers to be written as {self.dtype.name}, "
                                 f"found {data[data != np.trunc(data)][0]}")
        if data.ndim != 1:
            raise ParameterError(f"a sequence must be 1-D, got shape {data.shape}")
        if data.size and data.dtype.kind in "iu" and self.dtype.kind in "iu":
            info = np.iinfo(self.dtype)
            low, high = data.min(), data.max()
            if low < info.min or high > info.max:
                raise ParameterError(f"token ids {int(low)}..{int(high)} do not fit {self.dtype.name}; "
                                     "give a larger dtype or the real vocab_size")
        return data.astype(self.dtype, copy=False)

    def close(self) -> None:
        """Writes the index and renames both files into place."""
        if self._closed:
            return
        self._closed = True
        try:
            self._bin.close()
            with open(self._idx_tmp, "wb") as f:
                f.write(self._index_bytes())
            # Replacing a pair is two renames, and a crash between them must not leave a new
            # .bin beside the old .idx (same byte count: garbage that loads). So the old .idx
            # goes first: at every step the folder holds the old pair, a lone file (a clear
            # MissingPartnerError), or the new pair. The old provenance sidecar goes before
            # both: it describes the old tokens, and the new pair's sidecar (if any) is
            # written by the caller after this.
            remove_quietly(self.prefix + SIDECAR_SUFFIX)
            remove_quietly(self.prefix + ".idx")
            os.replace(self._bin_tmp, self.prefix + ".bin")
            os.replace(self._idx_tmp, self.prefix + ".idx")
        except BaseException:
            self.abort()
            raise
        self._release()

    def abort(self) -> None:
        """Deletes the temporary files; nothing is left at the final names. Safe when
        closing the file fails again (a full disk refuses the flush)."""
        self._closed = True
        try:
            self._bin.close()
        except OSError:
            pass
        finally:
            for path in (self._bin_tmp, self._idx_tmp):
                remove_quietly(path)
            self._release()

    def _release(self) -> None:
        if self._own_lock is not None:
            self._own_lock.release()

    def _index_bytes(self) -> bytes:
        lengths = np.frombuffer(self._lengths, np.int64) if len(self._lengths) else np.zeros(0, np.int64)
        pointers = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1], out=pointers[1:])
        pointers *= self.dtype.itemsize
        parts = [PREAMBLE.pack(MAGIC, VERSION, self._code, len(lengths))]
        if self.flavour is Flavour.MEGATRON:
            parts.append(DOCUMENT_COUNT.pack(len(self._document_indices)))
        parts += [lengths.astype(LENGTH_DTYPE).tobytes(), pointers.astype(POINTER_DTYPE).tobytes()]
        if self.flavour is Flavour.MEGATRON:
            parts.append(np.frombuffer(self._document_indices, np.int64).astype(DOCUMENT_INDEX_DTYPE).tobytes())
        return b"".join(parts)

    def __enter__(self) -> "IndexedFileWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_documents(prefix, documents: Iterable, **writer_options) -> str:
    """Writes ``documents`` (each a token list or array) as one pair; returns the prefix."""
    with IndexedFileWriter(prefix, **writer_options) as writer:
        for document in documents:
            writer.add_document(document)
    return writer.prefix
