"""Batches as numpy arrays in the files' own dtype, for streams and prepared datasets alike.

``IterableDataset.with_format("numpy")`` (datasets 5.2) turns each batch into a Python list of
row arrays, stacks them and upcasts to int64: about as costly as reading the samples, and a
stream's ``with_format`` takes no dtype. Reading batches as Arrow and viewing fixed-size list
columns as 2-D numpy arrays costs one copy (joining the batch's tables) and keeps the dtype.
Measured by benchmarks/bench_builder.py (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa


def _as_numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
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


__all__ = ["numpy_batches"]
