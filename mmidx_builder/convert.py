"""Text or token lists -> ``.bin``/``.idx``: Megatron's ``tools/preprocess_data.py``, as a library.

The path of one document:

    input file ──reader (this process)──> Batch of raw lines / rows, in input order
        ──worker process──> JSON parse, key lookup, tokenizer.encode_batch, + EOD
        ──this process, in submission order──> IndexedFileWriter per JSON key

Outputs are named as preprocess_data names them, ``{prefix}_{key}_document.bin/.idx``, and
hold what it writes: uint16 ids below 65,500 vocabulary entries else int32 (Megatron's
``DType.optimal_dtype``), EOD appended to every non-empty document, and a document that
tokenizes to nothing stored as a document of zero sequences. With ``split_sentences``
(:mod:`.sentences`) every non-empty sentence is one sequence of its document, the EOD
closes the last one, and the names end in ``_sentence``.

Sharding for clusters: the inputs are laid end to end as one byte range, cut into K equal
parts; shard i converts every unit (a line of an uncompressed file; a whole compressed or
one-document file; a Parquet row group) whose first byte lies in part i. Units are
contiguous runs of the document stream, so merging shards 0..K-1 in order gives the bytes
of a single run. ``hf:`` inputs shard with ``Dataset.shard(contiguous=True)`` instead.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import bz2
import glob
import gzip
import itertools
import json
import lzma
import multiprocessing
import os
import time
import zlib
from typing import Iterable, Iterator, Sequence

import numpy as np

from .errors import ConvertError, MMIdxError
from . import provenance
from ._io import WriterLock
from .format import IndexedFile, IndexedFileWriter, split_prefix
from .sentences import SentenceSplitter
from .dtypes import megatron_writer_dtype
from .tokenize import Tokenizer, load_tokenizer

COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".lzma", ".zst", ".zstd")
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
TEXT_SUFFIXES = (".txt", ".text")
PARQUET_SUFFIXES = (".parquet", ".pq")
HF_SCHEME = "hf:"
# A batch ends at whichever comes first; about 1 MiB keeps a worker busy for tens of ms,
# long enough to pay for the pickling, short enough for an even spread over workers.
BATCH_RECORDS = 1024
BATCH_BYTES = 1 << 20
# Bad records listed in the summary (all are counted).
BAD_EXAMPLES = 10
# The longest document (in characters) tokenized by default: one 200 MB document took a
# tokenizer.json to 23 GB of memory (the tokenizers library's own, ~100 bytes per character),
# so longer ones are refused as bad records unless the caller raises the limit.
MAX_DOCUMENT_CHARS = 10_000_000


# What reading a damaged or unreadable input raises: gzip's zlib and xz's lzma errors derive
# from none of the builtin ones.
_DAMAGE = (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError)


@dataclasses.dataclass
class Input:
    spec: str  # as the user gave it
    path: str
    kind: str  # "json", "text", "parquet" or "hf"
    compressed: bool = False
    whole: bool = False  # one document per file
    size: int = 0  # bytes on disk; 0 for hf


@dataclasses.dataclass
class Batch:
    """Raw records of one source, in order. ``payloads`` is a list of bytes (json, text) or,
    for ``rows``, a dict of column lists; ``positions`` locate each record in ``unit``s."""

    source: str
    kind: str  # "json", "text" or "rows"
    unit: str  # "line", "byte", "row" or "file"
    positions: list
    payloads: list | dict
    input_bytes: int

    def __len__(self) -> int:
        return len(self.positions)

    def where(self, k: int) -> str:
        if self.unit == "file":
            return self.source
        return f"{self.source}, {self.unit} {self.positions[k]}"


@dataclasses.dataclass
class BatchResult:
    tokens: dict  # key -> all documents' tokens, concatenated, EODs included
    lengths: dict  # key -> tokens per document (0: the document tokenized to nothing)
    bad: list  # (where, problem) per bad record, in order
    input_bytes: int
    # Split sentences only: key -> (sequences per document, every sequence's length).
    sentences: dict | None = None


@dataclasses.dataclass
class ConvertSummary:
    """What :func:`convert` did; ``table()`` is what the CLI prints."""

    outputs: dict  # key -> output prefix
    tokenizer: str
    dtype: str
    documents: int = 0
    tokens: dict = dataclasses.field(default_factory=dict)  # key -> token count
    empty_documents: int = 0
    bad_records: int = 0
    bad_examples: list = dataclasses.field(default_factory=list)
    input_bytes: int = 0
    seconds: float = 0.0
    workers: int = 1
    shard: tuple | None = None  # (index, count)
    eod: str = ""  # the EOD id and where it came from, with --append-eod
    special_tokens: bool = False
    sentences: str = ""  # the sentence splitter, with --split-sentences
    model_max_length: int | None = None  # from tokenizer_config.json
    long_documents: int = 0  # documents (per key) longer than model_max_length
    longest_document: int = 0  # tokens, EOD included

    def table(self) -> str:
        seconds = max(self.seconds, 1e-9)
        total_tokens = sum(self.tokens.values())
        rows = [("tokenizer", self.tokenizer + (" + post-processor special tokens" if self.special_tokens else "")),
                ("dtype", self.dtype), ("workers", str(self.workers))]
        if self.eod:
            rows.append(("EOD", self.eod))
        if self.sentences:
            rows.append(("sentences", self.sentences))
        if self.shard:
            rows.append(("shard", f"{self.shard[0]} of {self.shard[1]}"))
        rows += [("documents", f"{self.documents:,} ({self.empty_documents:,} tokenized to nothing)"),
                 ("tokens", f"{total_tokens:,}"),
                 ("bad records", f"{self.bad_records:,} skipped" if self.bad_records else "0"),
                 ("input", f"{self.input_bytes / 1e6:,.1f} MB"),
                 ("time", f"{self.seconds:,.1f} s"),
                 ("speed", f"{self.documents / seconds:,.0f} docs/s, {total_tokens / seconds:,.0f} tokens/s, "
                           f"{self.input_bytes / 1e6 / seconds:,.1f} MB/s")]
        rows += [(f"output [{key}]", f"{prefix}.bin/.idx ({self.tokens.get(key, 0):,} tokens)")
                 for key, prefix in self.outputs.items()]
        if self.model_max_length:
            rows.append(("model max length", self.length_note()))
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value}" for name, value in rows]
        lines += [f"  bad: {where}: {problem}" for where, problem in self.bad_examples]
        return "\n".join(lines)

    def length_note(self) -> str:
        """The tokenizer's model_max_length against the documents: nothing is truncated (as in
        preprocess_data.py), so longer documents are for the training side to pack or cut."""
        limit = self.model_max_length
        if not self.long_documents:
            return f"{limit:,} (tokenizer_config.json); no document is longer"
        many = f"{self.long_documents:,} documents are" if self.long_documents > 1 else "1 document is"
        return (f"WARNING: {many} longer than the tokenizer's model_max_length "
                f"{limit:,} (the longest has {self.longest_document:,} tokens, {self.longest_document / limit:,.1f}x); "
                f"they are kept whole, as preprocess_data.py keeps them: train with packed sequences "
                f"(GPTDataset's seq_length), not one document per example")


def output_prefix_for(prefix: str, key: str, level: str = "document") -> str:
    """Megatron's name: ``{prefix}_{key}_{level}``, level ``document``, or ``sentence`` when
    sentences are split."""
    return f"{prefix}_{key}_{level}"


# --- inputs ----------------------------------------------------------------------------

def plan_inputs(specs: Sequence[str], *, one_document_per_file: bool = False) -> list[Input]:
    """Classifies each input (globs expanded, sorted) by its extension."""
    inputs = []
    for spec in specs:
        spec = os.fspath(spec)
        if spec.startswith(HF_SCHEME):
            inputs.append(Input(spec, spec[len(HF_SCHEME):], "hf"))
            continue
        paths = sorted(glob.glob(spec)) if glob.has_magic(spec) else [spec]
        if not paths:
            raise ConvertError(f"{spec}: the pattern matches no file")
        for path in paths:
            name = path.lower()
            compressed = name.endswith(COMPRESSION_SUFFIXES)
            if compressed:
                name = os.path.splitext(name)[0]
            if name.endswith(JSON_SUFFIXES):
                kind = "json"
            elif name.endswith(TEXT_SUFFIXES):
                kind = "text"
            elif name.endswith(PARQUET_SUFFIXES) and not compressed:
                kind = "parquet"
            else:
                raise ConvertError(f"{path}: cannot tell the input format from the name; expected "
                                   f"{', '.join(JSON_SUFFIXES + TEXT_SUFFIXES + PARQUET_SUFFIXES)} "
                                   f"(text and JSON also with {', '.join(COMPRESSION_SUFFIXES)}), "
                                   f"or hf:NAME_OR_PATH[:SPLIT] for datasets.load_dataset")
            inputs.append(Input(spec, path, kind, compressed, whole=one_document_per_file and kind == "text"))
    return inputs


class _Shard:
    """Which units belong to shard ``index`` of ``count`` over ``total`` bytes."""

    def __init__(self, index: int, count: int, total: int):
        self.index, self.count, self.total = index, count, total
        self.low = index * total // count
        self.high = (index + 1) * total // count
        self.last = index == count - 1

    def owns(self, position: int) -> bool:
        return self.low <= position and (position < self.high or self.last)


class _Reader:
    """Turns the inputs into Batches, in order, for one shard (or all)."""

    def __init__(self, inputs: list[Input], keys: list[str], *, num_shards: int, shard_index: int,
                 skip_bad: bool, streaming: bool, max_line_bytes: int | None = None):
        self.inputs, self.keys = inputs, keys
        self.max_line_bytes = max_line_bytes
        self.skip_bad, self.streaming = skip_bad, streaming
        self.bad_files: list[tuple[str, str]] = []
        self.num_shards, self.shard_index = num_shards, shard_index
        hf = [i for i in inputs if i.kind == "hf"]
        if num_shards > 1 and hf and len(inputs) > 1:
            raise ConvertError("with --num-shards, an hf: input must be the only input "
                               f"(got {len(inputs)} inputs); convert it in a run of its own")
        position = 0
        self.starts = []
        for item in inputs:
            if item.kind != "hf":
                item.size = self._size(item)
            self.starts.append(position)
            position += item.size
        self.shard = _Shard(shard_index, num_shards, position)

    def _size(self, item: Input) -> int:
        try:
            return os.path.getsize(item.path)
        except OSError as error:
            self._bad_file(item.path, f"cannot read: {error.strerror or error}")
            return 0

    def _bad_file(self, path: str, problem: str) -> None:
        if not self.skip_bad:
            raise ConvertError(f"{path}: {problem}")
        self.bad_files.append((path, problem))

    def __iter__(self) -> Iterator[Batch]:
        for item, start in zip(self.inputs, self.starts):
            if item.path in {path for path, _ in self.bad_files}:
                continue
            records = 0  # of this file, handed on before any damage
            try:
                for batch in self._batches_of(item, start):
                    records += len(batch)
                    yield batch
            except _DAMAGE as error:  # unreadable, corrupt archive, bad parquet
                if isinstance(error, MMIdxError):
                    raise
                if not records:
                    kept = ""
                elif self.skip_bad:
                    kept = (f"; the {records:,} records before the damage were kept (bad ones among them "
                            "are counted as bad records), the rest of the file was skipped")
                    if item.compressed and not isinstance(error, EOFError):
                        # Garbage inside a deflate/xz stream decodes to plausible text until the
                        # decoder meets an impossible code; nothing marks where it began.
                        kept += ("; the last records before it may hold damaged text the decompressor "
                                 "could not detect")
                else:
                    kept = (f"; the {records:,} records before the damage were readable, but nothing was "
                            "written (pass --skip-bad-records to keep them)")
                self._bad_file(item.path, f"cannot read: {error}{kept}")

    def _batches_of(self, item: Input, start: int) -> Iterator[Batch]:
        if item.kind == "hf":
            yield from self._hf(item)
        elif item.kind == "parquet":
            yield from self._parquet(item, start)
        elif item.compressed or item.whole:
            if self.shard.owns(start):
                yield from self._whole_or_compressed(item)
        else:
            yield from self._lines(item, start)

    def _batches(self, source: str, kind: str, unit: str, records: Iterable[tuple[int, bytes]]) -> Iterator[Batch]:
        if kind == "json":
            records = _universal_newlines(records, unit)
        positions, payloads, size = [], [], 0
        try:
            for position, payload in records:
                positions.append(position)
                payloads.append(payload)
                size += len(payload)
                if len(positions) >= BATCH_RECORDS or size >= BATCH_BYTES:
                    yield Batch(source, kind, unit, positions, payloads, size)
                    positions, payloads, size = [], [], 0
        except _DAMAGE:
            # A damaged file (a compressed one cut short or with garbage inside): every
            # record read before the damage goes on, then the error (see __iter__).
            if positions:
                yield Batch(source, kind, unit, positions, payloads, size)
            raise
        if positions:
            yield Batch(source, kind, unit, positions, payloads, size)

    def _lines(self, item: Input, start: int) -> Iterator[Batch]:
        low = max(self.shard.low - start, 0)
        high = item.size if self.shard.last else min(self.shard.high - start, item.size)
        if low >= high:
            return
        with open(item.path, "rb", buffering=1 << 20) as f:
            if low == 0:
                # From the file's start, lines can be numbered.
                records = enumerate(_bounded_lines(f, self.max_line_bytes), start=1)
                unit = "line"
                if high < item.size:
                    records = _lines_below(records, high)
            else:
                # Mid-file: the line holding byte low-1 belongs to the shard before.
                f.seek(low - 1)
                f.readline()
                records = _lines_from(_bounded_lines(f, self.max_line_bytes), f.tell(), high)
                unit = "byte"
            yield from self._batches(item.path, item.kind, unit, records)

    def _whole_or_compressed(self, item: Input) -> Iterator[Batch]:
        opened = _open_compressed(item.path) if item.compressed else open(item.path, "rb")
        with opened as f:
            if item.whole:
                limit = self.max_line_bytes
                data = f.read() if limit is None else f.read(limit + 1)
                if limit is not None and len(data) > limit:
                    data = _Overlong(len(data))  # at least that long; not read further
                yield Batch(item.path, "text", "file", [0], [data], item.size)
                return
            lines = enumerate(_bounded_lines(f, self.max_line_bytes), start=1)
            for batch in self._batches(item.path, item.kind, "line", lines):
                batch.input_bytes = 0  # the meter counts compressed bytes, once the file is read
                yield batch
        yield Batch(item.path, item.kind, "line", [], [], item.size)

    def _parquet(self, item: Input, start: int) -> Iterator[Batch]:
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(item.path)
        missing = [key for key in self.keys if key not in parquet.schema_arrow.names]
        if missing:
            self._bad_file(item.path, f"no column {missing[0]!r}; the columns are {parquet.schema_arrow.names}")
            return
        metadata = parquet.metadata
        groups = metadata.num_row_groups
        first_row = 0
        for group in range(groups):
            rows = metadata.row_group(group).num_rows
            # A row group's place in the byte range: evenly spread over the file, so that
            # every group has one owner and groups keep their order.
            if self.shard.owns(start + group * item.size // max(groups, 1)):
                position = first_row
                size = sum(metadata.row_group(group).column(c).total_compressed_size
                           for c in range(metadata.num_columns))
                for table in parquet.iter_batches(batch_size=BATCH_RECORDS, row_groups=[group], columns=self.keys):
                    columns = {key: table.column(key).to_pylist() for key in self.keys}
                    n = table.num_rows
                    share = size * n // max(rows, 1)
                    yield Batch(item.path, "rows", "row", list(range(position, position + n)), columns, share)
                    position += n
            first_row += rows

    def _hf(self, item: Input) -> Iterator[Batch]:
        try:
            import datasets
        except ImportError as error:  # pragma: no cover - datasets is a dependency
            raise ConvertError(f"{item.spec}: hf: inputs need the datasets package ({error})") from None
        name, _, split = item.path.partition(":")
        split = split or "train"
        try:
            dataset = datasets.load_dataset(name, split=split, streaming=self.streaming)
        except Exception as error:  # load_dataset raises many kinds; all mean "cannot open"
            raise ConvertError(f"{item.spec}: datasets.load_dataset({name!r}, split={split!r}) failed: "
                               f"{type(error).__name__}: {error}") from None
        if self.num_shards > 1:
            try:
                dataset = dataset.shard(self.num_shards, self.shard_index, contiguous=True)
            except (ValueError, IndexError) as error:
                raise ConvertError(f"{item.spec}: cannot cut into {self.num_shards} shards: {error}") from None
        columns = dataset.column_names or []
        missing = [key for key in self.keys if columns and key not in columns]
        if missing:
            raise ConvertError(f"{item.spec}: no column {missing[0]!r}; the columns are {columns}")
        source = item.spec + (f" (shard {self.shard_index} of {self.num_shards})" if self.num_shards > 1 else "")
        position = 0
        for table in dataset.select_columns(self.keys).iter(batch_size=BATCH_RECORDS):
            n = len(table[self.keys[0]])
            yield Batch(source, "rows", "row", list(range(position, position + n)),
                        {key: table[key] for key in self.keys}, 0)
            position += n


def _open_compressed(path: str):
    suffix = os.path.splitext(path.lower())[1]
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix == ".bz2":
        return bz2.open(path, "rb")
    if suffix in (".xz", ".lzma"):
        return lzma.open(path, "rb")
    try:
        import zstandard  # optional: not a dependency of this package
    except ImportError:
        raise ConvertError(f"{path}: reading {suffix} files needs the 'zstandard' package "
                           "(pip install zstandard), or decompress the file first") from None
    return zstandard.open(path, "rb")


def _universal_newlines(records, unit: str):
    """JSON lines as preprocess_data.py reads them, in text mode: a bare ``\r`` ends a line
    too (old Mac line ends). Binary ``readline`` splits at ``\n`` only; a JSON text holds no
    raw ``\r`` inside a string, so every bare one is a line end. Units stay as the reader
    cut them (shards own whole ``\n`` lines); positions count the split lines."""
    extra = 0  # lines a bare \r split off before this one (line numbers only)
    for position, line in records:
        # An overlong line (_Overlong: not read whole) is passed on to be refused as it is.
        parts = line.splitlines(keepends=True) if isinstance(line, bytes) and b"\r" in line else ()
        if len(parts) < 2:  # no \r, or only the \r of a \r\n
            yield position + extra, line
            continue
        offset = 0
        for k, part in enumerate(parts):
            yield (position + offset, part) if unit == "byte" else (position + extra + k, part)
            offset += len(part)
        if unit != "byte":
            extra += len(parts) - 1


def _lines_below(records, high: int):
    position = 0
    for number, line in records:
        if position >= high:
            return
        yield number, line
        position += len(line)


def _lines_from(lines, position: int, high: int):
    for line in lines:
        if position >= high:
            return
        yield position, line
        position += len(line)


class _Overlong:
    """A line longer than the reader's bound, in place of its bytes (never held whole)."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:  # bytes, for the shard positions and batch sizes
        return self.size


