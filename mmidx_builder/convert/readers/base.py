"""What every input reader shares: the Batch it yields, the shard it reads for, the contract
of a reader, and the line reading that JSON lines and text have in common.

A reader is one input format (json.py, text.py, ...), registered in ``READERS``
(readers/__init__.py). It works in two places:

    Reader.batches(item, start, context)   this process, in input order: the input's raw
                                           records that belong to this shard, as Batches
    Reader.records(batch, keys, bad)       a worker: the Batch's raw records parsed into
                                           {key: value} records; bad ones appended to ``bad``

Raw records cross to the workers as bytes (or column lists), so that parsing runs in
parallel; a Batch names its format (``kind``), which picks the ``records`` that parses it.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import lzma
import os
import zlib
from typing import Callable, Iterable, Iterator

from ...errors import ConvertError

# A batch ends at whichever comes first; about 1 MiB keeps a worker busy for tens of ms,
# long enough to pay for the pickling, short enough for an even spread over workers.
BATCH_RECORDS = 1024
BATCH_BYTES = 1 << 20

# What reading a damaged or unreadable input raises: gzip's zlib and xz's lzma errors derive
# from none of the builtin ones.
DAMAGE = (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError)


@dataclasses.dataclass
class Batch:
    """Raw records of one source, in order. ``payloads`` is a list of bytes (json, text) or,
    for formats of rows, a dict of column lists; ``positions`` locate each record in ``unit``s.
    ``kind`` is the input format (a key of ``READERS``): its reader parses the payloads."""

    source: str
    kind: str
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


class Shard:
    """Which units belong to shard ``index`` of ``count`` over ``total`` bytes."""

    def __init__(self, index: int, count: int, total: int):
        self.index, self.count, self.total = index, count, total
        self.low = index * total // count
        self.high = (index + 1) * total // count
        self.last = index == count - 1

    def owns(self, position: int) -> bool:
        return self.low <= position and (position < self.high or self.last)


@dataclasses.dataclass
class ReadContext:
    """What a reader is told besides its input: the keys to read, this shard, and limits."""

    keys: list
    shard: Shard
    streaming: bool = False  # hf: load_dataset(streaming=True)
    max_document_chars: int = 0  # 0: no limit
    max_line_bytes: int | None = None  # None: lines are not bounded
    bad_file: Callable[[str, str], None] | None = None  # (path, problem): a file that cannot be read (skipped or raised)


class Reader:
    """One input format. Subclasses set how :func:`~..inputs.plan_inputs` recognises it and
    implement :meth:`batches` and :meth:`records`."""

    suffixes: tuple = ()  # name endings (lower case) of this format
    scheme: str = ""  # or a prefix of the input as given ("hf:")
    compressible = False  # also read with a compression suffix (.gz ...): one unit, one shard
    whole_files = False  # one_document_per_file=True reads a file as one document
    # Shards itself (Dataset.shard) rather than owning a byte range of files: it has no size on
    # disk and is the only input of a sharded run.
    shards_itself = False

    @staticmethod
    def batches(item, start: int, context: ReadContext) -> Iterator[Batch]:
        raise NotImplementedError

    @staticmethod
    def records(batch: Batch, keys: list, bad: list) -> list:
        """``[(k, record)]`` of the batch's good records (``record`` a dict); a bad one is
        appended to ``bad`` as ``(batch.where(k), problem)``."""
        raise NotImplementedError


def row_records(batch: Batch, keys: list, bad: list) -> list:
    """Records of a Batch of column lists (Parquet, datasets): one per row."""
    return [(k, {key: batch.payloads[key][k] for key in keys}) for k in range(len(batch))]


def read_payloads(batch: Batch, bad: list) -> Iterator[tuple[int, bytes]]:
    """``(k, payload)`` of a Batch of lines or files; one too long to be read whole is a bad record."""
    for k, payload in enumerate(batch.payloads):
        if isinstance(payload, Overlong):
            bad.append((batch.where(k), payload.problem()))
            continue
        yield k, payload


# --- lines ----------------------------------------------------------------------------

def max_line_bytes(max_document_chars: int, keys) -> int | None:
    """The longest input line that can hold a record within ``max_document_chars`` (0: no
    limit) per key: a character takes at most 12 bytes of JSON (an escaped surrogate pair,
    ``\\ud83d\\ude00``), plus 1 MiB for keys and other fields."""
    return max_document_chars * 12 * len(keys) + (1 << 20) if max_document_chars > 0 else None


class Overlong:
    """A line longer than the reader's bound, in place of its bytes (never held whole)."""

    def __init__(self, size: int, max_document_chars: int):
        self.size = size
        self.max_document_chars = max_document_chars

    def __len__(self) -> int:  # bytes, for the shard positions and batch sizes
        return self.size

    def problem(self) -> str:
        return (f"a line (or document file) of at least {self.size:,} bytes, longer than any record whose documents "
                f"have at most max_document_chars={self.max_document_chars:,} characters (skipped unread; raise "
                "the limit if the machine has the memory, or split the document)")


