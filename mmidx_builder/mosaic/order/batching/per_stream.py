"""``per_stream`` batching: every global batch from one stream, the streams' batches
interleaved in a seeded order.

Follows mosaicml-streaming 0.13.0's ``generate_work_per_stream_batching``
(streaming/base/batching/per_stream.py): each stream resampled and dealt to the world on its
own (its shuffle with its share of the block size), read in traversal order as global batches;
its batches with padding are dropped (a stream with no full batch is refused); the streams'
batches interleaved by ``default_rng(seed + epoch)`` (``seed`` alone unless shuffling with
balanced sampling) shuffling their stream labels.
"""

from __future__ import annotations

import numpy as np

from ..epoch import Epoch
from ..settings import refuse
from .global_batches import deal_global_batches, full_rows, in_traversal_order, interleave_streams


def per_stream_batching(epoch: Epoch) -> np.ndarray:
    plan, batch_size = epoch.plan, epoch.batch_size
    world = plan.world
    global_batch = batch_size * world.ranks_per_node * world.num_nodes
    streams = []
    for stream_id in range(epoch.layout.num_streams):
        units, sample_of_big = epoch.resample([stream_id])
        dealt = epoch.partition(len(sample_of_big), world.num_nodes, batch_size, 0)
        streams.append(epoch.sample_ids(dealt, units, sample_of_big, epoch.stream_block_size(stream_id)))
    kept, counts = [], []
    for stream_id, dealt in enumerate(streams):  # every stream is dealt before any is refused, as theirs
        rows = in_traversal_order(dealt).reshape(-1, global_batch)
        full = full_rows(rows)
        if not full:
            raise refuse(f"stream {stream_id}", f"enough samples for one full global batch of {global_batch} "
                         "with per_stream batching", f"{int((rows >= 0).sum())} samples dealt")
        kept.append(rows[:full])
        counts.append(full)
    seed = plan.shuffle_seed + plan.epoch if epoch.settings.epoch_seed_change else plan.shuffle_seed
    batches = np.concatenate(kept)[interleave_streams(np.random.default_rng(seed), counts)]
    return deal_global_batches(batches, world, batch_size, plan.sample_in_epoch)
