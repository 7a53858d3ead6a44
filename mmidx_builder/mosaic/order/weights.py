"""How many samples each stream gives an epoch: its weights resolved against its size.

Follows mosaicml-streaming 0.13.0's ``Stream.validate_weights`` and ``Stream.apply_weights``
(stream.py), which StreamingDataset calls once, when it is made, with its ``epoch_size`` and its
``shuffle_seed`` as given (a resumed state's seed does not change the weights).

Three cases, as there:

    relative   every stream has a proportion: choose = floor(epoch_size x normalised proportion),
               the shortfall to epoch_size (the streams' total when it is None) going one sample
               each to streams drawn without replacement by default_rng(shuffle_seed)
    unspecified, with an epoch_size: the same, each stream's proportion its share of the samples
    absolute   repeat (choose = int(repeat x samples)), choose, or none (choose = samples);
               the epoch is their total, and an epoch_size is refused
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .settings import StreamWeights, refuse


@dataclasses.dataclass(frozen=True)
class ResolvedWeights:
    """Each stream's weights once resolved (the ``proportion``, ``repeat`` and ``choose``
    attributes apply_weights leaves on each Stream) and the epoch's size in samples."""

    proportion: np.ndarray  # float64, per stream: used by the batching methods other than random
    repeat: np.ndarray      # float64, per stream
    choose: np.ndarray      # int64, per stream
    epoch_size: int


def _spread_by_proportion(total: int, proportion: np.ndarray, seed: int) -> np.ndarray:
    """``total`` samples spread over streams by proportion, rounded down, then the samples
    rounding lost given one each to streams chosen by the seed."""
    choose = (total * proportion).astype(np.int64)
    shortfall = total - choose.sum()
    lucky = np.random.default_rng(seed).choice(len(proportion), shortfall, False)
    choose[lucky] += 1
    return choose


def resolve_weights(samples_per_stream: np.ndarray, weights: Sequence[StreamWeights],
                    epoch_size: int | None, seed: int) -> ResolvedWeights:
    """Each stream's proportion, repeat and choose, and the epoch's size, as
    ``Stream.apply_weights(streams, samples_per_stream, epoch_size, seed)`` derives them."""
    samples_per_stream = np.asarray(samples_per_stream, np.int64)
    relative = weights[0].proportion is not None
    for stream_id, weight in enumerate(weights):
        if (weight.proportion is not None) != relative:
            raise refuse(f"weights[{stream_id}]", "relative (proportion) and absolute (repeat, choose, none) "
                         "weights not mixed: every stream or none with a proportion", weight)
    unspecified = all(w.proportion is None and w.repeat is None and w.choose is None for w in weights)
    if relative or (unspecified and epoch_size):
        if relative:
            proportion = np.array([w.proportion for w in weights], np.float64)
            if not proportion.sum() > 0:
                # StreamingDataset divides by zero here and goes on with NaN weights.
                raise refuse("weights", "proportions whose sum is positive", [w.proportion for w in weights])
        else:
            proportion = samples_per_stream.astype(np.float64)
        proportion /= proportion.sum()
        total = epoch_size or samples_per_stream.sum()
        choose = _spread_by_proportion(total, proportion, seed)
    else:
        if epoch_size:
            raise refuse("epoch_size", "None with absolute stream weights (repeat, choose or none; "
                         "StreamingDataset: 'Only provide `choose` when weighting streams relatively')", epoch_size)
        choose = np.array([int(w.repeat * n) if w.repeat is not None else w.choose if w.choose is not None else n
                           for w, n in zip(weights, samples_per_stream)], np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):  # all chose nothing: refused later, at the epoch
            proportion = choose / choose.sum()
        total = choose.sum()
    return ResolvedWeights(proportion, choose / samples_per_stream, choose, int(total))