def bounded_lines(f, context: ReadContext):
    """The lines of ``f`` (a binary file), as ``iter(f.readline, b"")``, except that a line
    longer than ``context.max_line_bytes`` is skipped a bounded chunk at a time and stands
    as an :class:`Overlong`: one 1.6 GB line must not take gigabytes before being refused."""
    limit = context.max_line_bytes
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
        yield Overlong(size, context.max_document_chars)


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


def batched(source: str, kind: str, unit: str, records: Iterable[tuple[int, bytes]]) -> Iterator[Batch]:
    """``(position, payload)`` records cut into Batches of BATCH_RECORDS or BATCH_BYTES."""
    positions, payloads, size = [], [], 0
    try:
        for position, payload in records:
            positions.append(position)
            payloads.append(payload)
            size += len(payload)
            if len(positions) >= BATCH_RECORDS or size >= BATCH_BYTES:
                yield Batch(source, kind, unit, positions, payloads, size)
                positions, payloads, size = [], [], 0
    except DAMAGE:
        # A damaged file (a compressed one cut short or with garbage inside): every
        # record read before the damage goes on, then the error (see InputBatches).
        if positions:
            yield Batch(source, kind, unit, positions, payloads, size)
        raise
    if positions:
        yield Batch(source, kind, unit, positions, payloads, size)


def line_batches(item, start: int, context: ReadContext, split=None) -> Iterator[Batch]:
    """An uncompressed file's lines whose first byte lies in this shard's byte range.
    ``split(records, unit)`` re-cuts the lines (JSON's bare ``\\r`` line ends)."""
    shard = context.shard
    low = max(shard.low - start, 0)
    high = item.size if shard.last else min(shard.high - start, item.size)
    if low >= high:
        return
    with open(item.path, "rb", buffering=1 << 20) as f:
        if low == 0:
            # From the file's start, lines can be numbered.
            records = enumerate(bounded_lines(f, context), start=1)
            unit = "line"
            if high < item.size:
                records = _lines_below(records, high)
        else:
            # Mid-file: the line holding byte low-1 belongs to the shard before.
            f.seek(low - 1)
            f.readline()
            records = _lines_from(bounded_lines(f, context), f.tell(), high)
            unit = "byte"
        if split is not None:
            records = split(records, unit)
        yield from batched(item.path, item.kind, unit, records)


def compressed_line_batches(item, start: int, context: ReadContext, split=None) -> Iterator[Batch]:
    """A compressed file's lines, all of them in the shard that owns the file's first byte
    (a compressed stream cannot be entered in the middle)."""
    if not context.shard.owns(start):
        return
    with open_compressed(item.path) as f:
        lines = enumerate(bounded_lines(f, context), start=1)
        if split is not None:
            lines = split(lines, "line")
        for batch in batched(item.path, item.kind, "line", lines):
            batch.input_bytes = 0  # the meter counts compressed bytes, once the file is read
            yield batch
    yield Batch(item.path, item.kind, "line", [], [], item.size)


def open_compressed(path: str):
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
