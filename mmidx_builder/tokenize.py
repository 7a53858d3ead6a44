"""Tokenizers for ``mmidx convert``: one small adapter per kind, all offline.

    spec                        adapter                 vocab size              end of document
    bytes                       BytesTokenizer          257                     256
    none                        PretokenizedTokenizer   --vocab-size            --eod-id
    PATH/tokenizer.json, DIR    HFTokenizersTokenizer   with added tokens       </s>, <|endoftext|>, ...
    PATH.model                  SentencePieceTokenizer  piece count             eos_id

Every adapter has ``encode_batch(texts) -> list of token-id lists``, the tokenizer's own
batch call, so the tokens written are exactly what the tokenizer's ``encode`` gives.
``tokenizers`` and ``sentencepiece`` are optional extras, imported only when asked for.
Adapters pickle as their spec and reload in a worker process, never as a model.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from .dtypes import megatron_writer_dtype as output_dtype  # noqa: F401  (the dtype convert writes)
from .errors import ConvertError

# Special tokens that mean "end of document", in the order they are looked for.
EOD_TOKENS = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "<|eos|>", "[EOS]")


class Tokenizer:
    """What conversion needs from a tokenizer."""

    name: str = ""
    vocab_size: int = 0
    eod_id: int | None = None
    pretokenized = False

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
            raise ConvertError("--tokenizer none needs --vocab-size (the output dtype follows from it, "
                               f"as in Megatron), got {vocab_size}")
        self.name = "none"
        self.eod_id = eod_id
        self.vocab_size = vocab_size if eod_id is None else max(vocab_size, eod_id + 1)

    def encode_batch(self, texts):
        raise ConvertError("--tokenizer none reads token-id lists; it cannot encode text")


def _import(module: str, extra: str):
    try:
        return __import__(module)
    except ImportError as error:
        raise ConvertError(f"this tokenizer needs the {module!r} package ({error}); "
                           f"install it with: pip install 'mmidx-builder[{extra}]'") from None


class HFTokenizersTokenizer(_LoadedFromFile):
    """A HuggingFace ``tokenizers`` file (``tokenizer.json``), e.g. from a model repo."""

    _native = "_tokenizer"

    def __init__(self, path: str, eod_id: int | None = None):
        self.path = path
        self.name = path
        self._load()
        # Added tokens count: Megatron's HuggingFaceTokenizer.vocab_size is len(tokenizer).
        self.vocab_size = self._tokenizer.get_vocab_size(with_added_tokens=True)
        if eod_id is None:
            eod_id = next((self._tokenizer.token_to_id(t) for t in EOD_TOKENS
                           if self._tokenizer.token_to_id(t) is not None), None)
        self.eod_id = eod_id
        if eod_id is not None:
            self.vocab_size = max(self.vocab_size, eod_id + 1)

    def _load(self) -> None:
        tokenizers = _import("tokenizers", "tokenizers")
        try:
            self._tokenizer = tokenizers.Tokenizer.from_file(self.path)
        except Exception as error:  # tokenizers raises a bare Exception for unreadable files
            raise ConvertError(f"{self.path}: cannot load as a tokenizers file (tokenizer.json): {error}") from None

    def encode_batch(self, texts):
        return [encoding.ids for encoding in self._tokenizer.encode_batch(list(texts))]


class SentencePieceTokenizer(_LoadedFromFile):
    """A sentencepiece ``.model``; ids as ``encode_as_ids`` gives them (no BOS/EOS added)."""

    _native = "_processor"

    def __init__(self, path: str, eod_id: int | None = None):
        self.path = path
        self.name = path
        self._load()
        self.vocab_size = self._processor.get_piece_size()
        if eod_id is None and self._processor.eos_id() >= 0:
            eod_id = self._processor.eos_id()
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
        return self._processor.encode(list(texts), out_type=int)


def load_tokenizer(spec: str, *, eod_id: int | None = None, vocab_size: int | None = None) -> Tokenizer:
    """The adapter for ``spec``: ``bytes``, ``none``, a ``tokenizer.json`` (or a folder
    holding one), or a sentencepiece ``.model``. ``eod_id`` overrides the tokenizer's own."""
    if isinstance(spec, Tokenizer):
        return spec
    if spec == "bytes":
        return BytesTokenizer(eod_id)
    if spec == "none":
        return PretokenizedTokenizer(vocab_size, eod_id)
    path = os.fspath(spec)
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
        raise ConvertError(f"tokenizer {spec!r}: no such file; give 'bytes', 'none', a tokenizer.json "
                           "(or a folder holding one) or a sentencepiece .model")
    if path.endswith(".model"):
        return SentencePieceTokenizer(path, eod_id)
    if path.endswith(".json"):
        return HFTokenizersTokenizer(path, eod_id)
    raise ConvertError(f"tokenizer {spec!r}: expected a tokenizer.json (tokenizers) or a .model "
                       f"(sentencepiece), found the extension {os.path.splitext(path)[1] or '(none)'!r}")


__all__ = ["EOD_TOKENS", "Tokenizer", "BytesTokenizer", "PretokenizedTokenizer", "HFTokenizersTokenizer",
           "SentencePieceTokenizer", "load_tokenizer", "output_dtype"]
