"""BlendedDataset's blending indices, exactly as megatron-core's ``helpers.cpp`` builds them.

A blend of datasets draws, for each blended sample ``s``, one dataset and the next unused
sample of it. megatron-core decides with a greedy "largest error" rule
(``helpers.cpp::build_blending_indices``), in double precision::

    x = max(double(s), 1.0)                       # so samples 0 and 1 both use x = 1
    error[i] = weights[i] * x - double(count[i])  # one rounded product, one rounded difference
    pick the first i with the largest error       # ties go to the lowest index
    dataset_index[s] = i; dataset_sample_index[s] = count[i]; count[i] += 1

``build_exhaustive_blending_indices`` (a blend without weights and without a size) runs the
same rule with ``weights = sizes / sum(sizes)`` over the datasets not yet used up, until
every dataset has given all its samples.

Outputs: ``dataset_index`` int16 and ``dataset_sample_index`` int64, one entry per blended
sample, bit for bit megatron-core's.

How it is computed without a loop per sample (pure numpy, no compiler)
-------------------------------------------------------------------
The state before sample ``s`` is the vector of counts; the rule is a deterministic function
of ``(s, counts)``. So the samples are cut into K chunks that are run side by side, one
numpy lane per chunk, each step doing the rule for all K chunks at once:

* chunk 0 starts from the exact state (all counts 0 at ``s = 0``);
* every other chunk starts ``WARMUP`` samples early from a *guessed* state (counts near
  ``weights * s``: ``floor`` plus one for the largest fractional parts) and runs the rule;
  trajectories of this rule merge quickly (measured: after a few dozen samples even for a
  weight of 1e-5), so by its first own sample it almost always holds the true state;
* verification is exact, not statistical: chunk j is right iff the state it reached at its
  first sample equals the state chunk j-1 ended with (and chunk j-1 is right). Chunks that
  fail are run again from their predecessor's end state, until every chunk checks out.
  The first failing chunk is always fixed by a rerun, so this ends; typically nothing fails.

Every error is computed with the same two IEEE double operations as the C++ (numpy ufuncs do
not fuse them into an FMA; the helper is built without FMA contraction), and a tie goes to the
lowest index among the equal largest errors, which is what the C++ scan with its strict ``>``
keeps. So the result is megatron-core's whatever the weights, ties and rounding included.

Speed and memory (``benchmarks/bench_blending.py``, 2 shared cores): 100M samples over 10
datasets and 1B over 3 take 0.6-0.7x the C++ helper's time (each lane step is a handful of
numpy calls over 16k lanes, which vectorise where the C++ loop cannot), and the peak is the
two output arrays plus ~3 MiB of buffers. A compiler (numba) was not needed.

With hundreds of datasets a step over every dataset costs ``lanes x n``; from ``_PRUNE_FROM``
datasets each block of steps runs, in each lane, over the few datasets that can provably be
picked in it (:func:`_run_lanes_pruned`): 1,000 weights x 2.9M samples, balanced, 3.4 s
(17.7 s over every dataset; the C++ 3.7 s in the same run).

:func:`load_or_build_blending_indices` caches results as ``.npy`` files keyed by content.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from ..warnings_once import warn_once
from ..storage import array_cache
from ..checks import check_int
from ..errors import ParameterError
from ..progress import Steps

__all__ = [
    "BlendingIndices",
    "build_blending_indices",
    "build_exhaustive_blending_indices",
    "drawn_counts",
    "load_or_build_blending_indices",
]

# BlendedDataset asserts fewer than 32767 datasets: dataset_index is int16.
MAX_DATASETS = 32766
# Chunks run side by side: enough lanes that each numpy call does real work, few enough that
# the per-step arrays stay in cache (measured best between 8k and 16k on 2 cores).
_MAX_LANES = 16384
# Shortest chunk worth a lane of its own, and the samples a chunk runs before its first own one.
_MIN_CHUNK = 2048
_WARMUP = 64
# Steps buffered per lane before they are copied out (lane-major, so that they go out as row
# copies): 16 fill two cache lines of int64; 16k lanes x 16 steps x 10 bytes is 2.5 MiB.
_BLOCK_STEPS = 16
# From this many datasets, blocks of _PRUNED_BLOCK_STEPS steps run over the datasets each lane
# can pick in them (_run_lanes_pruned); lanes that keep more than _CANDIDATES run as a group
# of their own.
_PRUNE_FROM = 96
_PRUNED_BLOCK_STEPS = 48
_CANDIDATES = 128
# A pruned block's arrays are lanes x datasets: at most this many cells each (20 MB of float64),
# fewer lanes for more datasets. 1,000 datasets, 30M samples: 14.7k lanes ran 1.40x the C++
# helper's time, 2,000-3,000 lanes 0.93-1.00x, 5,000 1.17x.
_PRUNED_LANE_CELLS = 2_500_000
_CACHE_FORMAT = 2  # 2: meta files carry digests (array_cache)


class BlendingIndices:
    """``dataset_index`` (int16) and ``dataset_sample_index`` (int64), one entry per sample.

    ``len()`` is the number of samples. Deliberately not iterable: ``tuple(x)`` would take
    ``len()`` as a size hint and allocate 8 bytes per sample before finding two items.
    ``drawn``: how many samples the blend takes from each dataset (int64, one per dataset),
    or None when not counted (see :func:`drawn_counts`).
    """

    __slots__ = ("dataset_index", "dataset_sample_index", "drawn")

    def __init__(self, dataset_index: np.ndarray, dataset_sample_index: np.ndarray, drawn: np.ndarray | None = None):
        self.dataset_index = dataset_index
        self.dataset_sample_index = dataset_sample_index
        self.drawn = drawn

    def __len__(self) -> int:
        return len(self.dataset_index)


def drawn_counts(blending: BlendingIndices, num_datasets: int) -> np.ndarray:
    """Samples ``blending`` draws from each of ``num_datasets`` datasets: the counts recorded
    with a cached blend, else one pass over ``dataset_index`` (at 60M samples a mapped one
    costs ~0.7 s, paid at every open of a blend before the counts were recorded)."""
    if blending.drawn is None or len(blending.drawn) != num_datasets:
        blending.drawn = np.bincount(np.asarray(blending.dataset_index, np.intp), minlength=num_datasets)
    return blending.drawn


# --- inputs --------------------------------------------------------------------------------------

def _as_weights(weights) -> np.ndarray:
    try:
        w = np.array(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"blending weights must be numbers, got {weights!r}") from None
    if w.ndim != 1 or len(w) == 0:
        raise ParameterError(f"blending weights must be a non-empty 1-D list, got shape {w.shape}")
    if len(w) > MAX_DATASETS:
        raise ParameterError(f"{len(w)} datasets in one blend; megatron-core's int16 dataset_index allows "
                             f"at most {MAX_DATASETS}")
    bad = ~np.isfinite(w) | (w <= 0)
    if bad.any():
        k = int(np.argmax(bad))
        raise ParameterError(f"blending weight {k} is {w[k]!r}; every weight must be a finite number > 0 "
                             "(megatron-core's BlendedDataset asserts it)")
    return w


def _as_sizes(sizes) -> np.ndarray:
    s = np.asarray(sizes)
    if s.ndim != 1 or len(s) == 0 or not np.issubdtype(s.dtype, np.integer):
        raise ParameterError(f"dataset sizes must be a non-empty 1-D integer list, got {sizes!r}")
    if len(s) > MAX_DATASETS:
        raise ParameterError(f"{len(s)} datasets in one blend; at most {MAX_DATASETS}")
    if (s <= 0).any():
        k = int(np.argmax(s <= 0))
        raise ParameterError(f"dataset {k} has {int(s[k])} samples; every dataset of a blend must hold at "
                             "least one (megatron-core's BlendedDataset asserts it)")
    return s.astype(np.int64)


# --- the rule, many chunks at once ----------------------------------------------------------------

def _guess_counts(weights: np.ndarray, caps: np.ndarray | None, steps: np.ndarray) -> np.ndarray:
    """A plausible state before sample ``steps[j]``: counts near ``weights * steps`` summing to
    ``steps``; exact for step 0. Only speed depends on it: every chunk is verified."""
    x = np.maximum(steps, 1).astype(np.float64)
    product = np.outer(weights, x)  # (n, lanes)
    counts = np.floor(product)
    missing = steps.astype(np.float64) - counts.sum(axis=0)
    # The datasets furthest into their current sample are the ones most likely already drawn.
    rank = np.argsort(np.argsort(-(product - counts), axis=0, kind="stable"), axis=0, kind="stable")
    counts += rank < missing[None, :]
    counts[:, steps == 0] = 0
    if caps is not None:
        np.minimum(counts, caps[:, None], out=counts)
    return counts


def _run_lanes(weights: np.ndarray, caps: np.ndarray | None, first_steps: np.ndarray, counts: np.ndarray,
               num_steps: int, snapshot_step: int | None, write) -> np.ndarray | None:
    """Runs the rule for ``num_steps`` samples in every lane, lane j starting at sample
    ``first_steps[j]`` with ``counts[:, j]`` (float64, updated in place).

    ``write(t0, picks, drawn)`` receives each block of steps ``t0 ..``: ``picks`` (lanes, steps)
    int16 and ``drawn`` (lanes, steps) int64, lane-major so that they go out as row copies.
    Returns a copy of the counts before step ``snapshot_step`` (the state a chunk reached at
    its first own sample), if asked.
    """
    n, lanes = counts.shape
    if n >= _PRUNE_FROM:
        return _run_lanes_pruned(weights, caps, first_steps, counts, num_steps, snapshot_step, write)
    flat_counts = counts.reshape(-1)  # a view: row i holds dataset i's counts, lane-contiguous
    lane_ids = np.arange(lanes, dtype=np.int64)
    step = first_steps.astype(np.float64)  # exact: samples stay far below 2**53
    column = weights[:, None]
    rank_dtype = np.uint8 if n < 255 else np.uint16
    # Dataset i scores n - i where its error is the largest: the highest score is the lowest index.
    score_of = (n - np.arange(n)).astype(rank_dtype)[:, None]
    # x = max(sample, 1.0) differs from the sample only at sample 0, which only a lane starting
    # there meets, on its first step: afterwards x is the step counter itself.
    x = np.maximum(step, 1.0) if (first_steps == 0).any() else step
    errors = np.empty((n, lanes))
    largest = np.empty(lanes)
    is_largest = np.empty((n, lanes), dtype=bool)
    scores = np.empty((n, lanes), dtype=rank_dtype)
    top = np.empty(lanes, dtype=rank_dtype)
    spent = np.empty((n, lanes), dtype=bool) if caps is not None else None
    pick = np.empty(lanes, dtype=np.int16)
    flat = np.empty(lanes, dtype=np.int64)
    taken = np.empty(lanes)
    block = max(1, min(num_steps, _BLOCK_STEPS))
    picks = np.empty((lanes, block), dtype=np.int16)
    drawn = np.empty((lanes, block), dtype=np.int64)
    snapshot = None
    for t0 in range(0, num_steps, block):
        steps_here = min(block, num_steps - t0)
        for b in range(steps_here):
            if snapshot_step == t0 + b:
                snapshot = counts.copy()
            # fl(fl(w * x) - count) for every dataset: the C++ expression, operation for operation.
            np.multiply(column, x, out=errors)
            np.subtract(errors, counts, out=errors)
            if caps is not None:  # a used-up dataset is out of the exhaustive draw
                np.greater_equal(counts, caps[:, None], out=spent)
                np.copyto(errors, -np.inf, where=spent)
            # The C++ keeps the first of equal largest errors (it replaces only on a strictly
            # greater one): the lowest index among those equal to the maximum.
            np.maximum.reduce(errors, axis=0, out=largest)
            np.equal(errors, largest, out=is_largest)
            np.multiply(is_largest.view(np.uint8), score_of, out=scores)
            np.maximum.reduce(scores, axis=0, out=top)
            np.subtract(n, top, out=pick, dtype=np.int16, casting="unsafe")
            picks[:, b] = pick
            # In int64: an int16 product would overflow past 32767 (numpy 2 keeps int16 for int16 * int).
            np.multiply(pick, lanes, out=flat, dtype=np.int64)
            flat += lane_ids
            np.take(flat_counts, flat, out=taken)
            drawn[:, b] = taken
            taken += 1.0
            flat_counts[flat] = taken  # measured 2.5x faster than np.put
            step += 1.0
            if x is not step:
                x = step
        write(t0, picks[:, :steps_here], drawn[:, :steps_here])
    if snapshot_step == num_steps:
        snapshot = counts.copy()
    return snapshot


def _run_lanes_pruned(weights: np.ndarray, caps: np.ndarray | None, first_steps: np.ndarray, counts: np.ndarray,
                      num_steps: int, snapshot_step: int | None, write) -> np.ndarray | None:
    """:func:`_run_lanes` for many datasets: each block of steps runs, in each lane, over the
    few datasets that can be picked in it, not over all ``n``.

    Which datasets can be picked in a block, exactly: no dataset's error falls during the block
    except by being picked, and fewer than ``steps`` datasets are picked before its last step;
    so at every step one of the ``steps`` largest errors of the block's start is still standing,
    and the largest error is at least the ``steps``-th largest of the start (the lane's
    ``floor``). No dataset's error exceeds the one it would have at the block's last sample with
    its count of the start (its ``ceiling``: ``fl(w * x)`` grows with ``x``, the count only
    grows). A dataset whose ceiling is below the floor can be neither the largest nor tie it,
    so the rule over the others, kept in index order (ties to the lowest index), picks what it
    picks over all ``n``. Where the weights are balanced a few dozen datasets a lane remain
    (lanes x candidates numbers a step instead of lanes x n); lanes where more remain (the
    first samples, ties of equal weights) run as a group of their own with what they keep.
    """
    n, lanes = counts.shape
    by_lane = np.ascontiguousarray(counts.T)  # (lanes, n): a lane's counts side by side
    step = first_steps.astype(np.float64)
    block = max(1, min(num_steps, _PRUNED_BLOCK_STEPS, n - 1))
    picks = np.empty((lanes, block), dtype=np.int16)
    drawn = np.empty((lanes, block), dtype=np.int64)
    weights_row = weights[None, :]
    caps_row = None if caps is None else caps[None, :]
    snapshot = None
    t0 = 0
    while t0 < num_steps:
        if snapshot_step == t0:
            snapshot = by_lane.T.copy()
        steps_here = min(block, num_steps - t0)
        if snapshot_step is not None and t0 < snapshot_step < t0 + steps_here:
            steps_here = snapshot_step - t0
        # Errors at the block's first sample, ceilings at its last: the C++ expression, fl(fl(w * x) - count).
        errors = np.maximum(step, 1.0)[:, None] * weights_row
        errors -= by_lane
        ceilings = np.maximum(step + (steps_here - 1), 1.0)[:, None] * weights_row
        ceilings -= by_lane
        if caps_row is not None:  # a used-up dataset is out of the exhaustive draw
            spent = by_lane >= caps_row
            errors[spent] = -np.inf
            ceilings[spent] = -np.inf
        floor = np.partition(errors, n - steps_here, axis=1)[:, n - steps_here]
        keep = ceilings >= floor[:, None]  # a floor of -inf keeps every dataset
        kept = keep.sum(axis=1)
        few = kept <= _CANDIDATES
        for group in (np.flatnonzero(few), np.flatnonzero(~few)):
            if len(group):
                _run_candidates(weights, caps, by_lane, step, group, keep[group], kept[group], steps_here,
                                picks, drawn)
        step += steps_here
        write(t0, picks[:, :steps_here], drawn[:, :steps_here])
        t0 += steps_here
    if snapshot_step == num_steps:
        snapshot = by_lane.T.copy()
    counts[...] = by_lane.T
    return snapshot


def _run_candidates(weights, caps, by_lane, step, group, keep, kept, num_steps, picks, drawn) -> None:
    """The rule for ``num_steps`` samples in the lanes ``group``, each over the datasets its row
    of ``keep`` holds (in index order); counts updated in ``by_lane``, picks and draws written
    into the lanes' rows of ``picks`` and ``drawn``."""
    width = int(kept.max())
    rows, datasets = np.nonzero(keep)  # row by row, each row's datasets in index order
    slots = np.arange(len(datasets)) - np.repeat(np.cumsum(kept) - kept, kept)
    # Slots past a lane's own candidates: weight 0 and an infinite count, an error of -inf,
    # never the largest (a lane always keeps a dataset with a finite error).
    chosen = np.zeros((len(group), width), dtype=np.int64)
    chosen_weights = np.zeros((len(group), width))
    chosen_counts = np.full((len(group), width), np.inf)
    chosen[rows, slots] = datasets
    chosen_weights[rows, slots] = weights[datasets]
    lanes_of = group[rows]
    chosen_counts[rows, slots] = by_lane[lanes_of, datasets]
    chosen_caps = None
    if caps is not None:
        chosen_caps = np.full((len(group), width), np.inf)
        chosen_caps[rows, slots] = caps[datasets]
    ids = np.arange(len(group))
    x = step[group]
    errors = np.empty((len(group), width))
    for b in range(num_steps):
        np.multiply(np.maximum(x, 1.0)[:, None], chosen_weights, out=errors)
        np.subtract(errors, chosen_counts, out=errors)
        if chosen_caps is not None:
            errors[chosen_counts >= chosen_caps] = -np.inf
        at = errors.argmax(axis=1)  # the first of equal largest errors: the lowest dataset index
        picks[group, b] = chosen[ids, at]
        taken = chosen_counts[ids, at]
        drawn[group, b] = taken
        chosen_counts[ids, at] = taken + 1.0
        x += 1.0
    by_lane[lanes_of, datasets] = chosen_counts[rows, slots]


