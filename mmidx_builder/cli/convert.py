"""``mmidx convert`` and ``mmidx merge``: Megatron's preprocess_data.py and merge_datasets."""

from __future__ import annotations

import argparse

from ..convert import MAX_DOCUMENT_CHARS  # light: numpy and the format layer
from .keywords import in_flags

def add_commands(commands) -> None:
    """``mmidx convert`` and ``mmidx merge``."""
    p = commands.add_parser("convert", help="tokenize text (JSON lines, Parquet, text, hf:) into .bin/.idx; MDS token "
                                            "shards to .bin/.idx and back",
                            description="Megatron's preprocess_data.py: writes PREFIX_KEY_document.bin/.idx per JSON "
                                        "key.\nGiven MosaicML folders (index.json, or Composer's index.mds), writes "
                                        "their token column\nas PREFIX_COLUMN_document.bin/.idx (the bytes of "
                                        "megatron-core's IndexedDatasetBuilder).\nWith --to mds, writes .bin/.idx "
                                        "prefixes as an MDS folder of token samples (--output),\nthe bytes "
                                        "streaming.MDSWriter writes.",
                            formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EPILOG)
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="*.jsonl/.json[.gz|.bz2|.xz|.zst], *.parquet, *.txt, or hf:NAME_OR_PATH[:SPLIT]; MDS folders "
                        "or their index.json / index.mds[.gz]; with --to mds, .bin/.idx prefixes")
    p.add_argument("--output-prefix", metavar="PREFIX",
                   help="the output pairs' prefix: PREFIX_KEY_document.bin/.idx (text), PREFIX_COLUMN_document.bin/.idx "
                        "(MDS inputs)")
    p.add_argument("--tokenizer", metavar="T",
                   help="(text inputs: required) a tokenizer folder (tokenizer.json + tokenizer_config.json) or its "
                        "tokenizer.json, a sentencepiece .model, 'bytes', 'none' (inputs hold token-id lists), or "
                        "Megatron's GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase, TikTokenizer")
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
    p.add_argument("--vocab-size", type=int, help="for --tokenizer none and MDS inputs: sets the dtype (uint16 below "
                                                   "65500, else int32); TikTokenizer: its vocabulary size (default "
                                                   "131072)")
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
    mds = p.add_argument_group("MosaicML token shards (MDS), both ways")
    mds.add_argument("--to", choices=("megatron", "mds"), default="megatron",
                     help="mds: write the INPUT prefixes (.bin/.idx) as an MDS folder (default megatron: .bin/.idx)")
    mds.add_argument("--output", metavar="DIR", help="--to mds: the MDS folder to write (new or empty)")
    mds.add_argument("--column", dest="token_column", default="tokens", metavar="NAME",
                     help="the column of token ids, read or written (default tokens, LLM Foundry's)")
    mds.add_argument("--encoding", default="ndarray:int32",
                     help="--to mds: the column's MDS encoding: ndarray:int32 (default, LLM Foundry's), another "
                          "integer ndarray[:DTYPE], ndarray:DTYPE:N with --concat-tokens N, or bytes (older LLM "
                          "Foundry: the ids as --dtype, int64 by default)")
    mds.add_argument("--dtype", help="MDS inputs: how a bytes column is read (older LLM Foundry: int64), or the output "
                                     "dtype of an ndarray column; --to mds: the ids' dtype in a bytes or ndarray column")
    mds.add_argument("--concat-tokens", type=int, metavar="N",
                     help="--to mds: pack the documents into samples of exactly N ids, as LLM Foundry's "
                          "convert_dataset_hf.py --concat_tokens (default: one sample per document)")
    mds.add_argument("--no-wrap", action="store_true",
                     help="with --concat-tokens: drop what is left of a document after its sample (LLM Foundry's "
                          "--no_wrap)")
    mds.add_argument("--bos-id", dest="bos_ids", type=int, nargs="+", default=[], metavar="ID",
                     help="--to mds: ids before each document (default none: Megatron's documents end in their EOD)")
    mds.add_argument("--eos-id", dest="eos_ids", type=int, nargs="+", default=[], metavar="ID",
                     help="--to mds: ids after each document (default none)")
    mds.add_argument("--compression", help="--to mds: zstd, zstd:LEVEL, br, bz2, gz, snappy (default none, as MDSWriter)")
    mds.add_argument("--hashes", nargs="+", default=[], metavar="ALGO",
                     help="--to mds: hashes recorded for every shard file (sha1, md5, xxh64, xxh3_64...)")
    mds.add_argument("--size-limit", default="64mb", metavar="SIZE",
                     help="--to mds: start a new shard before one would pass SIZE bytes (67108864, '64mb'; 'none': one "
                          "shard; default 64mb, MDSWriter's)")
    mds.add_argument("--split-at-eos", type=int, metavar="ID",
                     help="MDS inputs: join the samples' ids and cut a document after every ID (default: one document "
                          "per sample)")
    # preprocess_data.py's own flags, so that its command line is sent to `mmidx preprocess-data`.
    for flag in PREPROCESS_DATA_ONLY:
        p.add_argument(flag, dest=f"pd_{flag[2:].replace('-', '_')}", nargs="?", const=True, help=argparse.SUPPRESS)
    # The library's messages name its keywords (workers=); errors are reported with these flags.
    p.set_defaults(run=_run_convert, explain=in_flags(p), parser=p)

    p = commands.add_parser("merge", help="join .bin/.idx pairs in order (Megatron's merge_datasets)")
    p.add_argument("prefixes", nargs="+", metavar="PREFIX", help="pairs to join, in this order")
    p.add_argument("--output-prefix", required=True, metavar="P")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.set_defaults(run=_run_merge, explain=in_flags(p))


