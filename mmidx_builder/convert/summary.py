"""What a conversion did, as :func:`~mmidx_builder.convert.convert` returns it."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ConvertSummary:
    """What :func:`convert` did; ``table()`` is what the CLI prints."""

    outputs: dict  # key -> output prefix
    tokenizer: str
    dtype: str
    documents: int = 0
    tokens: dict = dataclasses.field(default_factory=dict)  # key -> token count
    empty_documents: int = 0
    bad_records: int = 0
    bad_examples: list = dataclasses.field(default_factory=list)
    input_bytes: int = 0
    seconds: float = 0.0
    workers: int = 1
    shard: tuple | None = None  # (index, count)
    eod: str = ""  # the EOD id and where it came from, with append_eod=True
    special_tokens: bool = False
    sentences: str = ""  # the sentence splitter, with split_sentences=True
    model_max_length: int | None = None  # from tokenizer_config.json
    long_documents: int = 0  # documents (per key) longer than model_max_length
    longest_document: int = 0  # tokens, EOD included

    def table(self) -> str:
        seconds = max(self.seconds, 1e-9)
        total_tokens = sum(self.tokens.values())
        rows = [("tokenizer", self.tokenizer + (" + post-processor special tokens" if self.special_tokens else "")),
                ("dtype", self.dtype), ("workers", str(self.workers))]
        if self.eod:
            rows.append(("EOD", self.eod))
        if self.sentences:
            rows.append(("sentences", self.sentences))
        if self.shard:
            rows.append(("shard", f"{self.shard[0]} of {self.shard[1]}"))
        rows += [("documents", f"{self.documents:,} ({self.empty_documents:,} tokenized to nothing)"),
                 ("tokens", f"{total_tokens:,}"),
                 ("bad records", f"{self.bad_records:,} skipped" if self.bad_records else "0"),
                 ("input", f"{self.input_bytes / 1e6:,.1f} MB"),
                 ("time", f"{self.seconds:,.1f} s"),
                 ("speed", f"{self.documents / seconds:,.0f} docs/s, {total_tokens / seconds:,.0f} tokens/s, "
                           f"{self.input_bytes / 1e6 / seconds:,.1f} MB/s")]
        rows += [(f"output [{key}]", f"{prefix}.bin/.idx ({self.tokens.get(key, 0):,} tokens)")
                 for key, prefix in self.outputs.items()]
        if self.model_max_length:
            rows.append(("model max length", self.length_note()))
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value}" for name, value in rows]
        lines += [f"  bad: {where}: {problem}" for where, problem in self.bad_examples]
        return "\n".join(lines)

    def length_note(self) -> str:
        """The tokenizer's model_max_length against the documents: nothing is truncated (as in
        preprocess_data.py), so longer documents are for the training side to pack or cut."""
        limit = self.model_max_length
        if not self.long_documents:
            return f"{limit:,} (tokenizer_config.json); no document is longer"
        many = f"{self.long_documents:,} documents are" if self.long_documents > 1 else "1 document is"
        return (f"WARNING: {many} longer than the tokenizer's model_max_length "
                f"{limit:,} (the longest has {self.longest_document:,} tokens, {self.longest_document / limit:,.1f}x); "
                f"they are kept whole, as preprocess_data.py keeps them: train with packed sequences "
                f"(GPTDataset's seq_length), not one document per example")


@dataclasses.dataclass
class TokensSummary:
    """What :func:`pairs_to_mds` or :func:`mds_to_pairs` did: token ids moved from one format to
    the other (no tokenizer); ``table()`` is what the CLI prints."""

    inputs: list  # prefixes, or MDS index files
    output: str  # the MDS folder, or the pair's prefix
    layout: str  # "tokens: ndarray:int32", or the pair's dtype
    packing: str  # how documents became samples, or samples documents
    documents: int = 0  # documents read (to MDS) or written (to .bin/.idx)
    samples: int = 0  # samples written (to MDS) or read
    tokens_in: int = 0
    tokens_out: int = 0
    empty_documents: int = 0  # skipped: an MDS ndarray holds at least one id
    dropped_tokens: int = 0  # the last partial sample of --concat-tokens, as LLM Foundry drops it
    shards: int = 0
    bytes_in: int = 0  # token bytes read
    bytes_out: int = 0  # bytes written (shards as stored, or .bin and .idx)
    seconds: float = 0.0
    to_mds: bool = True

    def table(self) -> str:
        seconds = max(self.seconds, 1e-9)
        if self.to_mds:
            rows = [("inputs", f"{len(self.inputs)} pair(s): {self.documents:,} documents, {self.tokens_in:,} tokens"),
                    ("output", f"{self.output} ({self.layout}; {self.shards:,} shard(s), {self.bytes_out / 1e6:,.1f} MB)"),
                    ("samples", f"{self.samples:,} ({self.packing})")]
            if self.empty_documents:
                rows.append(("empty documents", f"{self.empty_documents:,} skipped (an MDS sample holds at least one id)"))
            rows.append(("tokens written", f"{self.tokens_out:,}" + (f" ({self.dropped_tokens:,} left over at the end, "
                                                                     "dropped as LLM Foundry drops them)"
                                                                     if self.dropped_tokens else "")))
        else:
            rows = [("inputs", f"{len(self.inputs)} MDS stream(s): {self.samples:,} samples, {self.tokens_in:,} tokens"),
                    ("output", f"{self.output}.bin/.idx ({self.layout}, {self.bytes_out / 1e6:,.1f} MB)"),
                    ("documents", f"{self.documents:,} ({self.packing})"),
                    ("tokens written", f"{self.tokens_out:,}")]
        rows += [("time", f"{self.seconds:,.1f} s"),
                 ("speed", f"{self.bytes_in / 1e6 / seconds:,.1f} MB/s of token ids, {self.tokens_in / seconds:,.0f} tokens/s")]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


__all__ = ["ConvertSummary", "TokensSummary"]
