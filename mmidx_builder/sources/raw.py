"""Raw files read ``n_bytes`` per token: data that was never tokenized, as a token source.

A file's bytes are read as unsigned little-endian integers of ``n_bytes`` bytes (1-4), so
the vocabulary is the ``2**(8*n_bytes)`` byte tokens plus one end-of-file token:

    n_bytes   byte tokens      EOF id          dtype (smallest holding the EOF id)
    1         0 .. 255         256             uint16
    2         0 .. 65535       65536           int32
    3         0 .. 2**24-1     2**24           int32
    4         0 .. 2**32-1     2**32           int64

Of two dtypes of one size the signed one is taken: torch has no general uint32/uint64
tensors, and Megatron's dtype table (so a ``.bin`` written from these tokens) has no
uint32.

A file of ``b`` bytes holds ``ceil(b / n_bytes)`` tokens; a trailing partial token is
padded with zero bytes (the high bytes, as the integers are little-endian). Each file is
one "sequence" of its tokens followed by EOF, which is all ``sampling`` needs: a
:class:`RawFiles` offers the ``sequence_lengths`` / ``dtype`` / ``read_pieces`` surface of
:class:`~mmidx_builder.format.IndexedFile`, decoding tokens on the fly from a memory map,
with no converted copy of the data anywhere.

Two ways to cut the files into examples:

* ``concat``: sampling.assemble_samples(RawFiles(...), sampling.build_indices(...), ids),
  Megatron's packing over files as documents;
* ``diff``: :func:`diff_chunks` / :func:`diff_samples`, every file cut into its own
  ``seq_length`` chunks, the last one padded with EOF (rows of the ``mmidx_raw_chunks`` builder).

Labels come from class folders, as ``datasets``' imagefolder infers them, or from a
metadata file (:func:`labels_for`). This module never imports ``datasets`` or ``pyarrow``.
"""

from __future__ import annotations

import collections
import csv
import json
import os
import posixpath
from typing import IO, Callable, Sequence

import numpy as np

from ..storage.files import file_identity, stat_identity
from ..checks import check_int
from ..dtypes import raw_token_dtype
from ..errors import FormatError, ParameterError
from ..storage.bin_readers import opened_size
from ..storage.mapped import MappedFile, gather
from ..storage.remote import read_ranges, remote_access_for
from .token_source import check_pieces, combined_identity

N_BYTES_CHOICES = (1, 2, 3, 4)


