"""legacy_shuffle.shuffle against numpy's own ``RandomState.shuffle``: the same permutation and the
same generator state after, for sizes at the edges of its bands (powers of two), of its
windows, rounds and blocks, for views (megatron-core shuffles ``index[:cut]``), for each dtype
the indices use, and for a generator that has drawn before."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmidx_builder.megatron import legacy_shuffle


def _both(n: int, seed: int, dtype=np.int32, drawn_before: int = 0, alone: bool = False):
    """(numpy's array, ours, numpy's generator, ours) after shuffling arange(n) from ``seed``."""
    theirs, ours = np.arange(n, dtype=dtype), np.arange(n, dtype=dtype)
    their_rng, our_rng = np.random.RandomState(seed), np.random.RandomState(seed)
    for rng in (their_rng, our_rng):
        rng.random_sample(drawn_before)
    their_rng.shuffle(theirs)
    legacy_shuffle.shuffle(ours, our_rng, alone=alone)
    return theirs, ours, their_rng, our_rng


def _same_state(a: np.random.RandomState, b: np.random.RandomState) -> bool:
    (_, key_a, pos_a, *_), (_, key_b, pos_b, *_) = a.get_state(), b.get_state()
    return np.array_equal(key_a, key_b) and pos_a == pos_b


@pytest.fixture
def small_pieces(monkeypatch):
    """Every path on arrays of thousands: tiny windows, rounds, blocks and word buffers, so that a
    band is many rounds, a round many windows and the words are drawn again and again."""
    monkeypatch.setattr(legacy_shuffle, "SMALL_BYTES", 0)
    monkeypatch.setattr(legacy_shuffle, "ROUND", 97)
    monkeypatch.setattr(legacy_shuffle, "WINDOW", 61)
    monkeypatch.setattr(legacy_shuffle, "MAX_BLOCK", 7)
    monkeypatch.setattr(legacy_shuffle, "_WORDS", 113)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 63, 64, 65, 1000, 1023, 1024, 1025, 4097, 20_011])
@pytest.mark.parametrize("seed", [0, 1234])
def test_small_pieces_shuffle_as_numpy_does(small_pieces, n, seed):
    theirs, ours, their_rng, our_rng = _both(n, seed)
    assert np.array_equal(ours, theirs)
    assert _same_state(our_rng, their_rng)
    assert our_rng.randint(0, 2**31, 5).tolist() == their_rng.randint(0, 2**31, 5).tolist()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 5000), seed=st.integers(0, 2**32 - 1), drawn_before=st.integers(0, 700))
def test_any_size_seed_and_position_in_the_stream(n, seed, drawn_before):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(legacy_shuffle, "SMALL_BYTES", 0)
        patch.setattr(legacy_shuffle, "WINDOW", 37)
        patch.setattr(legacy_shuffle, "MAX_BLOCK", 5)
        patch.setattr(legacy_shuffle, "_WORDS", 53)
        theirs, ours, their_rng, our_rng = _both(n, seed, drawn_before=drawn_before)
    assert np.array_equal(ours, theirs)
    assert _same_state(our_rng, their_rng)


@pytest.mark.parametrize("n, dtype, alone", [(6_291_457, np.int32, False), (3_145_729, np.int64, False),
                                             (6_400_003, np.uint32, False), (16_777_217, np.int32, True)])
def test_sizes_past_numpys_path_shuffle_as_numpy_does(n, dtype, alone):
    # the shipped thresholds, not numpy's path
    assert n * np.dtype(dtype).itemsize >= (legacy_shuffle.ALONE_BYTES if alone else legacy_shuffle.SMALL_BYTES)
    theirs, ours, their_rng, our_rng = _both(n, 20_24, dtype, alone=alone)
    assert np.array_equal(ours, theirs)
    assert _same_state(our_rng, their_rng)


@pytest.mark.parametrize("n, dtype", [(65_536, np.int32), (131_073, np.uint32), (1_000_003, np.int32),
                                      (600_001, np.int64)])
def test_mid_sizes_shuffle_as_numpy_does(monkeypatch, n, dtype):
    monkeypatch.setattr(legacy_shuffle, "SMALL_BYTES", 0)
    theirs, ours, their_rng, our_rng = _both(n, 20_24, dtype)
    assert np.array_equal(ours, theirs)
    assert _same_state(our_rng, their_rng)


def test_views_one_after_the_other_as_megatron_shuffles_epochs():
    """build_document_index's separate final epoch: two shuffles of views, one generator; the
    first past the threshold, the second under it (numpy's loop), so the state is handed over."""
    theirs, ours = np.arange(9_000_000, dtype=np.int32), np.arange(9_000_000, dtype=np.int32)
    their_rng, our_rng = np.random.RandomState(7), np.random.RandomState(7)
    cut = 6_400_017
    their_rng.shuffle(theirs[:cut])
    their_rng.shuffle(theirs[cut:])
    legacy_shuffle.shuffle(ours[:cut], our_rng)
    legacy_shuffle.shuffle(ours[cut:], our_rng)
    assert np.array_equal(ours, theirs)
    assert _same_state(our_rng, their_rng)


def test_what_it_does_not_take_on_goes_to_numpy():
    """A list, a 2-d array or a generator that is not MT19937: numpy's own shuffle, unchanged."""
    rows = np.arange(40_000 * 2).reshape(40_000, 2)
    theirs, ours = rows.copy(), rows.copy()
    np.random.RandomState(3).shuffle(theirs)
    legacy_shuffle.shuffle(ours, np.random.RandomState(3))
    assert np.array_equal(ours, theirs)
    other = np.arange(70_000)
    expected = other.copy()
    np.random.RandomState(np.random.PCG64(5)).shuffle(expected)
    legacy_shuffle.shuffle(other, np.random.RandomState(np.random.PCG64(5)))
    assert np.array_equal(other, expected)
