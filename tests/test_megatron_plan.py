"""Megatron blends and split strings, sample for sample against megatron-core's own
BlendedMegatronDatasetBuilder (GPTDataset mid-level datasets, BlendedDataset on top)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import MegatronTokenizer

from mmidx_builder.errors import ParameterError
from mmidx_builder.sources.indexed import IndexedFile, write_documents
from mmidx_builder.megatron import plan as mplan
from mmidx_builder.megatron.splits import build_split, split_samples

SPLITS = ("train", "validation", "test")


def _write_prefixes(folder, rng, count):
    prefixes = []
    for k in range(count):
        n = int(rng.integers(40, 400))
        lengths = rng.integers(0, 60, n)
        lengths[rng.random(n) < 0.1] = 0
        # Every other file int32 with ids past 65535: blends mix dtypes.
        high, dtype = (60_000, np.uint16) if k % 2 == 0 else (100_000, np.int32)
        prefixes.append(write_documents(folder / f"p{k}_text_document",
                                        [rng.integers(1, high, m) for m in lengths], dtype=dtype))
    return prefixes


def _theirs(megatron_builder, megatron_config, prefixes, weights, split, per_split, sizes, seq_length, seed, extra,
            surplus, cache):
    from megatron.core.datasets.gpt_dataset import GPTDataset

    def blend_of(ps, ws):
        return (list(ps), None if ws is None else list(ws))

    kwargs = dict(random_seed=seed, sequence_length=seq_length, tokenizer=MegatronTokenizer(), path_to_cache=str(cache),
                  add_extra_token_to_sequence=extra, reset_position_ids=False, reset_attention_mask=False,
                  eod_mask_loss=False, mid_level_dataset_surplus=surplus)
    if per_split is None:
        config = megatron_config(blend=blend_of(prefixes, weights), split=split, **kwargs)
    else:
        config = megatron_config(blend_per_split=[None if b is None else blend_of(*b) for b in per_split], **kwargs)
    return megatron_builder(GPTDataset, sizes, lambda: True, config).build()


def _their_sample(dataset, i):
    """(tokens, dataset_id) of position i of a megatron-core top-level dataset."""
    if hasattr(dataset, "dataset_index"):  # BlendedDataset
        d, j = int(dataset.dataset_index[i]), int(dataset.dataset_sample_index[i])
        return dataset.datasets[d]._query_document_sample_shuffle_indices(j)[0], d
    return dataset._query_document_sample_shuffle_indices(i)[0], None


def _read_every_row(datasets):
    for dataset in datasets:
        for i in range(len(dataset) if dataset is not None else 0):
            _their_sample(dataset, i)


def _their_endless_loop(prefixes, weights, split, per_split, sizes, seq_length, extra, surplus) -> bool:
    """Whether megatron-core's builder would make a mid-level GPTDataset without a token that
    must still reach a number of tokens: its GPTDataset._get_num_epochs then adds empty epochs
    forever (``while num_tokens < num_samples * sequence_length + add_extra_token``). The
    split ranges and per-dataset sizes come from megatron-core's own functions."""
    from megatron.core.datasets.blended_megatron_dataset_builder import _get_size_per_split_per_dataset
    from megatron.core.datasets.blended_megatron_dataset_config import (convert_split_vector_to_split_matrix,
                                                                        parse_and_normalize_split)
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import normalize

    def lengths_of(prefix):  # copied out: the arrays are views of a map the dataset closes when collected
        dataset = IndexedDataset(prefix)
        return np.array(dataset.sequence_lengths)

    def endless(lengths, num_samples):
        return (num_samples is not None and int(np.sum(lengths)) == 0
                and num_samples * seq_length + int(extra) > 0)

    if per_split is not None:  # each split its own blend, every dataset whole
        for index, entry in enumerate(per_split):
            if entry is None or sizes[index] == 0:
                continue
            chosen, ws = entry
            mid = ([[sizes[index]]] if len(chosen) == 1 else
                   [[None]] * len(chosen) if ws is None else
                   _get_size_per_split_per_dataset(normalize(ws), [sizes[index]], surplus=surplus))
            if any(endless(lengths_of(p), m[0]) for p, m in zip(chosen, mid)):
                return True
        return False
    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(split))
    if len(prefixes) == 1 and weights is None:
        mid = [list(sizes)]
    elif weights is None:
        mid = [[None] * len(SPLITS) for _ in prefixes]
    else:
        mid = _get_size_per_split_per_dataset(normalize(weights), sizes, surplus=surplus)
    for prefix, per_split_sizes in zip(prefixes, mid):
        lengths = lengths_of(prefix)
        for bookends, num_samples in zip(matrix, per_split_sizes):
            if bookends is None:
                continue
            begin, end = (int(round(b * float(len(lengths)))) for b in bookends)  # as _build_megatron_dataset_splits
            if endless(lengths[begin:end], num_samples):
                return True
    return False


