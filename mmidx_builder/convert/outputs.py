"""The output pairs: Megatron's names, the refusal to replace one unasked, and each encoded
batch written to them in order (and counted in the summary)."""

from __future__ import annotations

import os

from ..errors import ConvertError
from .encode import BatchResult
from .summary import ConvertSummary

# Bad records listed in the summary (all are counted).
BAD_EXAMPLES = 10


def output_prefix_for(prefix: str, key: str, level: str = "document") -> str:
    """Megatron's name: ``{prefix}_{key}_{level}``, level ``document``, or ``sentence`` when
    sentences are split."""
    return f"{prefix}_{key}_{level}"


def refuse_existing(prefixes) -> None:
    for prefix in prefixes:
        for path in (prefix + ".bin", prefix + ".idx"):
            if os.path.exists(path):
                raise ConvertError(f"{path} exists; pass overwrite=True to replace it")


def write_result(result: BatchResult, writers: dict, summary: ConvertSummary, skip_bad: bool) -> None:
    """One batch's documents appended to each key's writer, its counts to ``summary``; its
    first bad record stops the run unless ``skip_bad``."""
    if result.bad:
        if not skip_bad:
            where, problem = result.bad[0]
            raise ConvertError(f"{where}: {problem} (pass skip_bad_records=True to skip such records)")
        summary.bad_records += len(result.bad)
        room = BAD_EXAMPLES - len(summary.bad_examples)
        summary.bad_examples.extend(result.bad[:max(room, 0)])
    for key, writer in writers.items():
        tokens, lengths = result.tokens[key], result.lengths[key]
        per_document, sequence_lengths = result.sentences[key] if result.sentences else (None, None)
        offset = first = 0
        for document, length in enumerate(lengths.tolist()):
            if per_document is None:
                # A document that tokenized to nothing is a document of no sequence, as in Megatron.
                sequences = [length] if length else []
            else:
                count = int(per_document[document])
                sequences = sequence_lengths[first:first + count]
                first += count
            writer.add_document(tokens[offset:offset + length], sequence_lengths=sequences)
            offset += length
        summary.tokens[key] += offset
        if summary.model_max_length and len(lengths):
            summary.long_documents += int((lengths > summary.model_max_length).sum())
            summary.longest_document = max(summary.longest_document, int(lengths.max()))
    first = next(iter(result.lengths.values()))
    summary.documents += len(first)
    summary.empty_documents += int((first == 0).sum())
    summary.input_bytes += result.input_bytes


__all__ = ["output_prefix_for", "refuse_existing", "write_result"]
