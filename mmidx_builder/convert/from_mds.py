""":func:`mds_to_pairs`: MosaicML token shards (MDS ``index.json`` folders, or Composer's legacy
``index.mds``) -> one ``.bin``/``.idx`` pair, byte-identical to what megatron-core's
``IndexedDatasetBuilder`` writes for the same documents.

    one document a sample     (default) sample k of the streams, in order, is document k
    split_at_eos=ID           the samples' ids laid end to end (LLM Foundry packs documents
                              into samples, each ending in its EOS) and cut after every ID;
                              ids after the last ID are the last document

The pair is named as ``preprocess_data.py`` names its outputs, with the token column as the
key: ``{output_prefix}_{token_column}_document`` (``out/corpus_tokens_document.bin``). Its
dtype is the column's (int32 for LLM Foundry's ``ndarray:int32``, ``dtype`` for a ``bytes``
column), Megatron's rule for ``vocab_size`` when given (uint16 below 65,500 ids, else int32),
or ``dtype`` for an ndarray column; every id is checked to fit.

Compressed shards are decompressed into a hidden temporary folder beside the output, removed
at the end. The provenance sidecar records what is known: no tokenizer, the vocabulary size
and the EOS id when given.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Sequence

import numpy as np

from ..checks import check_int
from ..dtypes import cast_tokens, dtype_code, integer_dtype, megatron_writer_dtype
from ..errors import ConvertError, ParameterError
from ..mosaic.encodings import Kind
from ..mosaic.stats import local_index_path, open_local_stream
from ..mosaic.tokens import TokenColumn
from ..sources import provenance
from ..sources.indexed import IndexedFileWriter, split_prefix
from ..storage.files import WriterLock
from .outputs import output_prefix_for, refuse_existing
from .progress import count_bar
from .summary import TokensSummary
from .to_mds import BATCH_TOKENS, DEFAULT_COLUMN


def mds_inputs(inputs: Sequence[str]) -> list[str] | None:
    """The index file of each input when every one is a local MosaicML folder or index file
    (``index.json``, ``index.mds[.gz]``); None when none is; a ConvertError for a mix."""
    found = [local_index_path(os.fspath(i)) if os.path.exists(os.fspath(i)) else None for i in inputs]
    if all(f is None for f in found):
        return None
    if any(f is None for f in found):
        other = next(i for i, f in zip(inputs, found) if f is None)
        raise ConvertError(f"{other} is not an MDS folder or index while other inputs are: convert MDS streams and "
                           "text in separate runs")
    return found


def mds_to_pairs(inputs: Sequence[str] | str, output_prefix: str, *, token_column: str = DEFAULT_COLUMN,
                 dtype=None, vocab_size: int | None = None, split_at_eos: int | None = None,
                 overwrite: bool = False, progress: bool = False) -> TokensSummary:
    """Writes the ``token_column`` of the MosaicML streams ``inputs`` (folders or index files,
    read in order) as ``{output_prefix}_{token_column}_document.bin/.idx``; returns what was done.

    ``dtype``: how a ``bytes`` column is read (LLM Foundry's older shards: ``"int64"``;
    required there), or the output dtype for an ndarray column. ``vocab_size``: the output
    dtype by Megatron's rule instead. ``split_at_eos``: see the module. An existing pair is
    replaced only with ``overwrite``; nothing is left at the output names on failure.
    """
    started = time.perf_counter()
    inputs = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    if not inputs:
        raise ParameterError("no input given")
    indexes = mds_inputs(inputs)
    if indexes is None:
        raise ConvertError(f"{inputs[0]} is not an MDS folder or index file (index.json, index.mds[.gz])")
    split_at_eos = check_int("split_at_eos", split_at_eos, 0, allow_none=True)
    vocab_size = check_int("vocab_size", vocab_size, 1, allow_none=True)
    if not isinstance(token_column, str) or not token_column:
        raise ParameterError(f"token_column= must be a column name, got {token_column!r}")
    prefix = output_prefix_for(split_prefix(output_prefix), token_column)
    folder = os.path.dirname(prefix) or "."
    os.makedirs(folder, exist_ok=True)
    with WriterLock(prefix) as lock, tempfile.TemporaryDirectory(prefix=".mmidx-unpack-", dir=folder) as unpack:
        if not overwrite:
            refuse_existing([prefix])
        columns = [TokenColumn(open_local_stream(index, unpack_dir=unpack), token_column, dtype=dtype)
                   for index in indexes]
        out_dtype = _output_dtype(columns, dtype, vocab_size)
        if split_at_eos is not None and split_at_eos > np.iinfo(out_dtype).max:
            raise ParameterError(f"split_at_eos={split_at_eos} does not fit the output's {out_dtype.name} ids")
        summary = TokensSummary(inputs=list(indexes), output=prefix, layout=out_dtype.name, to_mds=False,
                                packing="one a sample" if split_at_eos is None else f"split after every id {split_at_eos}")
        ends_with_eos = _write(columns, prefix, out_dtype, split_at_eos, lock, summary, progress)
        provenance.write_sidecar(prefix, tokenizer=None, vocab_size=vocab_size, eod_id=split_at_eos,
                                 append_eod=bool(ends_with_eos))
    summary.bytes_out = os.path.getsize(prefix + ".bin") + os.path.getsize(prefix + ".idx")
    summary.seconds = time.perf_counter() - started
    return summary


def _output_dtype(columns: list[TokenColumn], dtype, vocab_size) -> np.dtype:
    ndarray = any(c.encoding.kind is Kind.NDARRAY for c in columns)
    if vocab_size is not None:
        if dtype is not None and ndarray:
            raise ParameterError("vocab_size= and dtype= both set the output dtype of an ndarray column; give one")
        return megatron_writer_dtype(vocab_size)
    if dtype is not None and ndarray:
        chosen = integer_dtype(dtype)
    else:
        found = {c.dtype.newbyteorder("=") for c in columns}
        if len(found) > 1:
            raise ParameterError(f"the streams' columns hold {', '.join(sorted(d.name for d in found))} ids; give the "
                                 "output's dtype= or vocab_size=")
        chosen = found.pop()
    try:
        dtype_code(chosen)
    except ParameterError:
        raise ParameterError(f"a Megatron .idx cannot hold {chosen.name} ids (its dtypes: uint8, int8, int16, int32, "
                             "int64, uint16...); give vocab_size= (Megatron's rule) or dtype=") from None
    return chosen


def _write(columns, prefix, out_dtype, eos, lock, summary: TokensSummary, progress: bool) -> bool | None:
    """Every sample of ``columns`` written as documents; whether the last document ends with
    ``eos`` (None without it)."""
    carry = np.zeros(0, out_dtype)
    with IndexedFileWriter(prefix, dtype=out_dtype, lock=lock) as writer, \
            count_bar(progress, total=sum(len(c.sequence_lengths) for c in columns), unit=" samples",
                      desc="convert from MDS") as meter:
        for column in columns:
            for tokens, lengths in _sample_batches(column):
                summary.samples += len(lengths)
                summary.tokens_in += len(tokens)
                summary.bytes_in += tokens.nbytes
                tokens = _cast(tokens, out_dtype, column)
                if eos is None:
                    writer.add_documents(tokens, lengths)
                    summary.documents += len(lengths)
                    summary.tokens_out += len(tokens)
                else:
                    stream = np.concatenate((carry, tokens))
                    ends = np.flatnonzero(stream == eos) + 1
                    if len(ends):
                        writer.add_documents(stream[:ends[-1]], np.diff(ends, prepend=0))
                        summary.documents += len(ends)
                        summary.tokens_out += int(ends[-1])
                    carry = stream[ends[-1] if len(ends) else 0:]
                meter.update(len(lengths))
        if len(carry):
            writer.add_documents(carry, [len(carry)])
            summary.documents += 1
            summary.tokens_out += len(carry)
    return None if eos is None else (summary.tokens_out > 0 and not len(carry))


def _sample_batches(column: TokenColumn):
    """``(tokens, lengths)`` of the column's samples, about BATCH_TOKENS ids a batch."""
    lengths = column.sequence_lengths.astype(np.int64)
    starts = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=starts[1:])
    begin = 0
    while begin < len(lengths):
        end = int(np.searchsorted(starts, starts[begin] + BATCH_TOKENS, "right")) - 1
        end = min(max(end, begin + 1), len(lengths))
        ids = np.arange(begin, end)
        yield column.read_pieces(ids, np.zeros(len(ids), np.int64), lengths[begin:end]), lengths[begin:end]
        begin = end


def _cast(tokens: np.ndarray, out_dtype: np.dtype, column: TokenColumn) -> np.ndarray:
    try:
        return cast_tokens(tokens, out_dtype)
    except ParameterError:
        raise ParameterError(f"{column.files.index.path} holds ids {int(tokens.min())}..{int(tokens.max())}, which "
                             f"{out_dtype.name} does not hold; give a larger vocab_size= or dtype=") from None


__all__ = ["mds_inputs", "mds_to_pairs"]
