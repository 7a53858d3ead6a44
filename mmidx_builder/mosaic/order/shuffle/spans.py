"""Shuffle units cut into canonical nodes' parts: the step every shard-aware shuffle shares
(and the pieces' order py1s, py1br and py1e share after it: :func:`pieces_in_order`).

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


def pieces_in_order(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int):
    """The steps py1s, py1br and py1e share (their ``get_shuffle_py1*``, up to the pieces'
    order): the units in an order of ``default_rng(seed)``, cut into the canonical nodes'
    parts, each part's pieces shuffled by ``default_rng(seed + epoch)``. Returns the pieces,
    their order (part by part) and that generator, which the algorithms go on drawing from."""
    unit_sizes = np.asarray(unit_sizes, np.int64)
    run_order = shuffled(np.random.default_rng(seed), len(unit_sizes))
    pieces = divide(unit_starts(unit_sizes)[run_order], unit_sizes[run_order], num_canonical_nodes)
    epoch_rng = np.random.default_rng(seed + epoch)
    order = np.arange(len(pieces.start))
    for part in range(num_canonical_nodes):
        within = order[pieces.part(part)]
        order[pieces.part(part)] = within[shuffled(epoch_rng, len(within))]
    return pieces, order, epoch_rng


def laid_end_to_end(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The sample ids of pieces (``starts``/``sizes``) one after another."""
    return np.repeat(starts - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))
