"""Megatron-LM's vocabulary-file tokenizers, as its core_v0.16.1 tag builds them.

    --tokenizer               files                         ids as                     EOD
    GPT2BPETokenizer          --vocab-file vocab.json       Megatron's gpt2_tokenization  <|endoftext|>
                              --merge-file merges.txt       (GPT-2's byte-level BPE)
    BertWordPieceLowerCase    --vocab-file vocab.txt        Megatron's bert_tokenization  [EOS], added after
    BertWordPieceCase         --vocab-file vocab.txt        (BasicTokenizer + WordPiece)  the vocabulary
    TikTokenizer              --tokenizer-model vocab.json  megatron.core's TikTokenTokenizer  </s> (id 2)
                              (tiktoken ranks), --vocab-size,
                              --tiktoken-pattern, --tiktoken-num-special-tokens

GPT2BPETokenizer and BertWordPiece follow Megatron-LM's own tokenizers (``--legacy-tokenizer``;
``megatron/training/tokenizer``), the only ones that build from the files offline: the
default path of that tag opens ``gpt2`` / ``bert-large-(un)cased`` from the Hugging Face Hub
with ``AutoTokenizer`` and the given files beside them. They run here on the ``tokenizers``
library with the same steps (GPT-2's split pattern and byte-level alphabet; BERT's text
cleaning, CJK spacing, punctuation splitting, accent stripping when lower-casing, WordPiece
with a 200-character word limit), so they are fast:

- GPT2BPETokenizer reads merges.txt as Megatron does (the first line is skipped, whatever it
  holds, and so is the text after the last newline); special tokens are never matched in
  the text; the vocabulary size is vocab.json's entry count. With ``special_in_text``
  (core_v0.19's path, transformers' GPT2Tokenizer over the same files) ``<|endoftext|>`` in
  the text is that one id, as transformers' added token (appended when vocab.json lacks it).
- BertWordPiece*: vocab.txt one token a line (stripped); ``[BOS]`` and ``[EOS]`` are added
  after the vocabulary when missing, and ``[EOS]`` is the EOD, as Megatron's
  ``_BertWordPieceTokenizer`` does; ``[UNK]``, ``[CLS]``, ``[SEP]``, ``[PAD]`` and ``[MASK]``
  must be in the file (Megatron fails without them).
- TikTokenizer is the default path's ``TikTokenTokenizer`` (it needs ``tiktoken``): the
  first ``num_special_tokens`` ids are the special tokens (``<unk>``, ``<s>``, ``</s>``,
  ``<mask>``, ``<pad>``, ``<cls>``, ``<sep>``, then ``<SPECIAL_7>``...), the file's ranks
  follow, cut at ``vocab_size``; special tokens in the text are encoded as such.
"""

from __future__ import annotations

import base64
import json
import os

from ..errors import ConvertError

BERT_SPECIAL = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")
GPT2_EOD = "<|endoftext|>"
TIKTOKEN_SPECIAL = ("<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>")
TIKTOKEN_DEFAULTS = {"vocab_size": 2 ** 17, "num_special_tokens": 1000, "pattern": "v2"}
# megatron.core.tokenizers.text.libraries.tiktoken_tokenizer's split patterns.
TIKTOKEN_PATTERNS = {
    "v1": r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    "v2": (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
           r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|"
           r"\s*[\r\n]+|\s+(?!\S)|\s+"),
}
NAMES = ("GPT2BPETokenizer", "BertWordPieceLowerCase", "BertWordPieceCase", "TikTokenizer")


def _tokenizers():
    try:
        import tokenizers
    except ImportError as error:
        raise ConvertError(f"Megatron's vocabulary-file tokenizers run on the 'tokenizers' package ({error}); "
                           "pip install 'mmidx-builder[tokenizers]'") from None
    return tokenizers


def _read(path: str, option: str) -> str:
    if not path:
        raise ConvertError(f"this tokenizer needs {option}")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ConvertError(f"{path}, given as {option}: cannot read as UTF-8 text: {error}") from None


def gpt2_bpe(vocab_file: str, merge_file: str, special_in_text: bool = False):
    """(tokenizers.Tokenizer, vocabulary size, EOD id or None) for GPT2BPETokenizer."""
    tokenizers = _tokenizers()
    try:
        vocab = json.loads(_read(vocab_file, "vocab_file= (vocab.json)"))
    except ValueError as error:
        raise ConvertError(f"{vocab_file}: expected GPT-2's vocab.json (a JSON object of token -> id): {error}") from None
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise ConvertError(f"{vocab_file}: expected a JSON object of token -> id, found {type(vocab).__name__}")
    # gpt2_tokenization: bpe_data = f.read().split('\n')[1:-1]; merges are whitespace-split pairs.
    pairs = [tuple(line.split()) for line in _read(merge_file, "merge_file= (merges.txt)").split("\n")[1:-1]]
    try:
        # A pair outside the vocabulary can never give a token Megatron finds (it maps such a
        # piece to id 0); one whose merge is missing is dropped for the same reason.
        merges = [pair for pair in pairs if len(pair) == 2 and pair[0] in vocab and pair[1] in vocab
                  and pair[0] + pair[1] in vocab]
        model = tokenizers.models.BPE(vocab, merges, unk_token=_token_of(vocab, 0))
    except Exception as error:  # tokenizers raises bare Exceptions for bad vocabularies
        raise ConvertError(f"{vocab_file} + {merge_file}: not a byte-level BPE vocabulary: {error}") from None
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if special_in_text:
        tokenizer.add_special_tokens([tokenizers.AddedToken(GPT2_EOD, special=True, normalized=False)])
        return tokenizer, tokenizer.get_vocab_size(with_added_tokens=True), tokenizer.token_to_id(GPT2_EOD)
    return tokenizer, len(vocab), vocab.get(GPT2_EOD)


