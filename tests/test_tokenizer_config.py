"""tokenizer_config.json / special_tokens_map.json as transformers reads them (transformers
itself is the reference), and bad config files."""

from __future__ import annotations

import json
import os

import pytest

from mmidx_builder.errors import ConvertError
from mmidx_builder.convert.tokenize import load_tokenizer
from mmidx_builder.convert.tokenizer_config import read_tokenizer_config


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory):
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.WordLevelTrainer(special_tokens=["[UNK]", "[SEP]", "[MASK]"], show_progress=False)
    tokenizer.train_from_iterator(["hello world end of text", "more words here"] * 3, trainer)
    path = tmp_path_factory.mktemp("wl") / "tokenizer.json"
    tokenizer.save(str(path))
    return str(path)


def folder_with(tmp_path, tokenizer_json, **files) -> str:
    import shutil

    os.makedirs(tmp_path, exist_ok=True)
    shutil.copy(tokenizer_json, tmp_path / "tokenizer.json")
    for name, content in files.items():
        (tmp_path / f"{name}.json").write_text(content if isinstance(content, str) else json.dumps(content))
    return str(tmp_path)


CASES = {
    "map_overrides_config": dict(tokenizer_config={"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "[SEP]"},
                                 special_tokens_map={"eos_token": "[MASK]"}),
    "token_object": dict(tokenizer_config={"tokenizer_class": "PreTrainedTokenizerFast",
                                           "eos_token": {"__type": "AddedToken", "content": "end", "lstrip": False, "rstrip": False,
                                                         "normalized": False, "single_word": False}}),
    "new_tokens": dict(tokenizer_config={"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
                                         "eos_token": "</s>", "pad_token": "<pad>",
                                         "additional_special_tokens": ["<x>", "<y>"]}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_special_tokens_as_transformers_registers_them(case, tokenizer_json, tmp_path):
    if os.environ.get("MMIDX_REQUIRE_ORACLE") != "1":
        pytest.importorskip("transformers")
    import transformers

    folder = folder_with(tmp_path, tokenizer_json, **CASES[case])
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    ours = load_tokenizer(folder)
    assert ours.vocab_size == len(theirs)
    assert ours.eod_id == theirs.eos_token_id
    text = "hello </s> world<x> end <pad>of text"
    assert ours.encode_batch([text]) == [theirs(text, add_special_tokens=False).input_ids]


def test_model_max_length(tokenizer_json, tmp_path):
    assert read_tokenizer_config(folder_with(tmp_path, tokenizer_json, tokenizer_config={"model_max_length": 512})
                                 ).model_max_length == 512
    # transformers writes int(1e30) for "no limit"
    unbounded = folder_with(tmp_path, tokenizer_json, tokenizer_config={"model_max_length": 1000000000000000019884624838656})
    assert read_tokenizer_config(unbounded).model_max_length is None


@pytest.mark.parametrize("content, message", [
    ("{not json", "cannot read as JSON"),
    ("[1, 2]", "expected a JSON object, found a list"),
    ('{"eos_token": 7}', "'eos_token' should be a token string"),
    ('{"model_max_length": "long"}', "'model_max_length' should be a positive number"),
    ('{"additional_special_tokens": "<x>"}', "should be a list of tokens"),
    ('{"split_special_tokens": "yes"}', "'split_special_tokens' should be true or false"),
    ('{"tokenizer_class": 3}', "'tokenizer_class' should be a class name"),
])
def test_bad_config_names_the_file(content, message, tokenizer_json, tmp_path):
    folder = folder_with(tmp_path, tokenizer_json, tokenizer_config=content)
    with pytest.raises(ConvertError, match=message) as error:
        load_tokenizer(folder)
    assert "tokenizer_config.json" in str(error.value)


def test_sentencepiece_without_bos_cannot_add_special_tokens(tmp_path):
    sentencepiece = pytest.importorskip("sentencepiece")
    prefix = str(tmp_path / "sp")
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(["hello world", "more words here"] * 50),
                                             model_prefix=prefix, vocab_size=30, bos_id=-1, minloglevel=2,
                                             hard_vocab_limit=False)
    assert load_tokenizer(prefix + ".model").encode_batch(["hello"])  # fine without the option
    with pytest.raises(ConvertError, match="has none \\(bos_id -1\\)"):
        load_tokenizer(prefix + ".model", add_special_tokens=True)


def test_without_transformers_only_the_generic_class_is_built(tokenizer_json, tmp_path):
    """What AutoTokenizer would build is a class of transformers' own when tokenizer_config.json
    names one, or when it names none and config.json has a model_type: refused with the
    install hint rather than guessed."""
    from mmidx_builder.convert.tokenize import HFTokenizersTokenizer

    generic = folder_with(tmp_path / "generic", tokenizer_json, tokenizer_config={"tokenizer_class": "TokenizersBackend"},
                          config={"model_type": "bert"})
    assert HFTokenizersTokenizer(generic, use_transformers=False).built.built_by == "tokenizers"
    by_model_type = folder_with(tmp_path / "model_type", tokenizer_json, config={"model_type": "bert"})
    with pytest.raises(ConvertError, match="config.json's model_type 'bert'.*mmidx-builder\\[transformers\\]"):
        HFTokenizersTokenizer(by_model_type, use_transformers=False)
