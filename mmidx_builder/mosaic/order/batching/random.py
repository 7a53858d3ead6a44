"""``random`` batching (StreamingDataset's default): the streams' samples mixed in one epoch,
so a batch takes from any stream.

Follows mosaicml-streaming 0.13.0's ``generate_work_random_batching``
(streaming/base/batching/random.py): all streams resampled at once, the epoch dealt to the
world (``sample_in_epoch`` already seen), the dealt ids shuffled with the whole block size.

:func:`random_batching` builds the whole epoch as theirs; :class:`RandomEpoch` gives one
worker's ids in the same steps and order (resample, deal, shuffle), dealing only that worker's
share (worker_partition.py) and mapping it through the epoch's shuffled sample ids, which it
keeps for the next worker.
"""

from __future__ import annotations

import numpy as np

from ..epoch import Epoch
from ..sampling import CHUNK
from ..shuffle import shuffle
from ..worker_partition import worker_partition


def random_batching(epoch: Epoch) -> np.ndarray:
    plan = epoch.plan
    units, sample_of_big = epoch.resample(range(epoch.layout.num_streams))
    dealt = epoch.partition(epoch.weights.epoch_size, plan.world.num_nodes, epoch.batch_size, plan.sample_in_epoch)
    return epoch.sample_ids(dealt, units, sample_of_big, plan.shuffle_block_size)


class RandomEpoch:
    """One epoch of random batching, a worker at a time. Keeps one int64 array of the epoch's
    size: the sample id at each place of the shuffled epoch; ``shuffled_ids``, when given, is
    that array built by another process (work.py's per-node cache), and no resampling runs."""

    def __init__(self, epoch: Epoch, shuffled_ids: np.ndarray | None = None):
        self.epoch = epoch
        if shuffled_ids is None:
            self.units, self.sample_of_place = epoch.resample(range(epoch.layout.num_streams))
            self.shuffled = not epoch.settings.shuffle
        else:
            self.units, self.sample_of_place, self.shuffled = None, shuffled_ids, True

    def worker_places(self, node: int, rank: int, worker: int) -> np.ndarray:
        """The places of the shuffled epoch the worker reads, in order (its deal, -1 dropped)."""
        epoch, plan = self.epoch, self.epoch.plan
        world = plan.world
        big = worker_partition(epoch.settings.partition_algo, epoch.weights.epoch_size, plan.num_canonical_nodes,
                               world.num_nodes, world.ranks_per_node, world.workers_per_rank, epoch.batch_size,
                               plan.sample_in_epoch, plan.initial_physical_nodes, node, rank, worker)
        big = big.reshape(-1)
        return big[big != -1]

    def shuffled_ids(self) -> np.ndarray:
        """The sample id at each place of the shuffled epoch (the whole epoch, int64)."""
        if not self.shuffled:
            epoch, plan = self.epoch, self.epoch.plan
            order = shuffle(epoch.settings.shuffle_algo, self.units, plan.num_canonical_nodes, plan.shuffle_seed,
                            plan.epoch, plan.shuffle_block_size)
            for begin in range(0, len(order), CHUNK):  # composed in place: no third epoch-sized array
                order[begin:begin + CHUNK] = self.sample_of_place[order[begin:begin + CHUNK]]
            self.sample_of_place, self.units, self.shuffled = order, None, True
        return self.sample_of_place

    def worker_sample_ids(self, node: int, rank: int, worker: int) -> np.ndarray:
        places = self.worker_places(node, rank, worker)  # before the shuffle, as theirs: a refused deal comes first
        return self.shuffled_ids()[places]