# Flags of Megatron-LM's preprocess_data.py that mmidx convert spells otherwise.
PREPROCESS_DATA_ONLY = ("--input", "--tokenizer-type", "--partitions", "--keep-sequential-samples", "--log-interval",
                        "--legacy-tokenizer", "--tokenizer-hf-include-special-tokens")

_EPILOG = """Megatron-LM's preprocess_data.py command line runs as it is under `mmidx preprocess-data`.

MosaicML token shards:
  mmidx convert out/mds --output-prefix data/corpus      # -> data/corpus_tokens_document.bin/.idx
  mmidx convert data/corpus_text_document --to mds --output out/mds --concat-tokens 2048 --compression zstd

Empty documents make no MDS sample (an MDS ndarray holds at least one id): they are skipped and counted."""

# Options of one direction only, with their defaults: set in another direction, they are refused.
_TEXT_ONLY = {"tokenizer": None, "vocab_file": None, "merge_file": None, "tokenizer_model": None,
              "tiktoken_pattern": None, "tiktoken_num_special_tokens": None, "json_keys": ["text"],
              "append_eod": False, "add_special_tokens": False, "split_sentences": False, "keep_newlines": False,
              "lang": "english", "eod_id": None, "workers": 1, "num_shards": 1, "shard_index": 0,
              "one_document_per_file": False, "streaming": False, "skip_bad_records": False,
              "max_document_chars": MAX_DOCUMENT_CHARS}
_TO_MDS_ONLY = {"output": None, "encoding": "ndarray:int32", "concat_tokens": None, "no_wrap": False, "bos_ids": [],
                "eos_ids": [], "compression": None, "hashes": [], "size_limit": "64mb"}
_FROM_MDS_ONLY = {"split_at_eos": None}
_MDS_ONLY = {"token_column": "tokens", "dtype": None, **_TO_MDS_ONLY, **_FROM_MDS_ONLY}


def _refuse(args, options: dict, why: str) -> None:
    given = [name for name, default in options.items() if getattr(args, name) != default]
    if given:
        flags = args.explain(" ".join(f"{name}=" for name in given))
        args.parser.error(f"{flags}: not for {why}")


def _run_convert(args) -> None:
    given = [flag for flag in PREPROCESS_DATA_ONLY if getattr(args, f"pd_{flag[2:].replace('-', '_')}") is not None]
    if given:
        args.parser.error(f"{given[0]} is preprocess_data.py's flag: run its command line unchanged as `mmidx "
                          "preprocess-data --input ... --output-prefix ... --tokenizer-type ... --workers N`, or "
                          "here give the inputs as arguments and the tokenizer as --tokenizer")
    if not args.inputs:
        args.parser.error("the following arguments are required: INPUT")
    if args.to == "mds":
        _refuse(args, {**_TEXT_ONLY, **_FROM_MDS_ONLY, "output_prefix": None, "vocab_size": None}, "--to mds")
        if args.output is None:
            args.parser.error("the following arguments are required with --to mds: --output")
        return _run_to_mds(args)
    from ..convert.from_mds import mds_inputs

    if mds_inputs(args.inputs) is not None:
        _refuse(args, {**_TEXT_ONLY, **_TO_MDS_ONLY}, "MDS inputs (they hold token ids already)")
        if args.output_prefix is None:
            args.parser.error("the following arguments are required: --output-prefix")
        return _run_from_mds(args)
    _refuse(args, _MDS_ONLY, "text inputs (MDS folders and --to mds only)")
    missing = [flag for flag, value in (("--output-prefix", args.output_prefix), ("--tokenizer", args.tokenizer))
               if value is None]
    if missing:
        args.parser.error(f"the following arguments are required: {', '.join(missing)}")
    _run_text(args)


def _run_to_mds(args) -> None:
    from ..convert import pairs_to_mds

    size_limit = None if str(args.size_limit).lower() == "none" else args.size_limit
    summary = pairs_to_mds(args.inputs, args.output, token_column=args.token_column, encoding=args.encoding,
                           dtype=args.dtype, concat_tokens=args.concat_tokens, no_wrap=args.no_wrap,
                           bos_ids=args.bos_ids, eos_ids=args.eos_ids, compression=args.compression,
                           hashes=args.hashes, size_limit=size_limit, overwrite=args.overwrite,
                           progress=not args.no_progress)
    print(summary.table())


def _run_from_mds(args) -> None:
    from ..convert import mds_to_pairs

    summary = mds_to_pairs(args.inputs, args.output_prefix, token_column=args.token_column, dtype=args.dtype,
                           vocab_size=args.vocab_size, split_at_eos=args.split_at_eos, overwrite=args.overwrite,
                           progress=not args.no_progress)
    print(summary.table())


def _run_text(args) -> None:
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
