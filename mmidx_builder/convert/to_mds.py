""":func:`pairs_to_mds`: ``.bin``/``.idx`` pairs -> an MDS folder of token samples, the shards
byte-identical to ``streaming.MDSWriter``'s for the same samples (mosaic/writer.py).

Two ways to make samples of documents:

    one sample a document       (default) each document's ids, its sequences joined
    concat_tokens=N             LLM Foundry's ``ConcatTokensDataset``: the documents' ids, each
                                between ``bos_ids`` and ``eos_ids``, in one stream cut into
                                samples of exactly N ids; the ids left at the end (fewer than N)
                                are dropped; with ``no_wrap`` what is left of a document after its
                                first sample is dropped too

Megatron's documents carry their EOD already (``--append-eod``), so nothing is added by
default. An empty document has no ids and an MDS ndarray cannot hold 0 (MDSWriter refuses it):
it makes no sample and is counted (``empty_documents``).
"""

from __future__ import annotations

import os
import time
from typing import Sequence

import numpy as np

from ..checks import check_bool, check_int
from ..dtypes import cast_tokens, common_token_dtype, integer_dtype
from ..errors import FormatError, ParameterError
from ..mosaic.encodings import DTYPE_CODES, Encoding, Kind, parse_encoding
from ..mosaic.writer import DEFAULT_SIZE_LIMIT, ShardWriter, token_samples
from ..sources.indexed import IndexedFile
from .progress import count_bar
from .summary import TokensSummary

# Token ids read from the .bin per batch (16 MiB of int32).
BATCH_TOKENS = 1 << 22
DEFAULT_COLUMN = "tokens"
# LLM Foundry's since June 2024 (its PR #1254); "bytes" of int64 before.
DEFAULT_ENCODING = "ndarray:int32"


def pairs_to_mds(prefixes: Sequence[str] | str, output: str, *, token_column: str = DEFAULT_COLUMN,
                 encoding: str = DEFAULT_ENCODING, dtype=None, concat_tokens: int | None = None,
                 no_wrap: bool = False, bos_ids: Sequence[int] = (), eos_ids: Sequence[int] = (),
                 compression: str | None = None, hashes: Sequence[str] = (), size_limit=DEFAULT_SIZE_LIMIT,
                 overwrite: bool = False, progress: bool = False) -> TokensSummary:
    """Writes the documents of ``prefixes`` (in order) as MDS samples of one column,
    ``token_column``, into the folder ``output``; returns what was done.

    ``encoding``: ``"ndarray:int32"`` (LLM Foundry's), another integer ``ndarray[:DTYPE]``
    (``"ndarray"`` alone: the pairs' dtype, or ``dtype``), ``"ndarray:DTYPE:N"`` with
    ``concat_tokens=N``, or ``"bytes"`` (older LLM Foundry: the ids as ``dtype``, int64 by
    default). Every id must fit the dtype (checked). ``concat_tokens``, ``no_wrap``,
    ``bos_ids``, ``eos_ids``: see the module. ``compression``, ``hashes``, ``size_limit``:
    MDSWriter's. ``output`` must be empty or new unless ``overwrite``.
    """
    started = time.perf_counter()
    prefixes = [prefixes] if isinstance(prefixes, (str, os.PathLike)) else list(prefixes)
    if not prefixes:
        raise ParameterError("no input pair given")
    if not isinstance(token_column, str) or not token_column:
        raise ParameterError(f"token_column= must be a column name, got {token_column!r}")
    concat_tokens = check_int("concat_tokens", concat_tokens, 1, allow_none=True)
    check_bool("no_wrap", no_wrap)
    if no_wrap and concat_tokens is None:
        raise ParameterError("no_wrap=True drops what is left of a document after its sample of concat_tokens= ids; "
                             "give concat_tokens=")
    sources = [IndexedFile.open(prefix) for prefix in prefixes]
    parsed = _token_encoding(encoding, dtype, sources, concat_tokens)
    values = parsed.dtype if parsed.dtype is not None else _values_dtype(parsed, dtype, sources)
    bos, eos = (_ids(name, ids, values) for name, ids in (("bos_ids", bos_ids), ("eos_ids", eos_ids)))
    if concat_tokens is None:
        packing = "one a document"
    else:
        packing = f"{concat_tokens:,} ids each, documents {'cut, the rest dropped (no_wrap)' if no_wrap else 'wrapped'}"
    if len(bos) or len(eos):
        packing += f", each document between {bos.tolist()} and {eos.tolist()}"
    summary = TokensSummary(inputs=[s.prefix for s in sources], output=os.path.normpath(output),
                            layout=f"{token_column}: {parsed.text}" + (f" of {values.name}" if parsed.kind is Kind.BYTES
                                                                      or parsed.dtype is None else ""),
                            packing=packing)
    with ShardWriter(output, {token_column: parsed.text}, compression=compression, hashes=hashes,
                     size_limit=size_limit, overwrite=overwrite) as writer:
        samples = _Samples(writer, parsed, values, concat_tokens, no_wrap, summary)
        total = sum(s.num_documents for s in sources)
        with count_bar(progress, total=total, unit=" docs", desc="convert to MDS") as meter:
            for source in sources:
                for tokens, lengths in _document_batches(source):
                    summary.documents += len(lengths)
                    summary.tokens_in += len(tokens)
                    summary.bytes_in += tokens.nbytes
                    tokens = _cast(tokens, values, source, parsed)
                    if len(bos) or len(eos):
                        tokens, lengths = _between(tokens, lengths, bos, eos)
                    samples.add(tokens, lengths)
                    meter.update(len(lengths))
        summary.dropped_tokens = samples.left_over()
    summary.shards, summary.bytes_out = len(writer.shards), writer.stored_bytes
    summary.seconds = time.perf_counter() - started
    return summary


