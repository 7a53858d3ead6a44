"""``py1s``: units shuffled once per run and cut into canonical nodes; each epoch, each node's
pieces shuffled, then the samples within each piece.

Follows mosaicml-streaming 0.13.0's ``get_shuffle_py1s`` (streaming/base/shuffle/py1s.py):
``default_rng(seed)`` orders the units, ``default_rng(seed + epoch)`` shuffles each part's
pieces (part by part), then each piece's samples (piece by piece, in the new order).
"""

from __future__ import annotations

import numpy as np

from .spans import divide, shuffled, unit_starts


def shuffle_py1s(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
                 block_size: int) -> np.ndarray:
    unit_sizes = np.asarray(unit_sizes, np.int64)
    run_order = shuffled(np.random.default_rng(seed), len(unit_sizes))
    pieces = divide(unit_starts(unit_sizes)[run_order], unit_sizes[run_order], num_canonical_nodes)
    epoch_rng = np.random.default_rng(seed + epoch)
    order = np.arange(len(pieces.start))
    for part in range(num_canonical_nodes):
        within = order[pieces.part(part)]
        order[pieces.part(part)] = within[shuffled(epoch_rng, len(within))]
    starts, sizes = pieces.start[order], pieces.size[order]
    ids = np.repeat(starts - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))
    offset = 0
    for size in sizes.tolist():
        epoch_rng.shuffle(ids[offset:offset + size])
        offset += size
    return ids
