"""A HuggingFace tokenizer folder built as Megatron's ``HuggingFaceTokenizer`` builds it.

preprocess_data.py (core_v0.16.1, default path) opens ``--tokenizer-model DIR`` with
``transformers.AutoTokenizer.from_pretrained(DIR)``, evens out the special tokens (an EOS
and no SEP: SEP = EOS, and the other way round; BOS and CLS likewise), and turns every
document into ``convert_tokens_to_ids(tokenize(text))``. What that writes depends on more
than tokenizer.json:

- the class transformers picks (tokenizer_config.json's ``tokenizer_class``, else
  config.json's ``model_type``) may rebuild the pipeline: ``GPT2TokenizerFast`` builds BPE
  from the vocabulary and merges with its own ByteLevel steps, dropping the file's
  normaliser; ``BertTokenizer`` lower-cases unless ``do_lower_case`` is false;
- ``split_special_tokens`` makes special tokens in the text ordinary text;
- pieces go to ids by their string: a piece outside the vocabulary (a Unigram model's
  unknown span) becomes transformers' ``unk_token_id``, the config's ``unk_token``.

With transformers installed, transformers builds the tokenizer (the same call), and the
``tokenizers.Tokenizer`` it built does the encoding here, batch by batch. Without it, a
folder of the generic class is built from its files (:mod:`.tokenizer_config`), and any
other class is refused with the install hint: guessing a class's rebuild would write
different ids without a word.
"""

from __future__ import annotations

import dataclasses
import json
import os

from ..errors import ConvertError
from .tokenizer_config import TokenizerConfig, read_tokenizer_config

TOKENIZER_FILE = "tokenizer.json"


@dataclasses.dataclass
class BuiltTokenizer:
    """What conversion needs of the built tokenizer; pickles small (no native objects)."""

    backend_json: str | None  # the tokenizers.Tokenizer built, serialised; None: transformers encodes
    split_special_tokens: bool
    unk_id: int | None  # transformers' unk_token_id: the id of a piece outside the vocabulary
    vocab_size: int  # len(tokenizer), what Megatron picks the dtype from
    eod_token: str | None
    eod_id: int | None
    built_by: str  # for the summary
    folder: str = ""


def needs_transformers(config: TokenizerConfig) -> bool:
    return not config.generic()


def build(path: str, config: TokenizerConfig, *, use_transformers: bool | None = None) -> BuiltTokenizer:
    """The tokenizer at ``path`` (a tokenizer.json, or a folder) as Megatron's
    HuggingFaceTokenizer builds it; ``use_transformers`` None: whenever transformers is
    installed and the file is a folder's tokenizer.json (what AutoTokenizer opens)."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    opens_folder = os.path.isdir(path) or os.path.basename(path) == TOKENIZER_FILE
    if use_transformers is None:
        use_transformers = opens_folder and _transformers_installed()
    if use_transformers:
        file = os.path.join(folder, TOKENIZER_FILE)
        if os.path.isfile(file):
            _load_file(file)  # a damaged tokenizer.json named as such, before transformers' own words
        return _with_transformers(folder)
    if needs_transformers(config):
        raise ConvertError(f"{folder}: {config.class_description()} is a tokenizer class that transformers builds its "
                           f"own way (Megatron opens the folder with AutoTokenizer); this needs the 'transformers' "
                           f"package: pip install 'mmidx-builder[transformers]'")
    return _without_transformers(path if not os.path.isdir(path) else os.path.join(path, TOKENIZER_FILE), config)


def _transformers_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


def load_transformers_tokenizer(folder: str):
    """``AutoTokenizer.from_pretrained`` as megatron-core's HuggingFaceTokenizer calls it,
    with its special-token evening-out; never a download, never remote code."""
    try:
        import transformers
    except ImportError as error:
        raise ConvertError(f"{folder}: building this tokenizer (no tokenizer.json: the class's own files) needs the "
                           f"'transformers' package ({error}); pip install 'mmidx-builder[transformers]'") from None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, use_fast=False, trust_remote_code=False,
                                                               local_files_only=True)
    except Exception as error:  # transformers raises many kinds for folders it cannot open
        raise ConvertError(f"{folder}: transformers.AutoTokenizer cannot open this folder: "
                           f"{type(error).__name__}: {error}") from None
    special = {"additional_special_tokens": []}
    if tokenizer.sep_token is None and tokenizer.eos_token:
        special["sep_token"] = tokenizer.eos_token
    elif tokenizer.eos_token is None and tokenizer.sep_token:
        special["eos_token"] = tokenizer.sep_token
    if tokenizer.bos_token is None and tokenizer.cls_token:
        special["bos_token"] = tokenizer.cls_token
    if tokenizer.cls_token is None and tokenizer.bos_token:
        special["cls_token"] = tokenizer.bos_token
    tokenizer.add_special_tokens(special)
    return tokenizer


def _with_transformers(folder: str) -> BuiltTokenizer:
    tokenizer = load_transformers_tokenizer(folder)
    eod_token = tokenizer.eos_token
    eod_id = tokenizer.convert_tokens_to_ids(eod_token) if eod_token is not None else None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    backend_json = backend.to_str() if backend is not None else None
    split = bool(getattr(tokenizer, "split_special_tokens", False))
    return BuiltTokenizer(backend_json, split, tokenizer.unk_token_id, len(tokenizer), eod_token, eod_id,
                          f"transformers {type(tokenizer).__name__}", folder)


def _without_transformers(path: str, config: TokenizerConfig) -> BuiltTokenizer:
    """The generic class, built from the files: tokenizer.json plus the config's special
    tokens registered as transformers registers them."""
    tokenizers = _import_tokenizers()
    tokenizer = _load_file(path)
    added = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
    missing = []
    for token in config.in_registration_order():
        if token.content not in added:
            added.add(token.content)
            missing.append(tokenizers.AddedToken(token.content, single_word=token.single_word, lstrip=token.lstrip,
                                                 rstrip=token.rstrip, normalized=token.normalized, special=True))
    if missing:
        tokenizer.add_special_tokens(missing)
    unk = config.special.get("unk_token")
    unk_token = unk.content if unk is not None else _model_unk_token(tokenizer)
    eod_token, _ = config.eod_token()
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    return BuiltTokenizer(tokenizer.to_str(), config.split_special_tokens,
                          tokenizer.token_to_id(unk_token) if unk_token is not None else None, vocab_size,
                          eod_token, tokenizer.token_to_id(eod_token) if eod_token is not None else None,
                          "tokenizers", os.path.dirname(os.path.abspath(path)))


def _load_file(path: str):
    tokenizers = _import_tokenizers()
    try:
        return tokenizers.Tokenizer.from_file(path)
    except Exception as error:  # tokenizers raises a bare Exception for unreadable files
        raise ConvertError(f"{path}: cannot load as a tokenizers file (tokenizer.json): {error}") from None


def _model_unk_token(tokenizer) -> str | None:
    model = json.loads(tokenizer.to_str()).get("model", {})
    if model.get("unk_token") is not None:
        return model["unk_token"]
    if model.get("type") == "Unigram" and model.get("unk_id") is not None:
        return model["vocab"][model["unk_id"]][0]
    return None


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError as error:
        raise ConvertError(f"this tokenizer needs the 'tokenizers' package ({error}); "
                           "install it with: pip install 'mmidx-builder[tokenizers]'") from None
    return tokenizers


__all__ = ["BuiltTokenizer", "build", "load_transformers_tokenizer", "needs_transformers", "read_tokenizer_config"]