def _bounded_lines(f, limit: int | None):
    """The lines of ``f`` (a binary file), as ``iter(f.readline, b"")``, except that a line
    longer than ``limit`` bytes is skipped a bounded chunk at a time and stands as an
    :class:`_Overlong`: one 1.6 GB line must not take gigabytes before being refused."""
    if limit is None:
        yield from iter(f.readline, b"")
        return
    while line := f.readline(limit + 1):
        if len(line) <= limit or line.endswith(b"\n"):
            yield line
            continue
        size = len(line)
        while rest := f.readline(1 << 20):
            size += len(rest)
            if rest.endswith(b"\n"):
                break
        yield _Overlong(size)


def max_line_bytes(max_document_chars: int, keys: Sequence[str]) -> int | None:
    """The longest input line that can hold a record within ``max_document_chars`` (0: no
    limit) per key: a character takes at most 12 bytes of JSON (an escaped surrogate pair,
    ``\\ud83d\\ude00``), plus 1 MiB for keys and other fields."""
    return max_document_chars * 12 * len(keys) + (1 << 20) if max_document_chars > 0 else None


# --- workers ---------------------------------------------------------------------------

_STATE: dict = {}


def _init_worker(tokenizer: Tokenizer, keys: list[str], append_eod: bool, dtype: np.dtype,
                 splitter: SentenceSplitter | None = None, max_document_chars: int = 0) -> None:
    _STATE.update(tokenizer=tokenizer, keys=keys, append_eod=append_eod, dtype=dtype, splitter=splitter,
                  max_document_chars=max_document_chars)


