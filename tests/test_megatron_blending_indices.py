"""mmidx_builder.megatron.blending_indices against megatron-core's C++ helpers (build_blending_indices,
build_exhaustive_blending_indices), including the lane machinery forced into its corners
(thousands of lanes, no warm-up so that chunks fail verification and are rerun), and the cache."""

import json
import os

import numpy as np
import pytest

from mmidx_builder.errors import ParameterError
from mmidx_builder.megatron import blending_indices as blending


def their_weighted(helpers, weights, size):
    index, sample = np.zeros(size, np.int16), np.zeros(size, np.int64)
    helpers.build_blending_indices(index, sample, list(map(float, weights)), len(weights), size, False)
    return index, sample


def their_exhaustive(helpers, sizes):
    index, sample = np.zeros(int(sum(sizes)), np.int16), np.zeros(int(sum(sizes)), np.int64)
    helpers.build_exhaustive_blending_indices(index, sample, np.asarray(sizes, np.int64), len(sizes))
    return index, sample


def random_weights(rng, n):
    kind = rng.randint(5)
    if kind == 0:
        w = rng.rand(n)
    elif kind == 1:
        w = rng.rand(n) ** 6 + 1e-7  # a few tiny weights
    elif kind == 2:
        w = np.ones(n)  # ties everywhere
    elif kind == 3:
        w = rng.randint(1, 4, n).astype(float)  # ties among some
    else:
        w = rng.randint(1, 10**6, n).astype(float)  # weights from dataset lengths
    return np.array((w / w.sum()).tolist())  # megatron-core's normalize


@pytest.fixture(params=["default", "many lanes", "no warm-up", "candidates"])
def lanes(request, monkeypatch):
    """The default tuning, then small chunks (thousands of lanes, >32767 / n for the int16
    products), then no warm-up at all (guessed states are often wrong: chunks are rerun), then
    every blend of 2 datasets or more run over candidate datasets per block (_run_lanes_pruned),
    with so few candidates that many lanes run in the group that keeps more."""
    if request.param == "many lanes":
        monkeypatch.setattr(blending, "_MIN_CHUNK", 16)
        monkeypatch.setattr(blending, "_MAX_LANES", 5000)
        monkeypatch.setattr(blending, "_WARMUP", 4)
        monkeypatch.setattr(blending, "_BLOCK_STEPS", 7)
    elif request.param == "no warm-up":
        monkeypatch.setattr(blending, "_MIN_CHUNK", 40)
        monkeypatch.setattr(blending, "_WARMUP", 0)
    elif request.param == "candidates":
        monkeypatch.setattr(blending, "_PRUNE_FROM", 2)
        monkeypatch.setattr(blending, "_PRUNED_BLOCK_STEPS", 5)
        monkeypatch.setattr(blending, "_CANDIDATES", 2)
        monkeypatch.setattr(blending, "_MIN_CHUNK", 40)
    runs = {"lanes": 0, "max lanes": 0, "reruns": 0}
    original = blending._run_lanes

    def counting(weights, caps, first_steps, counts, num_steps, snapshot_step, write):
        runs["reruns" if snapshot_step is None else "lanes"] += 1
        runs["max lanes"] = max(runs["max lanes"], len(first_steps))
        return original(weights, caps, first_steps, counts, num_steps, snapshot_step, write)

    monkeypatch.setattr(blending, "_run_lanes", counting)
    yield request.param
    # The machinery was really exercised: many lanes, and chunks rerun after failing verification.
    if request.param == "many lanes":
        assert runs["max lanes"] > 1000
    if request.param == "no warm-up":
        assert runs["reruns"] > 10


@pytest.mark.megatron
def test_weighted_blends_equal_helpers_cpp(megatron, lanes):
    rng = np.random.RandomState(11)
    for case in range(61):
        n = int(rng.choice([1, 2, 3, 5, 10, 17])) if case else 17
        weights = random_weights(rng, n)
        # Case 0: 17 datasets x 5000 lanes, past int16 in the lane arithmetic when lanes are many.
        size = int(rng.choice([0, 1, 2, 3, 64, 65, 1000, 20011, 80000])) if case else 80000
        ours = blending.build_blending_indices(weights, size)
        index, sample = their_weighted(megatron.helpers, weights, size)
        label = f"case {case}: n={n} size={size} weights={weights.tolist()}"
        assert ours.dataset_index.dtype == np.int16 and ours.dataset_sample_index.dtype == np.int64
        assert np.array_equal(ours.dataset_index, index), label
        assert np.array_equal(ours.dataset_sample_index, sample), label


