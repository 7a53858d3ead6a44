"""A prepared ``datasets.Dataset`` as a torch map-style dataset whose batches are Arrow tables.

Why: rows as Arrow are the cheap form for :class:`MegatronCollator` (one fixed-size-list
buffer viewed as a 2-D array, no Python object per token), but ``DataLoader`` over
``Dataset.with_format("arrow")`` fails in datasets 5.2: torch calls ``__getitems__``, which
reads the batch as an Arrow table and then indexes it like a dict of columns ("Index must
either be string or integer"). :func:`arrow_rows` answers ``__getitems__`` with the table
itself (one ``take`` per batch), which the collator accepts as it is.

A stream needs none of this: ``megatron_rank_stream(stream.with_format("arrow"), ...)`` or
``DataLoader(stream.with_format("arrow"), ...)`` already hand the collator Arrow rows.
"""

from __future__ import annotations

from ..errors import ParameterError
from ..extras import require_torch

torch = require_torch("arrow_rows")

__all__ = ["ArrowRows", "arrow_rows"]


def arrow_rows(dataset) -> "ArrowRows":
    """``dataset`` (a prepared ``datasets.Dataset``) for ``DataLoader(..., collate_fn=MegatronCollator(...))``:
    each batch reaches the collator as one Arrow table of its rows."""
    return ArrowRows(dataset)


class ArrowRows(torch.utils.data.Dataset):
    """What :func:`arrow_rows` returns: ``len`` rows; ``[i]`` a one-row table, ``__getitems__``
    (what ``DataLoader`` batches call) one table of the asked rows, in the asked order."""

    def __init__(self, dataset):
        import datasets

        if not isinstance(dataset, datasets.Dataset):
            raise ParameterError(f"arrow_rows takes a prepared datasets.Dataset, got {type(dataset).__name__}; "
                                 "a stream gives Arrow rows with .with_format('arrow') as it is")
        self.dataset = dataset.with_format("arrow")

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index):
        return self.dataset[index]

    def __getitems__(self, indices: list):
        return self.dataset[list(indices)]
