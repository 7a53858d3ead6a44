"""What a reader that knows which rows it needs may ask of a stream made by our builders.

``load_dataset(..., streaming=True)`` gives a ``datasets.IterableDataset`` that reads every
row in order. A reader that needs only some rows, in its own order (one data-parallel rank's
micro-batches: training.megatron_rank_stream), asks :func:`builder_stream` for the builder
behind the stream and reads just those rows through it, for every kind; the ``datasets``
internals this needs stay in registry.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

import pyarrow as pa

from . import registry
from .base_builder import BaseBuilder
from .plans import Plan


@dataclass(frozen=True)
class BuilderStream:
    """A split of one of our builders, as a stream read straight from it: ``num_rows`` rows,
    in the split's order (Megatron's training order for GPT samples)."""

    builder: BaseBuilder
    plan: Plan
    num_rows: int

    def tables(self, range_batches: Iterable[list[tuple[int, int]]]) -> Iterator[pa.Table]:
        """Arrow tables of the rows in each batch of ``(start, stop)`` ranges, in order (a batch
        may come as several tables). ``range_batches`` is read lazily; for remote files the
        batches after the one being read are fetched meanwhile, within ``read_ahead_bytes``."""
        return self.builder.row_tables(self.plan, range_batches)


def builder_stream(stream) -> BuilderStream | None:
    """The builder split behind ``stream`` when it is a whole split of one of our builders, read
    as it is; None for anything else (a ``map`` or ``skip`` on top, a resharded or sliced
    stream: read those through ``datasets``)."""
    origin = registry.stream_origin(stream)
    if origin is None:
        return None
    builder, kwargs = origin
    if not isinstance(builder, BaseBuilder) or set(kwargs) != {"plan", "ranges"}:
        return None
    ranges = kwargs["ranges"]
    contiguous = bool(ranges) and ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    if not contiguous:
        return None  # resharded or sliced by datasets: the generic reader follows it
    return BuilderStream(builder, kwargs["plan"], int(ranges[-1][1]))


def split_by_node(stream) -> bool:
    """Whether ``split_dataset_by_node`` was applied to ``stream``."""
    return registry.split_by_node(stream)


def format_type(stream) -> str | None:
    """The format ``with_format`` gave ``stream`` (None: Python objects)."""
    return registry.format_type(stream)


__all__ = ["BuilderStream", "builder_stream", "format_type", "split_by_node"]
