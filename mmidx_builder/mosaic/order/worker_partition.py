"""One worker's share of partition.py's deal, computed without dealing the rest of the epoch.

partition.py builds the whole (nodes, ranks, workers, batches, batch size) array, as
mosaicml-streaming 0.13.0's ``get_partitions_orig``/``get_partitions_relaxed`` do; a worker
needs its (batches, batch size) row only. Every place of that array is a closed formula of its
coordinates (below), so :func:`worker_partition` evaluates the formula at one worker's places:
memory and time in the worker's share, not the epoch. partition.py stays the reference (it
follows theirs step by step); the differential tests check both against StreamingDataset.

The formula, following ``get_partitions_orig``'s steps backwards from a place (node p, rank
r, worker w, batch t, slot b):

    s = (t * workers + w) * batch + b            the rank's s-th sample (-1 past its count)
    j = (s * ranks + r)-th of the node's samples  past the node's M, its padding samples
    i = drop_first + p + physical * j              place in the canonical nodes' column order
    c, k = i % canonical, i // canonical           canonical node c's k-th sample
    value = row_start[c] + k                       then the one-short rows' and padding fix-ups

and for ``relaxed`` on a resumption that re-cuts, a place of the world of now is mapped to its
place in the initial run's deal through their common traversal order.
"""

from __future__ import annotations

import numpy as np

from .partition import _NOT_DIVISIBLE
from .settings import refuse


class _OrigDeal:
    """``get_partitions_orig``'s deal of ``num_samples``, as formulas of a place."""

    def __init__(self, num_samples, canonical, physical, ranks, workers, batch, drop_first):
        if max(canonical, physical) % min(canonical, physical):
            raise refuse("num_canonical_nodes", _NOT_DIVISIBLE,
                         f"{canonical} canonical nodes and {physical} physical nodes")
        self.num_samples, self.canonical, self.physical = num_samples, canonical, physical
        self.ranks, self.workers, self.batch = ranks, workers, batch
        self.drop = drop_first - drop_first % physical
        self.per_canonical = -(-num_samples // canonical)
        ratio = physical // canonical if canonical < physical else 0
        self.padding = -self.per_canonical % ratio if ratio else 0
        self.width = self.per_canonical + self.padding
        self.contiguous = num_samples > canonical or (num_samples == canonical and canonical >= physical)
        if self.contiguous and self.padding:
            source = range(self.width)[slice(1 - 2 * self.padding - ratio, 1 - self.padding - ratio)]
            if len(source) not in (1, self.padding):
                raise refuse("num_canonical_nodes", f"rows of samples per canonical node long enough to pad for "
                             f"{ratio} physical nodes each", f"{self.per_canonical} samples per row of "
                             f"{canonical} canonical nodes")
            self.source_start, self.source_broadcast = source.start, len(source) == 1
        # Each node's samples: M of the column order, then the padding to a multiple of ranks.
        self.per_node = max(0, canonical * self.width - self.drop) // physical
        short = self.per_node % ranks
        self.missing = ranks - short if short else 0
        self.repeats_tail = ranks + self.missing - 1 <= self.per_node
        self.per_rank = (self.per_node + self.missing) // ranks
        self.batches = -(-self.per_rank // (workers * batch))  # each worker's, padded with -1

    def _row_value(self, c, k):
        """Canonical node c's k-th sample (k below the row's width)."""
        if not self.contiguous:
            return (c * self.width + k) % self.num_samples
        if self.padding:
            pad_column = k >= self.width - self.padding
            shift = 0 if self.source_broadcast else k - (self.width - self.padding)
            k = np.where(pad_column, self.source_start + shift, k)
        canonical, n = self.canonical, self.num_samples
        start, stop = c * n // canonical, (c + 1) * n // canonical
        one_short = (stop - start < self.per_canonical) & (k == self.per_canonical - 1)
        return start + k - one_short

    def at(self, node, rank, worker, batch_index, slot):
        """The deal's value at these places (broadcast arrays), -1 where it pads."""
        s = (batch_index * self.workers + worker) * self.batch + slot
        padded = s >= self.per_rank
        j = np.where(padded, 0, s) * self.ranks + rank
        past = j - self.per_node
        if self.missing:
            if self.repeats_tail:
                tail = self.per_node - self.ranks - self.missing + 1 + past
            else:
                tail = past % max(self.per_node, 1)
            j = np.where(past >= 0, tail, j)
        i = self.drop + node + self.physical * j
        value = self._row_value(i % self.canonical, i // self.canonical)
        return np.where(padded, -1, value).astype(np.int64)


def worker_partition(algo: str, num_samples: int, num_canonical_nodes: int, num_physical_nodes: int,
                     ranks_per_node: int, workers_per_rank: int, batch_size: int, drop_first: int,
                     initial_physical_nodes: int | None, node: int, rank: int, worker: int) -> np.ndarray:
    """``partition(...)[node, rank, worker]``: the worker's (batches, batch size) big ids."""
    devices = ranks_per_node * num_physical_nodes
    if num_samples + devices - num_samples % devices < drop_first:
        raise refuse("sample_in_epoch", f"at most the epoch's {num_samples} samples (padded to a multiple of "
                     f"{devices} devices)", drop_first)
    canonical, physical, ranks, workers = num_canonical_nodes, num_physical_nodes, ranks_per_node, workers_per_rank
    recut = (algo == "relaxed" and initial_physical_nodes is not None
             and max(canonical, physical) % min(canonical, physical))
    if not recut:
        deal = _OrigDeal(num_samples, canonical, physical, ranks, workers, batch_size, drop_first)
        t, b = np.ogrid[:deal.batches, :batch_size]
        return deal.at(node, rank, worker, t, b)
    global_batch = physical * ranks * batch_size
    initial = initial_physical_nodes
    if global_batch % (initial * ranks):
        raise refuse("batch_size", f"a global batch ({physical} nodes x {ranks} ranks x batch_size) "
                     f"divisible by the initial run's {initial * ranks} devices (relaxed partitioning keeps "
                     "the global batch size of the initial run)", f"{global_batch} (batch_size {batch_size})")
    initial_batch = global_batch // (initial * ranks)
    deal = _OrigDeal(num_samples, canonical, initial, ranks, workers, initial_batch, drop_first)
    total = deal.batches * workers * initial * ranks * initial_batch
    if total % (workers * global_batch):
        raise refuse("num_physical_nodes", f"a resumed epoch of a multiple of {workers * global_batch} "
                     "samples (workers x global batch), as the relaxed partition re-cuts the initial run's",
                     f"{total} samples for {physical} nodes")
    t, b = np.ogrid[:total // (workers * global_batch), :batch_size]
    x = (((t * workers + worker) * physical + node) * ranks + rank) * batch_size + b  # place in traversal order
    x, b0 = np.divmod(x, initial_batch)
    x, r0 = np.divmod(x, ranks)
    x, p0 = np.divmod(x, initial)
    t0, w0 = np.divmod(x, workers)
    return deal.at(p0, r0, w0, t0, b0)
