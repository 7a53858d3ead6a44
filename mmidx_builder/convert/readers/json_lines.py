"""JSON lines (``.jsonl``, ``.json``, ``.ndjson``, also compressed): one JSON object a line,
read as preprocess_data.py reads it (``json.loads`` of each line, the keys looked up)."""

from __future__ import annotations

import json
from typing import Iterator

from .base import Batch, ReadContext, Reader, compressed_line_batches, line_batches, read_payloads


def universal_newlines(records, unit: str):
    """JSON lines as preprocess_data.py reads them, in text mode: a bare ``\\r`` ends a line
    too (old Mac line ends). Binary ``readline`` splits at ``\\n`` only; a JSON text holds no
    raw ``\\r`` inside a string, so every bare one is a line end. Units stay as the reader
    cut them (shards own whole ``\\n`` lines); positions count the split lines."""
    extra = 0  # lines a bare \r split off before this one (line numbers only)
    for position, line in records:
        # An overlong line (Overlong: not read whole) is passed on to be refused as it is.
        parts = line.splitlines(keepends=True) if isinstance(line, bytes) and b"\r" in line else ()
        if len(parts) < 2:  # no \r, or only the \r of a \r\n
            yield position + extra, line
            continue
        offset = 0
        for k, part in enumerate(parts):
            yield (position + offset, part) if unit == "byte" else (position + extra + k, part)
            offset += len(part)
        if unit != "byte":
            extra += len(parts) - 1


class JSONLinesReader(Reader):
    suffixes = (".jsonl", ".json", ".ndjson")
    compressible = True

    @staticmethod
    def batches(item, start: int, context: ReadContext) -> Iterator[Batch]:
        lines = compressed_line_batches if item.compressed else line_batches
        yield from lines(item, start, context, split=universal_newlines)

    @staticmethod
    def records(batch: Batch, keys: list, bad: list) -> list:
        good = []
        for k, payload in read_payloads(batch, bad):
            try:
                record = json.loads(payload)
            except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
                shown = payload[:60].decode("utf-8", "replace").rstrip("\n")
                bad.append((batch.where(k), f"expected a JSON object, found {shown!r} ({error})"))
                continue
            except MemoryError:  # a line within the reader's bound that still does not fit
                bad.append((batch.where(k), f"a line of {len(payload):,} bytes does not fit in memory to be "
                                            "parsed; lower max_document_chars= or split the record"))
                continue
            if not isinstance(record, dict):
                bad.append((batch.where(k), f"expected a JSON object, found a {type(record).__name__}"))
                continue
            good.append((k, record))
        return good