@pytest.mark.megatron
def test_exhaustive_blends_equal_helpers_cpp(megatron, lanes):
    rng = np.random.RandomState(12)
    for case in range(60):
        n = int(rng.choice([1, 2, 3, 6, 12]))
        sizes = rng.randint(1, int(rng.choice([2, 5, 300, 9000])), n)
        if rng.rand() < 0.3:
            sizes[rng.randint(n)] = 1  # a dataset used up at once
        ours = blending.build_exhaustive_blending_indices(sizes)
        index, sample = their_exhaustive(megatron.helpers, sizes)
        assert np.array_equal(ours.dataset_index, index), f"case {case}: sizes={sizes.tolist()}"
        assert np.array_equal(ours.dataset_sample_index, sample), f"case {case}: sizes={sizes.tolist()}"


@pytest.mark.megatron
@pytest.mark.parametrize("kind", [0, 1, 2, 3, 4])
def test_blends_of_hundreds_of_datasets_equal_helpers_cpp(megatron, kind):
    """Hundreds of weights (a 1,000-prefix --data-path): blocks run over candidate datasets."""
    rng = np.random.RandomState(kind)
    n = 150 + 97 * kind
    weights = {0: rng.rand(n), 1: rng.rand(n) ** 6 + 1e-7, 2: np.ones(n), 3: rng.randint(1, 4, n).astype(float),
               4: rng.lognormal(0, 0.01, n)}[kind]
    weights = np.array((weights / weights.sum()).tolist())
    size = 120_011
    ours = blending.build_blending_indices(weights, size)
    index, sample = their_weighted(megatron.helpers, weights, size)
    assert np.array_equal(ours.dataset_index, index) and np.array_equal(ours.dataset_sample_index, sample)
    sizes = rng.randint(1, 400, n)
    sizes[::7] = 1  # datasets used up at once
    ours = blending.build_exhaustive_blending_indices(sizes)
    index, sample = their_exhaustive(megatron.helpers, sizes)
    assert np.array_equal(ours.dataset_index, index) and np.array_equal(ours.dataset_sample_index, sample)


@pytest.mark.megatron
def test_many_datasets_in_few_long_lanes_equal_helpers_cpp(megatron, monkeypatch):
    """Blends of many datasets cap their lanes by lanes x datasets (_PRUNED_LANE_CELLS): with
    the cap at its floor of 256 lanes, 1.2M samples of 150 datasets run in chunks longer than
    _MIN_CHUNK, and the arrays still equal the C++ helper's."""
    monkeypatch.setattr(blending, "_PRUNED_LANE_CELLS", 1)
    widest = []
    original = blending._run_lanes

    def counting(weights, caps, first_steps, counts, num_steps, snapshot_step, write):
        widest.append(len(first_steps))
        return original(weights, caps, first_steps, counts, num_steps, snapshot_step, write)

    monkeypatch.setattr(blending, "_run_lanes", counting)
    rng = np.random.RandomState(7)
    weights = rng.lognormal(0, 1, 150)
    weights = np.array((weights / weights.sum()).tolist())
    size = 1_200_007
    ours = blending.build_blending_indices(weights, size)
    assert max(widest) == 256 and size // 256 > blending._MIN_CHUNK
    index, sample = their_weighted(megatron.helpers, weights, size)
    assert np.array_equal(ours.dataset_index, index) and np.array_equal(ours.dataset_sample_index, sample)


def test_draws_follow_the_weights_and_count_up_per_dataset():
    """Invariants, without the oracle: each dataset's draws are 0, 1, 2, ... in order, and its
    share stays within a sample of weight * position."""
    weights = np.array([0.5, 0.3, 0.2])
    result = blending.build_blending_indices(weights, 50_000)
    for d in range(3):
        drawn = result.dataset_sample_index[result.dataset_index == d]
        assert np.array_equal(drawn, np.arange(len(drawn)))
        counts = np.cumsum(result.dataset_index == d)
        assert np.abs(counts - weights[d] * np.arange(1, 50_001)).max() < 1.5


@pytest.mark.parametrize("weights, expected", [
    ([], "non-empty"),
    ([0.5, 0.0], "finite number > 0"),
    ([0.5, -0.5], "finite number > 0"),
    ([float("nan"), 1.0], "finite number > 0"),
    (["a", 1.0], "must be numbers"),
    ([[0.5, 0.5]], "1-D"),
])
def test_bad_weights_are_refused(weights, expected):
    with pytest.raises(ParameterError, match=expected):
        blending.build_blending_indices(weights, 10)