def _values(batch: Batch, keys: list[str], bad: list) -> tuple[list[int], dict]:
    """The good records' values per key; bad ones are appended to ``bad``."""
    good, values = [], {key: [] for key in keys}
    if batch.kind == "rows":
        for k in range(len(batch)):
            record = {key: batch.payloads[key][k] for key in keys}
            good.append((k, record))
    elif batch.kind == "text":
        for k, payload in enumerate(batch.payloads):
            if isinstance(payload, _Overlong):
                bad.append((batch.where(k), _overlong_problem(payload)))
                continue
            if batch.unit != "file":
                payload = payload[:-1] if payload.endswith(b"\n") else payload
                payload = payload[:-1] if payload.endswith(b"\r") else payload
            try:
                good.append((k, {keys[0]: payload.decode("utf-8")}))
            except UnicodeDecodeError as error:
                bad.append((batch.where(k), f"not UTF-8 text ({error.reason} at byte {error.start})"))
    else:
        for k, payload in enumerate(batch.payloads):
            if isinstance(payload, _Overlong):
                bad.append((batch.where(k), _overlong_problem(payload)))
                continue
            try:
                record = json.loads(payload)
            except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
                shown = payload[:60].decode("utf-8", "replace").rstrip("\n")
                bad.append((batch.where(k), f"expected a JSON object, found {shown!r} ({error})"))
                continue
            except MemoryError:  # a line within the reader's bound that still does not fit
                bad.append((batch.where(k), f"a line of {len(payload):,} bytes does not fit in memory to be "
                                            "parsed; lower --max-document-chars or split the record"))
                continue
            if not isinstance(record, dict):
                bad.append((batch.where(k), f"expected a JSON object, found a {type(record).__name__}"))
                continue
            good.append((k, record))
    kept = []
    for k, record in good:
        problem = _check_record(record, keys)
        if problem:
            bad.append((batch.where(k), problem))
            continue
        kept.append(k)
        for key in keys:
            values[key].append(record[key])
    return kept, values


