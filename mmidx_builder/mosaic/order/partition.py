"""The epoch's samples dealt to physical nodes, ranks, workers and batches, so that the order
stays the same when the number of physical nodes changes ("elastic determinism").

Follows mosaicml-streaming 0.13.0: :func:`partition` is ``get_partitions``
(streaming/base/partition/__init__.py), :func:`partition_orig` is ``get_partitions_orig``
(partition/orig.py) and :func:`partition_relaxed` is ``get_partitions_relaxed``
(partition/relaxed.py). Every function returns ids in ``[0, num_samples)`` (the epoch's "big"
ids, before the shuffle), -1 for padding, shaped (physical nodes, ranks per node, workers per
rank, batches per worker, batch size).

How ``orig`` deals, in short: the epoch is cut into ``num_canonical_nodes`` contiguous rows;
the rows are read column by column (sample k of every canonical node, then sample k + 1 ...),
the first ``drop_first`` samples (rounded down to a multiple of the physical nodes) are
dropped, and the rest is dealt round robin to physical nodes, each node's share round robin
to its ranks, and each rank's share in batches round robin to its workers. Rows are padded by
repeating samples (the rows' lengths must divide evenly into physical nodes, and the nodes'
into ranks); the workers' batches by -1.
"""

from __future__ import annotations

import numpy as np

from .settings import refuse

_NOT_DIVISIBLE = ("canonical and physical nodes where one divides the other (else StreamingDataset refuses: "
                  "striping shards over nodes may make every node download every shard)")


def partition_orig(num_samples: int, num_canonical_nodes: int, num_physical_nodes: int, ranks_per_node: int,
                   workers_per_rank: int, batch_size: int, drop_first: int = 0) -> np.ndarray:
    canonical, physical = num_canonical_nodes, num_physical_nodes
    if max(canonical, physical) % min(canonical, physical):
        raise refuse("num_canonical_nodes", _NOT_DIVISIBLE,
                     f"{canonical} canonical nodes and {physical} physical nodes")
    drop_first -= drop_first % physical
    per_canonical = -(-num_samples // canonical)
    ratio = physical // canonical if canonical < physical else 0
    padding = -per_canonical % ratio if ratio else 0  # each row a multiple of its physical nodes
    width = per_canonical + padding
    if num_samples > canonical or (num_samples == canonical and canonical >= physical):
        starts = np.arange(canonical, dtype=np.int64) * num_samples // canonical
        stops = np.arange(1, canonical + 1, dtype=np.int64) * num_samples // canonical
        rows = starts[:, None] + np.arange(width, dtype=np.int64)
        # A row one sample short ends by repeating its next-to-last sample.
        rows[:, per_canonical - 1] -= stops - starts < per_canonical
        if padding:
            # The padding repeats samples from just before the row's last node-sized group.
            source = slice(1 - 2 * padding - ratio, 1 - padding - ratio)
            if len(range(width)[source]) not in (1, padding):
                # StreamingDataset fails here (numpy cannot broadcast the rows' too short source).
                raise refuse("num_canonical_nodes", f"rows of samples per canonical node long enough to pad for "
                             f"{ratio} physical nodes each", f"{per_canonical} samples per row of "
                             f"{canonical} canonical nodes")
            rows[:, -padding:] = rows[:, source]
    else:
        # Fewer samples than canonical nodes: every row is cut from the epoch repeated.
        rows = np.resize(np.arange(num_samples, dtype=np.int64), (canonical, width))
    per_node = rows.T.reshape(-1)[drop_first:].reshape(-1, physical).T
    per_node_count = per_node.shape[1]
    short = per_node_count % ranks_per_node
    if short:
        missing = ranks_per_node - short
        if ranks_per_node + missing - 1 <= per_node_count:
            extra = per_node[:, per_node_count - ranks_per_node - missing + 1:per_node_count - ranks_per_node + 1]
        else:
            extra = np.concatenate([np.tile(per_node, missing // per_node_count),
                                    per_node[:, :missing % per_node_count]], 1)
        per_node = np.concatenate([per_node, extra], 1)
    per_rank = per_node.reshape(physical, -1, ranks_per_node)
    samples_per_rank = per_rank.shape[1]
    step = workers_per_rank * batch_size
    padding = -(-samples_per_rank // step) * step - samples_per_rank
    if padding:
        per_rank = np.concatenate([per_rank, np.full((physical, padding, ranks_per_node), -1, np.int64)], 1)
    per_rank = per_rank.transpose(0, 2, 1).reshape(physical, ranks_per_node, -1, workers_per_rank, batch_size)
    return per_rank.transpose(0, 1, 3, 2, 4)


def partition_relaxed(num_samples: int, num_canonical_nodes: int, num_physical_nodes: int, ranks_per_node: int,
                      workers_per_rank: int, batch_size: int, drop_first: int = 0,
                      initial_physical_nodes: int | None = None) -> np.ndarray:
    """``orig``, except on resumption with physical nodes that do not divide (or are not
    divided by) the canonical ones: then the epoch is dealt as the initial run dealt it (its
    nodes, the same global batch) and its traversal order re-cut for the nodes of now."""
    canonical, physical = num_canonical_nodes, num_physical_nodes
    if initial_physical_nodes is None or not max(canonical, physical) % min(canonical, physical):
        return partition_orig(num_samples, canonical, physical, ranks_per_node, workers_per_rank, batch_size,
                              drop_first)
    global_batch = physical * ranks_per_node * batch_size
    initial_devices = initial_physical_nodes * ranks_per_node
    if global_batch % initial_devices:
        raise refuse("batch_size", f"a global batch ({physical} nodes x {ranks_per_node} ranks x batch_size) "
                     f"divisible by the initial run's {initial_devices} devices (relaxed partitioning keeps "
                     "the global batch size of the initial run)", f"{global_batch} (batch_size {batch_size})")
    initial = partition_orig(num_samples, canonical, initial_physical_nodes, ranks_per_node, workers_per_rank,
                             global_batch // initial_devices, drop_first)
    traversal = initial.transpose(3, 2, 0, 1, 4).reshape(-1)
    if traversal.size % (workers_per_rank * global_batch):
        # numpy fails to reshape here in StreamingDataset.
        raise refuse("num_physical_nodes", f"a resumed epoch of a multiple of {workers_per_rank * global_batch} "
                     "samples (workers x global batch), as the relaxed partition re-cuts the initial run's",
                     f"{traversal.size} samples for {physical} nodes")
    return traversal.reshape(-1, workers_per_rank, physical, ranks_per_node, batch_size).transpose(2, 3, 1, 0, 4)


def partition(algo: str, num_samples: int, num_canonical_nodes: int, num_physical_nodes: int, ranks_per_node: int,
              workers_per_rank: int, batch_size: int, drop_first: int = 0,
              initial_physical_nodes: int | None = None) -> np.ndarray:
    """The epoch of ``num_samples`` dealt to the world by ``algo`` ("orig" or "relaxed"),
    the first ``drop_first`` already seen (a resumption)."""
    devices = ranks_per_node * num_physical_nodes
    if num_samples + devices - num_samples % devices < drop_first:
        raise refuse("sample_in_epoch", f"at most the epoch's {num_samples} samples (padded to a multiple of "
                     f"{devices} devices)", drop_first)
    if algo == "orig":
        return partition_orig(num_samples, num_canonical_nodes, num_physical_nodes, ranks_per_node,
                              workers_per_rank, batch_size, drop_first)
    return partition_relaxed(num_samples, num_canonical_nodes, num_physical_nodes, ranks_per_node,
                             workers_per_rank, batch_size, drop_first, initial_physical_nodes)