def test_bad_sizes_are_refused():
    with pytest.raises(ParameterError, match="size= must be at least 0, got -1"):
        blending.build_blending_indices([1.0], -1)
    with pytest.raises(ParameterError, match="at least one"):
        blending.build_exhaustive_blending_indices([3, 0])
    with pytest.raises(ParameterError, match="at most 32766"):
        blending.build_blending_indices(np.full(40000, 1 / 40000), 5)


def test_cache_returns_the_same_arrays_and_rebuilds_damage(tmp_path):
    weights = [0.25, 0.75]
    first = blending.load_or_build_blending_indices(cache_dir=tmp_path, weights=weights, size=1000)
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 3 and not any(f.endswith(".tmp") for f in files)
    again = blending.load_or_build_blending_indices(cache_dir=tmp_path, weights=weights, size=1000)
    assert isinstance(again.dataset_index, np.memmap)  # a hit: read from disk
    assert np.array_equal(again.dataset_index, first.dataset_index)
    assert np.array_equal(again.dataset_sample_index, first.dataset_sample_index)
    for name in files:  # no pickles: plain .npy readable with allow_pickle=False
        if name.endswith(".npy"):
            np.load(tmp_path / name, allow_pickle=False)
    # Another size or other weights: another key.
    blending.load_or_build_blending_indices(cache_dir=tmp_path, weights=weights, size=999)
    blending.load_or_build_blending_indices(cache_dir=tmp_path, weights=[0.75, 0.25], size=1000)
    assert len(os.listdir(tmp_path)) == 9
    # A damaged array is rebuilt, not returned.
    damaged = next(tmp_path / f for f in files if f.endswith("dataset_index.npy"))
    damaged.write_bytes(b"garbage")
    rebuilt = blending.load_or_build_blending_indices(cache_dir=tmp_path, weights=weights, size=1000)
    assert np.array_equal(rebuilt.dataset_index, first.dataset_index)
    exhaustive = blending.load_or_build_blending_indices(cache_dir=tmp_path, sizes=[3, 4])
    assert np.array_equal(exhaustive.dataset_index, blending.build_exhaustive_blending_indices([3, 4]).dataset_index)


def test_cache_that_cannot_be_written_warns(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.warns(UserWarning, match="not cached"):
        result = blending.load_or_build_blending_indices(cache_dir=blocker / "sub", weights=[1.0], size=3)
    assert result.dataset_index.tolist() == [0, 0, 0]
    with pytest.raises(ParameterError, match="not both"):
        blending.load_or_build_blending_indices(cache_dir=None, weights=[1.0], size=3, sizes=[3])


def test_a_cached_blend_records_what_it_draws_from_each_dataset(tmp_path, monkeypatch):
    """The per-dataset counts (what build_split checks against each dataset's samples at every
    open) come with a warm load from the meta file, equal to a count of dataset_index; a cache
    written before they were recorded still loads, and is counted."""
    weights = [0.2, 0.5, 0.3]
    built = blending.load_or_build_blending_indices(cache_dir=tmp_path, weights=weights, size=5000)
    expected = [int((np.asarray(built.dataset_index) == d).sum()) for d in range(3)]
    counted = []
    real_bincount = np.bincount
    monkeypatch.setattr(blending.np, "bincount", lambda *a, **k: counted.append(1) or real_bincount(*a, **k))
    again = blending.load_or_build_blending_indices(cache_dir=tmp_path, weights=weights, size=5000)
    assert isinstance(again.dataset_index, np.memmap)
    assert blending.drawn_counts(again, 3).tolist() == expected and counted == []  # recorded, not counted

    from mmidx_builder.storage import array_cache
    meta_path = next(tmp_path / f for f in os.listdir(tmp_path) if f.endswith("-blending.json"))
    meta = json.loads(meta_path.read_text())
    del meta["drawn"]  # as written before the counts were recorded, digest and all
    array_cache._write_meta(str(meta_path), {k: meta[k] for k in ("kind", "size")}, meta["arrays"])
    old = blending.load_or_build_blending_indices(cache_dir=tmp_path, weights=weights, size=5000)
    assert isinstance(old.dataset_index, np.memmap) and old.drawn is None
    assert blending.drawn_counts(old, 3).tolist() == expected and counted == [1]
