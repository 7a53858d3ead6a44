"""``stratified`` batching: every global batch takes the same number of samples from each
stream, in proportion to the streams' weights.

Follows mosaicml-streaming 0.13.0's ``generate_work_stratified_batching``
(streaming/base/batching/stratified.py): each stream is resampled and dealt on its own as if
to one node with batches of one (its shuffle with its share of the block size), read in
traversal order and cut into its portions of a global batch; a stream's portion is
``int(proportion x global batch)``, the samples rounding lost going one each to the streams
that lost most (``argsort``'s order, reversed). The epoch has as many global batches as the
stream with fewest full portions gives.
"""

from __future__ import annotations

import numpy as np

from ..epoch import Epoch
from ..settings import refuse
from .global_batches import deal_global_batches, full_rows, in_traversal_order


def stratified_batching(epoch: Epoch) -> np.ndarray:
    world, batch_size = epoch.plan.world, epoch.batch_size
    global_batch = batch_size * world.ranks_per_node * world.num_nodes
    proportion = epoch.weights.proportion
    portions = np.array([int(p * global_batch) for p in proportion], np.int64)
    streams = []
    for stream_id in range(epoch.layout.num_streams):
        units, sample_of_big = epoch.resample([stream_id])
        dealt = epoch.partition(len(sample_of_big), 1, 1, 0)
        streams.append(epoch.sample_ids(dealt, units, sample_of_big, epoch.stream_block_size(stream_id)))
    missing = global_batch - portions.sum()
    if missing:
        lost = global_batch * proportion - portions
        portions[np.flip(np.argsort(lost))[:missing]] += 1
    for stream_id, portion in enumerate(portions):
        if portion <= 0:
            raise refuse("batch_size", f"a global batch ({global_batch} samples) large enough to take at least one "
                         f"sample of stream {stream_id} (proportion {proportion[stream_id]:.6g}) with stratified "
                         "batching", f"a portion of {portion}")
    parts = []
    for portion, dealt in zip(portions.tolist(), streams):
        line = in_traversal_order(dealt)
        line = np.concatenate([line, np.full(-line.size % portion, -1, np.int64)])
        parts.append(line.reshape(-1, portion))
    batches = min(full_rows(rows) for rows in parts)
    return deal_global_batches(np.concatenate([rows[:batches] for rows in parts], axis=1), world, batch_size,
                               epoch.plan.sample_in_epoch)
