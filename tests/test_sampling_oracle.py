"""megatron-core as the differential oracle of sampling: identical indices, identical tokens.

Each case writes a .bin/.idx with our IndexedFileWriter, builds a real GPTDataset on it
(megatron-core's own IndexedDataset, _build_document_index, helpers.build_sample_idx,
_build_shuffle_index, in its order) and compares its three arrays and every sample's tokens
with build_indices and assemble_samples.
"""

import numpy as np
import pytest

from conftest import MegatronTokenizer

from mmidx_builder.megatron import sampling
from mmidx_builder.errors import ParameterError
from mmidx_builder.sources.indexed import IndexedFile, IndexedFileWriter

pytestmark = pytest.mark.megatron


def megatron_dataset(megatron, prefix, cache_dir, *, seq_length, seed, num_samples, add_extra_token):
    from megatron.core.datasets.utils import Split

    config = megatron.gpt_dataset.GPTDatasetConfig(
        random_seed=seed, sequence_length=seq_length, blend=([prefix], None), split="1,0,0",
        tokenizer=MegatronTokenizer(), path_to_cache=str(cache_dir), reset_position_ids=False,
        reset_attention_mask=False, eod_mask_loss=False, add_extra_token_to_sequence=add_extra_token)
    low_level = megatron.indexed_dataset.IndexedDataset(prefix)
    documents = np.arange(len(low_level.sequence_lengths), dtype=np.int32)
    return megatron.gpt_dataset.GPTDataset(low_level, prefix, documents, num_samples, Split.train, config)


def random_case(rng):
    n = int(rng.randint(1, 40))
    lengths = rng.randint(1, 60, n)
    lengths[rng.rand(n) < 0.25] = 0  # empty sequences, first and last ones included at times
    if rng.rand() < 0.2:
        lengths[rng.randint(n)] = rng.randint(100, 400)  # one longer than any seq_length here
    if lengths.sum() < 2:
        lengths[-1] = 2
    seq_length = int(rng.choice([2, 3, 7, 16, 31, 64, 100]))
    extra = bool(rng.rand() < 0.7)
    per_epoch = (int(lengths.sum()) - extra) // seq_length
    kind = rng.choice(["epochs", "samples", "one"])
    if kind == "epochs":
        amount = {"num_epochs": int(rng.randint(1, 4))}
    elif kind == "samples":  # fractional epochs: 0.1 .. 3.9 of them, some just around the 80% rule
        amount = {"num_samples": max(1, int(rng.uniform(0.1, 3.9) * max(per_epoch, 1)))}
    else:
        amount = {}
    return lengths, seq_length, extra, amount, int(rng.randint(0, 2**32, dtype=np.int64))


def test_indices_and_tokens_equal_gptdataset(megatron, tmp_path):
    rng = np.random.RandomState(20240601)
    compared = separate = 0
    for case in range(400):
        lengths, seq_length, extra, amount, seed = random_case(rng)
        label = f"case {case}: lengths={lengths.tolist()} L={seq_length} E={extra} {amount} seed={seed}"
        prefix = str(tmp_path / f"data{case}")
        dtype = np.uint16 if case % 2 else np.int32
        with IndexedFileWriter(prefix, dtype=dtype) as writer:
            for i, n in enumerate(lengths):
                writer.add_document((np.arange(n) * 7 + i * 131) % 60000)
        source = IndexedFile.open(prefix)
        try:
            ours = sampling.build_indices(source.sequence_lengths, seq_length=seq_length, seed=seed,
                                          add_extra_token=extra, **amount)
        except ParameterError:
            # Only refused when the data cannot fill one sample (Megatron would give an empty dataset).
            assert (int(lengths.sum()) * amount.get("num_epochs", 1) - extra) // seq_length < 1, label
            continue
        # Megatron says how much to train in samples; whole epochs are the call with every sample of them.
        num_samples = amount.get("num_samples", ours.num_samples if "num_epochs" in amount else None)
        theirs = megatron_dataset(megatron, prefix, tmp_path / f"cache{case}", seq_length=seq_length, seed=seed,
                                  num_samples=num_samples, add_extra_token=extra)
        if len(theirs.document_index) != len(ours.document_index):
            # Whole epochs shorter than a sample: Megatron, given their sample count, needs fewer
            # epochs than were asked for; we keep the epochs asked for (documented).
            assert "num_epochs" in amount and int(lengths.sum()) < seq_length + extra, label
            continue
        for name in ("document_index", "sample_index", "shuffle_index"):
            a, b = getattr(ours, name), getattr(theirs, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), f"{name} differs, {label}"
        assert ours.total_samples == len(theirs), label
        ids = np.arange(ours.num_samples)
        samples = sampling.assemble_samples(source, ours, ids)
        expected = np.stack([theirs._query_document_sample_shuffle_indices(int(i))[0] for i in ids])
        assert np.array_equal(samples.astype(np.int64), expected), f"tokens differ, {label}"
        compared += 1
        separate += ours.separate_final_epoch
    assert compared > 250 and separate > 10  # the cases really exercise the rules


