"""fairseq's max_tokens batches: invariants and errors, without fairseq.

Equality with fairseq itself (batches, their order per epoch, the size filter) is
test_fairseq_oracle.py's; here are the properties any correct batching has, two small
models that hold in special cases, and the errors.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmidx_builder.errors import ParameterError
from mmidx_builder.fairseq import batch_by_size, max_tokens_batches, ordered_indices
from mmidx_builder.fairseq.batches import FAIRSEQ_VERSIONS, filter_by_size, shard_batches

RELEASE, CURRENT = "0.12.2", "0.12.3.1"


def sizes(seed, n=300):
    rng = np.random.default_rng(seed)
    return rng.integers(1, 60, n), rng.integers(1, 60, n)


def test_ordered_indices_sort_a_seeded_permutation_by_source_then_target():
    src, tgt = sizes(0)
    order = ordered_indices(src, tgt, seed=4)
    permutation = np.random.RandomState(4).permutation(len(src))
    # Stable sorts: by target, then by source, ties kept in permutation order.
    expected = sorted(range(len(src)), key=lambda k: (src[permutation[k]], tgt[permutation[k]], k))
    np.testing.assert_array_equal(order, permutation[expected])
    np.testing.assert_array_equal(ordered_indices(src, None, shuffle=False), np.argsort(src, kind="stable"))


def greedy(indices, tokens, max_tokens, max_sentences):
    """With a batch multiple of 1, fairseq's loop reduces to: start a new batch when the
    next example would overflow max_tokens (padded) or max_sentences."""
    batches, current, longest = [], [], 0
    for index, n in zip(indices, tokens):
        if current and ((len(current) + 1) * max(longest, n) > max_tokens or len(current) + 1 > max_sentences):
            batches.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, n)
    return batches + ([current] if current else [])


@pytest.mark.parametrize("version", FAIRSEQ_VERSIONS)
@pytest.mark.parametrize("max_tokens,max_sentences", [(60, 10**9), (500, 10**9), (4096, 7), (59 * 300, 10**9)])
def test_with_multiple_one_batching_is_greedy(max_tokens, max_sentences, version):
    src, tgt = sizes(1)
    indices = ordered_indices(src, tgt, seed=1)
    tokens = np.maximum(src, tgt)[indices]
    got = batch_by_size(indices, tokens, max_tokens, None if max_sentences == 10**9 else max_sentences,
                        fairseq_version=version)
    assert [b.tolist() for b in got] == greedy(indices.tolist(), tokens.tolist(), max_tokens, max_sentences)


def test_batches_end_on_the_multiple_and_0_12_3_drops_a_last_partial_one():
    # 20 sentences of 10 tokens fit 200; the largest multiple of 8 below is 16.
    kept = batch_by_size(np.arange(100), np.full(100, 10), max_tokens=200, required_batch_size_multiple=8,
                         fairseq_version=RELEASE)
    assert [len(b) for b in kept] == [16] * 6 + [4]
    assert np.concatenate(kept).tolist() == list(range(100))
    dropped = batch_by_size(np.arange(100), np.full(100, 10), max_tokens=200, required_batch_size_multiple=8)
    assert [b.tolist() for b in dropped] == [b.tolist() for b in kept[:-1]]
    full = batch_by_size(np.arange(96), np.full(96, 10), max_tokens=200, required_batch_size_multiple=8)
    assert [len(b) for b in full] == [16] * 6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=120), st.integers(0, 120), st.integers(0, 25),
       st.sampled_from([1, 2, 3, 8, 64]))
def test_batches_partition_the_order_within_the_limits(tokens, extra_tokens, max_sentences, multiple):
    tokens = np.array(tokens)
    max_tokens = int(tokens.max()) + extra_tokens
    max_sentences = max_sentences or None
    indices = np.arange(len(tokens)) * 5 + 1
    release = batch_by_size(indices, tokens, max_tokens, max_sentences, multiple, fairseq_version=RELEASE)
    assert np.concatenate(release).tolist() == indices.tolist()
    for batch in release:
        n = len(batch)
        assert n >= 1 and n * tokens[(batch - 1) // 5].max() <= max_tokens
        assert max_sentences is None or n <= max_sentences
    current = batch_by_size(indices, tokens, max_tokens, max_sentences, multiple)
    last_is_partial = multiple > 1 and len(release[-1]) % multiple != 0
    assert [b.tolist() for b in current] == [b.tolist() for b in release[:len(release) - last_is_partial]]


@pytest.mark.parametrize("version", FAIRSEQ_VERSIONS)
@pytest.mark.parametrize("multiple", (1, 8))
def test_epochs_reorder_the_same_batches(multiple, version):
    src, tgt = sizes(2)
    args = dict(max_tokens=400, seed=3, required_batch_size_multiple=multiple, fairseq_version=version)
    first, second, again = (max_tokens_batches(src, tgt, epoch=e, **args) for e in (1, 2, 1))
    assert [b.tolist() for b in first] == [b.tolist() for b in again]
    assert sorted(map(tuple, first)) == sorted(map(tuple, second))
    assert [b.tolist() for b in first] != [b.tolist() for b in second]
    everything = np.concatenate(first).tolist()
    assert len(set(everything)) == len(everything)
    if version == RELEASE or multiple == 1:
        assert sorted(everything) == list(range(len(src)))
    for b in first:
        assert len(b) * np.maximum(src[b], tgt[b]).max() <= 400
    # Made at a later epoch (resumed training), the pairs are ordered with another seed.
    resumed = max_tokens_batches(src, tgt, epoch=3, start_epoch=3, **args)
    same_seed = max_tokens_batches(src, tgt, epoch=3, **args)
    assert (sorted(map(tuple, resumed)) == sorted(map(tuple, same_seed))) == (version == RELEASE)


def test_unshuffled_batches_follow_the_length_order():
    src, tgt = sizes(3)
    batches = max_tokens_batches(src, tgt, 400, epoch=5, shuffle=False, required_batch_size_multiple=8)
    order = ordered_indices(src, tgt, shuffle=False)
    assert np.concatenate(batches).tolist() == order[:sum(map(len, batches))].tolist()


def test_filter_by_size_keeps_the_order_and_names_the_first_too_long_pair():
    src = np.array([5, 50, 7, 90, 3, 60])
    tgt = np.array([5, 10, 70, 9, 3, 61])
    order = np.array([4, 0, 2, 1, 5, 3])
    kept, ignored = filter_by_size(order, src, tgt, (60, 60), ignore_invalid_inputs=True)
    assert kept.tolist() == [4, 0, 1] and ignored.tolist() == [2, 5, 3]
    kept, ignored = filter_by_size(order, src, tgt, 60, ignore_invalid_inputs=True)
    assert kept.tolist() == [4, 0, 1]
    kept, _ = filter_by_size(order, src, None, 60, ignore_invalid_inputs=True)
    assert kept.tolist() == [4, 0, 2, 1, 5]
    assert filter_by_size(order, src, tgt, None)[0].tolist() == order.tolist()
    with pytest.raises(ParameterError, match=r"pair 2 has source 7, target 70 tokens, more than "
                                             r"max_positions=\(60, 60\) \(3 pair\(s\) too long\).*ignore_invalid"):
        filter_by_size(order, src, tgt, (60, 60))
    batches = max_tokens_batches(src, tgt, 100, max_positions=(60, 60), ignore_invalid_inputs=True)
    assert sorted(np.concatenate(batches).tolist()) == [0, 1, 4]


@pytest.mark.parametrize("max_positions", ["60", (1, 2, 3), (60, None), True, [None]])
def test_a_bad_max_positions_is_named(max_positions):
    with pytest.raises(ParameterError, match="max_positions must be"):
        filter_by_size(np.arange(3), np.ones(3), np.ones(3), max_positions)


@pytest.mark.parametrize("kwargs,message", [
    ({"max_tokens": 0}, "max_tokens= must be at least 1, got 0; or None for no limit"),
    ({"max_tokens": 12.5}, "max_tokens"),
    ({"max_sentences": 0}, "max_sentences"),
    ({"required_batch_size_multiple": 0}, "required_batch_size_multiple"),
    ({"required_batch_size_multiple": None}, "required_batch_size_multiple"),
    ({"fairseq_version": "0.13"}, "fairseq_version must be one of '0.12.3.1', '0.12.2'"),
    ({"max_tokens": 5}, "example .* has 9 tokens, more than max_tokens=5"),
])
def test_bad_batching_parameters_are_named(kwargs, message):
    args = {"max_tokens": 100, **kwargs}
    with pytest.raises(ParameterError, match=message):
        batch_by_size(np.arange(4), np.array([3, 9, 2, 4]), **args)


def test_bad_epochs_and_sizes_are_named():
    src, tgt = sizes(4, 10)
    with pytest.raises(ParameterError, match="epoch= must be at least 3, got 2"):
        max_tokens_batches(src, tgt, 100, epoch=2, start_epoch=3)
    with pytest.raises(ParameterError, match="10 source sizes but 9 target sizes"):
        max_tokens_batches(src, tgt[:-1], 100)
    with pytest.raises(ParameterError, match="two vectors of one length"):
        batch_by_size(np.arange(3), np.ones(4), 10)


def test_nothing_to_batch_makes_no_batches():
    assert batch_by_size(np.arange(0), np.arange(0), 10, required_batch_size_multiple=8) == []
    assert max_tokens_batches([70, 80], [1, 1], 100, max_positions=50, ignore_invalid_inputs=True) == []


@pytest.mark.parametrize("count,num_shards", [(0, 3), (1, 4), (7, 3), (9, 3), (10, 4), (3, 8)])
def test_shard_batches_deals_every_batch_once_and_pads_short_ranks(count, num_shards):
    """fairseq's ShardedIterator(fill_value=[]) spelled out: rank r gets batches r, r+n, ...
    and as many steps as ceil(count / n), the missing ones empty and at the end."""
    batches = [np.arange(k, k + 2) for k in range(0, 2 * count, 2)]
    ranks = [shard_batches(batches, num_shards, rank) for rank in range(num_shards)]
    steps = -(-count // num_shards)
    assert all(len(rank) == steps for rank in ranks)
    dealt = [b.tolist() for step in zip(*ranks) for b in step if len(b)]
    assert dealt == [b.tolist() for b in batches]
    for rank in ranks:
        sizes = [len(b) for b in rank]
        assert sizes == sorted(sizes, reverse=True)   # empty ones only at the end
    assert sum(len(b) == 0 for rank in ranks for b in rank) == steps * num_shards - count


def test_sharded_batches_of_all_ranks_are_the_unsharded_ones():
    src, tgt = sizes(5, 300)
    whole = max_tokens_batches(src, tgt, 60, epoch=2)
    ranks = [max_tokens_batches(src, tgt, 60, epoch=2, num_shards=3, shard_id=r) for r in range(3)]
    assert [b.tolist() for step in zip(*ranks) for b in step if len(b)] == [b.tolist() for b in whole]


@pytest.mark.parametrize("kwargs,message", [
    ({"num_shards": 0}, "num_shards= must be at least 1, got 0"),
    ({"num_shards": 2, "shard_id": 2}, r"shard_id must lie in \[0, num_shards=2\), got 2"),
    ({"shard_id": -1}, "shard_id= must be at least 0, got -1"),
])
def test_bad_shards_are_named(kwargs, message):
    src, tgt = sizes(4, 10)
    with pytest.raises(ParameterError, match=message):
        max_tokens_batches(src, tgt, 100, **kwargs)