def _overlong_problem(line: _Overlong) -> str:
    limit = _STATE["max_document_chars"]
    return (f"a line (or document file) of at least {line.size:,} bytes, longer than any record whose documents have at most "
            f"--max-document-chars {limit:,} characters (skipped unread; raise the limit if the machine "
            "has the memory, or split the document)")


def _check_record(record: dict, keys: list[str]) -> str | None:
    tokenizer = _STATE["tokenizer"]
    for key in keys:
        if key not in record:
            return f"no key {key!r} (keys: {sorted(record)[:10]})"
        value = record[key]
        if tokenizer.pretokenized:
            problem = _check_token_list(value, tokenizer.vocab_size)
            if problem:
                return f"{key!r}: {problem}"
        elif not isinstance(value, str):
            return f"{key!r}: expected a string, found {type(value).__name__} {str(value)[:40]!r}"
        elif 0 < _STATE["max_document_chars"] < len(value):
            return (f"{key!r}: a document of {len(value):,} characters, more than --max-document-chars "
                    f"{_STATE['max_document_chars']:,} (tokenizers needs about 100 bytes of memory per character "
                    "of one document; raise the limit if the machine has the memory, or split the document)")
    return None


def _check_token_list(value, vocab_size: int) -> str | None:
    if not isinstance(value, (list, tuple, np.ndarray)):
        return f"expected a list of token ids, found {type(value).__name__}"
    if len(value) == 0:
        return None
    ids = np.asarray(value)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        return f"expected a flat list of integer token ids, found {str(value)[:40]!r}"
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        return f"token ids must lie in [0, {vocab_size}) (--vocab-size), found {low}..{high}"
    return None


