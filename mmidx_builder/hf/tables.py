"""Where a split's rows become Arrow tables: shard ranges, tables made one ahead in a thread,
consecutive small batches joined into one gather, fixed-size list columns, sample features."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future

import datasets
import numpy as np
import pyarrow as pa

# Rows per Arrow table: large enough to amortise per-table costs, small enough that a
# table of 2,049-token samples stays a few MB.
ROWS_PER_TABLE = 1000


def shard_ranges(num_rows: int, num_shards: int) -> list[tuple[int, int]]:
    """``num_shards`` contiguous ranges of ``range(num_rows)``, sizes differing by at most
    one, larger first: any round-robin assignment of shards to ranks then gives ranks row
    counts that differ by at most one."""
    num_shards = max(1, min(num_shards, num_rows))
    size, extra = divmod(num_rows, num_shards)
    bounds = np.cumsum([0] + [size + (i < extra) for i in range(num_shards)])
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def one_ahead(make, batches):
    """Yields ``(key, make(rows))`` while the next table is being made in a worker thread,
    so gathering tokens overlaps with what the caller does with the table (datasets writing
    it to the Arrow cache). numpy's copies and file I/O release the GIL. Streaming asks for
    one shard (often one table) at a time: nothing to overlap then, and a thread only costs.

    Leaving early (a ``break``, ``take``, the interpreter's exit) never waits for the table
    being made ahead: the thread is a daemon that finishes it alone and ends, and a table not
    started yet is dropped (a ThreadPoolExecutor would be joined, at exit too)."""
    if len(batches) < 2:
        for key, rows in batches:
            yield key, make(rows)
        return
    jobs = queue.SimpleQueue()
    threading.Thread(target=_make_tables, args=(make, jobs), name="mmidx-one-ahead", daemon=True).start()
    pending = None
    try:
        for key, rows in batches:
            future = Future()
            jobs.put((future, rows))
            if pending is not None:
                yield pending[0], pending[1].result()
            pending = (key, future)
        if pending is not None:
            yield pending[0], pending[1].result()
            pending = None
    finally:
        if pending is not None:
            pending[1].cancel()  # not started yet: never made
        jobs.put(None)


def _make_tables(make, jobs: queue.SimpleQueue) -> None:
    """one_ahead's thread: makes the tables asked for, in order, until told to stop."""
    while (job := jobs.get()) is not None:
        future, rows = job
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(make(rows))
        except BaseException as error:  # noqa: BLE001  handed to the consumer, raised there
            future.set_exception(error)


def table_rows(ranges: list[tuple[int, int]], first_sizes=(1, 8, 64, 512)) -> tuple[list, list]:
    """``(alone, batches)``: the rows of ``ranges`` (shards) cut into ``(Key(shard, batch), rows)``
    of up to ROWS_PER_TABLE rows. When the first shard is larger than a table, its first
    batches hold ``first_sizes`` rows and come apart in ``alone`` (to be made one by one, never
    joined): the first row of a stream waits for one sample's reads, not a thousand (issue
    31). A smaller shard costs at most one table anyway."""
    alone, batches = [], []
    for shard, (start, stop) in enumerate(ranges):
        position = start
        if shard == 0 and stop - start > ROWS_PER_TABLE:
            for size in first_sizes:
                alone.append((datasets.builder.Key(shard, len(alone)), np.arange(position, position + size)))
                position += size
        for first in range(position, stop, ROWS_PER_TABLE):
            batch = len(alone) if shard == 0 else 0
            batches.append((datasets.builder.Key(shard, batch + (first - position) // ROWS_PER_TABLE),
                            np.arange(first, min(first + ROWS_PER_TABLE, stop))))
    return alone, batches


def joined_batches(batches, limit: int) -> list:
    """``(keys, rows)`` from ``(key, rows)`` batches: consecutive batches joined while their
    rows add up to at most ``limit`` (a larger batch stays alone). ``keys`` lists each batch's
    ``(key, row count)``; ``rows`` is their rows, concatenated."""
    joined, keys, parts, size = [], [], [], 0
    for key, rows in batches:
        if keys and size + len(rows) > limit:
            joined.append((keys, parts[0] if len(parts) == 1 else np.concatenate(parts)))
            keys, parts, size = [], [], 0
        keys.append((key, len(rows)))
        parts.append(rows)
        size += len(rows)
    if keys:
        joined.append((keys, parts[0] if len(parts) == 1 else np.concatenate(parts)))
    return joined


def fixed_size_lists(values: np.ndarray, length: int) -> pa.FixedSizeListArray:
    """Rows of ``length`` values, zero-copy from a C-contiguous array."""
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(values).reshape(-1)), length)


def sample_features(dtype: np.dtype, sample_length: int, document_structure: bool = False) -> datasets.Features:
    """``input_ids`` as a fixed-length list of the files' own dtype (no upcast in storage)."""
    features = {"input_ids": datasets.List(datasets.Value(np.dtype(dtype).name), length=sample_length)}
    if document_structure:
        features["position_ids"] = datasets.List(datasets.Value("int32"), length=sample_length)
        features["piece_lengths"] = datasets.List(datasets.Value("int32"))
    return datasets.Features(features)