def _random_split(rng):
    parts = [int(rng.choice([0, 1, 2, 5, 30, 969])) for _ in range(int(rng.integers(1, 4)))]
    if not any(parts):
        parts[0] = 1
    return ",".join(map(str, parts))


@pytest.fixture(scope="module")
def oracle(megatron):
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    return BlendedMegatronDatasetBuilder, GPTDatasetConfig


@pytest.mark.megatron
def test_random_blends_and_splits_equal_megatron_core(oracle, tmp_path):
    builder_cls, config_cls = oracle
    rng = np.random.default_rng(11)
    compared = splits_seen = refused = 0
    for case in range(200):
        folder = tmp_path / f"case{case}"
        prefixes = _write_prefixes(folder, rng, int(rng.integers(1, 5)))
        files = {p: IndexedFile.open(p) for p in prefixes}
        weighted = bool(rng.integers(0, 2))
        weights = [float(rng.integers(1, 10)) for _ in prefixes] if weighted else None
        seq_length, seed, extra = int(rng.integers(2, 40)), int(rng.integers(0, 10_000)), bool(rng.integers(0, 2))
        surplus = float(rng.choice([0.005, 0.05, 0.5]))
        sizes = [int(rng.integers(1, 300)) for _ in SPLITS] if weighted or rng.integers(0, 2) else [None] * 3
        per_split = None
        if rng.random() < 0.3:  # blend_per_split
            per_split = []
            for _ in SPLITS:
                chosen = [p for p in prefixes if rng.random() < 0.6] or [prefixes[0]]
                per_split.append((chosen, [float(rng.integers(1, 5)) for _ in chosen] if weighted else None))
            data_path, split = None, None
        else:
            split = _random_split(rng)
            data_path = prefixes if weights is None else [t for w, p in zip(weights, prefixes) for t in (str(w), p)]
        num_samples = dict(zip(SPLITS, sizes))
        kwargs = dict(num_samples=num_samples, mid_level_dataset_surplus=surplus)
        if per_split is None:
            kwargs.update(data_path=data_path, split_ratios=split)
        else:
            kwargs.update({name: (ps if ws is None else [t for w, p in zip(ws, ps) for t in (str(w), p)])
                           for name, (ps, ws) in zip(("train_data_path", "valid_data_path", "test_data_path"),
                                                     per_split)})
        try:
            plans = mplan.megatron_plan(**kwargs)
            built = {name: build_split(plan, files, seq_length=seq_length, seed=seed, add_extra_token=extra)
                     for name, plan in plans.items()}
        except ParameterError as error:
            # Refused exactly where megatron-core fails: it loops forever on a mid-level dataset
            # without tokens (decided from its own split and size functions, as it cannot be
            # run), raises building the split or reading one of its rows (an assert on a blend
            # weight of 0, an IndexError where a blend draws past a dataset...), or makes the
            # refused split empty (no row to train on).
            refused += 1
            if not _their_endless_loop(prefixes, weights, split, per_split, sizes, seq_length, extra, surplus):
                refused_split = SPLITS.index(str(error).split("'")[1]) if str(error).startswith("split '") else None
                try:
                    theirs = _theirs(builder_cls, config_cls, prefixes, weights, split, per_split, sizes, seq_length,
                                     seed, extra, surplus, folder / "megatron")
                    _read_every_row(theirs)
                except ParameterError:
                    raise
                except Exception:  # noqa: BLE001 - megatron-core's own refusal, whatever its type
                    continue
                assert refused_split is not None and theirs[refused_split] is not None \
                    and len(theirs[refused_split]) == 0, (case, "megatron-core builds what we refuse", str(error))
            continue
        assert not _their_endless_loop(prefixes, weights, split, per_split, sizes, seq_length, extra, surplus), case
        theirs = _theirs(builder_cls, config_cls, prefixes, weights, split, per_split, sizes, seq_length, seed,
                         extra, surplus, folder / "megatron")
        for index, name in enumerate(SPLITS):
            if name not in built:
                assert theirs[index] is None or len(theirs[index]) == 0 or sizes[index] == 0, (case, name)
                continue
            ours = built[name]
            splits_seen += 1
            available = len(theirs[index])
            # The rows Megatron-LM trains on: the size asked for of a weighted blend (megatron-core's
            # BlendedDataset holds sum(ceil(size * w)), a few more) or of one dataset (its
            # GPTDataset holds whole epochs); every row of megatron-core's unweighted blend
            # (min(size, sum of the datasets' lengths)) or of a dataset without a size.
            blended = hasattr(theirs[index], "dataset_index")
            sized = sizes[index] is not None and (weighted or not blended)
            assert ours.rows == (sizes[index] if sized else available), (case, name, ours.rows, available)
            assert ours.rows <= available, (case, name)
            check = np.unique(np.concatenate([np.arange(min(ours.rows, 25)),
                                              rng.integers(0, ours.rows, 25)])) if ours.rows else []
            tokens, dataset_ids, _ = split_samples(ours, check)
            for k, i in enumerate(np.asarray(check).tolist()):
                text, d = _their_sample(theirs[index], i)
                assert np.array_equal(tokens[k], text), (case, name, i)
                if d is not None:
                    assert int(dataset_ids[k]) == d, (case, name, i)
                compared += 1
    assert splits_seen > 200 and compared > 5000 and refused < 40


