"""``mmidx convert`` and ``mmidx merge``: Megatron's preprocess_data.py and merge_datasets."""

from __future__ import annotations

from ..convert import MAX_DOCUMENT_CHARS  # light: numpy and the format layer
from .keywords import in_flags

def add_commands(commands) -> None:
    """``mmidx convert`` and ``mmidx merge``."""
    p = commands.add_parser("convert", help="tokenize text (JSON lines, Parquet, text, hf:) into .bin/.idx",
                            description="Megatron's preprocess_data.py: writes PREFIX_KEY_document.bin/.idx "
                                        "per JSON key.")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="*.jsonl/.json[.gz|.bz2|.xz|.zst], *.parquet, *.txt, or hf:NAME_OR_PATH[:SPLIT]")
    p.add_argument("--output-prefix", required=True, metavar="PREFIX")
    p.add_argument("--tokenizer", required=True, metavar="T",
                   help="a tokenizer folder (tokenizer.json + tokenizer_config.json) or its tokenizer.json, a "
                        "sentencepiece .model, 'bytes', 'none' (inputs hold token-id lists), or Megatron's "
                        "GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase, TikTokenizer")
    p.add_argument("--vocab-file", help="GPT2BPETokenizer: vocab.json; BertWordPiece*: vocab.txt")
    p.add_argument("--merge-file", help="GPT2BPETokenizer: merges.txt")
    p.add_argument("--tokenizer-model", help="TikTokenizer: its tiktoken-format vocab .json")
    p.add_argument("--tiktoken-pattern", choices=("v1", "v2"), help="TikTokenizer's split pattern (default v2)")
    p.add_argument("--tiktoken-num-special-tokens", type=int, metavar="N",
                   help="TikTokenizer: ids below N are special tokens (default 1000)")
    p.add_argument("--json-keys", nargs="+", default=["text"], metavar="KEY", help="default: text")
    p.add_argument("--append-eod", action="store_true", help="end every non-empty document with the EOD id")
    p.add_argument("--add-special-tokens", action="store_true",
                   help="add the tokenizer's post-processor special tokens ([CLS] ... [SEP], BOS) to every "
                        "document, as Megatron's --legacy-tokenizer does (default: none, as its default path)")
    p.add_argument("--split-sentences", action="store_true",
                   help="one sequence per sentence (nltk Punkt), outputs PREFIX_KEY_sentence")
    p.add_argument("--keep-newlines", action="store_true", help="with --split-sentences: keep newlines")
    p.add_argument("--lang", default="english", help="Punkt language for --split-sentences (default english)")
    p.add_argument("--eod-id", type=int, help="overrides the tokenizer's end-of-document id")
    p.add_argument("--vocab-size", type=int, help="for --tokenizer none: sets the dtype (uint16 below 65500); "
                                                   "TikTokenizer: its vocabulary size (default 131072)")
    p.add_argument("--workers", type=int, default=1, help="tokenizing processes (default 1)")
    p.add_argument("--num-shards", type=int, default=1, metavar="K", help="cut the input into K slices ...")
    p.add_argument("--shard-index", type=int, default=0, metavar="I", help="... and convert slice I")
    p.add_argument("--one-document-per-file", action="store_true", help=".txt: a whole file is one document")
    p.add_argument("--streaming", action="store_true", help="hf: inputs: load_dataset(streaming=True)")
    p.add_argument("--skip-bad-records", action="store_true", help="count and report bad records, do not stop")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    p.add_argument("--max-document-chars", type=int, default=MAX_DOCUMENT_CHARS, metavar="N",
                   help="refuse (as a bad record) a document longer than N characters; tokenizers needs "
                        "~100 bytes of memory per character (default %(default)s; 0: no limit)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    # The library's messages name its keywords (workers=); errors are reported with these flags.
    p.set_defaults(run=_run_convert, explain=in_flags(p))

    p = commands.add_parser("merge", help="join .bin/.idx pairs in order (Megatron's merge_datasets)")
    p.add_argument("prefixes", nargs="+", metavar="PREFIX", help="pairs to join, in this order")
    p.add_argument("--output-prefix", required=True, metavar="P")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.set_defaults(run=_run_merge, explain=in_flags(p))


def _run_convert(args) -> None:
    from ..convert import convert

    summary = convert(args.inputs, args.output_prefix, args.tokenizer, json_keys=args.json_keys,
                      append_eod=args.append_eod, eod_id=args.eod_id, vocab_size=args.vocab_size,
                      workers=args.workers, num_shards=args.num_shards, shard_index=args.shard_index,
                      one_document_per_file=args.one_document_per_file, streaming=args.streaming,
                      skip_bad_records=args.skip_bad_records, overwrite=args.overwrite,
                      progress=not args.no_progress, max_document_chars=args.max_document_chars,
                      add_special_tokens=args.add_special_tokens, split_sentences=args.split_sentences,
                      keep_newlines=args.keep_newlines, lang=args.lang,
                      tokenizer_options=dict(vocab_file=args.vocab_file, merge_file=args.merge_file,
                                             tokenizer_model=args.tokenizer_model,
                                             tiktoken_pattern=args.tiktoken_pattern,
                                             tiktoken_num_special_tokens=args.tiktoken_num_special_tokens))
    print(summary.table())


def _run_merge(args) -> None:
    from ..convert import merge
    from ..sources.indexed import IndexedFile

    prefix = merge(args.prefixes, args.output_prefix, overwrite=args.overwrite)
    merged = IndexedFile.open(prefix)
    print(f"wrote {prefix}.bin/.idx: {merged.num_documents:,} documents, {merged.num_tokens:,} tokens "
          f"from {len(args.prefixes)} pair(s)")
