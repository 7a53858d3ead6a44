"""The inputs: what each one is (planned from its name by the reader table), and their raw
records in input order for one shard.

Sharding for clusters: the inputs are laid end to end as one byte range, cut into K equal
parts; shard i converts every unit (a line of an uncompressed file; a whole compressed or
one-document file; a Parquet row group) whose first byte lies in part i. Units are
contiguous runs of the document stream, so merging shards 0..K-1 in order gives the bytes
of a single run. Readers that shard themselves (``hf:``) cut with
``Dataset.shard(contiguous=True)`` instead.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from typing import Iterator, Sequence

from ..errors import ConvertError, MMIdxError
from .readers import READERS
from .readers.base import DAMAGE, Batch, ReadContext, Shard

COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".lzma", ".zst", ".zstd")


@dataclasses.dataclass
class Input:
    spec: str  # as the user gave it
    path: str
    kind: str  # the input format: a key of readers.READERS ("json", "text", "parquet", "hf")
    compressed: bool = False
    whole: bool = False  # one document per file
    size: int = 0  # bytes on disk; 0 for a reader that shards itself


def plan_inputs(specs: Sequence[str], *, one_document_per_file: bool = False) -> list[Input]:
    """Classifies each input (globs expanded, sorted) by its scheme or extension."""
    inputs = []
    for spec in specs:
        spec = os.fspath(spec)
        scheme = next((kind for kind, reader in READERS.items() if reader.scheme and spec.startswith(reader.scheme)),
                      None)
        if scheme is not None:
            inputs.append(Input(spec, spec[len(READERS[scheme].scheme):], scheme))
            continue
        paths = sorted(glob.glob(spec)) if glob.has_magic(spec) else [spec]
        if not paths:
            raise ConvertError(f"{spec}: the pattern matches no file")
        for path in paths:
            name = path.lower()
            compressed = name.endswith(COMPRESSION_SUFFIXES)
            if compressed:
                name = os.path.splitext(name)[0]
            kind = next((kind for kind, reader in READERS.items()
                         if reader.suffixes and name.endswith(reader.suffixes)
                         and (reader.compressible or not compressed)), None)
            if kind is None:
                raise ConvertError(f"{path}: cannot tell the input format from the name; {_expected()}")
            inputs.append(Input(spec, path, kind, compressed,
                                whole=one_document_per_file and READERS[kind].whole_files))
    return inputs


def _expected() -> str:
    suffixes = [suffix for reader in READERS.values() for suffix in reader.suffixes]
    compressible = [kind for kind, reader in READERS.items() if reader.compressible]
    schemes = [f"{reader.scheme}NAME_OR_PATH[:SPLIT]" for reader in READERS.values() if reader.scheme]
    return (f"expected {', '.join(suffixes)} ({' and '.join(compressible)} also with "
            f"{', '.join(COMPRESSION_SUFFIXES)}), or {' or '.join(schemes)} for datasets.load_dataset")


class InputBatches:
    """The inputs' raw records as Batches, in input order, for one shard (or all): each input
    through its reader. A file that cannot be read is a ConvertError, or with ``skip_bad``
    is skipped and listed in ``bad_files``."""

    def __init__(self, inputs: list[Input], keys: list[str], *, num_shards: int, shard_index: int,
                 skip_bad: bool, streaming: bool, max_document_chars: int = 0, max_line_bytes: int | None = None):
        self.inputs = inputs
        self.skip_bad = skip_bad
        self.bad_files: list[tuple[str, str]] = []
        alone = [item for item in inputs if READERS[item.kind].shards_itself]
        if num_shards > 1 and alone and len(inputs) > 1:
            raise ConvertError(f"with num_shards= above 1, an {READERS[alone[0].kind].scheme} input must be the only "
                               f"input (got {len(inputs)} inputs); convert it in a run of its own")
        position = 0
        self.starts = []
        for item in inputs:
            if not READERS[item.kind].shards_itself:
                item.size = self._size(item)
            self.starts.append(position)
            position += item.size
        self.context = ReadContext(keys=keys, shard=Shard(shard_index, num_shards, position), streaming=streaming,
                                   max_document_chars=max_document_chars, max_line_bytes=max_line_bytes,
                                   bad_file=self._bad_file)

    def _size(self, item: Input) -> int:
        try:
            return os.path.getsize(item.path)
        except OSError as error:
            self._bad_file(item.path, f"cannot read: {error.strerror or error}")
            return 0

    def _bad_file(self, path: str, problem: str) -> None:
        if not self.skip_bad:
            raise ConvertError(f"{path}: {problem}")
        self.bad_files.append((path, problem))

    def __iter__(self) -> Iterator[Batch]:
        for item, start in zip(self.inputs, self.starts):
            if item.path in {path for path, _ in self.bad_files}:
                continue
            records = 0  # of this file, handed on before any damage
            try:
                for batch in READERS[item.kind].batches(item, start, self.context):
                    records += len(batch)
                    yield batch
            except DAMAGE as error:  # unreadable, corrupt archive, bad parquet
                if isinstance(error, MMIdxError):
                    raise
                if not records:
                    kept = ""
                elif self.skip_bad:
                    kept = (f"; the {records:,} records before the damage were kept (bad ones among them "
                            "are counted as bad records), the rest of the file was skipped")
                    if item.compressed and not isinstance(error, EOFError):
                        # Garbage inside a deflate/xz stream decodes to plausible text until the
                        # decoder meets an impossible code; nothing marks where it began.
                        kept += ("; the last records before it may hold damaged text the decompressor "
                                 "could not detect")
                else:
                    kept = (f"; the {records:,} records before the damage were readable, but nothing was "
                            "written (pass skip_bad_records=True to keep them)")
                self._bad_file(item.path, f"cannot read: {error}{kept}")


__all__ = ["COMPRESSION_SUFFIXES", "Input", "InputBatches", "plan_inputs"]
