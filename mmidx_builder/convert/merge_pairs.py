"""Pairs joined in order into one: ``mmidx merge``, Megatron's ``merge_datasets``."""

from __future__ import annotations

import os
from typing import Sequence

from ..sources import provenance
from ..storage.files import WriterLock
from ..errors import ConvertError
from ..sources.indexed import IndexedFile, IndexedFileWriter, split_prefix
from .outputs import refuse_existing


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
            raise ConvertError(f"{output_prefix}: the output is also an input; choose another output_prefix=")
    dtypes = {source.dtype for source in sources}
    if len(dtypes) > 1:
        found = ", ".join(f"{s.bin_path}: {s.dtype.name}" for s in sources)
        raise ConvertError(f"pairs to merge must share a dtype (one tokenizer), found {found}")
    with WriterLock(output_prefix) as lock:  # held from the existence check to the sidecar
        if not overwrite:
            refuse_existing([output_prefix])
        with IndexedFileWriter(output_prefix, dtype=sources[0].dtype, lock=lock) as writer:
            for source in sources:
                writer.add_file(source.prefix)
        provenance.merge_sidecars([source.prefix for source in sources], output_prefix)
    return output_prefix


__all__ = ["merge"]
