"""``py2s``: units and their samples shuffled once per run, cut into canonical nodes; each
epoch, each node's pieces shuffled and each piece's samples shuffled again.

Follows mosaicml-streaming 0.13.0's ``get_shuffle_py2s`` (streaming/base/shuffle/py2s.py):
``default_rng(seed)`` orders the units, then shuffles each unit's samples in that order;
``default_rng(seed + epoch)`` goes node by node, shuffling the node's pieces, then each
piece's samples in the new order. A unit split between nodes is shuffled (run-wise) before
the split, and each piece (epoch-wise) on its own.
"""

from __future__ import annotations

import numpy as np

from .spans import divide, shuffled, unit_starts


def shuffle_py2s(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
                 block_size: int) -> np.ndarray:
    unit_sizes = np.asarray(unit_sizes, np.int64)
    run_rng = np.random.default_rng(seed)
    run_order = shuffled(run_rng, len(unit_sizes))
    sizes = unit_sizes[run_order]
    line_starts = np.cumsum(sizes) - sizes
    line = np.repeat(unit_starts(unit_sizes)[run_order] - line_starts, sizes) + np.arange(int(sizes.sum()))
    for begin, size in zip(line_starts.tolist(), sizes.tolist()):
        run_rng.shuffle(line[begin:begin + size])
    # Pieces are cut in the line's coordinates: a piece's "start" is where it lies in ``line``.
    pieces = divide(line_starts, sizes, num_canonical_nodes)
    epoch_rng = np.random.default_rng(seed + epoch)
    out, offset = np.empty_like(line), 0
    for part in range(num_canonical_nodes):
        chosen = np.arange(pieces.bounds[part], pieces.bounds[part + 1])
        for piece in chosen[shuffled(epoch_rng, len(chosen))].tolist():
            begin, size = int(pieces.start[piece]), int(pieces.size[piece])
            epoch_rng.shuffle(line[begin:begin + size])
            out[offset:offset + size] = line[begin:begin + size]
            offset += size
    return out