def _token_encoding(text, dtype, sources, concat_tokens) -> Encoding:
    """The column's encoding, checked: integer ids, one axis, a fixed shape only of N ids."""
    try:
        encoding = parse_encoding(text, "encoding=", "tokens")
    except FormatError as error:
        raise ParameterError(f"encoding={text!r} is not an MDS encoding ({error.expected})") from None
    if encoding.kind not in (Kind.NDARRAY, Kind.BYTES):
        raise ParameterError(f"encoding={text!r} cannot hold token ids: give 'ndarray:int32' (LLM Foundry's), another "
                             "integer ndarray[:DTYPE], or 'bytes' (older LLM Foundry)")
    if encoding.dtype is not None and encoding.dtype.kind not in "iu":
        raise ParameterError(f"encoding={text!r} holds {encoding.dtype.name} values; token ids are integers")
    if encoding.dtype is not None and dtype is not None and integer_dtype(dtype) != encoding.dtype:
        raise ParameterError(f"dtype={np.dtype(dtype).name} differs from the dtype of encoding={text!r}; give one")
    if encoding.shape is not None:
        if len(encoding.shape) != 1 or concat_tokens != encoding.shape[0]:
            raise ParameterError(f"encoding={text!r} has a fixed shape: give concat_tokens={encoding.shape[0]} with "
                                 "it (one axis of N ids), or leave the shape out")
    for source in sources:
        if source.dtype.kind not in "iu":
            raise ParameterError(f"{source.bin_path} holds {source.dtype.name} values; token ids are integers")
    return encoding


def _values_dtype(encoding: Encoding, dtype, sources) -> np.dtype:
    """The dtype of the ids in a ``bytes`` column (int64 unless ``dtype``), or in an ndarray
    column that names none (the pairs' own unless ``dtype``)."""
    if dtype is not None:
        values = integer_dtype(dtype)
    elif encoding.kind is Kind.BYTES:
        values = np.dtype("int64")
    else:
        values = common_token_dtype([s.dtype for s in sources], [s.prefix for s in sources])
    if encoding.kind is Kind.NDARRAY and values.name not in DTYPE_CODES:
        raise ParameterError(f"dtype={values.name}: MDS ndarrays hold {', '.join(DTYPE_CODES)}")
    return values.newbyteorder("<")


def _cast(tokens: np.ndarray, values: np.dtype, source: IndexedFile, encoding: Encoding) -> np.ndarray:
    try:
        return cast_tokens(tokens, values)
    except ParameterError:
        low, high = int(tokens.min()), int(tokens.max())
        what = "encoding=" if encoding.dtype is not None else "dtype="
        raise ParameterError(f"{source.bin_path} holds ids {low}..{high}, which {values.name} does not hold (the column's "
                             f"values, {encoding.text}); give a wider {what}") from None


