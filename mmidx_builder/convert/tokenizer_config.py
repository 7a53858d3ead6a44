"""What ``transformers`` reads beside a ``tokenizer.json``, read without ``transformers``.

Megatron's preprocess_data.py opens a HuggingFace tokenizer folder with
``AutoTokenizer.from_pretrained``, which takes two things from the JSON files next to
``tokenizer.json`` that change the ids written:

- the special tokens of ``tokenizer_config.json``, overridden key by key by
  ``special_tokens_map.json``. Each one that ``tokenizer.json`` does not already hold as an
  added token is registered as a special added token, in the order below: a string missing
  from the vocabulary gets the next free id (the vocabulary grows), and a string that is an
  ordinary vocabulary entry is from then on matched whole in the text;
- ``eos_token``: megatron-core's HuggingFaceTokenizer takes ``eos_token`` as the EOD, or
  ``sep_token`` when there is no ``eos_token``.

``model_max_length`` changes nothing (no truncation happens) but is worth a warning.
``split_special_tokens`` (transformers sets the backend's ``encode_special_tokens`` from it)
and ``tokenizer_class`` are read too: a class other than the generic fast tokenizer is one
that transformers builds its own way, which :mod:`.autotokenizer` leaves to transformers.
"""

from __future__ import annotations

import dataclasses
import json
import os

from ..errors import ConvertError

# transformers' SPECIAL_TOKENS_ATTRIBUTES order, which is the order missing tokens get ids in.
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# The list of further special tokens: transformers 4 writes the first name, 5 the second.
EXTRA_TOKEN_KEYS = ("additional_special_tokens", "extra_special_tokens")
CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json")
# tokenizer_class values that load tokenizer.json as it is (transformers 5 names the class
# TokenizersBackend; PreTrainedTokenizerFast is its old name and an alias).
GENERIC_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")
# transformers writes int(1e30) when a tokenizer has no maximum; anything this large means "none".
UNBOUNDED_LENGTH = 10 ** 12


@dataclasses.dataclass
class SpecialToken:
    """One special token as transformers registers it (its AddedToken flags)."""

    content: str
    single_word: bool = False
    lstrip: bool = False
    rstrip: bool = False
    normalized: bool = False


@dataclasses.dataclass
class TokenizerConfig:
    """The parts of ``tokenizer_config.json`` + ``special_tokens_map.json`` that matter here."""

    special: dict  # key of SPECIAL_TOKEN_KEYS -> SpecialToken, only keys that are set
    extra: list  # further SpecialTokens, in file order
    model_max_length: int | None = None
    files: tuple = ()  # the files that were read
    split_special_tokens: bool = False
    tokenizer_class: str | None = None
    model_type: str | None = None  # config.json's, which picks the class when tokenizer_class is absent

    def generic(self) -> bool:
        """Whether transformers loads tokenizer.json as it is (no class of its own rebuilds it)."""
        if self.tokenizer_class is not None:
            return self.tokenizer_class in GENERIC_CLASSES
        return self.model_type is None

    def class_description(self) -> str:
        if self.tokenizer_class is not None:
            return f"tokenizer_class {self.tokenizer_class!r}"
        return f"config.json's model_type {self.model_type!r}"

    def in_registration_order(self) -> list[SpecialToken]:
        return [self.special[key] for key in SPECIAL_TOKEN_KEYS if key in self.special] + self.extra

    def eod_token(self) -> tuple[str | None, str]:
        """megatron-core's EOD: ``eos_token``, else ``sep_token``; with the key it came from."""
        for key in ("eos_token", "sep_token"):
            if key in self.special:
                return self.special[key].content, key
        return None, ""


def read_tokenizer_config(folder: str) -> TokenizerConfig:
    """Reads the config files in ``folder``; missing files are an empty config."""
    special: dict = {}
    extra: list = []
    model_max_length = None
    files = []
    options: dict = {}
    for name in CONFIG_FILES:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        files.append(path)
        data = _read_json_object(path)
        for key in SPECIAL_TOKEN_KEYS:
            if key in data:
                token = _special_token(data[key], path, key)
                if token is None:
                    special.pop(key, None)  # an explicit null unsets the token
                else:
                    special[key] = token
        for key in EXTRA_TOKEN_KEYS:
            if key in data and data[key]:
                values = list(data[key].values()) if isinstance(data[key], dict) else data[key]
                if not isinstance(values, list):
                    raise ConvertError(f"{path}: {key!r} should be a list of tokens, found {data[key]!r:.80}")
                extra = [t for t in (_special_token(v, path, key) for v in values) if t is not None]
        if name == "tokenizer_config.json" and data.get("model_max_length") is not None:
            value = data["model_max_length"]
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 1:
                raise ConvertError(f"{path}: 'model_max_length' should be a positive number, found {value!r}")
            model_max_length = int(value) if value < UNBOUNDED_LENGTH else None
        if name == "tokenizer_config.json":
            options = _options(data, path)
    model_type = _model_type(os.path.join(folder, "config.json"))
    return TokenizerConfig(special, extra, model_max_length, tuple(files), model_type=model_type, **options)


def _options(data: dict, path: str) -> dict:
    options = {}
    value = data.get("split_special_tokens", False)
    if not isinstance(value, bool):
        raise ConvertError(f"{path}: 'split_special_tokens' should be true or false, found {value!r}")
    options["split_special_tokens"] = value
    value = data.get("tokenizer_class")
    if value is not None and not isinstance(value, str):
        raise ConvertError(f"{path}: 'tokenizer_class' should be a class name, found {value!r:.80}")
    options["tokenizer_class"] = value
    return options


def _model_type(path: str) -> str | None:
    """config.json's model_type (a model folder's), which AutoTokenizer maps to a class."""
    if not os.path.isfile(path):
        return None
    value = _read_json_object(path).get("model_type")
    return value if isinstance(value, str) and value else None


def _read_json_object(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as error:
        raise ConvertError(f"{path}: cannot read as JSON: {error}") from None
    if not isinstance(data, dict):
        raise ConvertError(f"{path}: expected a JSON object, found a {type(data).__name__}")
    return data


def _special_token(value, path: str, key: str) -> SpecialToken | None:
    if value is None:
        return None
    if isinstance(value, str):
        return SpecialToken(value)
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        flags = {name: bool(value[name]) for name in ("single_word", "lstrip", "rstrip", "normalized")
                 if name in value}
        return SpecialToken(value["content"], **flags)
    raise ConvertError(f"{path}: {key!r} should be a token string or an object with 'content', "
                       f"found {value!r:.80}")


__all__ = ["GENERIC_CLASSES", "SPECIAL_TOKEN_KEYS", "SpecialToken", "TokenizerConfig", "read_tokenizer_config"]
