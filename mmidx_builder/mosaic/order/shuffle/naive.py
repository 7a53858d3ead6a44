"""``naive``: one permutation of the whole epoch, shards and nodes ignored.

Follows mosaicml-streaming 0.13.0's ``get_shuffle_naive`` (streaming/base/shuffle/naive.py).
"""

from __future__ import annotations

import numpy as np


def shuffle_naive(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
                  block_size: int) -> np.ndarray:
    return np.random.default_rng(seed + epoch).permutation(int(np.sum(unit_sizes)))
