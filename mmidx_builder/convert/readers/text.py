"""Plain text (``.txt``, ``.text``, also compressed): a document a line, or with
``one_document_per_file=True`` a whole file as one document. UTF-8; a line's ``\\n`` (and a
``\\r`` before it) is not part of the document."""

from __future__ import annotations

from typing import Iterator

from .base import (Batch, Overlong, ReadContext, Reader, compressed_line_batches, line_batches, open_compressed,
                   read_payloads)


class TextReader(Reader):
    suffixes = (".txt", ".text")
    compressible = True
    whole_files = True

    @staticmethod
    def batches(item, start: int, context: ReadContext) -> Iterator[Batch]:
        if item.whole:
            yield from _whole_file(item, start, context)
        elif item.compressed:
            yield from compressed_line_batches(item, start, context)
        else:
            yield from line_batches(item, start, context)

    @staticmethod
    def records(batch: Batch, keys: list, bad: list) -> list:
        good = []
        for k, payload in read_payloads(batch, bad):
            if batch.unit != "file":
                payload = payload[:-1] if payload.endswith(b"\n") else payload
                payload = payload[:-1] if payload.endswith(b"\r") else payload
            try:
                good.append((k, {keys[0]: payload.decode("utf-8")}))
            except UnicodeDecodeError as error:
                bad.append((batch.where(k), f"not UTF-8 text ({error.reason} at byte {error.start})"))
        return good


def _whole_file(item, start: int, context: ReadContext) -> Iterator[Batch]:
    """The file as one document, in the shard that owns its first byte."""
    if not context.shard.owns(start):
        return
    opened = open_compressed(item.path) if item.compressed else open(item.path, "rb")
    with opened as f:
        limit = context.max_line_bytes
        data = f.read() if limit is None else f.read(limit + 1)
        if limit is not None and len(data) > limit:
            data = Overlong(len(data), context.max_document_chars)  # at least that long; not read further
    yield Batch(item.path, item.kind, "file", [0], [data], item.size)