def _tokenize_batch(batch: Batch) -> BatchResult:
    tokenizer, keys = _STATE["tokenizer"], _STATE["keys"]
    append_eod, dtype = _STATE["append_eod"], _STATE["dtype"]
    bad: list = []
    kept, values = _values(batch, keys, bad)
    splitter = _STATE.get("splitter")
    eod = tokenizer.eod_id if append_eod else None
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
                           "--keep-newlines' pattern is slow on long runs without whitespace (preprocess_data.py "
                           "stops there too): convert without --keep-newlines or clean the text") from None


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


def _ordered_results(pool, batches: Iterable[Batch], in_flight: int) -> Iterator[BatchResult]:
    """Pool results in submission order, with at most ``in_flight`` batches read ahead
    (``Pool.imap`` would read the whole input into memory ahead of the workers)."""
    pending: collections.deque = collections.deque()
    for batch in batches:
        pending.append(pool.apply_async(_tokenize_batch, (batch,)))
        if len(pending) >= in_flight:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


@contextlib.contextmanager
def _worker_pool(workers: int, initargs: tuple):
    # Each worker runs its tokenizer single-threaded: N processes on N cores, not N x N threads.
    # Set before the fork, so that tokenizers also skips its "forked after parallelism" warning.
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                              else "spawn")
        pool = context.Pool(workers, initializer=_init_worker, initargs=initargs)
    finally:
        if saved is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = saved
    try:
        yield pool
        pool.close()
    finally:
        pool.terminate()
        pool.join()


