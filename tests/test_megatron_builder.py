"""load_dataset with Megatron's data arguments, against megatron-core and Megatron-LM's own
training-side functions (shipped in the megatron-core wheel, run from their source)."""

from __future__ import annotations

import ast
import os
import inspect
import json
import types

import numpy as np
import pytest

from conftest import MegatronTokenizer

# Every test here compares with megatron-core or Megatron-LM's own code (the oracle).
pytest.importorskip("megatron.core", reason="megatron-core, the oracle (bash scripts/test.sh installs it)")

from datasets import load_dataset

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder.errors import ParameterError
from mmidx_builder.sources.indexed import write_documents
from mmidx_builder.megatron import resolve

pytestmark = pytest.mark.megatron
SPLITS = ("train", "validation", "test")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron")
    rng = np.random.default_rng(3)
    for name, count in (("a", 3000), ("b", 2000), ("c", 1200)):
        lengths = rng.integers(0, 80, count)
        write_documents(root / "data" / f"{name}_text_document", [rng.integers(1, 60_000, n) for n in lengths],
                        dtype=np.uint16)
    return root


def _function_from(module, name: str, **namespace):
    """A function of an installed Megatron-LM module, run from its own source with the given
    globals (megatron.training does not import on Python 3.11: it needs typing.override)."""
    tree = ast.parse(inspect.getsource(module) if not isinstance(module, str) else open(module).read())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    scope = dict(namespace)
    exec(compile(ast.Module([node], []), f"<megatron {name}>", "exec"), scope)
    return scope[name]


def _megatron_file(relative: str) -> str:
    import megatron.core

    import os
    return os.path.join(os.path.dirname(os.path.dirname(megatron.core.__file__)), relative)


def megatron_num_samples(**args):
    """Megatron-LM's get_train_valid_test_num_samples for these arguments."""
    defaults = dict(train_samples=None, train_iters=None, global_batch_size=None, full_validation=False,
                    skip_train=False, eval_iters=100, eval_interval=1000, start_eval_at_iter=None,
                    phase_transition_iterations=None)
    namespace = types.SimpleNamespace(**{**defaults, **args})
    function = _function_from(_megatron_file("training/training.py"), "get_train_valid_test_num_samples",
                              get_args=lambda: namespace)
    return function()


