"""Settings no builder takes are refused with what to do instead (hf/kind_settings.py, hooked
into datasets' config check by hf/registry.py)."""

import json

import numpy as np
import pytest

import datasets
from datasets import load_dataset, load_dataset_builder

import mmidx_builder  # noqa: F401  (registers the builders)
from mmidx_builder.errors import ParameterError
from mmidx_builder.hf import kind_settings
from mmidx_builder.hf.mmidx import KINDS
from mmidx_builder.sources.indexed import write_documents


@pytest.fixture
def corpus(tmp_path):
    rng = np.random.default_rng(7)
    write_documents(tmp_path / "corpus" / "train", [rng.integers(1, 500, n) for n in (30, 7, 52)], dtype=np.uint16)
    return tmp_path / "corpus"


INDEXED_SETTINGS = ("add_extra_token, document_structure, dtype, index_cache_dir, max_remote_cache_bytes, num_epochs, "
                    "num_samples, num_shards, read_ahead_bytes, remote_cache_dir, seed, seq_length")


@pytest.mark.parametrize("call", ["folder", "front door", "kind by name"])
def test_a_misspelt_setting_names_the_closest_and_lists_the_kinds_settings(corpus, tmp_path, call):
    load = {"folder": lambda: load_dataset(str(corpus), seq_lenght=64, cache_dir=str(tmp_path / "c")),
            "front door": lambda: load_dataset("mmidx", data_dir=str(corpus), seq_lenght=64,
                                               cache_dir=str(tmp_path / "c")),
            "kind by name": lambda: load_dataset("mmidx_indexed", data_dir=str(corpus), seq_lenght=64,
                                                 cache_dir=str(tmp_path / "c"))}[call]
    with pytest.raises(ParameterError) as caught:
        load()
    message = str(caught.value)
    assert message.startswith("seq_lenght= is not a setting of the mmidx_indexed builder: did you mean seq_length?")
    assert message.endswith(f"Its settings: {INDEXED_SETTINGS}")
    assert len(message) < 400  # not datasets' repr of the whole config


def test_settings_listed_are_the_configs_fields(corpus):
    """The list printed is what the kind's config declares, read from the dataclass, not kept by hand."""
    import dataclasses

    indexed = next(kind for kind in KINDS if kind.__module__.endswith(".mmidx_indexed"))
    declared = {f.name for f in dataclasses.fields(indexed.BUILDER_CONFIG_CLASS)}
    base = {f.name for f in dataclasses.fields(datasets.BuilderConfig)}
    assert set(INDEXED_SETTINGS.split(", ")) == declared - base - {"features"}
    assert kind_settings.kind_fields(indexed) == declared - base


def test_a_name_close_to_nothing_says_so_and_still_lists(corpus, tmp_path):
    with pytest.raises(ParameterError, match=r"colour= is not a setting of the mmidx_indexed builder: no setting "
                                             r"has a name close to it\. Its settings: add_extra_token"):
        load_dataset(str(corpus), colour="red", cache_dir=str(tmp_path / "c"))


def test_another_kinds_setting_on_a_kind_by_name_names_the_kinds_that_take_it(corpus, tmp_path):
    with pytest.raises(ParameterError, match=r"n_bytes= is not a setting of the mmidx_indexed builder: it is a "
                                             r"setting of mmidx_raw_chunks, mmidx_raw; load with"):
        load_dataset("mmidx_indexed", data_dir=str(corpus), n_bytes=2, cache_dir=str(tmp_path / "c"))


def test_a_fairseq_typo_suggests_the_fairseq_setting(tmp_path):
    rng = np.random.default_rng(3)
    for lang in ("de", "en"):
        write_documents(tmp_path / "data-bin" / f"train.de-en.{lang}", [rng.integers(4, 40, 5) for _ in range(4)],
                        dtype=np.int32, flavour="fairseq")
    with pytest.raises(ParameterError, match=r"source_lan= is not a setting of the mmidx_fairseq builder: did you "
                                             r"mean source_lang\?"):
        load_dataset_builder("mmidx_fairseq", data_dir=str(tmp_path / "data-bin"), source_lan="de",
                             cache_dir=str(tmp_path / "c"))


def test_our_settings_on_a_folder_without_pairs_say_so(tmp_path):
    texts = tmp_path / "texts"
    texts.mkdir()
    for i in range(2):
        (texts / f"part-{i}.jsonl").write_text(json.dumps({"text": "a few words"}) + "\n")
    (texts / "NOTES.txt").write_text("notes\n")
    with pytest.raises(ParameterError) as caught:
        load_dataset(str(texts), seq_length=64, cache_dir=str(tmp_path / "c"))
    message = str(caught.value)
    assert message.startswith("seq_length=: a setting of mmidx_builder's .bin/.idx builders, but the data holds no "
                              f".bin/.idx pair (2 data file(s) in {texts}: 2 .jsonl), so datasets chose its 'json' "
                              "builder")
    assert "mmidx convert" in message


def test_datasets_own_settings_on_its_own_builders_pass(tmp_path):
    """Only our setting names are intercepted: a JSON folder with JSON's own settings loads."""
    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "a.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    ds = load_dataset(str(texts), encoding="utf-8", split="train", cache_dir=str(tmp_path / "c"))
    assert ds["text"] == ["x"]
    # A misspelt JSON setting is datasets' to report, unchanged.
    with pytest.raises(ValueError) as caught:
        load_dataset(str(texts), encodin="utf-8", split="train", cache_dir=str(tmp_path / "c"))
    assert not isinstance(caught.value, ParameterError)
