"""``mmidx preprocess-data``: Megatron-LM's ``tools/preprocess_data.py`` command line, verbatim.

Every flag of preprocess_data.py at core_v0.16 and core_v0.19 (its own and the tokenizer flags
of ``_add_tokenizer_args``) is parsed as it parses them (``--input``, ``--output-prefix`` and
``--workers`` required, no abbreviations) and given to :func:`convert` (``--partitions``
above 1 to :func:`convert_partitions`, which deals the lines as it does); the pairs are the
bytes it writes. What ``mmidx convert`` does not follow is refused naming what to use.

Which release: ``--megatron-version core_v0.16|core_v0.19`` (ours; default core_v0.19, the newest
compared, as ``megatron_version`` everywhere in mmidx). The two scripts take different flags and
differ in defaults (read from each tag and its megatron-core, compared in the tests):

    preprocess_data.py              core_v0.16 (megatron-core 0.16.1)     core_v0.19 (0.19.2)
    HuggingFaceTokenizer            no special tokens, use_fast False      the post-processor's special
                                                                           tokens ([CLS] ... [SEP], a BOS),
                                                                           use_fast True
    flags of its own                --legacy-tokenizer,                    --tokenizer-hf-no-include-special-
                                    --tokenizer-hf-include-special-tokens, tokens, --tokenizer-hf-no-use-fast,
                                    --tokenizer-hf-use-fast,               --no-pad-vocab-size, --chat-template,
                                    --tiktoken-special-tokens              --find-optimal-num-workers, ...
    GPT2BPETokenizer                Megatron-LM's own, from the files      transformers' of the Hub's gpt2 with
                                    (<|endoftext|> in the text: text)      the files (<|endoftext|>: the EOD id)
    BertWordPiece*                  Megatron-LM's own, from the files      the Hub's bert-large-*, [CLS] ... [SEP]
                                                                           added: refused, unless
                                                                           --tokenizer-hf-no-include-special-tokens
    several --json-keys             the last key's .idx only               every key's .idx

A flag the chosen release does not have is refused naming the release that has it (its script
would exit with a usage error); where the default changes the ids and ``--megatron-version`` was
not given, a note on stderr says which release's default is followed.

Differences that leave the pairs alone: the partition files and the partitions' pairs go to a
temporary folder, not beside the input and the output; ``--split-sentences`` writes the pairs in
one run (preprocess_data.py with one partition first writes the split sentences, ``X_ss.jsonl``,
and only a second run encodes them); ``--log-interval`` is a progress bar's business here.
"""

from __future__ import annotations

import argparse

from ..megatron.versions import DEFAULT_MEGATRON_VERSION, MEGATRON_VERSIONS
from .keywords import in_flags

# --tokenizer-type -> how mmidx convert names the tokenizer (None: --tokenizer-model's file).
TOKENIZERS = {"HuggingFaceTokenizer": None, "GPTSentencePieceTokenizer": None, "SentencePieceTokenizer": None,
              "Llama2Tokenizer": None, "GPT2BPETokenizer": "GPT2BPETokenizer",
              "BertWordPieceLowerCase": "BertWordPieceLowerCase", "BertWordPieceCase": "BertWordPieceCase",
              "TikTokenizer": "TikTokenizer"}
