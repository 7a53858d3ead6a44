"""One Batch of raw records -> token arrays: what a worker does (workers.py runs it).

Records are parsed by their format's reader and checked (records.py), texts encoded with
``tokenizer.encode_batch`` (no truncation, no padding), the EOD appended to every non-empty
document, and the ids cast to the output dtype; with a sentence splitter every non-empty
sentence is one sequence of its document, as preprocess_data.py's ``--split-sentences``.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from ..errors import ConvertError
from .readers.base import Batch
from .records import good_values
from .sentences import SentenceSplitter
from .tokenize import Tokenizer


@dataclasses.dataclass
class EncodeJob:
    """What every batch of one run is encoded with; pickled once into each worker."""

    tokenizer: Tokenizer
    keys: list
    append_eod: bool
    dtype: np.dtype
    splitter: SentenceSplitter | None = None
    max_document_chars: int = 0


@dataclasses.dataclass
class BatchResult:
    tokens: dict  # key -> all documents' tokens, concatenated, EODs included
    lengths: dict  # key -> tokens per document (0: the document tokenized to nothing)
    bad: list  # (where, problem) per bad record, in order
    input_bytes: int
    # Split sentences only: key -> (sequences per document, every sequence's length).
    sentences: dict | None = None


def encode_batch(batch: Batch, job: EncodeJob) -> BatchResult:
    tokenizer, keys, dtype, splitter = job.tokenizer, job.keys, job.dtype, job.splitter
    bad: list = []
    kept, values = good_values(batch, keys, bad, pretokenized=tokenizer.pretokenized, vocab_size=tokenizer.vocab_size,
                               max_document_chars=job.max_document_chars)
    eod = tokenizer.eod_id if job.append_eod else None
    tokens, lengths, sentences = {}, {}, {} if splitter else None
    for key in keys:
        texts = values[key]
        if splitter:
            pieces = [_split(splitter, text, batch.where(k), key) for k, text in zip(kept, texts)]
            flat = [sentence for piece in pieces for sentence in piece]
            wheres = [batch.where(k) for k, piece in zip(kept, pieces) for _ in piece]
            encoded = _encode(tokenizer, flat, wheres, key) if flat else []
            try:
                tokens[key], lengths[key], sentences[key] = _flatten_sentences(encoded, [len(p) for p in pieces],
                                                                              eod, dtype)
            except (OverflowError, ValueError):
                raise _id_outside_dtype(encoded, dtype, wheres, key) from None
            continue
        wheres = [batch.where(k) for k in kept]
        encoded = texts if tokenizer.pretokenized else (_encode(tokenizer, texts, wheres, key) if texts else [])
        try:
            tokens[key], lengths[key] = _flatten(encoded, eod, dtype)
        except (OverflowError, ValueError):  # numpy refuses an id outside the dtype
            raise _id_outside_dtype(encoded, dtype, wheres, key) from None
    return BatchResult(tokens, lengths, bad, batch.input_bytes, sentences)


def _encode(tokenizer: Tokenizer, texts: list, wheres: list[str], key: str) -> list:
    """``tokenizer.encode_batch(texts)``; a text the tokenizer fails on (tokenizers raises a
    bare Exception, e.g. a WordPiece model whose unk token is not in its vocabulary) is a
    ConvertError naming the record, found by encoding the batch's texts one at a time."""
    try:
        return tokenizer.encode_batch(texts)
    except Exception as error:  # noqa: BLE001 - tokenizers' own errors are bare Exceptions
        for where, text in zip(wheres, texts):
            try:
                tokenizer.encode_batch([text])
            except Exception as single:  # noqa: BLE001
                raise ConvertError(f"{where}: {key!r}: the tokenizer cannot encode this text: {single}") from None
        raise ConvertError(f"{wheres[0] if wheres else key}: the tokenizer failed on a batch: {error}") from None


def _id_outside_dtype(encoded: list, dtype: np.dtype, wheres: list[str], key: str) -> ConvertError:
    """The first document holding an id the output dtype cannot hold, named. The dtype
    follows the vocabulary size as Megatron's (len(tokenizer)); a tokenizer whose ids run
    past it (a sparse vocabulary) would crash preprocess_data.py's worker there."""
    info = np.iinfo(dtype)
    for where, ids in zip(wheres, encoded):
        bad = [i for i in ids if not info.min <= i <= info.max]
        if bad:
            return ConvertError(f"{where}: {key!r}: token id {bad[0]} does not fit the output dtype {dtype.name} "
                                f"(ids {info.min}..{info.max}, chosen from the tokenizer's vocabulary size as "
                                "Megatron chooses it); the tokenizer gives ids past its vocabulary size")
    return ConvertError(f"{key!r}: a token id does not fit the output dtype {dtype.name}")


def _split(splitter: SentenceSplitter, text: str, where: str, key: str) -> list[str]:
    try:
        return splitter.split(text)
    except TimeoutError as error:  # nltk's guard against regular expressions that backtrack for ever
        raise ConvertError(f"{where}: nltk's Punkt gave up splitting the {key!r} text into sentences ({error}); "
                           "the keep_newlines=True pattern is slow on long runs without whitespace "
                           "(preprocess_data.py stops there too): convert without keep_newlines=True or clean "
                           "the text") from None


def _flatten_sentences(encoded: list, counts: list[int], eod: int | None, dtype: np.dtype):
    """preprocess_data's sentence level: a sentence that tokenizes to nothing is dropped, the
    others are the document's sequences, and the EOD lengthens the last one."""
    per_document, sequence_lengths, document_lengths, parts = [], [], [], []
    first = 0
    for count in counts:
        kept = [ids for ids in encoded[first:first + count] if len(ids)]
        first += count
        lengths = [len(ids) for ids in kept]
        parts.extend(kept)
        if kept and eod is not None:
            parts.append((eod,))
            lengths[-1] += 1
        per_document.append(len(lengths))
        sequence_lengths.extend(lengths)
        document_lengths.append(sum(lengths))
    total = sum(document_lengths)
    flat = np.fromiter(itertools.chain.from_iterable(parts), dtype, count=total)
    return flat, np.array(document_lengths, np.int64), (np.array(per_document, np.int64),
                                                        np.array(sequence_lengths, np.int64))


def _flatten(encoded: list, eod: int | None, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Documents' ids back to back, EOD after each non-empty one (as preprocess_data does)."""
    lengths = np.fromiter((len(ids) for ids in encoded), np.int64, count=len(encoded))
    eods = (lengths > 0) if eod is not None else np.zeros(len(encoded), bool)
    total_lengths = lengths + eods
    total = int(total_lengths.sum())
    if encoded and isinstance(encoded[0], np.ndarray):
        parts = []
        tail = np.array([eod if eod is not None else 0], dtype)
        for ids, has_eod in zip(encoded, eods.tolist()):
            parts.append(ids)
            if has_eod:
                parts.append(tail)
        flat = np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
    elif eod is None:
        flat = np.fromiter(itertools.chain.from_iterable(encoded), dtype, count=total)
    else:
        tail = (eod,)
        flat = np.fromiter(itertools.chain.from_iterable(
            itertools.chain.from_iterable((ids, tail) if len(ids) else (ids,) for ids in encoded)),
            dtype, count=total)
    return flat, total_lengths
