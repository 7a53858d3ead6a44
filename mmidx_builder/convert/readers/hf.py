"""``hf:NAME_OR_PATH[:SPLIT]``: a dataset opened with ``datasets.load_dataset`` (``streaming``
as asked), the key columns in batches. Sharded runs cut it with
``Dataset.shard(contiguous=True)``, so it must be the run's only input."""

from __future__ import annotations

from typing import Iterator

from ...errors import ConvertError
from . import base
from .base import Batch, ReadContext, Reader, row_records


class HFDatasetReader(Reader):
    scheme = "hf:"
    shards_itself = True
    records = staticmethod(row_records)

    @staticmethod
    def batches(item, start: int, context: ReadContext) -> Iterator[Batch]:
        try:
            import datasets
        except ImportError as error:  # pragma: no cover - datasets is a dependency
            raise ConvertError(f"{item.spec}: hf: inputs need the datasets package ({error})") from None
        keys, shard = context.keys, context.shard
        name, _, split = item.path.partition(":")
        split = split or "train"
        try:
            dataset = datasets.load_dataset(name, split=split, streaming=context.streaming)
        except Exception as error:  # load_dataset raises many kinds; all mean "cannot open"
            raise ConvertError(f"{item.spec}: datasets.load_dataset({name!r}, split={split!r}) failed: "
                               f"{type(error).__name__}: {error}") from None
        if shard.count > 1:
            try:
                dataset = dataset.shard(shard.count, shard.index, contiguous=True)
            except (ValueError, IndexError) as error:
                raise ConvertError(f"{item.spec}: cannot cut into {shard.count} shards: {error}") from None
        columns = dataset.column_names or []
        missing = [key for key in keys if columns and key not in columns]
        if missing:
            raise ConvertError(f"{item.spec}: no column {missing[0]!r}; the columns are {columns}")
        source = item.spec + (f" (shard {shard.index} of {shard.count})" if shard.count > 1 else "")
        position = 0
        for table in dataset.select_columns(keys).iter(batch_size=base.BATCH_RECORDS):
            n = len(table[keys[0]])
            yield Batch(source, item.kind, "row", list(range(position, position + n)),
                        {key: table[key] for key in keys}, 0)
            position += n