def _open_maps_limit() -> int:
    """Memory maps kept open at once. Each holds two file descriptors (mapped.py's own,
    and the one Python's mmap dups), so a folder of 100,000 files must stay within the
    descriptor limit, and the kernel's map count (vm.max_map_count, 65,530 by default).
    Re-mapping a file costs ~20 us, so keep as many as the limits comfortably allow."""
    try:
        import resource  # POSIX only
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY:
            soft = 16384
    except (ImportError, OSError, ValueError):
        soft = 1024
    return max(32, min(4096, soft // 8))


_OPEN_MAPS = _open_maps_limit()
# Megatron's sequence lengths are int32, and so are ours.
_MAX_SEQUENCE_LENGTH = np.iinfo(np.int32).max


def check_n_bytes(n_bytes: int) -> int:
    """``n_bytes`` if it is one of 1-4, else a ParameterError."""
    if n_bytes not in N_BYTES_CHOICES:
        raise ParameterError(f"n_bytes must be one of {N_BYTES_CHOICES}, got {n_bytes!r}")
    return int(n_bytes)


def eof_id(n_bytes: int) -> int:
    """The end-of-file token: one past the largest byte token, ``2**(8*n_bytes)``."""
    return 2 ** (8 * check_n_bytes(n_bytes))


def token_dtype(n_bytes: int) -> np.dtype:
    """The dtype of ``n_bytes`` tokens: the smallest that holds the EOF id (table above)."""
    return raw_token_dtype(eof_id(n_bytes))


def _combine_planes(planes: np.ndarray, out: np.ndarray) -> None:
    """(tokens, 3) little-endian byte planes into ``out``: there is no 3-byte dtype."""
    np.copyto(out, planes[:, 0], casting="unsafe")
    out |= planes[:, 1].astype(out.dtype) << 8
    out |= planes[:, 2].astype(out.dtype) << 16


def _read_three(data: np.ndarray, planes: np.ndarray, start: int, stop: int, out: np.ndarray) -> None:
    """Tokens ``start:stop`` of a file of 3-byte tokens into ``out``.

    Each token is read as the 4-byte little-endian integer at its first byte (a strided,
    unaligned view of the bytes, 3 bytes apart) with the fourth byte masked off: one pass,
    no temporaries. A last token whose 4-byte read would leave the bytes goes by planes.
    """
    inside = min(stop, (len(data) - 1) // 3)  # tokens j with 3j + 4 <= len(data)
    if inside > start:
        words = np.ndarray((inside - start,), "<u4", buffer=data, offset=3 * start, strides=(3,))
        np.bitwise_and(words, 0xFFFFFF, out=out[:inside - start], casting="unsafe")
    first = max(start, inside)
    if stop > first:
        _combine_planes(planes[first:stop], out[first - start:])


def decode_bytes(data, n_bytes: int, out: np.ndarray) -> None:
    """Decodes ``data`` (bytes-like or a uint8 array) into ``out``, ``n_bytes`` per token.

    ``len(out)`` tokens are written; missing high bytes of the last one are zeros.
    """
    raw = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    full = len(raw) // n_bytes
    if full > len(out):
        raise ParameterError(f"{len(raw)} bytes hold more than the {len(out)} tokens asked for")
    if n_bytes == 3:
        _read_three(raw, raw[:full * 3].reshape(full, 3), 0, full, out[:full])
    else:
        # A view of the memory map in the byte order of the file, cast once into out.
        view = raw[:full * n_bytes].view(np.dtype(f"<u{n_bytes}"))
        np.copyto(out[:full], view, casting="unsafe")
    if full < len(out):
        tail = raw[full * n_bytes:]
        if full + 1 < len(out) or len(tail) == 0:
            raise ParameterError(f"{len(raw)} bytes hold fewer than the {len(out)} tokens asked for")
        padded = np.zeros(n_bytes, np.uint8)
        padded[:len(tail)] = tail
        decode_bytes(padded, n_bytes, out[full:])


class RawFiles:
    """Files read as tokens of ``n_bytes`` bytes, each file followed by one EOF token.

    ``sequence_lengths[i]`` is the tokens of file ``i`` plus one. Local paths are memory
    mapped (lazily, a bounded number at a time) and read through mapped.py: a file truncated
    while in use is a FormatError, never SIGBUS. Remote paths are read by remote.py (every
    piece of a read fetched at once), through ``opener`` when it is a remote.RemoteAccess;
    another ``open``-like callable is used as it is, one ranged read per piece.
    """

    def __init__(self, paths: Sequence[str | os.PathLike], n_bytes: int, *,
                 opener: Callable[..., IO[bytes]] | None = None, sizes: Sequence[int] | None = None):
        self.n_bytes = check_n_bytes(n_bytes)
        self.paths = [os.fspath(p) for p in paths]
        self.dtype = token_dtype(self.n_bytes)
        self.eof = eof_id(self.n_bytes)
        self._opener = opener
        self._access = remote_access_for(opener, self.paths[0]) if self.paths else None
        self._objects = self._access.stat_many(self.paths) if self._access is not None else None
        # Local files listed here: what each path was (one stat gives size and identity),
        # checked again when it is mapped.
        self._identities = None
        if self._objects is not None:
            sizes = [o.size for o in self._objects]
        elif sizes is None and opener is None:
            stats = [os.stat(p) for p in self.paths]
            sizes = [st.st_size for st in stats]
            self._identities = [stat_identity(p, st) for p, st in zip(self.paths, stats)]
        elif sizes is None:
            sizes = [opened_size(p, opener) for p in self.paths]
        elif len(sizes) != len(self.paths):
            raise ParameterError(f"{len(sizes)} sizes given for {len(self.paths)} files")
        self.file_sizes = np.asarray(sizes, np.int64).reshape(-1)
        self.file_tokens = -(-self.file_sizes // self.n_bytes)
        too_long = self.file_tokens + 1 > _MAX_SEQUENCE_LENGTH
        if too_long.any():
            i = int(np.flatnonzero(too_long)[0])
            raise FormatError(self.paths[i], "file size",
                              f"at most {(_MAX_SEQUENCE_LENGTH - 1) * self.n_bytes} bytes "
                              f"({_MAX_SEQUENCE_LENGTH - 1} tokens of {self.n_bytes} bytes)",
                              f"{int(self.file_sizes[i])} bytes",
                              hint="sequence lengths are int32 as in Megatron; split the file or raise n_bytes")
        self.sequence_lengths = (self.file_tokens + 1).astype(np.int32)
        self.identity = combined_identity(f"raw-n_bytes={self.n_bytes}",
                                          self._identities or [file_identity(p) for p in self.paths])
        self._maps: collections.OrderedDict[int, MappedFile] = collections.OrderedDict()
        self._files: collections.OrderedDict[int, IO[bytes]] = collections.OrderedDict()

    def __getstate__(self):
        state = dict(self.__dict__)
        # Maps and file objects are reopened lazily in the process that unpickles.
        state["_maps"] = collections.OrderedDict()
        state["_files"] = collections.OrderedDict()
        return state

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
        self._maps.clear()

    @property
    def identities(self) -> list[str]:
        """What each local file was when listed (checked again when it is mapped)."""
        return list(self._identities or ())

    @property
    def num_sequences(self) -> int:
        return len(self.paths)

    @property
    def remote(self) -> bool:
        """Reads are network round trips (worth reading ahead)."""
        return self._opener is not None or self._access is not None

    @property
    def num_tokens(self) -> int:
        """Tokens of every file, EOFs included."""
        return int(self.sequence_lengths.sum(dtype=np.int64))

    # --- bytes -------------------------------------------------------------------------
    def _mapped(self, i: int) -> MappedFile:
        """Local file ``i``, mapped and read through mapped.MappedFile: a file truncated while
        in use is a FormatError, never SIGBUS. Kept open (a bounded number at a time)."""
        mapped = self._maps.get(i)
        if mapped is not None:
            self._maps.move_to_end(i)
            return mapped
        size = int(self.file_sizes[i])
        # Refused if another file was renamed over the listed one: its size is not the listed one.
        mapped = MappedFile(self.paths[i], self._identities[i] if self._identities else None)
        if mapped.size < size:
            raise FormatError(self.paths[i], "file size", f"{size} bytes", f"{mapped.size} bytes",
                              hint="the file shrank after it was listed")
        self._maps[i] = mapped
        if len(self._maps) > _OPEN_MAPS:
            self._maps.popitem(last=False)
        return mapped

    def _read_bytes(self, i: int, start: int, stop: int):
        """Bytes ``[start, stop)`` of file ``i`` (``stop`` within the file)."""
        if start == stop:
            return b""
        f = self._files.get(i)
        if f is None:
            f = self._files[i] = self._opener(self.paths[i], "rb")
            if len(self._files) > _OPEN_MAPS:
                self._files.popitem(last=False)[1].close()
        else:
            self._files.move_to_end(i)
        f.seek(start)
        data = f.read(stop - start)
        if len(data) != stop - start:
            raise FormatError(self.paths[i], "bytes", f"{stop - start} bytes at byte {start}",
                              f"{len(data)} bytes", hint="the file changed or the read was cut short")
        return data

    # --- tokens ------------------------------------------------------------------------
    def read_pieces(self, sequence_ids, offsets, lengths, out: np.ndarray | None = None) -> np.ndarray:
        """Tokens ``offsets[k] : offsets[k] + lengths[k]`` of file ``sequence_ids[k]``
        (its tokens then EOF), for every k, concatenated into one 1-D array.

        Same contract as :meth:`mmidx_builder.format.IndexedFile.read_pieces`.
        """
        sequence_ids, offsets, lengths, out = check_pieces(
            self.sequence_lengths, sequence_ids, offsets, lengths, out, self.dtype,
            lambda k: f"{self.paths[k]} (EOF included)")
        if self._access is not None:
            self._read_remote(sequence_ids, offsets, lengths, out)
        elif self._opener is None:
            self._read_local(sequence_ids, offsets, lengths, out)
        else:
            self._read_ranged(sequence_ids.tolist(), offsets.tolist(), lengths.tolist(), out)
        return out

    def _byte_ranges(self, files, offsets, lengths):
        """(last data token + 1, whether there is data, first byte, end byte) of each piece: a
        piece is data tokens, then EOF when it reaches the end of its file."""
        data_end = np.minimum(offsets + lengths, self.file_tokens[files])
        return data_end, data_end > offsets, offsets * self.n_bytes, np.minimum(data_end * self.n_bytes,
                                                                                 self.file_sizes[files])

    def _read_local(self, files, offsets, lengths, out) -> None:
        """Every piece's bytes in one mapped.gather (copied by the kernel: a file truncated
        meanwhile is an error, not SIGBUS), each at its tokens' place in a zeroed buffer, so
        that a file's partial last token reads with zero high bytes; then decoded at once."""
        n = self.n_bytes
        data_end, has_data, starts, stops = self._byte_ranges(files, offsets, lengths)
        counts = np.maximum(data_end - offsets, 0)  # data tokens of each piece
        token_at = np.cumsum(counts) - counts
        unique, which = np.unique(files[has_data], return_inverse=True)
        mapped = [self._mapped(int(i)) for i in unique.tolist()]
        total = int(counts.sum())
        data = np.zeros(total * n + 1, np.uint8)  # + 1: the 4-byte reads of 3-byte tokens stay inside
        gather(mapped, which, starts[has_data], (stops - starts)[has_data], data, at=token_at[has_data] * n)
        if n == 3:  # each token the 4-byte word at its first byte, the fourth byte masked off
            words = np.ndarray((total,), "<u4", buffer=data, strides=(3,))
            tokens = np.bitwise_and(words, 0xFFFFFF, dtype=np.uint32)
        else:
            tokens = data[:total * n].view(f"<u{n}")
        # ``out`` is the tokens in order with an EOF after each piece that reaches its file's end.
        position = taken = 0
        for eof in (np.cumsum(lengths) - 1)[(data_end < offsets + lengths) & (lengths > 0)].tolist():
            np.copyto(out[position:eof], tokens[taken:taken + eof - position], casting="unsafe")
            taken += eof - position
            out[eof] = self.eof
            position = eof + 1
        np.copyto(out[position:], tokens[taken:], casting="unsafe")

    def _read_remote(self, files, offsets, lengths, out) -> None:
        """Every piece's bytes in one remote.read_ranges call, then decoded as _read_local does."""
        data_end, has_data, starts, stops = self._byte_ranges(files, offsets, lengths)
        pieces = read_ranges(self._access, self._objects, files[has_data], starts[has_data], stops[has_data])
        self._decode(offsets, lengths, data_end, has_data, iter(pieces), out)

    def _decode(self, offsets, lengths, data_end, has_data, pieces, out) -> None:
        """Each piece's bytes (the next of ``pieces`` when it has data) decoded into its place
        in ``out``, and EOF where a piece reaches the end of its file."""
        ends = np.cumsum(lengths)
        for end, length, offset, stop, data in zip(ends.tolist(), lengths.tolist(), offsets.tolist(),
                                                   data_end.tolist(), has_data.tolist()):
            target = out[end - length:end]
            if data:
                decode_bytes(next(pieces), self.n_bytes, target[:stop - offset])
            if stop < offset + length:
                target[max(stop - offset, 0):] = self.eof  # only ever the last token of a file

    def _read_ranged(self, files, offsets, lengths, out) -> None:
        n, position = self.n_bytes, 0
        for f, offset, length in zip(files, offsets, lengths):
            target = out[position:position + length]
            position += length
            # The piece is data tokens [offset, data_end) and, when it reaches the end, EOF.
            data_end = min(offset + length, int(self.file_tokens[f]))
            if data_end > offset:
                stop_byte = min(data_end * n, int(self.file_sizes[f]))
                decode_bytes(self._read_bytes(f, offset * n, stop_byte), n, target[:data_end - offset])
            if data_end < offset + length:
                target[data_end - offset:] = self.eof  # only ever the last token of a file

    def sequence(self, i: int) -> np.ndarray:
        """File ``i``'s tokens, EOF last."""
        return self.read_pieces([i], [0], [int(self.sequence_lengths[i])])

    def __repr__(self) -> str:
        return (f"RawFiles({len(self.paths)} files, n_bytes={self.n_bytes}, dtype={self.dtype.name}, "
                f"tokens={self.num_tokens})")


# --- style="diff": every file cut into its own chunks ---------------------------------

def diff_chunks(raw: RawFiles, seq_length: int) -> tuple[np.ndarray, np.ndarray]:
    """(file id, token offset) of every chunk when each file is cut into ``seq_length`` pieces.

    A file's sequence is its tokens then EOF, so it yields ``ceil((tokens + 1) / seq_length)``
    chunks: an empty file gives one chunk of EOFs, and a file whose tokens fill chunks exactly
    still ends with a chunk that says where it ended.
    """
    seq_length = check_int("seq_length", seq_length, 1)
    lengths = raw.sequence_lengths.astype(np.int64)
    counts = -(-lengths // seq_length)
    file_ids = np.repeat(np.arange(len(lengths), dtype=np.int64), counts)
    first_chunk = np.cumsum(counts) - counts
    offsets = (np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(first_chunk, counts)) * seq_length
    return file_ids, offsets


def diff_samples(raw: RawFiles, file_ids: np.ndarray, offsets: np.ndarray, seq_length: int) -> np.ndarray:
    """The ``(len(file_ids), seq_length)`` chunks named by :func:`diff_chunks`, EOF-padded."""
    file_ids = np.asarray(file_ids, np.int64)
    offsets = np.asarray(offsets, np.int64)
    lengths = np.minimum(raw.sequence_lengths[file_ids].astype(np.int64) - offsets, seq_length)
    flat = raw.read_pieces(file_ids, offsets, lengths)
    samples = np.full((len(file_ids), seq_length), raw.eof, raw.dtype)
    # Row-major boolean assignment fills each row's first `lengths[row]` cells in order.
    samples[np.arange(seq_length) < lengths[:, None]] = flat
    return samples


# --- labels ----------------------------------------------------------------------------

def _segments(path: str) -> int:
    # datasets.packaged_modules.folder_based_builder.count_path_segments
    return path.replace("\\", "/").count("/")


def _class_folder(path: str) -> str:
    return posixpath.basename(posixpath.dirname(path.replace("\\", "/")))


def labels_for(paths: Sequence[str], metadata: str | os.PathLike | None = None, *,
               opener: Callable[..., IO] | None = None) -> tuple[list[str], np.ndarray] | None:
    """``(class_names, label_ids)`` for ``paths``, or ``None`` when they carry no labels.

    Without ``metadata`` this is imagefolder's rule (``datasets``' folder_based_builder):
    the label is the name of the file's parent folder, used only when the files sit in more
    than one such folder, all at the same depth; class names are sorted. With ``metadata``
    (a ``.csv`` or ``.jsonl`` with columns ``file_name``, relative to the metadata file's
    folder, and ``label``) every path must appear there.
    """
    paths = [os.fspath(p) for p in paths]
    if metadata is not None:
        return _labels_from_metadata(paths, os.fspath(metadata), opener)
    folders = [_class_folder(p) for p in paths]
    if len(set(folders)) <= 1 or len({_segments(p) for p in paths}) != 1:
        return None
    names = sorted(set(folders))
    lookup = {name: i for i, name in enumerate(names)}
    return names, np.array([lookup[f] for f in folders], np.int64)


def _metadata_rows(path: str, opener) -> list[tuple[int, dict]]:
    """(line number, row) of a metadata file."""
    open_ = opener or open
    ext = os.path.splitext(path)[1].lower()
    rows = []
    with open_(path, "r", encoding="utf-8", newline="" if ext == ".csv" else None) as f:
        if ext == ".csv":
            reader = csv.DictReader(f)
            for row in reader:
                rows.append((reader.line_num, row))
        elif ext in (".jsonl", ".json"):
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise FormatError(path, f"line {number}", "one JSON object", repr(line.strip()[:80]),
                                      hint=str(error)) from None
                if not isinstance(row, dict):
                    raise FormatError(path, f"line {number}", "a JSON object", type(row).__name__)
                rows.append((number, row))
        else:
            raise ParameterError(f"metadata file {path}: expected a .csv or .jsonl file")
    return rows


def _labels_from_metadata(paths: list[str], metadata: str, opener) -> tuple[list[str], np.ndarray]:
    base = posixpath.dirname(metadata.replace("\\", "/"))
    by_name: dict[str, object] = {}
    for number, row in _metadata_rows(metadata, opener):
        for key in ("file_name", "label"):
            if row.get(key) in (None, ""):
                raise FormatError(metadata, f"line {number}", f"a {key!r} value", repr(row)[:120])
        name = posixpath.normpath(str(row["file_name"]).replace("\\", "/"))
        if posixpath.isabs(name) or name == ".." or name.startswith("../"):
            raise FormatError(metadata, f"line {number}", "a file_name relative to the metadata file's folder",
                              repr(row["file_name"]))
        by_name[name] = row["label"]
    labels = []
    for p in paths:
        relative = posixpath.relpath(p.replace("\\", "/"), base or ".")
        if relative not in by_name:
            raise FormatError(metadata, "file_name", f"a row for {relative!r} (the data file {p})", "none")
        labels.append(by_name[relative])
    # Integer labels sort as numbers, anything else as text.
    distinct = set(labels)
    numeric = all(isinstance(v, int) or (isinstance(v, str) and v.lstrip("-").isdigit()) for v in distinct)
    names = sorted({str(v) for v in distinct}, key=(lambda s: int(s)) if numeric else None)
    lookup = {name: i for i, name in enumerate(names)}
    return names, np.array([lookup[str(v)] for v in labels], np.int64)
