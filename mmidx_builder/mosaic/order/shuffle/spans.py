"""Shuffle units cut into canonical nodes' parts: the step every shard-aware shuffle shares.

Follows mosaicml-streaming 0.13.0's ``divide_spans`` (streaming/base/shuffle/py1s.py) and
py2s's ``_partition`` (shuffle/py2s.py), which loop over spans; here it is one pass of
``searchsorted``.

Units (a shard, or a shard's part repeat) are laid end to end in a given order; the line is cut
into ``num_parts`` stretches of ``total * (part + 1) // num_parts``; a unit that straddles a cut
is split there. The pieces keep their order, each belonging to the part its first sample falls
in (a part may hold none).
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Pieces:
    """Units split at the parts' edges: ``start`` (first sample id) and ``size`` of each piece,
    in line order, and ``bounds``: part p holds pieces ``bounds[p]:bounds[p + 1]``."""

    start: np.ndarray
    size: np.ndarray
    bounds: np.ndarray

    def part(self, index: int) -> slice:
        return slice(int(self.bounds[index]), int(self.bounds[index + 1]))


def unit_starts(unit_sizes: np.ndarray) -> np.ndarray:
    """Each unit's first sample id, the units numbering the epoch's samples in their order."""
    unit_sizes = np.asarray(unit_sizes, np.int64)
    return np.cumsum(unit_sizes) - unit_sizes


def divide(starts: np.ndarray, sizes: np.ndarray, num_parts: int) -> Pieces:
    """The units (``starts``/``sizes``, in line order, every size positive) cut into
    ``num_parts`` parts of (nearly) equal samples."""
    sizes = np.asarray(sizes, np.int64)
    line_ends = np.cumsum(sizes)
    total = int(line_ends[-1]) if len(line_ends) else 0
    part_ends = total * np.arange(1, num_parts + 1, dtype=np.int64) // num_parts
    cuts = np.union1d(np.concatenate([[0], line_ends]), part_ends)
    cuts = cuts[cuts < total]  # where pieces begin
    unit = np.searchsorted(line_ends, cuts, side="right")
    next_cuts = np.append(cuts[1:], total)
    piece_start = starts[unit] + cuts - (line_ends[unit] - sizes[unit])
    piece_part = np.searchsorted(part_ends, cuts, side="right")
    bounds = np.searchsorted(piece_part, np.arange(num_parts + 1), side="left")
    return Pieces(piece_start.astype(np.int64), (next_cuts - cuts).astype(np.int64), bounds)


def shuffled(rng: np.random.Generator, count: int) -> np.ndarray:
    """The order in which ``rng.shuffle`` leaves a list of ``count`` items: the same draws as
    theirs shuffling a list of spans or shards in place."""
    order = np.arange(count)
    rng.shuffle(order)
    return order
