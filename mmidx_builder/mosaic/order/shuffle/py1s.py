"""``py1s``: units shuffled once per run and cut into canonical nodes; each epoch, each node's
pieces shuffled, then the samples within each piece.

Follows mosaicml-streaming 0.13.0's ``get_shuffle_py1s`` (streaming/base/shuffle/py1s.py):
``default_rng(seed)`` orders the units, ``default_rng(seed + epoch)`` shuffles each part's
pieces (part by part), then each piece's samples (piece by piece, in the new order).
"""

from __future__ import annotations

import numpy as np

from .spans import laid_end_to_end, pieces_in_order


def shuffle_py1s(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
                 block_size: int) -> np.ndarray:
    pieces, order, epoch_rng = pieces_in_order(unit_sizes, num_canonical_nodes, seed, epoch)
    starts, sizes = pieces.start[order], pieces.size[order]
    ids = laid_end_to_end(starts, sizes)
    offset = 0
    for size in sizes.tolist():
        epoch_rng.shuffle(ids[offset:offset + size])
        offset += size
    return ids
