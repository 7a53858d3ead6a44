"""Global batches back to the world: the step the per-stream batchings share once they have
laid the epoch out as global batches (rows of ``num_nodes x ranks_per_node x batch_size``
samples, in traversal order).

Follows the common tail of mosaicml-streaming 0.13.0's ``generate_work_stratified_batching``,
``generate_work_per_stream_batching`` and ``generate_work_device_per_stream_batching``
(streaming/base/batching/): the global batches already seen are dropped (a resumption can only
restart at a global batch: ``sample_in_epoch`` is rounded down to one), the rest padded with
batches of -1 to a multiple of the workers' turn, and dealt back as (nodes, ranks, workers,
batches, batch size).

Traversal order is the order the world consumes a dealt epoch in: batch by batch, each batch
worker by worker (of every rank at once), node by node, rank by rank.
"""

from __future__ import annotations

import numpy as np

from ..settings import OrderWorld


def in_traversal_order(dealt: np.ndarray) -> np.ndarray:
    """A dealt epoch (nodes, ranks, workers, batches, batch size) as one line, in the order
    the world reads it."""
    return dealt.transpose(3, 2, 0, 1, 4).reshape(-1)


def full_rows(rows: np.ndarray) -> int:
    """How many rows hold no padding (-1), wherever they are."""
    return int(np.count_nonzero(rows.min(axis=1) >= 0)) if rows.size else 0


def deal_global_batches(batches: np.ndarray, world: OrderWorld, batch_size: int, sample_in_epoch: int) -> np.ndarray:
    global_batch = batch_size * world.ranks_per_node * world.num_nodes
    batches = batches[sample_in_epoch // global_batch:]
    turn = global_batch * world.workers_per_rank
    if batches.size % turn:
        missing = (turn - batches.size % turn) // global_batch
        batches = np.concatenate([batches, np.full((missing, global_batch), -1, np.int64)])
    return batches.reshape(-1, world.workers_per_rank, world.num_nodes, world.ranks_per_node,
                           batch_size).transpose(2, 3, 1, 0, 4)


def interleave_streams(rng: np.random.Generator, batches_per_stream) -> np.ndarray:
    """Which batch comes where when streams' batches (stream after stream) are interleaved:
    each place's stream drawn by shuffling the streams' labels, each stream's batches kept in
    their order."""
    origins = np.concatenate([np.full(count, stream, np.int64) for stream, count in enumerate(batches_per_stream)])
    rng.shuffle(origins)
    index = np.empty(len(origins), np.int64)
    index[np.argsort(origins, kind="stable")] = np.arange(len(origins))
    return index
