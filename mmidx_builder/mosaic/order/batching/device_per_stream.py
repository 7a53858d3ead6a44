"""``device_per_stream`` batching: every device batch (one rank's batch) from one stream.

Follows mosaicml-streaming 0.13.0's ``generate_work_device_per_stream_batching``
(streaming/base/batching/device_per_stream.py): each stream resampled and dealt on its own to
the canonical nodes as if each were physical (batches of one; its shuffle with its share of
the block size, refused when that share is 0); each physical node takes its canonical nodes'
samples, stream by stream, in traversal order as device batches (those with padding dropped; a
stream with none full refused); one ``default_rng(seed + epoch)`` (``seed`` alone unless
shuffling with balanced sampling) interleaves each node's streams in turn, node by node; the
nodes are padded with batches of -1 to the same count, a multiple of the devices (a whole
extra turn of the devices when it already is one), and read node after node, batch by batch.
"""

from __future__ import annotations

import numpy as np

from ..epoch import Epoch
from ..settings import refuse
from .global_batches import deal_global_batches, full_rows, in_traversal_order, interleave_streams


def device_per_stream_batching(epoch: Epoch) -> np.ndarray:
    plan, batch_size = epoch.plan, epoch.batch_size
    world, canonical = plan.world, plan.num_canonical_nodes
    if canonical % world.num_nodes:
        raise refuse("num_canonical_nodes", f"a multiple of the {world.num_nodes} physical nodes for "
                     "device_per_stream batching", canonical)
    streams = []
    for stream_id in range(epoch.layout.num_streams):
        units, sample_of_big = epoch.resample([stream_id])
        dealt = epoch.partition(len(sample_of_big), canonical, 1, 0)
        block = epoch.stream_block_size(stream_id)
        if epoch.settings.shuffle and block == 0:
            raise refuse("shuffle_block_size", f"a block whose share for stream {stream_id} (proportion "
                         f"{epoch.weights.proportion[stream_id]:.6g}) is at least one sample", plan.shuffle_block_size)
        streams.append(epoch.sample_ids(dealt, units, sample_of_big, block))

    per_node = canonical // world.num_nodes
    nodes, counts = [], []
    for node in range(world.num_nodes):
        kept, node_counts = [], []
        for stream_id, dealt in enumerate(streams):
            line = in_traversal_order(dealt[node * per_node:(node + 1) * per_node])
            line = np.concatenate([line, np.full(batch_size - line.size % batch_size, -1, np.int64)])
            rows = line.reshape(-1, batch_size)
            full = full_rows(rows)
            if not full:
                raise refuse(f"stream {stream_id}", f"enough samples for one full device batch of {batch_size} "
                             f"on node {node} with device_per_stream batching", f"{int((line >= 0).sum())} samples")
            kept.append(rows[:full])
            node_counts.append(full)
        nodes.append(np.concatenate(kept))
        counts.append(node_counts)

    devices = world.num_nodes * world.ranks_per_node
    longest = max(len(batches) for batches in nodes)
    longest += devices - longest % devices
    seed = plan.shuffle_seed + plan.epoch if epoch.settings.epoch_seed_change else plan.shuffle_seed
    rng = np.random.default_rng(seed)
    for node in range(world.num_nodes):
        batches = nodes[node][interleave_streams(rng, counts[node])]
        nodes[node] = np.concatenate([batches, np.full((longest - len(batches), batch_size), -1, np.int64)])
    global_batch = batch_size * devices
    batches = np.stack(nodes, axis=1).reshape(-1, global_batch)
    return deal_global_batches(batches, world, batch_size, plan.sample_in_epoch)
