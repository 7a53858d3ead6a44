"""A planned Megatron split (plan.py) built over opened files: every mid-level dataset's GPT
indices, the blending indices, and the tokens of any training positions.

    build_split(plan, sources, ...)   -> BuiltSplit   (the indices, cached like the others)
    split_samples(built, positions)   -> tokens (rows, sample_length), dataset_id per row

A part's GPTDataset is sampled over its sequence range exactly as sampling.build_indices
samples the range's lengths (megatron-core tiles and shuffles the range's own ids, which
RandomState permutes as it permutes ``arange``), read through a source.SequenceRange.
Pure numpy; nothing here imports ``datasets``.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from . import sampling
from ..warnings_once import warn_once
from ..dtypes import cast_tokens, common_token_dtype
from ..errors import ParameterError
from ..parallel import beside, in_threads
from ..sources.token_source import SequenceRange, TokenSource, lengths_view, sequence_count
from ..storage.remote import concurrently
from .plan import SplitPlan, normalize, per_dataset_size, sequence_range
from .blending_indices import BlendingIndices, drawn_counts, load_or_build_blending_indices


@dataclass(frozen=True, eq=False)
class BuiltSplit:
    plan: SplitPlan
    sources: tuple[TokenSource, ...]  # one per part: the prefix's sequence range
    indices: tuple[sampling.SamplingIndices, ...]  # one per part; every built sample readable
    blending: BlendingIndices | None
    rows: int  # what the split yields: positions 0 .. rows - 1

    @property
    def sample_length(self) -> int:
        return self.indices[0].sample_length

    @property
    def dtype(self) -> np.dtype:
        """A token dtype holding every part's ids: a blend may mix a uint16 file with an int32 one."""
        return common_token_dtype([source.dtype for source in self.sources], [part.prefix for part in self.plan.parts])


def _part_source(plan: SplitPlan, part, source: TokenSource, prefix_label: str) -> SequenceRange:
    begin, end = sequence_range(part.bookend, sequence_count(source))
    ranged = SequenceRange(source, begin, end)
    if end <= begin:
        raise _empty_range_error(plan, ranged, prefix_label)
    return ranged


def _empty_range_error(plan: SplitPlan, ranged: SequenceRange, prefix_label: str) -> ParameterError:
    """A split's range of a prefix with no sequence, or with sequences of no token: megatron-core
    loops forever in GPTDataset._get_num_epochs there (a size, no tokens). Tokens are counted
    only when sampling fails: a cached range had some, and counting costs two reads of the .idx."""
    what = "no sequence" if ranged.end <= ranged.begin else "no token"
    return ParameterError(
        f"split {plan.name!r} (ratio {plan.ratio:.4g}) gets sequences [{ranged.begin}, {ranged.end}) of "
        f"{prefix_label}, which has {sequence_count(ranged.source):,} sequences: that is {what}. Raise the "
        f"split's ratio, give the prefix more sequences, or set that split's ratio to 0 to leave it out")


def check_seq_length(seq_length: int) -> None:
    """Accepts ``seq_length`` 1 with a warning. megatron-core's ``helpers.cpp::build_sample_idx``
    asserts ``seq_length > 1``: a debug build aborts, while its release wheels (built with
    NDEBUG) skip the assert and sample as for any length, which is what the rows here are (the
    Megatron-LM oracle test compares them at core_v0.16.1 and core_v0.19.0)."""
    if seq_length == 1:
        warn_once("seq_length=1: megatron-core asserts seq_length > 1 in helpers.cpp; its release builds skip "
                      "the assert and give these samples, a debug build of it aborts", stacklevel=3)