def test_sample_index_equals_helpers_cpp(megatron):
    """Many more shapes straight against helpers.build_sample_idx, including seq_length 1."""
    rng = np.random.RandomState(7)
    for case in range(5000):
        n = int(rng.randint(1, 30))
        sizes = rng.randint(0, 50, n).astype(np.int32)
        sizes[rng.rand(n) < 0.3] = 0
        if sizes.sum() < 2:
            continue
        epochs, seq_length, extra = int(rng.randint(1, 4)), int(rng.randint(1, 70)), int(rng.randint(0, 2))
        document_index = np.tile(np.arange(n, dtype=np.int32), epochs)
        rng.shuffle(document_index)
        tokens = int(sizes.sum())
        if (epochs * tokens - extra) // seq_length < 1:
            continue
        ours = sampling.build_sample_index(sizes, document_index, seq_length, epochs * tokens, extra)
        theirs = megatron.helpers.build_sample_idx(sizes, document_index, seq_length, epochs, tokens, True, bool(extra))
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), \
            f"case {case}: sizes={sizes.tolist()} epochs={epochs} L={seq_length} E={extra}"


def test_document_and_shuffle_index_equal_megatron_functions(megatron):
    for seed in range(40):
        for num_epochs, separate in ((1, False), (3, False), (3, True), (2, True)):
            ours = sampling.build_document_index(37, num_epochs, np.random.RandomState(seed), separate)
            theirs = megatron.gpt_dataset._build_document_index(
                np.arange(37, dtype=np.int32), num_epochs, np.random.RandomState(seed), separate)
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)
        for first, total in ((50, 50), (31, 50), (0, 9)):
            ours = sampling.build_shuffle_index(first, total, np.random.RandomState(seed))
            theirs = megatron.gpt_dataset._build_shuffle_index(first, total, np.random.RandomState(seed))
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)


@pytest.mark.parametrize("pieces", ["as shipped", "small"])
def test_large_document_and_shuffle_indices_equal_megatron_functions(megatron, monkeypatch, pieces):
    """Past legacy_shuffle.SMALL_BYTES (ALONE_BYTES for the document index) our shuffles are
    not numpy's loop (legacy_shuffle.py): the arrays must still be megatron-core's, shuffle
    after shuffle from one generator (as shipped: a document index past its threshold, whole
    epochs under it with the separate final one; shuffle indices past theirs); "small" runs
    every path of it (band edges, windows, blocks, word buffers) many times over."""
    from mmidx_builder.megatron import legacy_shuffle

    cases = ((1234, 3_500_001, 3, True), (5, 8_400_007, 2, False))
    if pieces == "as shipped":
        assert 8_400_007 * 2 * 4 >= legacy_shuffle.ALONE_BYTES > 3_500_001 * 2 * 4 >= legacy_shuffle.SMALL_BYTES
    if pieces == "small":
        for name, value in (("SMALL_BYTES", 0), ("ALONE_BYTES", 0), ("ROUND", 1001), ("WINDOW", 257),
                            ("MAX_BLOCK", 31), ("_WORDS", 4099)):
            monkeypatch.setattr(legacy_shuffle, name, value)
        cases = ((1234, 100_003, 3, True), (5, 70_001, 2, False), (77, 65_536, 1, False))
    for seed, count, num_epochs, separate in cases:
        ours_rng, their_rng = np.random.RandomState(seed), np.random.RandomState(seed)
        ours = sampling.build_document_index(count, num_epochs, ours_rng, separate)
        theirs = megatron.gpt_dataset._build_document_index(
            np.arange(count, dtype=np.int32), num_epochs, their_rng, separate)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)
        first, total = count * num_epochs * 2 // 3, count * num_epochs  # after the documents, as GPTDataset
        ours = sampling.build_shuffle_index(first, total, ours_rng)
        theirs = megatron.gpt_dataset._build_shuffle_index(first, total, their_rng)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)


