"""Numbers about a ``.bin``/``.idx`` pair, as ``mmidx inspect`` prints them and cards record them."""

from __future__ import annotations

import numpy as np

from .indexed import IndexedFile


def describe(indexed: IndexedFile) -> dict:
    """Flavour, dtype, counts, document-length summary and file sizes of one pair."""
    lengths = indexed.document_lengths()
    return {
        "prefix": indexed.prefix,
        "flavour": indexed.flavour.value,
        "dtype": indexed.dtype.name,
        "num_sequences": indexed.num_sequences,
        "num_documents": indexed.num_documents,
        "num_tokens": indexed.num_tokens,
        "empty_documents": int((lengths == 0).sum()),
        "shortest_document": int(lengths.min()) if len(lengths) else None,
        "median_document": float(np.median(lengths)) if len(lengths) else None,
        "longest_document": int(lengths.max()) if len(lengths) else None,
        "idx_bytes": indexed.idx_size,
        "bin_bytes": indexed.bin_size,
    }


__all__ = ["describe"]