def test_split_strings_parse_and_cut_as_megatron_core(megatron):
    from megatron.core.datasets.blended_megatron_dataset_config import (convert_split_vector_to_split_matrix,
                                                                          parse_and_normalize_split)

    for split in ["969,30,1", "98,2,0", "1", "0,1", "1,1,1", "0.5, 0.25, 0.25", "33,33,34", "7,0,3", "100, 0, 0"]:
        assert mplan.parse_split(split) == parse_and_normalize_split(split)
        assert mplan.split_matrix(mplan.parse_split(split)) == convert_split_vector_to_split_matrix(
            parse_and_normalize_split(split))


def test_data_path_parses_as_megatron_core(megatron):
    from megatron.core.datasets.utils import get_blend_from_list, normalize

    for tokens in (["A"], ["A", "B", "C"], ["0.3", "A", "0.7", "B"], ["30", "A", "70", "B", "1", "C"], ["1", "A"],
                   ["0.3", "A", "0.7", "A", "1", "B"], ["A", "A", "B"]):  # a prefix twice: two datasets
        prefixes, weights = get_blend_from_list(tokens)
        ours = mplan.parse_data_path(tokens)
        assert list(ours.prefixes) == prefixes
        assert (ours.weights is None) == (weights is None)
        if weights is not None:
            assert list(ours.weights) == normalize(weights)


@pytest.mark.parametrize("value, message", [
    (["-1", "A", "2", "B"], "finite and >= 0"),
    (["0", "A", "0", "B"], "every weight is 0"),
    (["nan", "A", "1", "B"], "finite"),
    (["0.3", "A", "B", "C"], "stands where a weight should be"),
    ([], "empty"),
    (["0", "A", "1", "B"], "weight 0"),
])
def test_bad_weights_and_prefixes_are_one_clear_error(value, message):
    with pytest.raises(ParameterError, match=message):
        mplan.parse_data_path(value)


def test_a_split_without_sequences_is_refused_at_once_not_a_hang(tmp_path):
    """300 sequences at 969,30,1 give the test split none: megatron-core loops forever there."""
    prefix = write_documents(tmp_path / "p_text_document", [[1, 2, 3]] * 300, dtype=np.uint16)
    plans = mplan.megatron_plan(data_path=[prefix], split_ratios="969,30,1",
                                 num_samples={"train": 10, "validation": 5, "test": 1})
    with pytest.raises(ParameterError, match=r"split 'test' \(ratio 0.001\).*300 sequences.*no sequence"):
        build_split(plans["test"], {prefix: IndexedFile.open(prefix)}, seq_length=4, seed=1)


