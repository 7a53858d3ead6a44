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
"""

from __future__ import annotations

import array
import glob
import os
import shutil
import struct
import threading
from dataclasses import dataclass
from typing import IO, Callable, Iterable, Sequence

import numpy as np

from . import _io
from ._io import (TEMPORARY_MARK, WriterLock,  # noqa: F401  (TEMPORARY_MARK: tests read it here)
                  file_identity, map_readonly, not_a_regular_file, remove_quietly,
                  temporary_path, temporary_stem)
from .dtypes import DTYPE_TABLES, FAIRSEQ_DTYPES, MEGATRON_DTYPES, Flavour, dtype_code, smallest_dtype, writer_dtype  # noqa: F401
from .errors import FormatError, MissingPartnerError, ParameterError
from .source import check_pieces, combined_identity, first_bad

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
            if documents is not None:
                expected += f" or {megatron_size} bytes (Megatron flavour, N={count}, D={documents})"
            raise FormatError(path, "file size", expected, f"{file_size} bytes",
                              hint="the sequence/document counts in the header do not match "
                                   "the file size; the file is truncated or the counts are damaged")

    table = DTYPE_TABLES[flavour]
    if code not in table:
        raise FormatError(path, "dtype code", f"one of {sorted(table)} ({flavour.value} flavour)",
                          code, offset=_DTYPE_CODE_OFFSET)
    return Header(flavour, np.dtype(table[code]).newbyteorder("<"), code, count, documents, multimodal)


class BinReader:
    """The seam behind which a ``.bin`` is read: memory map, plain file or remote ranges."""

    size: int
    remote = False  # True when reads are network round trips (callers may read ahead)

    def read(self, start: int, count: int) -> np.ndarray:
        """``count`` tokens from token position ``start``."""
        raise NotImplementedError

    def gather(self, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
        """Copies the runs ``[starts[i], starts[i] + lengths[i])`` one after another into ``out``."""
        position = 0
        for start, length in zip(starts.tolist(), lengths.tolist()):
            out[position:position + length] = self.read(start, length)
            position += length


def check_mapped(mapped, size: int, path: str) -> None:
    """FormatError unless the file ``mapped`` (an ``mmap``, None for an empty file) still
    holds ``size`` bytes: ``mmap.size()`` is an ``fstat`` of the mapped file itself."""
    if mapped is None:
        return
    now = mapped.size()
    if now < size:
        raise FormatError(path, "file size", f"{size} bytes, as when it was opened", f"{now} bytes",
                          hint="the file was truncated while in use; reopen the dataset")


# Below this mean run length a fancy-index gather beats a Python loop of slice copies.
# Measured by benchmarks/bench_format.py (page cache warm): the loop costs ~0.2 us of Python
# per piece plus a cache miss it waits for (short random pieces cost ~0.4 us each), the take
# ~5-10 ns per token for building its index but overlaps its misses; they cross between runs
# of 64 and 128 tokens. Both are exact; this is only speed.
_LOOP_MIN_MEAN_RUN = 96


class MemmapBinReader(BinReader):
    """A zero-copy memory map of a local ``.bin``.

    ``expected_identity`` (what :func:`~mmidx_builder._io.stat_identity` said of the file when
    the pair was first opened) makes a reopening refuse a file that was replaced since: a
    worker process that maps the new ``.bin`` under the old index would serve wrong tokens.
    """

    def __init__(self, path: str, dtype: np.dtype, expected_identity: str | None = None):
        self.path = path
        self.dtype = dtype
        self._map, self.size, self.identity = map_readonly(path, expected_identity)
        count = self.size // dtype.itemsize
        # A plain ndarray over the map (slicing the np.memmap subclass costs ~1 us per slice
        # in __array_finalize__, more than copying a 1,000-token piece); it keeps the map alive.
        self.tokens = np.frombuffer(self._map, dtype, count) if count else np.empty(0, dtype)
        # The same bytes as a memoryview: a memoryview slice assignment is a bare memcpy,
        # about twice as cheap per piece as numpy's slice assignment (which builds two
        # array objects and a casting plan for every piece).
        self._bytes = memoryview(self.tokens.view(np.uint8))

    def __getstate__(self):
        # Pickling (datasets' worker processes) must not copy the whole .bin: map it again
        # there, and only if it is still the file this process opened.
        return {"path": self.path, "dtype": self.dtype, "identity": self.identity}

    def __setstate__(self, state):
        self.__init__(state["path"], state["dtype"], state.get("identity"))

    def check_size(self) -> None:
        """A mapped file that shrank kills the process with SIGBUS on the next read of a lost
        page, with no message; an ``fstat`` of the mapped file before each read turns that
        into a FormatError. Of the mapped file, not the path: a pair replaced by rename leaves
        the old file mapped and whole, and it is still read (this process opened that
        generation; a reopening refuses the new one). A shrink between this check and the
        copy still cannot be caught: see docs/reliability.md."""
        check_mapped(self._map, self.size, self.path)

    def read(self, start: int, count: int) -> np.ndarray:
        self.check_size()
        return self.tokens[start:start + count]

    def gather(self, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
        runs = len(starts)
        if runs == 0:
            return
        self.check_size()
        if out.size >= _LOOP_MIN_MEAN_RUN * runs:
            if out.dtype == self.dtype and out.flags.c_contiguous and out.flags.writeable:
                # Byte positions of every run in the file and in ``out``; one memcpy each.
                itemsize = self.dtype.itemsize
                ends = np.cumsum(lengths, dtype=np.int64)
                ends *= itemsize
                source, target = self._bytes, memoryview(out.view(np.uint8))
                begin = 0
                for start, end in zip((np.asarray(starts, np.int64) * itemsize).tolist(), ends.tolist()):
                    target[begin:end] = source[start:start + end - begin]
                    begin = end
                return
            tokens, position = self.tokens, 0
            for start, length in zip(starts.tolist(), lengths.tolist()):
                out[position:position + length] = tokens[start:start + length]
                position += length
            return
        # Short runs: one vectorised take; index k of run i is starts[i] + (k - run_begin[i]).
        run_begin = np.cumsum(lengths) - lengths
        index = np.repeat(np.asarray(starts, np.int64) - run_begin, lengths)
        index += np.arange(out.size, dtype=np.int64)
        # Every index was bounds-checked by read_pieces; "clip" skips numpy's buffered re-check.
        np.take(self.tokens, index, out=out, mode="clip")


def opened_size(path: str, opener: Callable[..., IO[bytes]]) -> int:
    """The size of a file reached through ``opener``. fsspec's HTTP filesystem hands out an
    unseekable stream when the server reports size 0 or none; only then are the bytes
    counted by reading them."""
    with opener(path, "rb") as f:
        try:
            return f.seek(0, os.SEEK_END)
        except (ValueError, OSError):
            size = 0
            while chunk := f.read(1 << 20):
                size += len(chunk)
            return size


class FileBinReader(BinReader):
    """Ranged reads through a file object (an ``open``-like callable the caller chose), one
    request per run; remote.RemoteBinReader is the fast way to read remote files."""

    remote = True

    def __init__(self, path: str, dtype: np.dtype, opener: Callable[..., IO[bytes]]):
        self.path = path
        self.dtype = dtype
        self._opener = opener
        self._file = None
        # One file object, one position: remote sources are read ahead from several threads.
        self._lock = threading.Lock()
        self.size = opened_size(path, opener)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_file"] = None  # reopened lazily in the worker process
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def read(self, start: int, count: int) -> np.ndarray:
        itemsize = self.dtype.itemsize
        with self._lock:
            if self._file is None:
                self._file = self._opener(self.path, "rb")
            self._file.seek(start * itemsize)
            data = self._file.read(count * itemsize)
        if len(data) != count * itemsize:
            raise FormatError(self.path, "tokens", f"{count * itemsize} bytes at byte {start * itemsize}",
                              f"{len(data)} bytes", hint="the file changed or the read was cut short")
        return np.frombuffer(data, dtype=self.dtype)

    def gather(self, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
        # Neighbouring runs (consecutive sequences of one document) become one request.
        starts = np.asarray(starts, np.int64)
        lengths = np.asarray(lengths, np.int64)
        if len(starts) == 0:
            return
        breaks = np.flatnonzero(starts[1:] != starts[:-1] + lengths[:-1]) + 1
        group_first = np.concatenate(([0], breaks))
        group_lengths = np.add.reduceat(lengths, group_first)
        super().gather(starts[group_first], group_lengths, out)


def _read_idx_bytes(path: str, opener, expected_identity: str | None = None):
    """(bytes, size, map or None, identity) of an ``.idx``: mapped when local, read whole
    through ``opener`` otherwise."""
    if opener is None:
        mapped, size, identity = map_readonly(path, expected_identity)
        return (mapped if mapped is not None else memoryview(b"")), size, mapped, identity
    with opener(path, "rb") as f:
        data = f.read()
    return memoryview(data), len(data), None, path


def _exists(path: str, opener) -> bool:
    if opener is None:
        return os.path.isfile(path)
    try:
        with opener(path, "rb"):
            return True
    except (FileNotFoundError, OSError):
        return False


def check_partners(idx_path: str, bin_path: str, opener=None) -> None:
    """Both files of a pair exist (through ``opener`` when given), else a MissingPartnerError
    naming the one that is missing; a local one that is a FIFO or a directory is named as such."""
    for path in (idx_path, bin_path) if opener is None else ():
        kind = not_a_regular_file(path)
        if kind:  # no usable partner there (a MissingPartnerError, as before), but said as it is
            raise MissingPartnerError(path, "file", "a regular file (one of a .bin/.idx pair)", kind)
    idx_there, bin_there = _exists(idx_path, opener), _exists(bin_path, opener)
    if not idx_there and not bin_there:
        raise MissingPartnerError(split_prefix(idx_path), "files", f"{idx_path} and {bin_path}", "neither exists")
    for present, missing, there in ((idx_path, bin_path, bin_there), (bin_path, idx_path, idx_there)):
        if not there:
            raise MissingPartnerError(missing, "file", "the partner of " + present, "no such file",
                                      hint="a .bin/.idx pair needs both files")


# Sequences validated per step on open: bounds the temporaries (~24 bytes a sequence) to ~6 MiB.
_VALIDATE_CHUNK = 1 << 18


class IndexedFile:
    """One validated ``.bin``/``.idx`` pair.

    Sequence and document arrays are read-only views of the memory-mapped index. Token
    access returns views of the memory-mapped ``.bin`` (copies when read remotely).

    Open with :meth:`open`; pass ``opener`` (an ``open``-like callable, e.g. the one
    ``datasets`` patches for streaming, or ``fsspec.open``) to read anything that is not
    a local path.

    Memory and truncation. Opening costs no memory per sequence beyond the mapped file
    (validation runs in bounded chunks; token starts are computed from the pointers when
    read; fairseq's one-sequence documents are a range made only on request), so an index
    of 2**28 sequences opens in a few MiB. The price of views is that a mapped ``.idx``
    truncated while in use would kill the process with SIGBUS at the next read of a lost
    page. So the arrays are reached only through properties that first ``fstat`` the mapped
    file (``mmap.size()``, ~1 us) and raise :class:`FormatError` if it shrank: every read
    path (sampling, ``read_pieces``, documents) fetches them anew. A truncation between that
    check and the read that follows stays possible, the same window as for the ``.bin``.
    """

    def __init__(self, prefix: str, header: Header, idx: np.ndarray | memoryview,
                 bin_reader: BinReader, idx_path: str, bin_path: str, idx_size: int,
                 idx_map=None, idx_identity: str | None = None):
        self.prefix = prefix
        self.idx_path = idx_path
        self.bin_path = bin_path
        self.header = header
        self.idx_size = idx_size
        self.bin_size = bin_reader.size
        self._bin = bin_reader
        self._idx_map = idx_map
        n = header.num_sequences
        offset = header.size
        self._lengths = np.frombuffer(idx, LENGTH_DTYPE, n, offset)
        offset += LENGTH_DTYPE.itemsize * n
        self._pointers = np.frombuffer(idx, POINTER_DTYPE, n, offset)
        offset += POINTER_DTYPE.itemsize * n
        self._documents = None  # fairseq: sequence i is document i
        if header.flavour is Flavour.MEGATRON:
            self._documents = np.frombuffer(idx, DOCUMENT_INDEX_DTYPE, header.document_count, offset)
            offset += DOCUMENT_INDEX_DTYPE.itemsize * header.document_count
        self._modes = np.frombuffer(idx, MODE_DTYPE, n, offset) if header.multimodal else None
        self._num_tokens = self._validate()
        self.identities = (idx_identity or file_identity(idx_path), getattr(bin_reader, "identity", None)
                           or file_identity(bin_path))
        self.identity = combined_identity("mmidx", list(self.identities))

    @property
    def remote(self) -> bool:
        """Tokens are read over the network (remote.py): worth reading ahead."""
        return self._bin.remote

    @classmethod
    def open(cls, path: str | os.PathLike, *, opener: Callable[..., IO[bytes]] | None = None,
             idx_path: str | None = None, bin_path: str | None = None,
             expected_identities: tuple[str, str] | None = None) -> "IndexedFile":
        """Opens and validates ``PREFIX`` (or ``PREFIX.bin`` / ``PREFIX.idx``).

        ``idx_path`` / ``bin_path`` override where the two files are read from, for
        downloads that lost their names. ``expected_identities`` (another opening's
        ``identities``) refuses local files replaced since. Raises :class:`FormatError`
        for anything malformed. A remote ``.bin`` (``hf://``, ``s3://``, ``https://``...) is
        read by remote.RemoteBinReader, through ``opener`` when it is a remote.RemoteAccess
        (storage options, block cache) and with default settings when no opener is given.
        """
        prefix = split_prefix(path)
        idx_path, bin_path = idx_path or prefix + ".idx", bin_path or prefix + ".bin"
        from .remote import RemoteBinReader, remote_access_for  # remote.py imports this module

        access = remote_access_for(opener, bin_path)
        if access is not None:
            idx, bin_object = access.open_pair(idx_path, bin_path)
            header = parse_header(bytes(idx[:MEGATRON_HEADER_SIZE]), len(idx), idx_path)
            reader = RemoteBinReader(bin_path, header.dtype, access, bin_object)
            return cls(prefix, header, memoryview(idx), reader, idx_path, bin_path, len(idx))
        check_partners(idx_path, bin_path, opener)
        expected_idx, expected_bin = expected_identities or (None, None)
        idx, idx_size, idx_map, idx_identity = _read_idx_bytes(idx_path, opener, expected_idx)
        header = parse_header(bytes(idx[:MEGATRON_HEADER_SIZE]), idx_size, idx_path)
        reader = (MemmapBinReader(bin_path, header.dtype, expected_bin) if opener is None
                  else FileBinReader(bin_path, header.dtype, opener))
        return cls(prefix, header, idx, reader, idx_path, bin_path, idx_size, idx_map, idx_identity)

    def __reduce__(self):
        # A copy in another process (spawn workers) maps the files again, and only the very
        # files this one opened: never the old index's numbers over a new .bin.
        # A remote reader's RemoteAccess (storage options, block cache) travels as its opener.
        opener = getattr(self._bin, "_opener", None) or getattr(self._bin, "access", None)
        return (_reopen, (self.prefix, self.idx_path, self.bin_path, opener,
                          self.identities if opener is None else None))

    def check_index(self) -> None:
        """FormatError if the mapped ``.idx`` shrank since it was opened (see the class doc)."""
        check_mapped(self._idx_map, self.idx_size, self.idx_path)

    def _validate(self) -> int:
        """Checks the whole index, a chunk of sequences at a time; returns the token count."""
        h, itemsize = self.header, self.dtype.itemsize
        lengths, pointers, documents = self._lengths, self._pointers, self._documents
        lengths_at = h.size
        pointers_at = lengths_at + LENGTH_DTYPE.itemsize * h.num_sequences
        documents_at = pointers_at + POINTER_DTYPE.itemsize * h.num_sequences

        tokens = 0  # before the chunk
        for begin in range(0, h.num_sequences, _VALIDATE_CHUNK):
            chunk = lengths[begin:begin + _VALIDATE_CHUNK]
            if chunk.min() < 0:
                i = begin + first_bad(chunk < 0)
                raise FormatError(self.idx_path, f"sequence_lengths[{i}]", "a length >= 0", int(lengths[i]),
                                  offset=lengths_at + 4 * i)
            # Pointers must be the running byte offsets of the lengths, starting at 0: that is
            # what both writers produce, and it keeps every read inside the .bin.
            expected = np.cumsum(chunk, dtype=np.int64)
            expected -= chunk
            expected += tokens
            expected *= itemsize
            found = pointers[begin:begin + len(chunk)]
            if not np.array_equal(found, expected):
                k = first_bad(found != expected)
                i = begin + k
                hint = ("pointers are not increasing" if i and pointers[i] < pointers[i - 1]
                        else "the pointer step does not match the previous sequence's length")
                hint += f"; read as the {h.flavour.value} flavour, whose size the file has"
                raise FormatError(self.idx_path, f"sequence_pointers[{i}]", int(expected[k]), int(pointers[i]),
                                  offset=pointers_at + 8 * i, hint=hint)
            tokens += int(chunk.sum(dtype=np.int64))
        if self.bin_size != tokens * itemsize:
            raise FormatError(self.bin_path, "file size",
                              f"{tokens * itemsize} bytes ({tokens} tokens of {self.dtype.name} "
                              f"as {self.idx_path} says)", f"{self.bin_size} bytes")
        if documents is not None:
            if len(documents) == 0:
                raise FormatError(self.idx_path, "document count", "at least 1 (documents + 1)", 0,
                                  offset=PREAMBLE.size)
            if documents[0] != 0:
                raise FormatError(self.idx_path, "document_indices[0]", 0, int(documents[0]), offset=documents_at)
            for begin in range(1, len(documents), _VALIDATE_CHUNK):
                end = min(begin + _VALIDATE_CHUNK, len(documents))
                falling = documents[begin:end] < documents[begin - 1:end - 1]
                if falling.any():
                    i = begin + first_bad(falling)
                    raise FormatError(self.idx_path, f"document_indices[{i}]",
                                      f">= document_indices[{i - 1}] = {int(documents[i - 1])}",
                                      int(documents[i]), offset=documents_at + 8 * i, hint="not increasing")
            if documents[-1] != h.num_sequences:
                i = len(documents) - 1
                raise FormatError(self.idx_path, f"document_indices[{i}]",
                                  f"the sequence count {h.num_sequences}", int(documents[-1]),
                                  offset=documents_at + 8 * i, hint="document index out of range")
        return tokens

    # --- the index's arrays, each checked against truncation when fetched ---------------
    @property
    def sequence_lengths(self) -> np.ndarray:
        """Tokens per sequence (int32, a view of the index)."""
        self.check_index()
        return self._lengths

    @property
    def sequence_pointers(self) -> np.ndarray:
        """Byte offset of each sequence in the ``.bin`` (int64, a view of the index)."""
        self.check_index()
        return self._pointers

    @property
    def document_indices(self) -> np.ndarray:
        """Sequence ids where documents start, then the sequence count. A view of a Megatron
        index; for fairseq (one sequence per document) ``0..N``, made when asked."""
        if self._documents is None:
            return np.arange(self.num_sequences + 1, dtype=np.int64)
        self.check_index()
        return self._documents

    @property
    def sequence_modes(self) -> np.ndarray | None:
        """Multimodal Megatron indexes only: the mode of each sequence."""
        if self._modes is not None:
            self.check_index()
        return self._modes

    @property
    def sequence_starts(self) -> np.ndarray:
        """Token position of each sequence start, then the token count (int64, a new array of
        ``N + 1``: reads compute the starts they need from the pointers instead)."""
        starts = np.empty(self.num_sequences + 1, np.int64)
        np.floor_divide(self.sequence_pointers, self.dtype.itemsize, out=starts[:-1])
        starts[-1] = self._num_tokens
        return starts

    def _start_of(self, sequence: int) -> int:
        """Token position where sequence ``sequence`` starts (the token count for N)."""
        if sequence >= self.num_sequences:
            return self._num_tokens
        return int(self.sequence_pointers[sequence]) // self.dtype.itemsize

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
        return self.num_sequences if self._documents is None else len(self._documents) - 1

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    def document_lengths(self) -> np.ndarray:
        """Tokens per document (a document is a run of sequences): int64, or for fairseq (one
        sequence a document) the int32 lengths themselves, a view: ``mmidx inspect`` of a
        2**28-sequence index must not need gigabytes."""
        if self._documents is None:
            return self.sequence_lengths
        documents, pointers = self.document_indices, self.sequence_pointers
        out = np.empty(len(documents) - 1, np.int64)
        for begin in range(0, len(out), _VALIDATE_CHUNK):  # temporaries of a chunk, not of the index
            chunk = documents[begin:begin + _VALIDATE_CHUNK + 1]
            bounds = np.full(len(chunk), self._num_tokens * self.dtype.itemsize, np.int64)
            inside = chunk < self.num_sequences
            bounds[inside] = pointers[chunk[inside]]
            np.floor_divide(np.diff(bounds), self.dtype.itemsize, out=out[begin:begin + len(chunk) - 1])
        return out

    # --- tokens ----------------------------------------------------------------------
    def sequence(self, i: int) -> np.ndarray:
        """The tokens of sequence ``i`` (a view when memory-mapped)."""
        i = _check_index(i, self.num_sequences, "sequence", self.idx_path)
        return self._bin.read(self._start_of(i), int(self.sequence_lengths[i]))

    def document(self, i: int) -> np.ndarray:
        """The tokens of document ``i``: its sequences, which are contiguous in ``.bin``."""
        i = _check_index(i, self.num_documents, "document", self.idx_path)
        first, last = i, i + 1  # fairseq: one sequence per document
        if self._documents is not None:
            documents = self.document_indices
            first, last = int(documents[i]), int(documents[i + 1])
        begin, end = self._start_of(first), self._start_of(last)
        return self._bin.read(begin, end - begin)

    def read_pieces(self, sequence_ids, offsets, lengths, out: np.ndarray | None = None) -> np.ndarray:
        """Tokens ``offsets[k] : offsets[k] + lengths[k]`` of sequence ``sequence_ids[k]``,
        for every k, concatenated into one 1-D array (``out`` if given).

        One vectorised bounds check, then one gather; never reads outside a sequence.
        """
        sequence_ids, offsets, lengths, out = check_pieces(
            self.sequence_lengths, sequence_ids, offsets, lengths, out, self.dtype,
            lambda k: f"sequence {k} of {self.idx_path}")
        starts = self._pointers[sequence_ids]  # checked just above, by sequence_lengths
        starts //= self.dtype.itemsize
        starts += offsets
        self._bin.gather(starts, lengths, out)
        return out

    def __repr__(self) -> str:
        return (f"IndexedFile({self.prefix!r}, flavour={self.flavour.value}, dtype={self.dtype.name}, "
                f"sequences={self.num_sequences}, documents={self.num_documents}, tokens={self.num_tokens})")


def _reopen(prefix, idx_path, bin_path, opener, identities) -> IndexedFile:
    return IndexedFile.open(prefix, opener=opener, idx_path=idx_path, bin_path=bin_path,
                            expected_identities=identities)


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
    # A name near NAME_MAX takes a cut and hashed temporary stem (_io.temporary_stem): those too.
    stems = [os.path.basename(temporary_stem(os.path.join(folder, n)))[1:] for n in names]
    return _io.remove_stale_temporaries(folder, tuple(dict.fromkeys(glob.escape(n) for n in names + stems)))


class IndexedFileWriter:
    """Writes a ``.bin``/``.idx`` pair, byte-identical to megatron-core's
    ``IndexedDatasetBuilder`` (or fairseq's ``MMapIndexedDatasetBuilder``) for the same
    documents and dtype.

    Both files are written under hidden temporary names and renamed only by :meth:`close`
    (an old ``.idx`` and provenance sidecar removed first, the new ``.idx`` renamed last), so
    an interrupted write never leaves a pair that looks valid, and a killed writer's
    leftovers are invisible to loading and removed by the next writer of the same prefix.
    The writer holds a :class:`~mmidx_builder._io.WriterLock` on the prefix from start to
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