def _token_of(vocab: dict, wanted: int) -> str | None:
    """The token of id ``wanted``: Megatron maps a piece missing from vocab.json to 0."""
    return next((token for token, i in vocab.items() if i == wanted), None)


def bert_wordpiece(vocab_file: str, lower_case: bool):
    """(tokenizers.Tokenizer, vocabulary size, EOD id) for BertWordPieceLowerCase/Case."""
    tokenizers = _tokenizers()
    vocab: dict = {}
    # bert_tokenization.load_vocab: one token a line, stripped; a later duplicate takes the id.
    for index, line in enumerate(_read(vocab_file, "vocab_file= (vocab.txt)").splitlines()):
        vocab[line.strip()] = index
    missing = [token for token in BERT_SPECIAL if token not in vocab]
    if missing:
        raise ConvertError(f"{vocab_file}: a BERT vocab.txt must hold {', '.join(BERT_SPECIAL)}; "
                           f"{', '.join(missing)} missing (Megatron's BertWordPiece tokenizers need them)")
    # _BertWordPieceTokenizer.add_token: [BOS] then [EOS] after the vocabulary, when missing.
    for token in ("[BOS]", "[EOS]"):
        vocab.setdefault(token, len(vocab))
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]",
                                                                 max_input_chars_per_word=200))
    tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                                 strip_accents=lower_case, lowercase=lower_case)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    return tokenizer, len(vocab), vocab["[EOS]"]


def tiktoken_encoding(path: str, *, vocab_size: int | None = None, num_special_tokens: int | None = None,
                      pattern: str | None = None):
    """(tiktoken.Encoding, vocabulary size, EOD id) as megatron.core's TikTokenTokenizer
    builds it from a tiktoken-format vocab.json (a list of {rank, token_bytes, token_str})."""
    try:
        import tiktoken
    except ImportError as error:
        raise ConvertError(f"tokenizer='TikTokenizer' needs the 'tiktoken' package ({error}); "
                           "pip install 'mmidx-builder[tiktoken]'") from None
    vocab_size = TIKTOKEN_DEFAULTS["vocab_size"] if vocab_size is None else vocab_size
    num_special_tokens = TIKTOKEN_DEFAULTS["num_special_tokens"] if num_special_tokens is None else num_special_tokens
    pattern = TIKTOKEN_DEFAULTS["pattern"] if pattern is None else pattern
    if pattern not in TIKTOKEN_PATTERNS:
        raise ConvertError(f"tiktoken_pattern= must be v1 or v2, got {pattern!r}")
    if not len(TIKTOKEN_SPECIAL) <= num_special_tokens < vocab_size:
        raise ConvertError(f"TikTokenizer needs {len(TIKTOKEN_SPECIAL)} <= tiktoken_num_special_tokens= "
                           f"({num_special_tokens}) < vocab_size= ({vocab_size})")
    inner = vocab_size - num_special_tokens
    try:
        entries = json.loads(_read(path, "tokenizer_model= (a tiktoken vocab .json)"))
    except ValueError as error:
        raise ConvertError(f"{path}: expected a tiktoken vocabulary (a JSON list), cannot parse: {error}") from None
    if not path.endswith(".json") or not isinstance(entries, list):
        raise ConvertError(f"{path}: expected a .json list of {{rank, token_bytes, token_str}} (Megatron's "
                           "tiktoken format)")
    if len(entries) < inner:
        raise ConvertError(f"{path}: holds {len(entries)} ranks, but vocab_size={vocab_size} minus "
                           f"{num_special_tokens} special tokens needs {inner} (Megatron asserts every id is used)")
    ranks = {}
    for i, entry in enumerate(entries[:inner]):
        if not isinstance(entry, dict) or set(entry) != {"rank", "token_bytes", "token_str"} or entry["rank"] != i:
            raise ConvertError(f"{path}: entry {i}: expected {{rank: {i}, token_bytes, token_str}}, found {entry!r:.80}")
        token = base64.b64decode(entry["token_bytes"])
        if i < 256 and token != bytes([i]):
            raise ConvertError(f"{path}: entry {i}: ranks 0-255 must be the single bytes, found {token!r}")
        ranks[token] = i + num_special_tokens
    if len(ranks) != inner:
        raise ConvertError(f"{path}: the first {inner} entries repeat a token")
    special = list(TIKTOKEN_SPECIAL) + [f"<SPECIAL_{i}>" for i in range(len(TIKTOKEN_SPECIAL), num_special_tokens)]
    encoding = tiktoken.Encoding(name=os.path.basename(os.path.dirname(os.path.abspath(path))),
                                 pat_str=TIKTOKEN_PATTERNS[pattern], mergeable_ranks=ranks,
                                 special_tokens={token: i for i, token in enumerate(special)})
    return encoding, vocab_size, special.index("</s>")


__all__ = ["NAMES", "TIKTOKEN_PATTERNS", "bert_wordpiece", "gpt2_bpe", "tiktoken_encoding"]