# The other tokenizer types of Megatron-LM, and what to use instead.
OTHER_TOKENIZERS = {
    "NullTokenizer": "its documents are whitespace-separated ids; write them as JSON lists of ids and run "
                     "mmidx convert --tokenizer none --vocab-size V --eod-id V",
    "MultimodalTokenizer": "convert text only (--tokenizer-type HuggingFaceTokenizer)",
    "NullMultimodalTokenizer": "convert text only",
    "SFTTokenizer": "conversations are not converted here; flatten them to text first",
}
LEGACY_SAME = ("GPT2BPETokenizer", "BertWordPieceLowerCase", "BertWordPieceCase")
LEGACY_SPECIAL_TOKENS = ("HuggingFaceTokenizer", "Llama2Tokenizer")
# Flags preprocess_data.py takes that change its output in ways not followed here, with their
# defaults: given otherwise, refused with the reason.
NOT_FOLLOWED = {
    "padded_vocab_size": (None, "the vocabulary padding does not change the ids written; drop it"),
    "vocab_extra_ids": (0, "extra ids (T5's sentinels) are not added here"),
    "tokenizer_metadata": (None, "give the tokenizer's files (--tokenizer-model, --vocab-file) instead"),
    "tokenizer_special_tokens": (None, "put the special tokens in the tokenizer's files"),
    "tiktoken_special_tokens": (None, "TikTokenizer's special tokens are its first --tiktoken-num-special-tokens ids"),
    "tokenizer_sentencepiece_legacy": (False, "the legacy sentencepiece path is not followed"),
    "tokenizer_hf_use_fast": (False, "the default (use_fast False) is what mmidx convert reads as"),
    "null_tokenizer_eod_id": (None, "NullTokenizer is not followed (mmidx convert --tokenizer none --eod-id N)"),
    "null_tokenizer_pad_id": (None, "NullTokenizer is not followed (mmidx convert --tokenizer none)"),
    "trust_remote_code": (False, "code from a tokenizer repo is never run here"),
    "find_optimal_num_workers": (False, "it times worker counts instead of converting; run with --workers N"),
    "sentencepiece_keep_extra_whitespaces": (False, "sentencepiece is read with its extra whitespace removed, the "
                                                    "default"),
    "chat_template": (None, "documents are converted as text; a chat template is not applied"),
}


# The flags of one release's parser only (its get_args() with _add_tokenizer_args; the tests
# read both parsers): dest -> (flag, its value when not given).
ONLY_IN = {
    "core_v0.16": {"legacy_tokenizer": ("--legacy-tokenizer", False),
                   "tokenizer_hf_include_special_tokens": ("--tokenizer-hf-include-special-tokens", False),
                   "tokenizer_hf_use_fast": ("--tokenizer-hf-use-fast", False),
                   "tiktoken_special_tokens": ("--tiktoken-special-tokens", None)},
    "core_v0.19": {"tokenizer_hf_no_include_special_tokens": ("--tokenizer-hf-no-include-special-tokens", False),
                   "tokenizer_hf_no_use_fast": ("--tokenizer-hf-no-use-fast", False),
                   "pad_vocab_size": ("--no-pad-vocab-size", None),
                   "sentencepiece_keep_extra_whitespaces": ("--no-tokenizer-sentencepiece-ignore-extra-whitespaces",
                                                            False),
                   "null_tokenizer_eod_id": ("--null-tokenizer-eod-id", None),
                   "null_tokenizer_pad_id": ("--null-tokenizer-pad-id", None),
                   "chat_template": ("--chat-template", None),
                   "find_optimal_num_workers": ("--find-optimal-num-workers", False),
                   "workers_to_check": ("--workers-to-check", None),
                   "max_documents": ("--max-documents", None)},
}