def build_split(plan: SplitPlan, sources: dict[str, TokenSource], *, seq_length: int, seed: int,
                add_extra_token: bool = True, cache_dir=None) -> BuiltSplit:
    """Indices for ``plan`` over ``sources`` (prefix -> the opened pair), megatron-core's way."""
    parts = [_part_source(plan, part, sources[part.prefix], part.prefix) for part in plan.parts]

    def part_indices(part, ranged) -> sampling.SamplingIndices:
        try:
            indices = sampling.load_or_build_source_indices(
                ranged, cache_dir=cache_dir, seq_length=seq_length, seed=seed, num_samples=part.num_samples,
                add_extra_token=add_extra_token, label=f"{part.prefix} ({plan.name})")
        except ParameterError as error:
            if ranged.num_tokens == 0:
                raise _empty_range_error(plan, ranged, part.prefix) from None
            raise ParameterError(f"split {plan.name!r}, {part.prefix} sequences [{ranged.begin}, {ranged.end}): "
                                 f"{error}") from None
        ranged.recorded_fingerprint = indices.lengths_fingerprint  # provenance needs no pass over the range
        # A blend may draw any sample megatron-core built (len(GPTDataset) is every sample of
        # its epochs), not only the num_samples asked for.
        return dataclasses.replace(indices, num_samples=indices.total_samples)

    weighted = None
    if plan.blend == "weighted":
        # A weighted blend's indices need only the plan's weights and size: built on a core of
        # their own while the datasets' indices are (for 1,000 prefixes, 30M samples, ~30 s of
        # a cold open). BlendedDataset normalises the weights it is given once more.
        size = sum(per_dataset_size(plan.size, w) for w in plan.weights)
        weighted = beside(lambda: load_or_build_blending_indices(
            cache_dir=cache_dir, weights=normalize(plan.weights), size=size,
            label=f"{len(plan.parts)} datasets ({plan.name})"))
    all_indices = in_threads(lambda pair: part_indices(*pair), list(zip(plan.parts, parts)))
    lengths = [indices.total_samples for indices in all_indices]
    blending = None
    if plan.blend is None:
        rows = plan.size if plan.size is not None else lengths[0]
    elif weighted is not None:
        blending = weighted()
        rows = plan.size
    elif plan.size is None:
        blending = load_or_build_blending_indices(cache_dir=cache_dir, sizes=np.array(lengths, np.int64),
                                                  label=f"{len(plan.parts)} datasets ({plan.name})")
        rows = len(blending)
    else:
        size = min(plan.size, sum(lengths))
        blending = load_or_build_blending_indices(cache_dir=cache_dir, weights=normalize(lengths), size=size,
                                                  label=f"{len(plan.parts)} datasets ({plan.name})")
        rows = size
    if blending is not None:
        for part, available, count in zip(plan.parts, lengths, drawn_counts(blending, len(lengths)).tolist()):
            if count > available:
                raise ParameterError(
                    f"split {plan.name!r}: the blend draws {count:,} samples from {part.prefix}, which has "
                    f"{available:,}; raise mid_level_dataset_surplus (megatron-core raises IndexError here)")
    return BuiltSplit(plan, tuple(parts), tuple(all_indices), blending, int(rows))


def split_samples(built: BuiltSplit, positions, document_structure: bool = False, dtype=None):
    """Tokens of training positions ``positions`` of the split: ``(tokens, dataset_ids,
    structure)`` where ``tokens`` is ``(len(positions), sample_length)`` in ``dtype`` (every
    value checked to fit; default ``built.dtype``),
    ``dataset_ids`` int16 (the prefix's index in its blend; 0 without a blend) and
    ``structure`` (position_ids, piece_lengths) when asked for, else None."""
    positions = np.asarray(positions, np.int64)
    if positions.size and (positions.min() < 0 or positions.max() >= built.rows):
        raise ParameterError(f"positions must lie in [0, {built.rows}) for split {built.plan.name!r}")
    if built.blending is None:
        datasets = np.zeros(len(positions), np.int64)
        samples = positions
    else:
        datasets = np.asarray(built.blending.dataset_index[positions], np.int64)
        samples = np.asarray(built.blending.dataset_sample_index[positions], np.int64)
    tokens = np.empty((len(positions), built.sample_length), built.dtype if dtype is None else dtype)
    position_ids = np.empty((len(positions), built.sample_length), np.int32) if document_structure else None
    piece_lengths: list = [None] * len(positions) if document_structure else None
    used = np.unique(datasets).tolist()
    rows_of = {d: np.flatnonzero(datasets == d) for d in used}

    def gather(d):
        return cast_tokens(sampling.assemble_samples(built.sources[d], built.indices[d], samples[rows_of[d]]), dtype)

    # Remote prefixes' reads wait on round trips: all the prefixes of these rows at once.
    remote = any(getattr(built.sources[d], "remote", False) for d in used)
    gathered = concurrently([functools.partial(gather, d) for d in used]) if remote else map(gather, used)
    for d, part in zip(used, gathered):
        rows = rows_of[d]
        tokens[rows] = part
        if document_structure:
            source, indices = built.sources[d], built.indices[d]
            ids, pieces = sampling.document_structure(indices, lengths_view(source), samples[rows])
            position_ids[rows] = ids
            for row, piece in zip(rows.tolist(), pieces):
                piece_lengths[row] = piece
    structure = (position_ids, piece_lengths) if document_structure else None
    return tokens, datasets.astype(np.int16), structure


__all__ = ["BuiltSplit", "build_split", "check_seq_length", "split_samples"]