# --- convert ---------------------------------------------------------------------------

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
        raise ConvertError(f"json_keys must be distinct and at least one, got {keys}")
    if not inputs:
        raise ConvertError("no input given")
    if num_shards < 1 or not 0 <= shard_index < num_shards:
        raise ConvertError(f"--shard-index must lie in [0, --num-shards) = [0, {num_shards}), got {shard_index}")
    if workers < 1:
        raise ConvertError(f"--workers must be at least 1, got {workers}")
    if isinstance(max_document_chars, bool) or not isinstance(max_document_chars, int) or max_document_chars < 0:
        raise ConvertError(f"--max-document-chars must be a number of characters >= 0 (0: no limit), "
                           f"got {max_document_chars!r}")
    planned = plan_inputs(inputs, one_document_per_file=one_document_per_file)
    if any(item.kind == "text" for item in planned) and len(keys) > 1:
        raise ConvertError(f"text inputs have one field; give one JSON key, not {keys}")
    tok = load_tokenizer(tokenizer, eod_id=eod_id, vocab_size=vocab_size, add_special_tokens=add_special_tokens,
                         **(tokenizer_options or {}))
    if append_eod and tok.eod_id is None:
        raise ConvertError(f"tokenizer {tok.name!r} has no end-of-document token; pass --eod-id")
    dtype = megatron_writer_dtype(tok.vocab_size)
    if tok.eod_id is not None and not 0 <= tok.eod_id <= np.iinfo(dtype).max:
        raise ConvertError(f"the end-of-document id {tok.eod_id} does not fit the output dtype {dtype.name} "
                           f"(ids 0..{np.iinfo(dtype).max}); give an id inside the vocabulary")
    if keep_newlines and not split_sentences:
        raise ConvertError("--keep-newlines keeps newlines between split sentences; it needs --split-sentences")
    if split_sentences and tok.pretokenized:
        raise ConvertError("--split-sentences splits text; --tokenizer none reads token-id lists")
    splitter = SentenceSplitter(lang, keep_newlines) if split_sentences else None

    level = "sentence" if split_sentences else "document"
    outputs = {key: output_prefix_for(split_prefix(output_prefix), key, level) for key in keys}
    # Each output name is locked from the existence check to its sidecar: a second convert
    # (or merge) to the same prefix is refused, never mixed with this one.
    with contextlib.ExitStack() as locks:
        held = {key: locks.enter_context(WriterLock(prefix)) for key, prefix in outputs.items()}
        if not overwrite:
            _refuse_existing(outputs.values())
        summary = _convert_locked(planned, keys, tok, dtype, outputs, held, splitter, started, append_eod=append_eod,
                                  workers=workers, num_shards=num_shards, shard_index=shard_index, streaming=streaming,
                                  skip_bad_records=skip_bad_records, progress=progress,
                                  keep_newlines=keep_newlines, max_document_chars=max_document_chars)
    summary.seconds = time.perf_counter() - started
    return summary


