"""Each stream's epoch drawn from its shards: how many samples each shard gives, the units the
shuffles move (a shard's full repeats, then the rest), and the sample id behind each of the
epoch's "big" ids.

Follows mosaicml-streaming 0.13.0: :func:`choose_per_shard` is ``get_sampling``
(streaming/base/sampling.py) and :func:`resample` is ``StreamingDataset.resample_streams``
(dataset.py), vectorised where theirs loops over shards; only the random draws stay in a
loop, in their order.

Seeds, as there: the shards' share of a fractional repeat is drawn with
``default_rng(seed + epoch)`` only when shuffling with balanced sampling (else
``default_rng(seed)``), while the samples of a shard's partial repeat are drawn with
``default_rng(seed + epoch)`` for balanced sampling, shuffled or not (``default_rng(seed)``
for fixed). The seed is the run's (a resumed state's).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .settings import refuse

CHUNK = 1 << 22  # elements of an epoch-sized array worked on at once, to bound temporary memory


def choose_per_shard(samples_per_shard: np.ndarray, choose: int, granularity: int, seed: int) -> np.ndarray:
    """How many samples each shard of one stream gives when ``choose`` are taken from it: every
    shard its share of the whole repeats, then the rest in picks of ``granularity`` samples
    (a shard's last pick may be smaller), taken in an order drawn by ``default_rng(seed)``
    until the rest is reached; the pick that reaches it is cut short."""
    samples_per_shard = np.asarray(samples_per_shard, np.int64)
    total = samples_per_shard.sum()
    if not choose % total:
        return samples_per_shard * choose // total
    picks_per_shard = (samples_per_shard + granularity - 1) // granularity
    last_pick = np.cumsum(picks_per_shard) - 1  # each shard's last pick, the one that may be smaller
    last_pick_size = samples_per_shard - (picks_per_shard - 1) * granularity
    order = np.random.default_rng(seed).permutation(int(picks_per_shard.sum()))
    chosen = samples_per_shard * (choose // total)
    rest = int(choose % total)
    # The picks in their drawn order, a chunk at a time: the rest is often reached long before
    # the last pick, and a chunk keeps the working arrays small.
    for begin in range(0, len(order), CHUNK):
        picks = order[begin:begin + CHUNK]
        shard = np.searchsorted(last_pick, picks)
        size = np.where(picks == last_pick[shard], last_pick_size[shard], granularity)
        taken = np.clip(rest - (np.cumsum(size) - size), 0, size)  # the pick reaching the rest is cut short
        chosen += np.bincount(shard, weights=taken, minlength=len(chosen)).astype(np.int64)
        rest -= int(taken.sum())
        if not rest:
            break
    return chosen


@dataclasses.dataclass(frozen=True)
class ShardLayout:
    """The shards of every stream, in StreamingDataset's order (stream by stream, each stream's
    shards in index order), with each shard's first sample id across all streams."""

    samples_per_shard: np.ndarray   # int64, every shard
    first_shard_of_stream: np.ndarray  # int64, per stream, and the total at the end

    @classmethod
    def of(cls, samples_per_shard_per_stream) -> "ShardLayout":
        sizes = [np.asarray(s, np.int64).reshape(-1) for s in samples_per_shard_per_stream]
        bounds = np.cumsum([0] + [len(s) for s in sizes])
        return cls(np.concatenate(sizes) if sizes else np.zeros(0, np.int64), bounds.astype(np.int64))

    @property
    def num_streams(self) -> int:
        return len(self.first_shard_of_stream) - 1

    @property
    def first_sample_of_shard(self) -> np.ndarray:
        return np.cumsum(self.samples_per_shard) - self.samples_per_shard

    def shards_of(self, stream_id: int) -> slice:
        return slice(int(self.first_shard_of_stream[stream_id]), int(self.first_shard_of_stream[stream_id + 1]))

    def samples_per_stream(self) -> np.ndarray:
        return np.array([self.samples_per_shard[self.shards_of(s)].sum() for s in range(self.num_streams)], np.int64)


def resample(layout: ShardLayout, choose_per_stream: np.ndarray, stream_ids, *, granularity: int,
             seed: int, epoch: int, balanced: bool, epoch_seed_change: bool) -> tuple[np.ndarray, np.ndarray]:
    """The epoch of the given streams (all, or one for the per-stream batchings): its shuffle
    units (each shard's full repeats, then its partial one) and the sample id of each of its
    samples, shard after shard. A partial repeat takes a shard's samples drawn without
    replacement, in id order."""
    rng = np.random.default_rng(seed + epoch if balanced else seed)
    sampling_seed = seed + epoch if epoch_seed_change else seed
    sizes, chosen = [], []
    for stream_id in stream_ids:
        shards = layout.shards_of(stream_id)
        sizes.append(layout.samples_per_shard[shards])
        chosen.append(choose_per_shard(sizes[-1], choose_per_stream[stream_id], granularity, sampling_seed))
    first = np.concatenate([layout.first_sample_of_shard[layout.shards_of(s)] for s in stream_ids])
    sizes, chosen = np.concatenate(sizes), np.concatenate(chosen).astype(np.int64)
    if not chosen.sum():
        # StreamingDataset fails here (numpy cannot concatenate no sample ids).
        raise refuse("weights", f"at least one sample chosen from stream(s) {list(stream_ids)} in epoch {epoch}",
                     "none (choose, repeat or proportion 0)")
    full, rest = chosen // sizes, chosen % sizes

    units_per_shard = full + (rest > 0)
    units = np.repeat(sizes, units_per_shard)
    partial_units = (np.cumsum(units_per_shard) - 1)[rest > 0]
    units[partial_units] = rest[rest > 0]

    # Every unit first as its shard's samples in id order (right for the full repeats), built in
    # place to keep to one array of the epoch's size beyond a temporary one.
    unit_starts = np.cumsum(units) - units
    sample_ids = np.repeat(np.repeat(first, units_per_shard) - unit_starts, units)
    for begin in range(0, len(sample_ids), CHUNK):
        sample_ids[begin:begin + CHUNK] += np.arange(begin, min(begin + CHUNK, len(sample_ids)), dtype=np.int64)
    for unit, size, count, offset in zip(partial_units.tolist(), sizes[rest > 0].tolist(), rest[rest > 0].tolist(),
                                         first[rest > 0].tolist()):
        start = int(unit_starts[unit])
        sample_ids[start:start + count] = np.sort(rng.choice(size, count, False)) + offset
    return units, sample_ids
