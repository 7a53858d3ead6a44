"""The epoch's global order: a permutation of its "big" sample ids, shard-aware.

Follows mosaicml-streaming 0.13.0's ``get_shuffle`` (streaming/base/shuffle/__init__.py) and
the five algorithms it registers, one module each: naive, py1s, py1br, py1e, py2s (0.13.0 has
no py1b). Every one takes the shuffle units (shards, or a shard's repeats, in epoch order: the
units' samples are numbered end to end), the canonical nodes, the run's seed, the epoch and
the block size, and returns ``shuffled[big_id]``: where each place of the epoch takes its
sample from. spans.py holds the cut into canonical nodes they share.
"""

from __future__ import annotations

import numpy as np

from .naive import shuffle_naive
from .py1br import shuffle_py1br
from .py1e import shuffle_py1e
from .py1s import shuffle_py1s
from .py2s import shuffle_py2s

SHUFFLES = {"naive": shuffle_naive, "py1br": shuffle_py1br, "py1e": shuffle_py1e, "py1s": shuffle_py1s,
            "py2s": shuffle_py2s}


def shuffle(algo: str, unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
            block_size: int) -> np.ndarray:
    return SHUFFLES[algo](np.asarray(unit_sizes, np.int64), num_canonical_nodes, seed, epoch, block_size)
