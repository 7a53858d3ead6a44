"""Input readers, one module per input format, chosen by one table.

A new input format is its module (a :class:`~.base.Reader`: the name endings or scheme that
select it, ``batches`` in this process, ``records`` in a worker) plus one line in ``READERS``.
The table's order is the order in which an input's name is matched.
"""

from __future__ import annotations

from .base import Batch, Reader
from .hf import HFDatasetReader
from .json_lines import JSONLinesReader
from .parquet import ParquetReader
from .text import TextReader

# input format -> its reader
READERS: dict[str, type[Reader]] = {
    "json": JSONLinesReader,
    "text": TextReader,
    "parquet": ParquetReader,
    "hf": HFDatasetReader,
}

__all__ = ["Batch", "READERS", "Reader"]