def _refuse_existing(prefixes) -> None:
    for prefix in prefixes:
        for path in (prefix + ".bin", prefix + ".idx"):
            if os.path.exists(path):
                raise ConvertError(f"{path} exists; pass --overwrite to replace it")


def _convert_locked(planned, keys, tok, dtype, outputs, held, splitter, started, *, append_eod, workers, num_shards,
                    shard_index, streaming, skip_bad_records, progress, keep_newlines, max_document_chars
                    ) -> ConvertSummary:
    """:func:`convert` after its checks, with every output name locked (``held``)."""
    reader = _Reader(planned, keys, num_shards=num_shards, shard_index=shard_index,
                     skip_bad=skip_bad_records, streaming=streaming,
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
        initargs = (tok, keys, append_eod, dtype, splitter, max_document_chars)
        with contextlib.ExitStack() as stack:
            if workers == 1:
                _init_worker(*initargs)
                results = map(_tokenize_batch, reader)
            else:
                pool = stack.enter_context(_worker_pool(workers, initargs))
                results = _ordered_results(pool, reader, in_flight=3 * workers)
            meter = stack.enter_context(_Meter(progress))
            for result in results:
                _write(result, writers, summary, skip_bad_records)
                meter.update(summary, started)
        summary.bad_records += len(reader.bad_files)
        # Every damaged or unreadable file is listed, past the cap of record examples: its
        # line says how much of it was kept.
        summary.bad_examples.extend(reader.bad_files)
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


def _write(result: BatchResult, writers: dict, summary: ConvertSummary, skip_bad: bool) -> None:
    if result.bad:
        if not skip_bad:
            where, problem = result.bad[0]
            raise ConvertError(f"{where}: {problem} (pass --skip-bad-records to skip such records)")
        summary.bad_records += len(result.bad)
        room = BAD_EXAMPLES - len(summary.bad_examples)
        summary.bad_examples.extend(result.bad[:max(room, 0)])
    for key, writer in writers.items():
        tokens, lengths = result.tokens[key], result.lengths[key]
        per_document, sequence_lengths = result.sentences[key] if result.sentences else (None, None)
        offset = first = 0
        for document, length in enumerate(lengths.tolist()):
            if per_document is None:
                # A document that tokenized to nothing is a document of no sequence, as in Megatron.
                sequences = [length] if length else []
            else:
                count = int(per_document[document])
                sequences = sequence_lengths[first:first + count]
                first += count
            writer.add_document(tokens[offset:offset + length], sequence_lengths=sequences)
            offset += length
        summary.tokens[key] += offset
        if summary.model_max_length and len(lengths):
            summary.long_documents += int((lengths > summary.model_max_length).sum())
            summary.longest_document = max(summary.longest_document, int(lengths.max()))
    first = next(iter(result.lengths.values()))
    summary.documents += len(first)
    summary.empty_documents += int((first == 0).sum())
    summary.input_bytes += result.input_bytes


class _Meter:
    """A tqdm bar of documents, with tokens/s and input MB/s beside it."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.shown = 0
        self.refreshed = 0.0

    def __enter__(self):
        if self.enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(unit=" docs", desc="convert", dynamic_ncols=True)
        return self

    def update(self, summary: ConvertSummary, started: float) -> None:
        if self.bar is None:
            return
        self.bar.update(summary.documents - self.shown)
        self.shown = summary.documents
        now = time.perf_counter()
        if now - self.refreshed > 0.5:
            self.refreshed = now
            seconds = max(now - started, 1e-9)
            self.bar.set_postfix_str(f"{sum(summary.tokens.values()) / seconds:,.0f} tok/s, "
                                     f"{summary.input_bytes / 1e6 / seconds:,.1f} MB/s", refresh=False)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()


# --- merge -----------------------------------------------------------------------------

def merge(prefixes: Sequence[str], output_prefix: str, *, overwrite: bool = False) -> str:
    """Joins pairs in the given order into one (Megatron's ``merge_datasets``); returns the prefix.

    Merging the shard outputs of :func:`convert` in shard order gives the bytes of a single run.
    """
    if not prefixes:
        raise ConvertError("merge needs at least one input prefix")
    output_prefix = split_prefix(output_prefix)
    sources = [IndexedFile.open(p) for p in prefixes]
    for source in sources:
        if os.path.abspath(source.prefix) == os.path.abspath(output_prefix):
            raise ConvertError(f"{output_prefix}: the output is also an input; choose another --output-prefix")
    dtypes = {source.dtype for source in sources}
    if len(dtypes) > 1:
        found = ", ".join(f"{s.bin_path}: {s.dtype.name}" for s in sources)
        raise ConvertError(f"pairs to merge must share a dtype (one tokenizer), found {found}")
    with WriterLock(output_prefix) as lock:  # held from the existence check to the sidecar
        if not overwrite:
            _refuse_existing([output_prefix])
        with IndexedFileWriter(output_prefix, dtype=sources[0].dtype, lock=lock) as writer:
            for source in sources:
                writer.add_file(source.prefix)
        provenance.merge_sidecars([source.prefix for source in sources], output_prefix)
    return output_prefix


__all__ = ["ConvertSummary", "Input", "convert", "merge", "output_prefix_for", "plan_inputs"]