def _greedy(weights: np.ndarray, size: int, caps: np.ndarray | None) -> BlendingIndices:
    n = len(weights)
    dataset_index = np.empty(size, dtype=np.int16)
    dataset_sample_index = np.empty(size, dtype=np.int64)
    # Touch the pages in order first: the lanes write all over the arrays, and first touches
    # scattered like that cost several times a sequential fill (measured: 0.8 s vs 0.1 s per GB).
    dataset_index.fill(0)
    dataset_sample_index.fill(0)
    if size == 0:
        return BlendingIndices(dataset_index, dataset_sample_index)
    if n == 1:  # one dataset: every draw is its next sample
        dataset_sample_index[:] = np.arange(size, dtype=np.int64)
        return BlendingIndices(dataset_index, dataset_sample_index)
    caps_f = None if caps is None else caps.astype(np.float64)

    # Chunk j records samples [W + j*m, W + (j+1)*m) (chunk 0 also [0, W)) after starting at
    # sample j*m, so every lane runs W + m steps and lane j's step t is sample j*m + t.
    warmup = _WARMUP
    max_lanes = _MAX_LANES if n < _PRUNE_FROM else max(256, min(_MAX_LANES, _PRUNED_LANE_CELLS // n))
    chunk = max(_MIN_CHUNK, -(-(size - warmup) // max_lanes))
    lanes = max(1, -(-(size - warmup) // chunk))
    if lanes == 1:
        warmup, chunk = 0, size
    starts = np.arange(lanes, dtype=np.int64) * chunk
    counts = _guess_counts(weights, caps_f, starts)
    row_len = warmup + chunk
    # Rows 0 .. lanes-2 lie inside the outputs; the last row may run past the end.
    full_rows = lanes - 1

    def views(array):
        return np.lib.stride_tricks.as_strided(array, shape=(full_rows, row_len),
                                               strides=(chunk * array.itemsize, array.itemsize))

    index_rows, sample_rows = views(dataset_index), views(dataset_sample_index)
    last_begin = (lanes - 1) * chunk

    def write_first_round(t0, picks, drawn):
        t1 = t0 + picks.shape[1]
        lo = max(t0, warmup)  # lanes after the first record only from their first own sample
        if full_rows:
            index_rows[0, t0:t1] = picks[0]
            sample_rows[0, t0:t1] = drawn[0]
            if lo < t1 and full_rows > 1:
                index_rows[1:, lo:t1] = picks[1:full_rows, lo - t0:]
                sample_rows[1:, lo:t1] = drawn[1:full_rows, lo - t0:]
        last_lo = t0 if lanes == 1 else lo
        stop = min(t1, size - last_begin)
        if last_lo < stop:
            dataset_index[last_begin + last_lo:last_begin + stop] = picks[-1, last_lo - t0:stop - t0]
            dataset_sample_index[last_begin + last_lo:last_begin + stop] = drawn[-1, last_lo - t0:stop - t0]

    begin_state = _run_lanes(weights, caps_f, starts, counts, row_len, warmup, write_first_round)
    end_state = counts  # state before each lane's sample j*m + W + m, the next chunk's first own
    if lanes == 1:
        return BlendingIndices(dataset_index, dataset_sample_index)

    # Exact verification: chunk j holds the truth iff it began where chunk j-1 ended.
    first_own = warmup + starts  # sample where each chunk's own range begins
    own_end = np.minimum(first_own + chunk, size)
    own_end[0] = warmup + chunk if lanes > 1 else size
    while True:
        agree = np.ones(lanes, dtype=bool)
        agree[1:] = (begin_state[:, 1:] == end_state[:, :-1]).all(axis=0)
        redo = np.flatnonzero(~agree)
        if len(redo) == 0:
            return BlendingIndices(dataset_index, dataset_sample_index)
        redo_counts = end_state[:, redo - 1].copy()
        redo_first = first_own[redo]
        redo_len = own_end[redo] - redo_first

        def write_redo(t0, picks, drawn, redo_first=redo_first, redo_len=redo_len):
            # Any number of chunks, anywhere: one scattered write per block (the last chunk may end early).
            offsets = t0 + np.arange(picks.shape[1], dtype=np.int64)
            inside = offsets[None, :] < redo_len[:, None]
            positions = (redo_first[:, None] + offsets[None, :])[inside]
            dataset_index[positions] = picks[inside]
            dataset_sample_index[positions] = drawn[inside]

        begin_state[:, redo] = redo_counts
        _run_lanes(weights, caps_f, redo_first, redo_counts, chunk, None, write_redo)
        end_state[:, redo] = redo_counts


# --- public functions -----------------------------------------------------------------------------

def build_blending_indices(weights, size: int) -> BlendingIndices:
    """``helpers.build_blending_indices(dataset_index, dataset_sample_index, weights, len(weights),
    size, False)``: ``size`` draws by the largest-error rule.

    ``weights`` are used as given (float64), as the C++ does: pass what BlendedDataset passes,
    i.e. ``normalize(weights)`` of the weights it was given (see ``plan.py``).
    """
    return _greedy(_as_weights(weights), check_int("size", size, 0), None)


def build_exhaustive_blending_indices(sizes) -> BlendingIndices:
    """``helpers.build_exhaustive_blending_indices``: exactly ``sizes[i]`` draws of dataset i,
    ``sum(sizes)`` in all, in the order of the largest-error rule with ``weights = sizes / total``
    over the datasets not yet used up."""
    sizes = _as_sizes(sizes)
    total = int(sizes.sum())
    # The C++ divides each int64 size, converted to double, by the double of the total.
    weights = sizes.astype(np.float64) / np.float64(float(total))
    return _greedy(weights, total, sizes)


# --- the cache ------------------------------------------------------------------------------------

def _cache_key(kind: str, values: np.ndarray, size: int) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps({"cache_format": _CACHE_FORMAT, "kind": kind, "size": size,
                              "dtype": values.dtype.str, "count": len(values)}, sort_keys=True).encode())
    digest.update(np.ascontiguousarray(values).data)
    return digest.hexdigest()[:32]


def _recorded_drawn(meta: dict, num_datasets: int, size: int) -> np.ndarray | None:
    """The per-dataset counts a cache's meta file recorded (its digest covers them), or None
    (a cache written before they were recorded: counted when asked)."""
    drawn = meta.get("drawn")
    if (not isinstance(drawn, list) or len(drawn) != num_datasets
            or not all(type(count) is int and count >= 0 for count in drawn) or sum(drawn) != size):
        return None
    return np.array(drawn, np.int64)


def load_or_build_blending_indices(*, cache_dir: str | os.PathLike | None, weights=None, size: int | None = None,
                                   sizes=None, label: str = "blend") -> BlendingIndices:
    """:func:`build_blending_indices` (``weights`` and ``size``) or
    :func:`build_exhaustive_blending_indices` (``sizes``), cached in ``cache_dir`` (None: no cache).

    The key hashes the exact float64 weights (or int64 sizes) and the size, so equal inputs share a
    cache whatever the files were called. Arrays are written with ``allow_pickle=False`` under
    temporary names and renamed, a small meta file last; a hit returns read-only memory maps. A
    cache that cannot be written is skipped with a warning. A build that takes more than a
    couple of seconds shows a progress bar named ``label`` (progress.Steps).
    """
    if (sizes is None) == (weights is None):
        raise ParameterError("give weights and size (a weighted blend) or sizes (an exhaustive blend), not both")
    if sizes is not None:
        values, kind = _as_sizes(sizes), "exhaustive"
        size = int(values.sum())
        build_now = lambda: build_exhaustive_blending_indices(values)  # noqa: E731
    else:
        values, kind = _as_weights(weights), "weighted"
        size = check_int("size", size, 0)
        build_now = lambda: build_blending_indices(values, size)  # noqa: E731

    def build():
        with Steps(label, ("blend",)) as steps:
            steps.step("blend")
            return build_now()
    if cache_dir is None:
        return build()
    cache_dir = os.fspath(cache_dir)
    key = _cache_key(kind, values, size)
    paths = {name: os.path.join(cache_dir, f"{key}-{name}.npy") for name in ("dataset_index", "dataset_sample_index")}
    meta_path = os.path.join(cache_dir, f"{key}-blending.json")
    loaded = array_cache.load_arrays(meta_path, paths)  # digests checked; damaged: warned, None
    if loaded is not None:
        meta, arrays = loaded
        index, sample = arrays["dataset_index"], arrays["dataset_sample_index"]
        if (meta.get("size") == size and index.shape == (size,) and sample.shape == (size,)
                and index.dtype == np.int16 and sample.dtype == np.int64):
            return BlendingIndices(index, sample, _recorded_drawn(meta, len(values), size))
    result = build()
    drawn = drawn_counts(result, len(values))
    try:
        array_cache.save_arrays(meta_path, paths, {name: getattr(result, name) for name in paths},
                                {"kind": kind, "size": size, "drawn": drawn.tolist()})
    except OSError as error:
        warn_once(f"blending indices not cached in {cache_dir}: {error}", stacklevel=2)
    return result
