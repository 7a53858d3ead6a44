"""One epoch's inputs for one world, and the three steps every batching method takes per
stream (or for all streams at once): resample the shards, deal the samples (partition), and
shuffle the dealt "big" ids before mapping them to sample ids.

The three steps follow mosaicml-streaming 0.13.0's ``StreamingDataset.resample_streams``
(sampling.py here), ``get_partitions`` (partition.py) and ``get_shuffle`` (shuffle/), as its
batching methods call them (streaming/base/batching/*.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .partition import partition
from .resume import ResumePlan
from .sampling import CHUNK, ShardLayout, resample
from .settings import OrderSettings, refuse
from .shuffle import shuffle
from .weights import ResolvedWeights


@dataclasses.dataclass(frozen=True)
class Epoch:
    """What decides one epoch's order for one world."""

    layout: ShardLayout
    weights: ResolvedWeights
    settings: OrderSettings
    plan: ResumePlan

    def __post_init__(self):
        if not self.weights.epoch_size:
            # StreamingDataset fails on such an epoch wherever its batching first meets it (no sample
            # ids to concatenate, or a NaN proportion).
            raise refuse("weights", "an epoch of at least one sample", "none chosen (choose, repeat or proportion 0)")

    @property
    def batch_size(self) -> int:
        batch_size = self.settings.batch_size
        if batch_size is None or batch_size < 1:
            # StreamingDataset: "Please pass `batch_size` to StreamingDataset" (0 divides by zero).
            raise refuse("batch_size", "a positive integer, the samples per batch of each rank, as the DataLoader's "
                         "(StreamingDataset needs it to build an epoch)", batch_size)
        return batch_size

    def resample(self, stream_ids) -> tuple[np.ndarray, np.ndarray]:
        """The shuffle units and the sample id of each "big" id of these streams' epoch."""
        settings = self.settings
        return resample(self.layout, self.weights.choose, list(stream_ids), granularity=settings.sampling_granularity,
                        seed=self.plan.shuffle_seed, epoch=self.plan.epoch,
                        balanced=settings.sampling_method == "balanced", epoch_seed_change=settings.epoch_seed_change)

    def partition(self, num_samples: int, num_physical_nodes: int, batch_size: int, drop_first: int) -> np.ndarray:
        plan = self.plan
        return partition(self.settings.partition_algo, num_samples, plan.num_canonical_nodes, num_physical_nodes,
                         plan.world.ranks_per_node, plan.world.workers_per_rank, batch_size, drop_first,
                         plan.initial_physical_nodes)

    def sample_ids(self, big_ids: np.ndarray, units: np.ndarray, sample_of_big: np.ndarray,
                   block_size: int) -> np.ndarray:
        """Dealt big ids (-1 kept) as sample ids, through the shuffle when there is one."""
        order = None
        if self.settings.shuffle:
            order = shuffle(self.settings.shuffle_algo, units, self.plan.num_canonical_nodes, self.plan.shuffle_seed,
                            self.plan.epoch, block_size)
        # Both walked in memory order, the output laid out as the deal (often a transposed view,
        # which reshape(-1) would copy whole): ravel("K") of either is then a view, not a copy.
        ids = np.empty_like(big_ids, dtype=np.int64)
        dealt, out = big_ids.ravel(order="K"), ids.ravel(order="K")
        # A chunk at a time: the epoch's temporaries (padding mask, shuffled big ids) stay a
        # chunk's size, and a padding -1 indexes the last element harmlessly before it is masked.
        for begin in range(0, dealt.size, CHUNK):
            chunk = dealt[begin:begin + CHUNK]
            looked_up = sample_of_big[order[chunk] if order is not None else chunk]
            looked_up[chunk == -1] = -1
            out[begin:begin + CHUNK] = looked_up
        return ids

    def stream_block_size(self, stream_id: int) -> int:
        """A stream's share of the shuffle block when streams are dealt one by one."""
        return int(self.plan.shuffle_block_size * self.weights.proportion[stream_id])