def megatron_splits(prefixes_and_weights, split, sizes, seq_length, seed, cache, per_split=None):
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    kwargs = dict(random_seed=seed, sequence_length=seq_length, tokenizer=MegatronTokenizer(), path_to_cache=str(cache),
                  reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
    if per_split is None:
        config = GPTDatasetConfig(blend=prefixes_and_weights, split=split, **kwargs)
    else:
        config = GPTDatasetConfig(blend_per_split=per_split, **kwargs)
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()


def their_rows(dataset, count):
    rows, ids = [], []
    for i in range(count):
        if hasattr(dataset, "dataset_index"):
            d, j = int(dataset.dataset_index[i]), int(dataset.dataset_sample_index[i])
            rows.append(dataset.datasets[d]._query_document_sample_shuffle_indices(j)[0])
            ids.append(d)
        else:
            rows.append(dataset._query_document_sample_shuffle_indices(i)[0])
    return np.array(rows), ids


@pytest.mark.parametrize("weighted", [True, False])
def test_a_blend_and_split_string_in_one_call_equal_megatron_core(folder, tmp_path, weighted):
    prefixes = [str(folder / "data" / f"{n}_text_document") for n in "abc"]
    weights = [0.5, 0.3, 0.2]
    data_path = [t for w, p in zip(weights, prefixes) for t in (str(w), p)] if weighted else prefixes
    sizes = {"train": 700, "validation": 90, "test": 30}
    dd = load_dataset("mmidx", data_path=data_path, split_ratios="90,7,3", num_samples=sizes, seq_length=32, seed=77,
                      cache_dir=str(tmp_path / "hf"))
    theirs = megatron_splits((prefixes, weights if weighted else None), "90,7,3", [sizes[s] for s in SPLITS], 32, 77,
                             tmp_path / "megatron")
    for index, name in enumerate(SPLITS):
        ours = dd[name].with_format("numpy")
        assert len(ours) == len(theirs[index]), name  # a split that drops its last row is not the oracle's
        expected, ids = their_rows(theirs[index], len(ours))
        np.testing.assert_array_equal(np.asarray(ours["input_ids"]), expected)
        assert np.asarray(ours["dataset_id"]).tolist() == ids and np.asarray(ours["dataset_id"]).dtype == np.int16


@pytest.mark.parametrize("weighted", [True, False])
def test_a_prefix_listed_twice_is_two_datasets_as_megatron_core_builds_it(folder, tmp_path, weighted):
    """``0.3 A 0.7 A 1 B`` and ``A A B``: megatron-core 0.19.2 builds one dataset per entry (the
    same files, each its own dataset_id and weighted size); so do we."""
    a, b = (str(folder / "data" / f"{n}_text_document") for n in "ab")
    data_path = ["0.3", a, "0.7", a, "1", b] if weighted else [a, a, b]
    sizes = {"train": 700, "validation": 90, "test": 30}
    dd = load_dataset("mmidx", data_path=data_path, split_ratios="90,7,3", num_samples=sizes, seq_length=32, seed=77,
                      cache_dir=str(tmp_path / "hf"))
    theirs = megatron_splits(([a, a, b], [0.3, 0.7, 1.0] if weighted else None), "90,7,3",
                             [sizes[s] for s in SPLITS], 32, 77, tmp_path / "megatron")
    for index, name in enumerate(SPLITS):
        ours = dd[name].with_format("numpy")
        expected, ids = their_rows(theirs[index], len(ours))
        np.testing.assert_array_equal(np.asarray(ours["input_ids"]), expected)
        assert np.asarray(ours["dataset_id"]).tolist() == ids
        assert set(ids) == {0, 1, 2}  # both entries of the prefix are drawn from


def test_megatron_args_give_megatrons_sizes_and_streams(folder, tmp_path):
    prefixes = [str(folder / "data" / f"{n}_text_document") for n in "ab"]
    command = (f"--data-path 0.3 {prefixes[0]} 0.7 {prefixes[1]} --split 969,30,1 --seq-length 24 --seed 1234 "
               "--train-iters 12 --global-batch-size 16 --eval-iters 2 --eval-interval 5 --micro-batch-size 4 "
               "--num-layers 2 --lr 1e-4")
    sizes = megatron_num_samples(train_iters=12, global_batch_size=16, eval_iters=2, eval_interval=5)
    assert resolve(command).settings["num_samples"] == dict(zip(SPLITS, sizes))
    stream = load_dataset("mmidx", megatron_args=command, streaming=True, cache_dir=str(tmp_path / "hf"))
    theirs = megatron_splits((prefixes, [0.3, 0.7]), "969,30,1", list(sizes), 24, 1234, tmp_path / "megatron")
    for index, name in enumerate(SPLITS):
        rows = list(stream[name])
        # Megatron-LM trains on sizes[index] samples; megatron-core's weighted BlendedDataset may
        # hold a few more (sum of ceil(size * weight)), never read by its training loop.
        assert len(rows) == sizes[index] <= len(theirs[index])
        expected, ids = their_rows(theirs[index], len(rows))
        np.testing.assert_array_equal(np.array([r["input_ids"] for r in rows]), expected)
        assert [r["dataset_id"] for r in rows] == ids


@pytest.mark.parametrize("args", [
    dict(train_iters=500, global_batch_size=1024, eval_iters=10, eval_interval=100),
    dict(train_samples=100_000, train_iters=97, global_batch_size=1024, eval_iters=3, eval_interval=7),
    dict(train_iters=10, global_batch_size=8, eval_iters=1, eval_interval=1000),
    dict(train_iters=10, global_batch_size=8, full_validation=True),
    dict(train_iters=1000, global_batch_size=8, eval_iters=5, eval_interval=100, start_eval_at_iter=250),
])
def test_sizes_follow_megatron_lms_get_train_valid_test_num_samples(args):
    # Megatron-LM's validate_args derives train_iters from train_samples; the command line gives one.
    given = {k: v for k, v in args.items() if not (k == "train_iters" and "train_samples" in args)}
    flags = " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in given.items())
    ours = resolve(f"--data-path A --seq-length 8 {flags}").settings["num_samples"]
    assert ours == dict(zip(SPLITS, megatron_num_samples(**args)))


def test_data_args_files_read_as_megatron_lm_reads_them(tmp_path):
    from megatron.core.datasets.utils import get_blend_from_list

    (tmp_path / "blend.txt").write_text("0.3 /d/a_text_document\n0.7 /d/b_text_document\n")
    (tmp_path / "per_split.json").write_text(json.dumps({"train": "1 /d/a 2 /d/b", "valid": ["/d/c"], "test": ["/d/c"]}))
    import megatron.core.msc_utils as msc

    function = _function_from(_megatron_file("training/utils/common_utils.py"), "get_blend_and_blend_per_split",
                              maybe_msc=msc.maybe_msc, get_blend_from_list=get_blend_from_list, json=json)
    args = dict(data_path=None, train_data_path=None, valid_data_path=None, test_data_path=None,
                data_args_path=str(tmp_path / "blend.txt"), per_split_data_args_path=None)
    blend, _ = function(types.SimpleNamespace(**args))
    ours = resolve(f"--data-args-path {tmp_path / 'blend.txt'} --split 1 --seq-length 8 "
                   "--global-batch-size 1 --train-iters 5 --eval-interval 5").settings
    assert ours["data_path"] == ["0.3", "/d/a_text_document", "0.7", "/d/b_text_document"]
    assert get_blend_from_list(ours["data_path"]) == blend
    args.update(data_args_path=None, per_split_data_args_path=str(tmp_path / "per_split.json"))
    _, per_split = function(types.SimpleNamespace(**args))
    ours = resolve(f"--per-split-data-args-path {tmp_path / 'per_split.json'} --seq-length 8 "
                   "--global-batch-size 1 --train-iters 5 --eval-interval 5").settings
    assert [get_blend_from_list(ours[f"{s}_data_path"].split() if isinstance(ours[f"{s}_data_path"], str)
                                else ours[f"{s}_data_path"]) for s in ("train", "valid", "test")] == per_split


def test_relative_prefixes_resolve_against_the_folder_and_a_card_carries_the_blend(folder, tmp_path):
    relative = ["0.6", "data/a_text_document", "0.4", "data/b_text_document"]
    sizes = {"train": 200, "validation": 20, "test": 10}
    direct = load_dataset(str(folder), data_path=relative, split_ratios="8,1,1", num_samples=sizes, seq_length=16,
                          cache_dir=str(tmp_path / "a"))
    absolute = load_dataset("mmidx", data_path=[t if t[0].isdigit() else str(folder / t) for t in relative],
                            split_ratios="8,1,1", num_samples=sizes, seq_length=16, cache_dir=str(tmp_path / "b"))
    card = folder / "README.md"
    card.write_text("---\nconfigs:\n- config_name: default\n  data_path: [\"0.6\", data/a_text_document, \"0.4\", "
                    "data/b_text_document]\n  split_ratios: \"8,1,1\"\n  num_samples: {train: 200, validation: 20, "
                    "test: 10}\n  seq_length: 16\n---\n")
    try:
        from_card = load_dataset(str(folder), cache_dir=str(tmp_path / "c"))
        overridden = load_dataset(str(folder), seq_length=8, split="train", cache_dir=str(tmp_path / "c"))
    finally:
        card.unlink()
    for name in SPLITS:
        np.testing.assert_array_equal(direct[name].with_format("numpy")["input_ids"],
                                      absolute[name].with_format("numpy")["input_ids"])
        np.testing.assert_array_equal(direct[name].with_format("numpy")["input_ids"],
                                      from_card[name].with_format("numpy")["input_ids"])
    assert len(overridden[0]["input_ids"]) == 9


def test_a_card_blend_cannot_reach_outside_its_folder(folder, tmp_path):
    card = folder / "README.md"
    card.write_text("---\nconfigs:\n- config_name: default\n  data_path: [../elsewhere/x_text_document]\n---\n")
    try:
        with pytest.raises(ParameterError, match="outside the dataset folder"):
            load_dataset(str(folder), cache_dir=str(tmp_path / "c"))
    finally:
        card.unlink()


def test_a_split_left_without_sequences_is_a_clear_error_not_a_hang(tmp_path):
    write_documents(tmp_path / "data" / "p_text_document", [[1, 2, 3]] * 300, dtype=np.uint16)
    with pytest.raises(ParameterError, match=r"split 'test' \(ratio 0.001\).*300 sequences"):
        load_dataset("mmidx", data_path=[str(tmp_path / "data" / "p_text_document")], split_ratios="969,30,1",
                     num_samples={"train": 10, "validation": 5, "test": 1}, seq_length=4, cache_dir=str(tmp_path / "c"))


def test_a_missing_prefix_is_named(tmp_path):
    with pytest.raises(Exception, match=r"nowhere_text_document\.(idx|bin)"):
        load_dataset("mmidx", data_path=[str(tmp_path / "nowhere_text_document")], split_ratios="1",
                     seq_length=4, cache_dir=str(tmp_path / "c"))


def test_megatron_settings_do_not_mix_with_other_kinds(tmp_path):
    with pytest.raises(ParameterError, match="num_epochs.*does not apply to Megatron data arguments"):
        load_dataset("mmidx", data_path=["x"], num_epochs=2, cache_dir=str(tmp_path / "c"))


def test_the_cli_prints_each_split_of_a_megatron_command_line(folder, capsys):
    from mmidx_builder.cli import main

    prefixes = [str(folder / "data" / f"{n}_text_document") for n in "ab"]
    command = (f"--data-path 0.3 {prefixes[0]} 0.7 {prefixes[1]} --split 969,30,1 --seq-length 16 "
               "--train-iters 4 --global-batch-size 8 --eval-iters 1 --eval-interval 2")
    assert main(["samples", "--megatron-args", command, "--show", "0:4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(report) == ["test", "train", "validation"]
    stream = load_dataset("mmidx", megatron_args=command, streaming=True, split="validation")
    expected = [(r["dataset_id"], r["input_ids"]) for r, _ in zip(stream, range(4))]
    assert [(s["dataset_id"], s["input_ids"]) for s in report["validation"]["samples"]] == expected
    assert main(["samples", "--megatron-args", command, "--split-name", "test"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("test: 8 samples") and "validation" not in out


def test_a_blend_of_uint16_and_int32_files_loads_every_token_id(tmp_path):
    small = write_documents(tmp_path / "small", [[1, 2, 3, 4, 5]] * 50, dtype=np.uint16)
    large = write_documents(tmp_path / "large", [[70_000, 70_001, 70_002]] * 50, dtype=np.int32)
    dd = load_dataset("mmidx", data_path=["0.5", small, "0.5", large], split_ratios="1", num_samples={"train": 40},
                      seq_length=4, seed=1, cache_dir=str(tmp_path / "hf"))
    rows = dd["train"].with_format("numpy")[:]
    ids = np.asarray(rows["input_ids"])
    assert set(np.unique(ids[rows["dataset_id"] == 1]).tolist()) == {70_000, 70_001, 70_002}


@pytest.mark.parametrize("command, message", [
    ("--data-path A --seq-length 8 --train-iters 10 --global-batch-size 8", "--eval-interval"),
    ("--data-path A --seq-length 8 --train-samples 80 --train-iters 10 --global-batch-size 8 --eval-interval 5",
     "not both"),
    ("--data-args-path blend.txt --seq-length 8 --train-iters 10 --global-batch-size 8 --eval-interval 5",
     "needs --split"),
])
def test_megatron_args_refused_where_megatron_lm_refuses(command, message):
    with pytest.raises(ParameterError, match=message):
        resolve(command).settings


def test_token_ids_never_turn_into_floats_in_a_blend(tmp_path):
    """numpy promotes int64 with uint64 (fairseq's code 10) to float64, which rounds ids above
    2**53. Such a blend is refused, naming the files and dtype=; with dtype="int64" every id
    is stored exactly."""
    signed = write_documents(tmp_path / "signed", [[1, 2, 3, 4, 5]] * 50, dtype=np.int64)
    big = [2**53 + 1, 2**53 + 3, 7]  # not representable in float64: rounding would show
    unsigned = write_documents(tmp_path / "unsigned", [big] * 50, dtype=np.uint64, flavour="fairseq")
    call = dict(data_path=["0.5", signed, "0.5", unsigned], split_ratios="1", num_samples={"train": 40},
                seq_length=4, seed=1)
    with pytest.raises(ParameterError) as error:
        load_dataset("mmidx", **call, cache_dir=str(tmp_path / "hf0"))
    assert "int64" in str(error.value) and "uint64" in str(error.value) and "dtype=" in str(error.value)
    assert "signed" in str(error.value) and "unsigned" in str(error.value)
    dd = load_dataset("mmidx", **call, dtype="int64", cache_dir=str(tmp_path / "hf1"))
    assert dd["train"].features["input_ids"].feature.dtype == "int64"
    rows = dd["train"].with_format("numpy")[:]
    ids = np.asarray(rows["input_ids"])
    assert ids.dtype == np.int64
    assert set(np.unique(ids[rows["dataset_id"] == 1]).tolist()) == set(big)
    assert set(np.unique(ids[rows["dataset_id"] == 0]).tolist()) <= {1, 2, 3, 4, 5}
    stream = load_dataset("mmidx", **call, dtype="int64", split="train", streaming=True)
    assert [row["input_ids"] for row in stream] == dd["train"]["input_ids"]


def test_collator_flags_is_refused_not_overwritten(folder, tmp_path):
    """The flags change batches, not samples: load_dataset used to accept collator_flags and
    overwrite it silently; it is refused, naming MegatronCollator."""
    prefix = str(folder / "data" / "a_text_document")
    with pytest.raises(ParameterError, match="MegatronCollator"):
        load_dataset("mmidx", data_path=[prefix], split_ratios="1", seq_length=8,
                     collator_flags={"reset_position_ids": True}, cache_dir=str(tmp_path))


def _write_pair(prefix, lengths, rng) -> None:
    """A Megatron .bin/.idx of these sequence lengths (one document each), random uint16 tokens,
    written from the format's layout in a few numpy calls (a million write_documents calls
    would take minutes); megatron-core reading it is the check that it is the format."""
    import struct

    lengths = np.asarray(lengths, "<i4")
    pointers = np.zeros(len(lengths), "<i8")
    np.cumsum(lengths[:-1].astype(np.int64) * 2, out=pointers[1:])
    with open(f"{prefix}.idx", "wb") as f:
        f.write(struct.pack("<9sQBQQ", b"MMIDIDX\x00\x00", 1, 8, len(lengths), len(lengths) + 1))
        f.write(lengths.tobytes() + pointers.tobytes() + np.arange(len(lengths) + 1, dtype="<i8").tobytes())
    rng.integers(1, 60_000, int(lengths.sum()), dtype=np.uint16).tofile(f"{prefix}.bin")


def test_a_large_prefix_read_from_its_idx_entries_equals_megatron_core(tmp_path):
    """A prefix of over 2**20 sequences keeps no copy of its lengths: each read fetches its
    pieces' pointers from the .idx, and a warm open takes the lengths' digest from the record
    (issue 43). Its three splits (a range of the prefix each, blended with a small prefix),
    read from the second open, against megatron-core."""
    import time

    rng = np.random.default_rng(11)
    large, small = str(tmp_path / "large_text_document"), str(tmp_path / "small_text_document")
    _write_pair(large, rng.integers(0, 12, (1 << 20) + 5000), rng)
    _write_pair(small, rng.integers(0, 40, 3000), rng)
    time.sleep(2.2)  # settled: the first open records the validation, the second reads the record
    prefixes, weights = [large, small], [0.7, 0.3]
    sizes = {"train": 2000, "validation": 300, "test": 100}
    call = dict(data_path=[t for w, p in zip(weights, prefixes) for t in (str(w), p)], split_ratios="969,30,1",
                num_samples=sizes, seq_length=16, seed=9, index_cache_dir=str(tmp_path / "indices"),
                cache_dir=str(tmp_path / "hf"), streaming=True)
    next(iter(load_dataset("mmidx", split="train", **call)))
    records = [n for n in os.listdir(tmp_path / "indices") if n.startswith("opened-")]
    assert len(records) == 2 and all(n.endswith("-meta.json") for n in records), records
    theirs = megatron_splits((prefixes, weights), "969,30,1", [sizes[s] for s in SPLITS], 16, 9, tmp_path / "megatron")
    for index, name in enumerate(SPLITS):
        ours = [row["input_ids"] for row in load_dataset("mmidx", split=name, **call)]
        expected, _ = their_rows(theirs[index], len(theirs[index]))
        assert len(ours) == len(expected), name
        np.testing.assert_array_equal(np.array(ours), expected, err_msg=name)
