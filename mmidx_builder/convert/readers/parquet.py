"""Parquet (``.parquet``, ``.pq``): the key columns, row group by row group. A row group
belongs to the shard that owns its place in the file's byte range."""

from __future__ import annotations

from typing import Iterator

from . import base
from .base import Batch, ReadContext, Reader, row_records


class ParquetReader(Reader):
    suffixes = (".parquet", ".pq")
    records = staticmethod(row_records)

    @staticmethod
    def batches(item, start: int, context: ReadContext) -> Iterator[Batch]:
        import pyarrow.parquet as pq

        keys = context.keys
        parquet = pq.ParquetFile(item.path)
        missing = [key for key in keys if key not in parquet.schema_arrow.names]
        if missing:
            context.bad_file(item.path, f"no column {missing[0]!r}; the columns are {parquet.schema_arrow.names}")
            return
        metadata = parquet.metadata
        groups = metadata.num_row_groups
        first_row = 0
        for group in range(groups):
            rows = metadata.row_group(group).num_rows
            # A row group's place in the byte range: evenly spread over the file, so that
            # every group has one owner and groups keep their order.
            if context.shard.owns(start + group * item.size // max(groups, 1)):
                position = first_row
                size = sum(metadata.row_group(group).column(c).total_compressed_size
                           for c in range(metadata.num_columns))
                for table in parquet.iter_batches(batch_size=base.BATCH_RECORDS, row_groups=[group], columns=keys):
                    columns = {key: table.column(key).to_pylist() for key in keys}
                    n = table.num_rows
                    share = size * n // max(rows, 1)
                    yield Batch(item.path, item.kind, "row", list(range(position, position + n)), columns, share)
                    position += n
            first_row += rows
