"""``py1br``: as py1s, then each canonical node's samples shuffled in blocks of random size
(0.75 to 1.25 x ``block_size``), the blocks' edges staggered per node.

Follows mosaicml-streaming 0.13.0's ``get_shuffle_py1br`` (streaming/base/shuffle/py1br.py):
after py1s's draws of the pieces' order (``default_rng(seed + epoch)``, part by part), that
generator draws every node's stagger, then node by node each block's size as the block is
laid, and after a node's blocks are laid, shuffles them in turn.
"""

from __future__ import annotations

import numpy as np

from ..settings import refuse
from .spans import laid_end_to_end, pieces_in_order


def shuffle_py1br(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
                  block_size: int) -> np.ndarray:
    pieces, order, epoch_rng = pieces_in_order(unit_sizes, num_canonical_nodes, seed, epoch)
    starts, sizes = pieces.start[order], pieces.size[order]
    ids = laid_end_to_end(starts, sizes)

    low, high = int(0.75 * block_size), int(1.25 * block_size)
    if low <= 0:
        # StreamingDataset fails drawing the stagger (numpy: high <= 0).
        raise refuse("shuffle_block_size", "a block of at least 2 samples for py1br (for each stream's share "
                     "of it with per-stream batchings)", block_size)
    stagger = epoch_rng.integers(0, low, (num_canonical_nodes,))
    node_ends = np.cumsum(sizes)[pieces.bounds[1:] - 1] if len(sizes) else np.zeros(num_canonical_nodes, np.int64)
    node_ends = np.where(pieces.bounds[1:] > 0, node_ends, 0)
    node_start = 0
    for node in range(num_canonical_nodes):
        node_stop = int(node_ends[node])
        blocks, laid = [], node_start
        while laid < node_stop:
            block = epoch_rng.integers(low, high)
            begin = max(laid - stagger[node], node_start)
            end = min(laid + block - stagger[node], node_stop)
            blocks.append((begin, end))
            laid += end - begin
        for begin, end in blocks:
            epoch_rng.shuffle(ids[begin:end])
        node_start = node_stop
    return ids