def test_build_indices_with_the_shuffle_index_made_beside_equal_megatron_functions(megatron):
    """Past sampling.BESIDE_SAMPLES the shuffle index is shuffled in a thread while the sample
    index is built: from the generator the document shuffle left, as GPTDataset's steps in order."""
    rng = np.random.RandomState(11)
    for num_epochs in (1, 3):
        sizes = rng.randint(0, 80, 200_003).astype(np.int32)
        tokens = int(sizes.sum())
        seq_length = 1 if num_epochs == 1 else 2
        assert (num_epochs * tokens - 1) // seq_length >= sampling.BESIDE_SAMPLES
        ours = sampling.build_indices(sizes, seq_length=seq_length, seed=99, num_epochs=num_epochs)
        theirs_rng = np.random.RandomState(99)
        document_index = megatron.gpt_dataset._build_document_index(
            np.arange(len(sizes), dtype=np.int32), num_epochs, theirs_rng, False)
        sample_index = megatron.helpers.build_sample_idx(sizes, document_index, seq_length, num_epochs, tokens,
                                                         True, True)
        shuffle_index = megatron.gpt_dataset._build_shuffle_index(len(sample_index) - 1, len(sample_index) - 1,
                                                                  theirs_rng)
        for name, expected in (("document_index", document_index), ("sample_index", sample_index),
                               ("shuffle_index", shuffle_index)):
            got = getattr(ours, name)
            assert got.dtype == expected.dtype and np.array_equal(got, expected), (name, num_epochs)


def test_indices_built_in_their_cache_file_equal_gptdatasets(megatron, tmp_path, monkeypatch):
    """Large indices are built where they are kept (sampling.IN_PLACE_BYTES, here every one),
    their shuffle index in a thread (sampling.BESIDE_SAMPLES, here every one): as megatron-core
    builds them, and read back as written by the next open."""
    monkeypatch.setattr(sampling, "IN_PLACE_BYTES", 0)
    monkeypatch.setattr(sampling, "BESIDE_SAMPLES", 1)
    rng = np.random.RandomState(7)
    compared = 0
    for case in range(60):
        lengths, seq_length, extra, amount, seed = random_case(rng)
        if (int(lengths.sum()) * amount.get("num_epochs", 1) - extra) // seq_length < 1:
            continue  # refused on both sides (test_indices_and_tokens_equal_gptdataset)
        prefix = str(tmp_path / f"data{case}")
        with IndexedFileWriter(prefix, dtype=np.uint16) as writer:
            for i, n in enumerate(lengths):
                writer.add_document((np.arange(n) * 7 + i * 131) % 60000)
        cache = tmp_path / f"ours{case}"
        built = sampling.load_or_build_indices(lengths.astype(np.int32), cache_dir=cache, identity=prefix,
                                               seq_length=seq_length, seed=seed, add_extra_token=extra, **amount)
        assert sorted(p.suffix for p in cache.iterdir()) == [".json", ".npy"]  # one packed file, its meta
        loaded = sampling.load_or_build_indices(lengths.astype(np.int32), cache_dir=cache, identity=prefix,
                                                seq_length=seq_length, seed=seed, add_extra_token=extra, **amount)
        num_samples = amount.get("num_samples", built.num_samples if "num_epochs" in amount else None)
        theirs = megatron_dataset(megatron, prefix, tmp_path / f"cache{case}", seq_length=seq_length, seed=seed,
                                  num_samples=num_samples, add_extra_token=extra)
        if len(theirs.document_index) != len(built.document_index):
            continue  # whole epochs shorter than a sample (test_indices_and_tokens_equal_gptdataset)
        for name in ("document_index", "sample_index", "shuffle_index"):
            expected = getattr(theirs, name)
            for ours in (getattr(built, name), getattr(loaded, name)):
                assert ours.dtype == expected.dtype and np.array_equal(ours, expected), f"{name}, case {case}"
        compared += 1
    assert compared > 30
