"""What Megatron-LM versions and megatron-core decide on the Megatron kind's edges, checked
against megatron-core 0.19.2 in this venv (tests/test_megatron_lm_oracle.py checks the same
edges against Megatron-LM itself at core_v0.16.1 and core_v0.19.0, where ../shared is)."""

from __future__ import annotations

import json
import types
import warnings

import numpy as np
import pytest

from conftest import MegatronTokenizer

from datasets import load_dataset

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder.errors import ParameterError
from mmidx_builder.sources.indexed import write_documents
from mmidx_builder.megatron import resolve

SIZES = "--global-batch-size 8 --train-iters 10 --eval-interval 5 --eval-iters 1"


def test_megatron_version_is_one_of_the_known_ones(tmp_path):
    with pytest.raises(ParameterError, match="'core_v0.16', 'core_v0.19'.*got 'core_v0.17'"):
        resolve(f"--data-path A --seq-length 8 {SIZES}", megatron_version="core_v0.17")
    with pytest.raises(ParameterError, match="megatron_version"):
        load_dataset("mmidx", data_path=["A"], megatron_version="0.19", cache_dir=str(tmp_path))


def test_rampup_is_counted_at_core_v0_16_and_not_read_at_core_v0_19():
    command = f"--data-path A --seq-length 8 --global-batch-size 8 --rampup-batch-size 2 2 64 --train-samples 400 " \
              "--eval-interval 10 --eval-iters 2"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "ignored: rampup-batch-size" any more
        old = resolve(command, megatron_version="core_v0.16").settings["num_samples"]
        new = resolve(command).settings["num_samples"]
    # the numbers: 62 iterations at core_v0.16.1, 400 // 8 = 50 at core_v0.19.0
    assert old == {"train": 400, "validation": (62 // 10 + 1) * 2 * 8, "test": 16}
    assert new == {"train": 400, "validation": (50 // 10 + 1) * 2 * 8, "test": 16}


@pytest.mark.parametrize("command, version, message", [
    ("--rampup-batch-size 2 2 64 --train-iters 10", "core_v0.16", "rampup.*iteration-based"),
    ("--rampup-batch-size 8 2 64 --train-samples 80", "core_v0.16", "must exceed the start"),
    ("--rampup-batch-size 2 4 64 --train-samples 80", "core_v0.16", "multiple of the increment"),
    ("--eval-global-batch-size 4 --train-iters 10", "core_v0.16", "--eval-global-batch-size is not an argument"),
    ("--dataloader-inter-document-masking --train-iters 10", "core_v0.16", "came with core_v0.19"),
    ("--step-batch-size-schedule '0:4 64:8' --train-iters 10", "core_v0.19", "step-batch-size-schedule"),
])
def test_what_a_version_of_megatron_lm_refuses_is_refused(command, version, message):
    with pytest.raises(ParameterError, match=message):
        resolve(f"--data-path A --seq-length 8 --global-batch-size 8 --eval-interval 5 {command}",
                megatron_version=version).settings


@pytest.mark.parametrize("extra", ["", "--null-tokenizer-eod-id 7", "--null-tokenizer-pad-id 3",
                                   "--null-tokenizer-eod-id 5 --null-tokenizer-pad-id 5"])
def test_null_tokenizer_ids_are_megatron_cores(megatron, extra):
    """megatron-core 0.19.2's own build_tokenizer for the same arguments (core_v0.16.1's EOD,
    vocab_size, is checked against Megatron-LM in test_megatron_lm_oracle.py)."""
    from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer

    flags = resolve(f"--data-path A --seq-length 8 {SIZES} --tokenizer-type NullTokenizer "
                    f"--vocab-size 1000 {extra}").collator_flags
    parsed = dict(zip(extra.split()[::2], map(int, extra.split()[1::2])))
    args = types.SimpleNamespace(tokenizer_type="NullTokenizer", vocab_size=1000, pad_vocab_size=False,
                                 null_tokenizer_eod_id=parsed.get("--null-tokenizer-eod-id"),
                                 null_tokenizer_pad_id=parsed.get("--null-tokenizer-pad-id", -1),
                                 tokenizer_metadata=None, rank=0, make_vocab_size_divisible_by=128,
                                 tensor_model_parallel_size=1)
    tokenizer = build_tokenizer(args)
    pad = tokenizer.pad if tokenizer.pad != tokenizer.eod else -1  # GPTDataset's collision rule
    assert (flags["eod_id"], flags["pad_id"]) == (tokenizer.eod, pad)


@pytest.mark.parametrize("content, message", [
    ({"train": ["A"], "valid": ["B"]}, r"no 'test' key.*KeyError.*null"),
    ({"train": ["A"], "validation": ["B"], "test": None}, r"no 'valid' key"),
    (["A"], "expected a JSON object"),
])
def test_a_per_split_json_is_read_as_megatron_lm_reads_it(tmp_path, content, message):
    path = tmp_path / "per_split.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ParameterError, match=message):
        resolve(f"--per-split-data-args-path {path} --seq-length 8 {SIZES}").settings
    path.write_text(json.dumps({"train": ["A"], "valid": "1 B 2 C", "test": None}))
    settings = resolve(f"--per-split-data-args-path {path} --seq-length 8 {SIZES}").settings
    assert (settings["train_data_path"], settings["valid_data_path"]) == (["A"], "1 B 2 C")
    assert settings["test_data_path"] is None


def _megatron_rows(per_split, sizes, seq_length, cache):
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    config = GPTDatasetConfig(random_seed=5, sequence_length=seq_length, tokenizer=MegatronTokenizer(),
                              path_to_cache=str(cache), reset_position_ids=False, reset_attention_mask=False,
                              eod_mask_loss=False, blend_per_split=per_split)
    built = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()
    return [None if d is None else np.array([d[i]["tokens"].numpy() for i in range(size)])
            for d, size in zip(built, sizes)]


def test_per_split_blends_of_different_dtypes_load_as_megatron_core_builds_them(megatron, tmp_path):
    rng = np.random.default_rng(2)
    wide = write_documents(tmp_path / "wide", [rng.integers(60_000, 90_000, n) for n in rng.integers(1, 30, 80)],
                           dtype=np.int32)
    narrow = write_documents(tmp_path / "narrow", [rng.integers(0, 60_000, n) for n in rng.integers(1, 30, 90)],
                             dtype=np.uint16)
    sizes = {"train": 40, "validation": 17, "test": 9}
    per_split = [([wide], None), ([narrow], None), ([narrow, wide], [0.5, 0.5])]
    theirs = _megatron_rows(per_split, list(sizes.values()), 12, tmp_path / "megatron")
    for streaming in (False, True):
        loaded = load_dataset("mmidx", train_data_path=[wide], valid_data_path=[narrow],
                              test_data_path=["0.5", narrow, "0.5", wide], num_samples=sizes, seq_length=12, seed=5,
                              streaming=streaming, cache_dir=str(tmp_path / f"hf{streaming}"))
        for (name, size), expected in zip(sizes.items(), theirs):
            rows = np.array([row["input_ids"] for row in loaded[name]])
            np.testing.assert_array_equal(rows[:, :-1], expected, err_msg=f"{name} streaming={streaming}")
        assert loaded["validation"].features["input_ids"].feature.dtype == "int32"  # holds the train split's ids


def test_seq_length_one_is_accepted_with_a_warning_and_megatron_cores_samples(megatron, tmp_path):
    rng = np.random.default_rng(1)
    prefix = write_documents(tmp_path / "p", [rng.integers(0, 60_000, n) for n in rng.integers(0, 9, 40)],
                             dtype=np.uint16)
    with pytest.warns(UserWarning, match="seq_length=1: megatron-core asserts seq_length > 1"):
        loaded = load_dataset("mmidx", train_data_path=[prefix], valid_data_path=[prefix], test_data_path=[prefix],
                              num_samples={"train": 30, "validation": 5, "test": 5}, seq_length=1, seed=5,
                              cache_dir=str(tmp_path / "hf"))
    theirs = _megatron_rows([([prefix], None)] * 3, [30, 5, 5], 1, tmp_path / "megatron")
    for name, expected in zip(("train", "validation", "test"), theirs):
        np.testing.assert_array_equal(np.array(loaded[name]["input_ids"])[:, :-1], expected)
