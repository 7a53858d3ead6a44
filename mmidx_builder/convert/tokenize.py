"""Tokenizers for ``mmidx convert``: one small adapter per kind, all offline.

    spec                        adapter                 vocab size              end of document
    bytes                       BytesTokenizer          257                     256
    none                        PretokenizedTokenizer   --vocab-size            --eod-id
    PATH/tokenizer.json, DIR    HFTokenizersTokenizer   with added tokens       eos_token (tokenizer_config.json),
                                                                                else sep_token, else </s>, ...
    PATH.model                  SentencePieceTokenizer  piece count             eos_id

Every adapter has ``encode_batch(texts) -> list of token-id lists``, the tokenizer's own
batch call, so the tokens written are exactly what the tokenizer's ``encode`` gives. They
give what megatron-core's tokenizers (preprocess_data.py's default path) give: a document is
never truncated or padded, whatever a tokenizer.json says, and no special tokens are added
unless ``add_special_tokens`` (a tokenizer.json's post-processor: [CLS] ... [SEP], a BOS;
sentencepiece: BOS).
``tokenizers`` and ``sentencepiece`` are optional extras, imported only when asked for.
Adapters pickle as their spec and reload in a worker process, never as a model.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from . import autotokenizer, megatron_tokenizers
from ..errors import ConvertError
from .tokenizer_config import TokenizerConfig, read_tokenizer_config

# Where an end-of-document id given by the caller came from, in the summary.
GIVEN_EOD = "the eod_id given"
# Special tokens that mean "end of document", in the order they are looked for.
EOD_TOKENS = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "<|eos|>", "[EOS]")


class Tokenizer:
    """What conversion needs from a tokenizer."""

    name: str = ""
    vocab_size: int = 0
    eod_id: int | None = None
    eod_source: str = ""  # where eod_id came from, for the summary
    pretokenized = False
    add_special_tokens = False
    model_max_length: int | None = None  # the model's context, when the tokenizer files say

    def encode_batch(self, texts: Sequence[str]) -> list:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, vocab_size={self.vocab_size}, eod_id={self.eod_id})"


class _LoadedFromFile(Tokenizer):
    """A tokenizer whose native object cannot be pickled: worker processes get the path and
    load the file again. Subclasses set ``_native`` (the attribute) and ``_load()``."""

    _native = ""

    def _load(self) -> None:
        raise NotImplementedError

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != self._native}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._load()


class BytesTokenizer(Tokenizer):
    """UTF-8 bytes as token ids 0-255; 256 is the end of document."""

    def __init__(self, eod_id: int | None = None):
        self.name = "bytes"
        self.eod_id = 256 if eod_id is None else eod_id
        self.vocab_size = max(257, self.eod_id + 1)

    def encode_batch(self, texts):
        return [np.frombuffer(text.encode("utf-8"), np.uint8) for text in texts]


class PretokenizedTokenizer(Tokenizer):
    """Records already hold token ids; nothing is encoded, ids are only range-checked."""

    pretokenized = True

    def __init__(self, vocab_size: int | None, eod_id: int | None = None):
        if vocab_size is None or vocab_size < 1:
            raise ConvertError("tokenizer='none' needs vocab_size= (the output dtype follows from it, "
                               f"as in Megatron), got {vocab_size}")
        self.name = "none"
        self.eod_id = eod_id
        self.vocab_size = vocab_size if eod_id is None else max(vocab_size, eod_id + 1)

    def encode_batch(self, texts):
        raise ConvertError("tokenizer='none' reads token-id lists; it cannot encode text")


def _import(module: str, extra: str):
    try:
        return __import__(module)
    except ImportError as error:
        raise ConvertError(f"this tokenizer needs the {module!r} package ({error}); "
                           f"install it with: pip install 'mmidx-builder[{extra}]'") from None


class HFTokenizersTokenizer(_LoadedFromFile):
    """A HuggingFace tokenizer folder (or its ``tokenizer.json``) as Megatron's
    HuggingFaceTokenizer opens it (see :mod:`.autotokenizer`: built by transformers when it
    is installed, with the special tokens of the ``tokenizer_config.json`` beside it),
    never truncated or padded, pieces mapped to ids by their string as
    ``convert_tokens_to_ids`` maps them, and the post-processor's special tokens only with
    ``add_special_tokens`` (then the ids ``tokenizer(text).input_ids`` gives)."""

    _native = "_tokenizer"

    def __init__(self, path: str, eod_id: int | None = None, add_special_tokens: bool = False,
                 use_transformers: bool | None = None):
        self.path = path
        self.name = path
        self.add_special_tokens = add_special_tokens
        folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
        self.config: TokenizerConfig = read_tokenizer_config(folder)
        self.built = autotokenizer.build(path, self.config, use_transformers=use_transformers)
        self._load()
        self.model_max_length = self.config.model_max_length
        # Added tokens count: Megatron's HuggingFaceTokenizer.vocab_size is len(tokenizer).
        self.vocab_size = self.built.vocab_size
        if eod_id is None:
            eod_id, self.eod_source = self._find_eod()
        else:
            self.eod_source = GIVEN_EOD
        self.eod_id = eod_id
        if eod_id is not None:
            self.vocab_size = max(self.vocab_size, eod_id + 1)

    def _find_eod(self) -> tuple[int | None, str]:
        if self.built.eod_id is not None:
            files = " + ".join(os.path.basename(f) for f in self.config.files) or self.built.built_by
            return self.built.eod_id, f"{self.built.eod_token} (the EOS of {files}, else its SEP)"
        # Where Megatron would find none (and crash on --append-eod), the usual names.
        for token in EOD_TOKENS:
            if self._ids.get(token) is not None:
                return self._ids[token], token
        return None, ""

    def _load(self) -> None:
        if self.built.backend_json is None:  # a class transformers runs in Python: it encodes
            self._tokenizer = autotokenizer.load_transformers_tokenizer(self.built.folder)
            self._ids = self._tokenizer.get_vocab()
            return
        tokenizers = _import("tokenizers", "tokenizers")
        self._tokenizer = tokenizers.Tokenizer.from_str(self.built.backend_json)
        # Many published tokenizer.json files (sentence-embedding and encoder models) carry
        # truncation to 128 or 512 tokens and fixed-length padding, which `encode` applies:
        # a document must never lose its tail or gain [PAD]s. transformers turns both off on
        # every call Megatron makes, so Megatron keeps every token too.
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self._tokenizer.encode_special_tokens = self.built.split_special_tokens
        # convert_tokens_to_ids: the backend's token_to_id of each piece, else unk_token_id.
        self._ids = {token: self._tokenizer.token_to_id(token)
                     for token in self._tokenizer.get_vocab(with_added_tokens=True)}

    def encode_batch(self, texts):
        if self.built.backend_json is None:
            if self.add_special_tokens:
                return [self._tokenizer(text).input_ids for text in texts]
            return [self._tokenizer.convert_tokens_to_ids(self._tokenizer.tokenize(text)) for text in texts]
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=self.add_special_tokens)
        if self.add_special_tokens:  # tokenizer(text).input_ids: the backend's ids as they are
            return [encoding.ids for encoding in encodings]
        ids, unk = self._ids, self.built.unk_id
        out = []
        for encoding in encodings:
            tokens = encoding.tokens
            mapped = [ids.get(token, unk) for token in tokens]
            if unk is None and None in mapped:
                piece = tokens[mapped.index(None)]
                raise ConvertError(f"{self.name}: the piece {piece!r} is not in the vocabulary and the tokenizer has "
                                   "no unk_token to stand for it (Megatron's convert_tokens_to_ids gives None there)")
            out.append(mapped)
        return out


class MegatronVocabTokenizer(_LoadedFromFile):
    """Megatron-LM's GPT2BPETokenizer, BertWordPieceLowerCase/Case and TikTokenizer, built
    from their vocabulary files (see :mod:`.megatron_tokenizers`)."""

    _native = "_tokenizer"

    def __init__(self, kind: str, eod_id: int | None = None, *, vocab_file: str | None = None,
                 merge_file: str | None = None, tokenizer_model: str | None = None, vocab_size: int | None = None,
                 tiktoken_pattern: str | None = None, tiktoken_num_special_tokens: int | None = None,
                 gpt2_special_in_text: bool | None = None):
        self.kind = kind
        self.files = dict(vocab_file=vocab_file, merge_file=merge_file, tokenizer_model=tokenizer_model,
                          vocab_size=vocab_size, tiktoken_pattern=tiktoken_pattern,
                          tiktoken_num_special_tokens=tiktoken_num_special_tokens,
                          gpt2_special_in_text=gpt2_special_in_text)
        self._load()
        self.name = f"{kind} ({', '.join(p for p in (vocab_file, merge_file, tokenizer_model) if p)})"
        self.vocab_size, own_eod = self._size, self._eod
        own_token = {"GPT2BPETokenizer": "<|endoftext|>", "TikTokenizer": "</s>"}.get(kind, "[EOS]")
        self.eod_source = GIVEN_EOD if eod_id is not None else (own_token if own_eod is not None else "")
        self.eod_id = own_eod if eod_id is None else eod_id
        if self.eod_id is not None:
            self.vocab_size = max(self.vocab_size, self.eod_id + 1)

    def _load(self) -> None:
        files = self.files
        if self.kind == "GPT2BPETokenizer":
            self._tokenizer, self._size, self._eod = megatron_tokenizers.gpt2_bpe(
                files["vocab_file"], files["merge_file"], special_in_text=bool(files["gpt2_special_in_text"]))
        elif self.kind.startswith("BertWordPiece"):
            self._tokenizer, self._size, self._eod = megatron_tokenizers.bert_wordpiece(
                files["vocab_file"], lower_case=self.kind == "BertWordPieceLowerCase")
        else:
            self._tokenizer, self._size, self._eod = megatron_tokenizers.tiktoken_encoding(
                files["tokenizer_model"], vocab_size=files["vocab_size"], pattern=files["tiktoken_pattern"],
                num_special_tokens=files["tiktoken_num_special_tokens"])

    def encode_batch(self, texts):
        if self.kind == "TikTokenizer":  # TikTokenTokenizer.text_to_ids: special tokens in the text count
            return [self._tokenizer.encode(text, allowed_special="all") for text in texts]
        return [encoding.ids for encoding in self._tokenizer.encode_batch(list(texts), add_special_tokens=False)]


class SentencePieceTokenizer(_LoadedFromFile):
    """A sentencepiece ``.model``; ids as ``encode_as_ids`` gives them (no BOS/EOS added), or
    with ``add_special_tokens`` the model's BOS first (Megatron's legacy Llama2Tokenizer)."""

    _native = "_processor"

    def __init__(self, path: str, eod_id: int | None = None, add_special_tokens: bool = False):
        self.path = path
        self.name = path
        self.add_special_tokens = add_special_tokens
        self._load()
        self.vocab_size = self._processor.get_piece_size()
        if add_special_tokens and self._processor.bos_id() < 0:
            raise ConvertError(f"{path}: add_special_tokens prepends the model's BOS, but this sentencepiece "
                               "model has none (bos_id -1)")
        self.eod_source = GIVEN_EOD if eod_id is not None else ""
        if eod_id is None and self._processor.eos_id() >= 0:
            eod_id = self._processor.eos_id()
            self.eod_source = f"{self._processor.id_to_piece(eod_id)} (the model's eos_id)"
        self.eod_id = eod_id
        if eod_id is not None:
            self.vocab_size = max(self.vocab_size, eod_id + 1)

    def _load(self) -> None:
        sentencepiece = _import("sentencepiece", "sentencepiece")
        try:
            self._processor = sentencepiece.SentencePieceProcessor(model_file=self.path)
        except (OSError, RuntimeError) as error:
            raise ConvertError(f"{self.path}: cannot load as a sentencepiece model: {error}") from None

    def encode_batch(self, texts):
        return self._processor.encode(list(texts), out_type=int, add_bos=self.add_special_tokens)


def load_tokenizer(spec: str, *, eod_id: int | None = None, vocab_size: int | None = None,
                   add_special_tokens: bool = False, **files) -> Tokenizer:
    """The adapter for ``spec``: ``bytes``, ``none``, a ``tokenizer.json`` (or a folder
    holding one), a sentencepiece ``.model``, or one of Megatron's vocabulary-file tokenizers
    by its name (``GPT2BPETokenizer``...; ``files``: ``vocab_file``, ``merge_file``,
    ``tokenizer_model``, ``tiktoken_pattern``, ``tiktoken_num_special_tokens``,
    ``gpt2_special_in_text``: core_v0.19's GPT2BPETokenizer). ``eod_id``
    overrides the tokenizer's own; ``add_special_tokens`` adds what the tokenizer's
    post-processor adds (see the module)."""
    if isinstance(spec, Tokenizer):
        return spec
    if spec in megatron_tokenizers.NAMES:
        if add_special_tokens:
            raise ConvertError(f"add_special_tokens=True does not apply to tokenizer={spec!r} (Megatron adds none)")
        return MegatronVocabTokenizer(spec, eod_id, vocab_size=vocab_size, **files)
    given = [f"{name}=" for name, value in files.items() if value is not None]
    if given:
        raise ConvertError(f"{', '.join(given)} apply to Megatron's tokenizers ({' / '.join(megatron_tokenizers.NAMES)}) "
                           f"only, not to tokenizer={spec!r}")
    if add_special_tokens and spec in ("bytes", "none"):
        raise ConvertError(f"add_special_tokens=True applies to tokenizer.json and sentencepiece tokenizers, "
                           f"not to tokenizer={spec!r}")
    if spec == "bytes":
        return BytesTokenizer(eod_id)
    if spec == "none":
        return PretokenizedTokenizer(vocab_size, eod_id)
    path = os.fspath(spec)
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "tokenizer.json")) and \
                os.path.isfile(os.path.join(path, "tokenizer_config.json")):
            # A folder of a class's own files (vocab.txt, spiece.model...): transformers builds it.
            return HFTokenizersTokenizer(path, eod_id, add_special_tokens, use_transformers=True)
        path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
        raise ConvertError(f"tokenizer {spec!r}: no such file; give 'bytes', 'none', a tokenizer.json "
                           "(or a folder holding one) or a sentencepiece .model")
    if path.endswith(".model"):
        return SentencePieceTokenizer(path, eod_id, add_special_tokens)
    if path.endswith(".json"):
        return HFTokenizersTokenizer(path, eod_id, add_special_tokens)
    raise ConvertError(f"tokenizer {spec!r}: expected a tokenizer.json (tokenizers) or a .model "
                       f"(sentencepiece), found the extension {os.path.splitext(path)[1] or '(none)'!r}")


__all__ = ["EOD_TOKENS", "Tokenizer", "BytesTokenizer", "PretokenizedTokenizer", "HFTokenizersTokenizer",
           "MegatronVocabTokenizer", "SentencePieceTokenizer", "load_tokenizer"]
