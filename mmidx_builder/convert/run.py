""":func:`convert`: its settings checked, the tokenizer loaded, every output name locked, then
the batches read (inputs.py), encoded (workers.py) and written in order (outputs.py)."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Sequence

import numpy as np

from ..sources import provenance
from ..storage.files import WriterLock
from ..dtypes import megatron_writer_dtype
from ..errors import ConvertError, ParameterError
from ..sources.indexed import IndexedFileWriter, split_prefix
from ..checks import check_int
from .encode import EncodeJob
from .inputs import InputBatches, plan_inputs
from .outputs import output_prefix_for, refuse_existing, write_result
from .progress import Meter
from .readers.base import max_line_bytes
from .records import MAX_DOCUMENT_CHARS
from .sentences import SentenceSplitter
from .summary import ConvertSummary
from .tokenize import Tokenizer, load_tokenizer
from .workers import encoded_batches


def convert(inputs: Sequence[str] | str, output_prefix: str, tokenizer: str | Tokenizer = "bytes", *,
            json_keys: Sequence[str] = ("text",), append_eod: bool = False, eod_id: int | None = None,
            vocab_size: int | None = None, workers: int = 1, num_shards: int = 1, shard_index: int = 0,
            one_document_per_file: bool = False, streaming: bool = False, skip_bad_records: bool = False,
            overwrite: bool = False, progress: bool = False, add_special_tokens: bool = False,
            split_sentences: bool = False, keep_newlines: bool = False, lang: str = "english",
            max_document_chars: int = MAX_DOCUMENT_CHARS, tokenizer_options: dict | None = None) -> ConvertSummary:
    """Tokenizes ``inputs`` into ``{output_prefix}_{key}_document.bin/.idx`` per JSON key.

    ``tokenizer`` is ``"bytes"``, ``"none"`` (records hold token-id lists; give
    ``vocab_size``), a ``tokenizer.json`` or a sentencepiece ``.model``; ids are what
    megatron-core's tokenizer gives (no truncation, no padding, no special tokens unless
    ``add_special_tokens``), or one of Megatron's vocabulary-file tokenizers by name with its
    files in ``tokenizer_options`` (:func:`.tokenize.load_tokenizer`). ``split_sentences`` (nltk Punkt for ``lang``; ``keep_newlines``)
    writes ``..._{key}_sentence`` pairs with one sequence per sentence. Documents keep
    input order for any ``workers``. ``num_shards``/``shard_index`` convert one contiguous
    slice; :func:`merge` of all slices in order equals a single run. Raises
    :class:`ConvertError` on the first bad record (file and line) unless
    ``skip_bad_records``; nothing is left at the output names on failure.
    """
    started = time.perf_counter()
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    keys = list(json_keys)
    if not keys or len(set(keys)) != len(keys):
        raise ConvertError(f"json_keys= must be distinct and at least one, got {keys}")
    if not inputs:
        raise ConvertError("no input given")
    num_shards = check_int("num_shards", num_shards, 1)
    shard_index = check_int("shard_index", shard_index, 0)
    if shard_index >= num_shards:
        raise ParameterError(f"shard_index= must be below num_shards= ({num_shards}), got {shard_index}")
    workers = check_int("workers", workers, 1)
    max_document_chars = check_int("max_document_chars", max_document_chars, 0, "0: no limit")
    planned = plan_inputs(inputs, one_document_per_file=one_document_per_file)
    if any(item.kind == "text" for item in planned) and len(keys) > 1:
        raise ConvertError(f"text inputs have one field; give one key in json_keys=, not {keys}")
    tok = load_tokenizer(tokenizer, eod_id=eod_id, vocab_size=vocab_size, add_special_tokens=add_special_tokens,
                         **(tokenizer_options or {}))
    if append_eod and tok.eod_id is None:
        raise ConvertError(f"tokenizer {tok.name!r} has no end-of-document token; pass eod_id=")
    dtype = megatron_writer_dtype(tok.vocab_size)
    if tok.eod_id is not None and not 0 <= tok.eod_id <= np.iinfo(dtype).max:
        raise ConvertError(f"the end-of-document id {tok.eod_id} does not fit the output dtype {dtype.name} "
                           f"(ids 0..{np.iinfo(dtype).max}); give an id inside the vocabulary")
    if keep_newlines and not split_sentences:
        raise ConvertError("keep_newlines=True keeps newlines between split sentences; it needs split_sentences=True")
    if split_sentences and tok.pretokenized:
        raise ConvertError("split_sentences=True splits text; tokenizer='none' reads token-id lists")
    splitter = SentenceSplitter(lang, keep_newlines) if split_sentences else None

    level = "sentence" if split_sentences else "document"
    outputs = {key: output_prefix_for(split_prefix(output_prefix), key, level) for key in keys}
    # Each output name is locked from the existence check to its sidecar: a second convert
    # (or merge) to the same prefix is refused, never mixed with this one.
    with contextlib.ExitStack() as locks:
        held = {key: locks.enter_context(WriterLock(prefix)) for key, prefix in outputs.items()}
        if not overwrite:
            refuse_existing(outputs.values())
        summary = _convert_locked(planned, keys, tok, dtype, outputs, held, splitter, started, append_eod=append_eod,
                                  workers=workers, num_shards=num_shards, shard_index=shard_index, streaming=streaming,
                                  skip_bad_records=skip_bad_records, progress=progress,
                                  keep_newlines=keep_newlines, max_document_chars=max_document_chars)
    summary.seconds = time.perf_counter() - started
    return summary


def _convert_locked(planned, keys, tok, dtype, outputs, held, splitter, started, *, append_eod, workers, num_shards,
                    shard_index, streaming, skip_bad_records, progress, keep_newlines, max_document_chars
                    ) -> ConvertSummary:
    """:func:`convert` after its checks, with every output name locked (``held``)."""
    batches = InputBatches(planned, keys, num_shards=num_shards, shard_index=shard_index,
                           skip_bad=skip_bad_records, streaming=streaming, max_document_chars=max_document_chars,
                           max_line_bytes=None if tok.pretokenized else max_line_bytes(max_document_chars, keys))
    summary = ConvertSummary(outputs=outputs, tokenizer=tok.name, dtype=dtype.name, workers=workers,
                             shard=(shard_index, num_shards) if num_shards > 1 else None,
                             tokens={key: 0 for key in keys}, special_tokens=tok.add_special_tokens,
                             model_max_length=tok.model_max_length)
    if append_eod:
        summary.eod = f"{tok.eod_id}" + (f" = {tok.eod_source}" if tok.eod_source else "")
    if splitter:
        summary.sentences = f"{splitter.source}" + (", newlines kept" if keep_newlines else "")
    writers = {}
    try:
        for key, prefix in outputs.items():
            writers[key] = IndexedFileWriter(prefix, dtype=dtype, lock=held[key])
        job = EncodeJob(tok, keys, append_eod, dtype, splitter, max_document_chars)
        with encoded_batches(batches, job, workers) as results, Meter(progress) as meter:
            for result in results:
                write_result(result, writers, summary, skip_bad_records)
                meter.update(summary, started)
        summary.bad_records += len(batches.bad_files)
        # Every damaged or unreadable file is listed, past the cap of record examples: its
        # line says how much of it was kept.
        summary.bad_examples.extend(batches.bad_files)
        for writer in writers.values():
            writer.close()
    except BaseException:
        for writer in writers.values():
            writer.abort()
        raise
    for prefix in outputs.values():  # after the pairs are complete: a sidecar never describes a partial pair
        provenance.write_sidecar(prefix, tokenizer=tok.name, vocab_size=tok.vocab_size, eod_id=tok.eod_id,
                                 append_eod=append_eod)
    return summary


__all__ = ["convert"]