def test_a_split_of_empty_sequences_is_refused_at_once_not_a_hang(tmp_path):
    """The validation split's 30 sequences hold no token (megatron-core loops forever there too),
    and tokens are counted only when sampling fails: a second open, its train indices cached,
    still refuses validation with the split's own message."""
    documents = [[1, 2, 3]] * 969 + [[]] * 30 + [[4]]
    prefix = write_documents(tmp_path / "p_text_document", documents, dtype=np.uint16)
    plans = mplan.megatron_plan(data_path=[prefix], split_ratios="969,30,1",
                                 num_samples={"train": 10, "validation": 5, "test": 1})
    for _ in range(2):
        build_split(plans["train"], {prefix: IndexedFile.open(prefix)}, seq_length=4, seed=1, cache_dir=tmp_path / "c")
        with pytest.raises(ParameterError, match=r"split 'validation' \(ratio 0.03\) gets sequences \[969, 999\).*no token"):
            build_split(plans["validation"], {prefix: IndexedFile.open(prefix)}, seq_length=4, seed=1,
                        cache_dir=tmp_path / "c")


def test_weights_without_a_size_are_refused_as_megatron_core_does():
    with pytest.raises(ParameterError, match="requires client-specified size"):
        mplan.megatron_plan(data_path=["1", "A", "2", "B"], split_ratios="1", num_samples=None)


def test_a_blend_of_uint16_and_int32_files_keeps_every_token_id(tmp_path):
    """Rows take a dtype that holds every file's ids (ids past 65535 in one file, uint16 in the other)."""
    small = write_documents(tmp_path / "small", [[1, 2, 3, 4, 5]] * 50, dtype=np.uint16)
    large = write_documents(tmp_path / "large", [[70_000, 70_001, 70_002]] * 50, dtype=np.int32)
    plans = mplan.megatron_plan(data_path=["0.5", small, "0.5", large], split_ratios="1", num_samples={"train": 40})
    built = build_split(plans["train"], {p: IndexedFile.open(p) for p in (small, large)}, seq_length=4, seed=1)
    tokens, dataset_id, _ = split_samples(built, np.arange(40))
    assert tokens.dtype == np.int32 and set(dataset_id.tolist()) == {0, 1}
    assert set(np.unique(tokens[dataset_id == 1]).tolist()) == {70_000, 70_001, 70_002}
    assert set(np.unique(tokens[dataset_id == 0]).tolist()) == {1, 2, 3, 4, 5}


@pytest.mark.megatron
def test_the_default_surplus_is_megatron_cores(oracle, tmp_path):
    """Neither side is given mid_level_dataset_surplus. Each prefix holds exactly 72 samples of
    16 tokens a pass, and a 0.5/0.5 blend of 139 rows asks each for ceil(70 * (1 + surplus)):
    71 (one epoch) at megatron-core's 0.005, 74 (two epochs, another shuffle) at 0.05, so any
    other default changes rows."""
    from datasets import load_dataset

    import mmidx_builder  # noqa: F401  registers the builders

    builder_cls, config_cls = oracle
    rng = np.random.default_rng(5)
    prefixes = []
    for name in ("a", "b"):
        cuts = np.sort(rng.choice(np.arange(1, 72 * 16 + 1), size=30, replace=False))
        lengths = np.diff(np.concatenate([[0], cuts, [72 * 16 + 1]]))  # 1,153 tokens: 72 samples of 16 (+1)
        prefixes.append(write_documents(tmp_path / f"{name}_text_document",
                                        [rng.integers(1, 60_000, n) for n in lengths], dtype=np.uint16))
    kwargs = dict(data_path=["0.5", prefixes[0], "0.5", prefixes[1]], split_ratios="100,0,0",
                  num_samples={"train": 139, "validation": 0, "test": 0}, seq_length=16, seed=1234)
    ours = load_dataset("mmidx", **kwargs, cache_dir=str(tmp_path / "hf"), split="train").with_format("numpy")
    config = config_cls(blend=(prefixes, [0.5, 0.5]), split="100,0,0", random_seed=1234, sequence_length=16,
                        tokenizer=MegatronTokenizer(), path_to_cache=str(tmp_path / "megatron"),
                        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
    theirs = builder_cls(__import__("megatron.core.datasets.gpt_dataset", fromlist=["GPTDataset"]).GPTDataset,
                         [139, 0, 0], lambda: True, config).build()[0]
    assert len(ours) == 139
    expected = np.array([_their_sample(theirs, i)[0] for i in range(139)])
    np.testing.assert_array_equal(np.asarray(ours["input_ids"]), expected)
    # The case tells the defaults apart: 0.05 changes rows here.
    other = load_dataset("mmidx", **kwargs, mid_level_dataset_surplus=0.05, cache_dir=str(tmp_path / "hf2"),
                         split="train").with_format("numpy")
    assert (np.asarray(other["input_ids"]) != expected).any(axis=1).sum() > 10
