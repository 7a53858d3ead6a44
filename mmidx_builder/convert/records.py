"""What makes a record good: every key present, text (or, with ``tokenizer="none"``, a flat
list of ids inside the vocabulary), and no document longer than ``max_document_chars``."""

from __future__ import annotations

import numpy as np

from .readers import READERS
from .readers.base import Batch

# The longest document (in characters) tokenized by default: one 200 MB document took a
# tokenizer.json to 23 GB of memory (the tokenizers library's own, ~100 bytes per character),
# so longer ones are refused as bad records unless the caller raises the limit.
MAX_DOCUMENT_CHARS = 10_000_000


def good_values(batch: Batch, keys: list[str], bad: list, *, pretokenized: bool, vocab_size: int,
                max_document_chars: int) -> tuple[list[int], dict]:
    """The good records of ``batch`` (parsed by its format's reader) as their positions in the
    batch and their values per key; bad ones are appended to ``bad`` as ``(where, problem)``."""
    values = {key: [] for key in keys}
    kept = []
    for k, record in READERS[batch.kind].records(batch, keys, bad):
        problem = check_record(record, keys, pretokenized=pretokenized, vocab_size=vocab_size,
                               max_document_chars=max_document_chars)
        if problem:
            bad.append((batch.where(k), problem))
            continue
        kept.append(k)
        for key in keys:
            values[key].append(record[key])
    return kept, values


def check_record(record: dict, keys: list[str], *, pretokenized: bool, vocab_size: int,
                 max_document_chars: int) -> str | None:
    """What is wrong with ``record``, or None."""
    for key in keys:
        if key not in record:
            return f"no key {key!r} (keys: {sorted(record)[:10]})"
        value = record[key]
        if pretokenized:
            problem = check_token_list(value, vocab_size)
            if problem:
                return f"{key!r}: {problem}"
        elif not isinstance(value, str):
            return f"{key!r}: expected a string, found {type(value).__name__} {str(value)[:40]!r}"
        elif 0 < max_document_chars < len(value):
            return (f"{key!r}: a document of {len(value):,} characters, more than max_document_chars="
                    f"{max_document_chars:,} (tokenizers needs about 100 bytes of memory per character of one "
                    "document; raise the limit if the machine has the memory, or split the document)")
    return None


def check_token_list(value, vocab_size: int) -> str | None:
    if not isinstance(value, (list, tuple, np.ndarray)):
        return f"expected a list of token ids, found {type(value).__name__}"
    if len(value) == 0:
        return None
    ids = np.asarray(value)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        return f"expected a flat list of integer token ids, found {str(value)[:40]!r}"
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        return f"token ids must lie in [0, {vocab_size}) (vocab_size=), found {low}..{high}"
    return None


__all__ = ["MAX_DOCUMENT_CHARS", "check_record", "check_token_list", "good_values"]