class _NoPadVocabSize(argparse.Action):
    """core_v0.19's --no-pad-vocab-size / --disable-pad-vocab-size: the padding of the model's
    vocabulary, not the ids."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, False)


def add_commands(commands) -> None:
    p = commands.add_parser("preprocess-data", allow_abbrev=False,
                            help="Megatron-LM's tools/preprocess_data.py command line, verbatim (same pairs)",
                            description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--megatron-version", choices=MEGATRON_VERSIONS,
                   help=f"whose preprocess_data.py to follow (ours, not Megatron-LM's; default "
                        f"{DEFAULT_MEGATRON_VERSION}): its flags and defaults")
    tokenizer = p.add_argument_group("tokenizer")
    tokenizer.add_argument("--tokenizer-type", choices=[*TOKENIZERS, *OTHER_TOKENIZERS])
    tokenizer.add_argument("--tokenizer-model", help="HuggingFaceTokenizer: a folder; GPTSentencePieceTokenizer: a "
                                                     ".model; TikTokenizer: its vocabulary .json")
    tokenizer.add_argument("--vocab-file")
    tokenizer.add_argument("--merge-file")
    tokenizer.add_argument("--vocab-size", type=int)
    tokenizer.add_argument("--legacy-tokenizer", action="store_true",
                           help="GPT2BPETokenizer, BertWordPiece*: Megatron-LM's own tokenizers (the same ids here)")
    tokenizer.add_argument("--tokenizer-hf-include-special-tokens", action="store_true")
    tokenizer.add_argument("--tiktoken-pattern", choices=("v1", "v2"))
    tokenizer.add_argument("--tiktoken-num-special-tokens", type=int, default=1000)
    tokenizer.add_argument("--padded-vocab-size", type=int)
    tokenizer.add_argument("--vocab-extra-ids", type=int, default=0)
    tokenizer.add_argument("--tokenizer-metadata")
    tokenizer.add_argument("--tokenizer-special-tokens", nargs="+")
    tokenizer.add_argument("--tiktoken-special-tokens", nargs="+")
    tokenizer.add_argument("--tokenizer-sentencepiece-legacy", action="store_true")
    tokenizer.add_argument("--tokenizer-hf-use-fast", action="store_true")
    tokenizer.add_argument("--trust-remote-code", action="store_true")
    # core_v0.19's tokenizer flags (its TokenizerConfig): the two "no" flags select what mmidx reads
    # as (the core_v0.16 defaults); the others leave the ids alone or are refused when set.
    tokenizer.add_argument("--tokenizer-hf-no-include-special-tokens", action="store_true")
    tokenizer.add_argument("--tokenizer-hf-no-use-fast", action="store_true")
    tokenizer.add_argument("--no-pad-vocab-size", "--disable-pad-vocab-size", dest="pad_vocab_size",
                           action=_NoPadVocabSize, nargs=0)
    tokenizer.add_argument("--no-tokenizer-sentencepiece-ignore-extra-whitespaces",
                           "--disable-tokenizer-sentencepiece-ignore-extra-whitespaces",
                           dest="sentencepiece_keep_extra_whitespaces", action="store_true")
    tokenizer.add_argument("--null-tokenizer-eod-id", type=int)
    tokenizer.add_argument("--null-tokenizer-pad-id", type=int)
    tokenizer.add_argument("--chat-template")
    data = p.add_argument_group("input, output, runtime")
    data.add_argument("--input", required=True, help="a JSON lines file (with --partitions above 1, a glob)")
    data.add_argument("--json-keys", nargs="+", default=["text"])
    data.add_argument("--split-sentences", action="store_true")
    data.add_argument("--keep-newlines", action="store_true")
    data.add_argument("--append-eod", action="store_true")
    data.add_argument("--lang", default="english")
    data.add_argument("--output-prefix", required=True)
    data.add_argument("--workers", type=int, required=True)
    data.add_argument("--partitions", type=int, default=1)
    data.add_argument("--log-interval", type=int, default=1000, help="accepted; the progress bar says as much")
    data.add_argument("--keep-sequential-samples", action="store_true")
    data.add_argument("--find-optimal-num-workers", action="store_true")
    data.add_argument("--workers-to-check", nargs="+", type=int)  # core_v0.19: default [16, 32, 64]
    data.add_argument("--max-documents", type=int)  # core_v0.19: default 100,000
    p.set_defaults(run=_run, explain=in_flags(p), parser=p)


def _release(args) -> str:
    """The release followed; refuses a flag its parser does not have, naming the one that has it."""
    release = args.megatron_version or DEFAULT_MEGATRON_VERSION
    chosen = "" if args.megatron_version else ", the default"
    for other, flags in ONLY_IN.items():
        if other == release:
            continue
        for name, (flag, default) in flags.items():
            if getattr(args, name) != default:
                args.parser.error(f"{flag} is a flag of {other}'s preprocess_data.py, not of {release}'s "
                                  f"(--megatron-version {release}{chosen}): add --megatron-version {other}, or drop "
                                  f"it ({release}'s script exits on it)")
    return release


def convert_keywords(args) -> dict:
    """preprocess_data.py's flags as :func:`convert`'s keywords; refuses, naming the flag and
    what to use, the ones not followed."""
    error = args.parser.error
    release = _release(args)
    for name, (default, why) in NOT_FOLLOWED.items():
        if getattr(args, name) != default:
            error(f"--{name.replace('_', '-')} is not followed by mmidx: {why}")
    kind = args.tokenizer_type
    if kind is None:
        error("--tokenizer-type is required (preprocess_data.py fails without one)")
    if kind in OTHER_TOKENIZERS:
        error(f"--tokenizer-type {kind} is not supported by mmidx: {OTHER_TOKENIZERS[kind]}")
    # --legacy-tokenizer: Megatron-LM's own tokenizer classes. Theirs for the vocabulary-file kinds
    # is what mmidx reads; HuggingFaceTokenizer's and Llama2Tokenizer's add the special tokens
    # (docs/convert.md's table); SentencePieceTokenizer's appends tokens of its own to the vocabulary.
    if args.legacy_tokenizer and kind not in (*LEGACY_SAME, *LEGACY_SPECIAL_TOKENS):
        error(f"--legacy-tokenizer with {kind} is not followed by mmidx (its legacy class adds ids of its own); "
              "drop it for the default path's ids")
    if args.vocab_size is not None and kind != "TikTokenizer":
        error(f"--vocab-size is read with TikTokenizer only here ({kind} takes its size from its files); drop it")
    if args.tokenizer_hf_include_special_tokens and kind != "HuggingFaceTokenizer":
        error("--tokenizer-hf-include-special-tokens goes with --tokenizer-type HuggingFaceTokenizer")
    if args.tokenizer_hf_no_include_special_tokens and kind not in ("HuggingFaceTokenizer", *LEGACY_SAME):
        error(f"--tokenizer-hf-no-include-special-tokens goes with --tokenizer-type HuggingFaceTokenizer (and "
              f"{', '.join(LEGACY_SAME)}), not {kind}")
    if release == "core_v0.19" and kind in LEGACY_SAME[1:] and not args.tokenizer_hf_no_include_special_tokens:
        # core_v0.19 builds these through transformers (Hub bert-large-*) with its special tokens:
        # [CLS] ... [SEP] around every document, which Megatron-LM's own WordPiece here does not add.
        error(f"--tokenizer-type {kind} with --megatron-version core_v0.19: its script adds [CLS] ... [SEP] to every "
              "document (include-special-tokens is its default), which is not followed here; add "
              "--tokenizer-hf-no-include-special-tokens, or give the tokenizer's folder with --tokenizer-type "
              "HuggingFaceTokenizer --tokenizer-model DIR")
    needs = {"HuggingFaceTokenizer": ["tokenizer_model"], "GPTSentencePieceTokenizer": ["tokenizer_model"],
             "SentencePieceTokenizer": ["tokenizer_model"], "Llama2Tokenizer": ["tokenizer_model"],
             "TikTokenizer": ["tokenizer_model"], "GPT2BPETokenizer": ["vocab_file", "merge_file"],
             "BertWordPieceLowerCase": ["vocab_file"], "BertWordPieceCase": ["vocab_file"]}[kind]
    missing = [f"--{name.replace('_', '-')}" for name in needs if getattr(args, name) is None]
    if missing:
        error(f"--tokenizer-type {kind} needs {' and '.join(missing)}")
    if args.workers < 1 or args.partitions < 1:
        error(f"--workers and --partitions must be at least 1, got {args.workers} and {args.partitions}")
    if args.workers % args.partitions:
        error(f"--workers {args.workers} is not divisible by --partitions {args.partitions} (preprocess_data.py "
              "asserts it: each partition gets workers / partitions processes)")
    tiktoken = kind == "TikTokenizer"
    options = {"vocab_file": args.vocab_file, "merge_file": args.merge_file,
               "tokenizer_model": args.tokenizer_model if tiktoken else None,
               "tiktoken_pattern": args.tiktoken_pattern if tiktoken else None,
               "tiktoken_num_special_tokens": args.tiktoken_num_special_tokens if tiktoken else None,
               # core_v0.19 builds GPT2BPETokenizer with transformers' GPT2Tokenizer over the files:
               # <|endoftext|> in the text is its special token there
               "gpt2_special_in_text": True if release == "core_v0.19" and kind == "GPT2BPETokenizer" else None}
    return {"tokenizer": TOKENIZERS[kind] or args.tokenizer_model, "json_keys": args.json_keys,
            "append_eod": args.append_eod, "vocab_size": args.vocab_size,
            "workers": max(1, args.workers // args.partitions),
            "add_special_tokens": _special_tokens(args, release), "split_sentences": args.split_sentences,
            "keep_newlines": args.keep_newlines, "lang": args.lang, "tokenizer_options": options}


def _special_tokens(args, release: str) -> bool:
    """Whether preprocess_data.py adds the tokenizer's special tokens: core_v0.16 with
    --tokenizer-hf-include-special-tokens or its legacy HuggingFace and Llama2 tokenizers;
    core_v0.19 for HuggingFaceTokenizer unless --tokenizer-hf-no-include-special-tokens."""
    if release == "core_v0.16":
        return args.tokenizer_hf_include_special_tokens or (args.legacy_tokenizer
                                                            and args.tokenizer_type in LEGACY_SPECIAL_TOKENS)
    return args.tokenizer_type == "HuggingFaceTokenizer" and not args.tokenizer_hf_no_include_special_tokens


def _run(args) -> None:
    import sys

    from ..convert import convert
    from ..convert.partitions import convert_partitions

    keywords = convert_keywords(args)
    release = args.megatron_version or DEFAULT_MEGATRON_VERSION
    if args.megatron_version is None and args.tokenizer_type == "HuggingFaceTokenizer" and not (
            args.tokenizer_hf_no_include_special_tokens):
        print(f"mmidx preprocess-data: note: following {release}'s preprocess_data.py (the default "
              f"--megatron-version): the tokenizer's special tokens are {'' if keywords['add_special_tokens'] else 'not '}"
              "added; core_v0.16's adds none unless --tokenizer-hf-include-special-tokens (--megatron-version "
              "core_v0.16 to follow it)", file=sys.stderr)
    if args.tokenizer_type in LEGACY_SAME and not args.legacy_tokenizer:
        # Megatron-LM's default path (core_v0.16.1's, and core_v0.19.0's only path) builds these
        # through transformers' AutoTokenizer of the Hub's repo of that name (gpt2, bert-large-*),
        # with the files given. core_v0.19's GPT2BPETokenizer is compared with a local stand-in for
        # that repo holding the same files; the others were not compared.
        print(f"mmidx preprocess-data: note: {args.tokenizer_type} from the files given; {release}'s script "
              "opens the Hugging Face Hub's repo of that name through transformers, with the files given "
              "(the same ids when the repo's vocabulary is the files')", file=sys.stderr)
    if args.partitions == 1:
        summary = convert([args.input], args.output_prefix, overwrite=True, **keywords)
        print(summary.table())
        return
    outputs = convert_partitions(args.input, args.output_prefix, args.partitions,
                                 keep_sequential_samples=args.keep_sequential_samples, overwrite=True, **keywords)
    for prefix in outputs.values():
        print(f"wrote {prefix}.bin/.idx ({args.partitions} partitions, joined in order)")
