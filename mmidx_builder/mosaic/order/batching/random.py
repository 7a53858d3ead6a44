"""``random`` batching (StreamingDataset's default): the streams' samples mixed in one epoch,
so a batch takes from any stream.

Follows mosaicml-streaming 0.13.0's ``generate_work_random_batching``
(streaming/base/batching/random.py): all streams resampled at once, the epoch dealt to the
world (``sample_in_epoch`` already seen), the dealt ids shuffled with the whole block size.
"""

from __future__ import annotations

import numpy as np

from ..epoch import Epoch


def random_batching(epoch: Epoch) -> np.ndarray:
    plan = epoch.plan
    units, sample_of_big = epoch.resample(range(epoch.layout.num_streams))
    dealt = epoch.partition(epoch.weights.epoch_size, plan.world.num_nodes, epoch.batch_size, plan.sample_in_epoch)
    return epoch.sample_ids(dealt, units, sample_of_big, plan.shuffle_block_size)
