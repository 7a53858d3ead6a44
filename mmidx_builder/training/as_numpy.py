"""Batches as numpy arrays in the files' own dtype, for streams and prepared datasets alike.

``IterableDataset.with_format("numpy")`` (datasets 5.2) turns each batch into a Python list of
row arrays, stacks them and upcasts to int64: about as costly as reading the samples, and a
stream's ``with_format`` takes no dtype. Reading batches as Arrow and viewing fixed-size list
columns as 2-D numpy arrays keeps the dtype and costs at most one copy (joining the batch's
tables), none when those tables are consecutive slices of one (a local stream's gathers).
Measured by benchmarks/bench_builder.py (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa


def _as_numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        view = _view_of_consecutive_rows(column)
        if view is not None:
            return view
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_fixed_size_list(array.type) and array.null_count == 0:
        values = array.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(len(array), array.type.list_size)
    return np.asarray(array.to_numpy(zero_copy_only=False))


def numpy_batches(dataset, batch_size: int = 1000) -> Iterator[dict[str, np.ndarray]]:
    """``{column: array}`` per batch of ``batch_size`` rows (the last may be shorter), from a
    ``datasets`` Dataset or IterableDataset: ``input_ids`` as ``(rows, sample_length)`` in the
    stored dtype (uint16 for most corpora), other fixed-length columns likewise, ragged ones
    (``piece_lengths``) as object arrays of arrays."""
    for table in dataset.with_format("arrow").iter(batch_size):
        yield {name: _as_numpy(table.column(name)) for name in table.column_names}


def _view_of_consecutive_rows(column: pa.ChunkedArray) -> np.ndarray | None:
    """A fixed-size list column whose chunks are consecutive rows of one array (a batch that
    datasets joined from slices of one table: a local stream's shards gathered together,
    hf/readahead.py) as a 2-D view of that array's values, without the copy joining the
    chunks would make; None for any other column. The view keeps the whole array alive."""
    if not pa.types.is_fixed_size_list(column.type):
        return None
    chunks = [chunk for chunk in column.chunks if len(chunk)]
    if len(chunks) < 2:
        return None
    values = chunks[0].values  # the whole child array, whatever the chunk's slice
    if values.null_count or not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        return None
    address = values.buffers()[1].address
    row = chunks[0].offset
    for chunk in chunks:
        if (chunk.null_count or chunk.offset != row or chunk.values.buffers()[1].address != address
                or chunk.values.offset != values.offset or len(chunk.values) != len(values)):
            return None
        row += len(chunk)
    width = column.type.list_size
    start = chunks[0].offset
    return values.slice(start * width, (row - start) * width).to_numpy().reshape(row - start, width)


__all__ = ["numpy_batches"]
