"""``py1e`` (StreamingDataset's default): as py1s up to the pieces' order, then each canonical
node's samples spread: every piece's samples shuffled, and each sample moved by a random shift
of up to half a random block (0.75 to 1.25 x ``block_size``) less its piece, the node's
samples then sorted by their shifted positions.

Follows mosaicml-streaming 0.13.0's ``get_shuffle_py1e`` (streaming/base/shuffle/py1e.py):
after the pieces' order (``default_rng(seed + epoch)``, part by part), node by node, that
generator shuffles each piece's samples (piece by piece), then for each piece draws a block
size and the piece's shifts (``uniform``); the sort is numpy's default ``argsort``, as theirs.
"""

from __future__ import annotations

import numpy as np

from ..settings import refuse
from .spans import laid_end_to_end, pieces_in_order


def shuffle_py1e(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
                 block_size: int) -> np.ndarray:
    pieces, order, epoch_rng = pieces_in_order(unit_sizes, num_canonical_nodes, seed, epoch)
    unit_sizes = np.asarray(unit_sizes, np.int64)
    low, high = int(0.75 * block_size), int(1.25 * block_size)
    ids = np.empty(int(unit_sizes.sum()), np.int64)
    offset = 0
    for part in range(num_canonical_nodes):
        chosen = order[pieces.part(part)]
        starts, sizes = pieces.start[chosen], pieces.size[chosen]
        count = int(sizes.sum())
        if not count:
            raise refuse("num_canonical_nodes", f"at most as many canonical nodes as the epoch (or each stream "
                         f"with per-stream batchings) has samples, {int(unit_sizes.sum())}, for py1e "
                         f"(a canonical node with no sample)", num_canonical_nodes)
        node_ids = laid_end_to_end(starts, sizes)
        piece_offsets = (np.cumsum(sizes) - sizes).tolist()
        for begin, size in zip(piece_offsets, sizes.tolist()):
            epoch_rng.shuffle(node_ids[begin:begin + size])
        positions = np.arange(count, dtype=np.float64)
        for begin, size in zip(piece_offsets, sizes.tolist()):
            if low >= high:
                raise refuse("shuffle_block_size", "a positive block for py1e (for each stream's share of it "
                             "with per-stream batchings)", block_size)
            block = epoch_rng.integers(low, high)
            reach = max((block - size) / 2, 0)
            lowest, highest = max(-reach, -begin), min(reach, count - begin - size)
            positions[begin:begin + size] += epoch_rng.uniform(low=lowest, high=highest, size=size)
        ids[offset:offset + count] = node_ids[np.argsort(positions)]
        offset += count
    return ids