def _ids(name: str, ids, dtype: np.dtype) -> np.ndarray:
    if isinstance(ids, (int, np.integer)):
        ids = [ids]
    values = [check_int(name, i, 0) for i in ids]
    if values and max(values) > np.iinfo(dtype).max:
        raise ParameterError(f"{name}={values} do not fit the column's {dtype.name} values")
    return np.array(values, dtype)


def _document_batches(source: IndexedFile):
    """``(tokens, lengths)`` of the documents of ``source``, a batch of about BATCH_TOKENS ids
    at a time (a longer document alone); a document's sequences joined."""
    sequence_lengths = source.sequence_lengths.astype(np.int64)
    first_sequence = source.document_indices
    sequence_starts = np.zeros(len(sequence_lengths) + 1, np.int64)
    np.cumsum(sequence_lengths, out=sequence_starts[1:])
    document_starts = sequence_starts[first_sequence]
    documents = len(first_sequence) - 1
    begin = 0
    while begin < documents:
        end = int(np.searchsorted(document_starts, document_starts[begin] + BATCH_TOKENS, "right")) - 1
        end = min(max(end, begin + 1), documents)
        s0, s1 = int(first_sequence[begin]), int(first_sequence[end])
        tokens = source.read_pieces(np.arange(s0, s1), np.zeros(s1 - s0, np.int64), sequence_lengths[s0:s1])
        yield tokens, np.diff(document_starts[begin:end + 1])
        begin = end


def _between(tokens: np.ndarray, lengths: np.ndarray, bos: np.ndarray, eos: np.ndarray):
    """Each document's ids between ``bos`` and ``eos``."""
    extra = len(bos) + len(eos)
    new_lengths = lengths + extra
    out = np.empty(int(new_lengths.sum()), tokens.dtype)
    starts = np.cumsum(new_lengths) - new_lengths
    for k, value in enumerate(bos.tolist()):
        out[starts + k] = value
    for k, value in enumerate(eos.tolist()):
        out[starts + new_lengths - len(eos) + k] = value
    keep = np.ones(len(out), bool)
    keep[(starts[:, None] + np.arange(len(bos))).reshape(-1)] = False
    keep[(starts[:, None] + new_lengths[:, None] - len(eos) + np.arange(len(eos))).reshape(-1)] = False
    out[keep] = tokens
    return out, new_lengths


class _Samples:
    """Documents in, samples out to the writer, as the packing says."""

    def __init__(self, writer: ShardWriter, encoding: Encoding, values: np.dtype, concat_tokens, no_wrap,
                 summary: TokensSummary):
        self.writer, self.encoding, self.concat, self.no_wrap, self.summary = (writer, encoding, concat_tokens,
                                                                               no_wrap, summary)
        self.buffer = np.zeros(0, values)

    def add(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        if self.concat is None:
            empty = lengths == 0
            self.summary.empty_documents += int(empty.sum())
            self._write(tokens, lengths[~empty])
        elif not self.no_wrap:
            stream = np.concatenate((self.buffer, tokens))
            whole = len(stream) // self.concat * self.concat
            self._write(stream[:whole], np.full(whole // self.concat, self.concat, np.int64))
            self.buffer = stream[whole:]
        else:
            # ConcatTokensDataset with no_wrap: a document's ids join what is left; a full
            # sample is taken from the front and the rest dropped.
            kept, position = [], 0
            for length in lengths.tolist():
                document = tokens[position:position + length]
                position += length
                if len(self.buffer) + length >= self.concat:
                    taken = self.concat - len(self.buffer)
                    kept.append(np.concatenate((self.buffer, document[:taken])))
                    self.summary.dropped_tokens += length - taken
                    self.buffer = self.buffer[:0]
                else:
                    self.buffer = np.concatenate((self.buffer, document))
            if kept:
                self._write(np.concatenate(kept), np.full(len(kept), self.concat, np.int64))

    def _write(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        if len(lengths):
            data, sizes = token_samples(self.encoding, tokens, lengths)
            self.writer.write_encoded(data, sizes)
            self.summary.samples += len(lengths)
            self.summary.tokens_out += len(tokens)

    def left_over(self) -> int:
        """Ids that make no sample (fewer than concat_tokens at the end), with what no_wrap dropped."""
        return self.summary.dropped_tokens + len(self.buffer)


__all__ = ["BATCH_TOKENS", "DEFAULT_COLUMN", "DEFAULT_ENCODING", "pairs_to_mds"]
