"""Megatron's data arguments as a plan: which prefixes feed which split, over which sequence
range, with how many samples, blended how. Read from megatron-core 0.19
(``blended_megatron_dataset_builder.py``, ``blended_megatron_dataset_config.py``, ``utils.py``,
``blended_dataset.py``); the rules, step by step:

    data_path        Megatron's ``--data-path`` tokens: prefixes alone, or weight/prefix pairs
                     (``get_blend_from_list``); weights normalised as ``normalize`` does
                     (float64 ``w / sum(w)``)
    split_ratios     ``--split`` ("969,30,1"): the numbers in it, padded to 3, normalised; book-ends
                     are running sums; split i of a prefix of N sequences is sequences
                     ``int(round(b0 * N)) .. int(round(b1 * N))`` (a ratio of 0 gives no split)
    one prefix, no   each split is that prefix's GPTDataset over its range (no blend, no dataset_id)
    weights
    weights          each prefix's GPTDataset of the split is built for
                     ``ceil(ceil(size * w) * (1 + surplus))`` samples; the blend draws
                     ``sum(ceil(size * w))`` samples by the largest-error rule (blending_indices.py)
    no weights       each prefix's GPTDataset is one pass (no size); the blend is weighted by
                     their lengths: ``min(size, sum(lengths))`` draws, or every sample of every
                     dataset (the exhaustive blend) when the split has no size
    per-split blends ``train/valid/test_data_path``: each split its own blend over whole files

What a split yields: the samples training consumes, positions ``0 .. size - 1`` of Megatron's
stream when a size is given (as the single-file builder does), else the whole stream.

Everything here is pure: prefixes are strings, sequence counts come from the caller.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..checks import check_int
from ..errors import ParameterError

# Megatron's Split enum order, and the names the HF splits get.
SPLIT_NAMES = ("train", "validation", "test")
# arguments.py: the split used when --data-path comes without --split.
LEGACY_DEFAULT_SPLIT = "969, 30, 1"
DEFAULT_SURPLUS = 0.005


@dataclass(frozen=True)
class Blend:
    """Prefixes and their normalised weights (None: weighted by dataset length)."""

    prefixes: tuple[str, ...]
    weights: tuple[float, ...] | None


def _as_tokens(value, what: str) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return [str(v) for v in value]
    raise ParameterError(f"{what} must be Megatron's --data-path tokens, a list or one string "
                         f"(\"0.3 A 0.7 B\"), got {value!r}")


def _float(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def normalize(weights: Sequence[float]) -> list[float]:
    """megatron-core's ``normalize``: float64 division by the float64 sum."""
    w = np.array(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def _without_pair_suffix(prefix: str) -> str:
    """``data/a_text_document.bin`` (or ``.idx``) names the pair ``data/a_text_document``, as
    every ``mmidx`` command reads a path; megatron-core would look for ``....bin.bin``."""
    return prefix[:-4] if prefix.endswith((".bin", ".idx")) and len(prefix) > 4 else prefix


def parse_data_path(value, what: str = "data_path") -> Blend:
    """Megatron's ``get_blend_from_list``: an odd number of tokens, or tokens that are not all
    weight/prefix pairs, are prefixes; otherwise weight/prefix pairs. Weights must be finite
    and positive (BlendedDataset asserts it) and not all zero. A prefix listed twice is two
    datasets of the blend, as megatron-core builds it (the same files, each its own
    ``dataset_id`` and, when weighted, its own size)."""
    tokens = _as_tokens(value, what)
    if not tokens:
        raise ParameterError(f"{what} is empty: give at least one prefix")
    weights = None
    prefixes = tokens
    if len(tokens) % 2 == 0:
        raw = [_float(t) for t in tokens[0::2]]
        if all(w is not None for w in raw):
            weights, prefixes = raw, tokens[1::2]
        elif any(w is not None for w in raw):
            bad = next(t for t, w in zip(tokens[0::2], raw) if w is None)
            raise ParameterError(f"{what}: {bad!r} stands where a weight should be; give weight/prefix pairs "
                                 f"throughout or prefixes only, got {tokens}")
    prefixes = [_without_pair_suffix(p.strip()) for p in prefixes]
    for prefix in prefixes:
        if _float(prefix) is not None and weights is None and len(tokens) > 1:
            raise ParameterError(f"{what}: {prefix!r} looks like a weight without its prefix (got {tokens})")
    if weights is not None:
        for prefix, weight in zip(prefixes, weights):
            if not math.isfinite(weight) or weight < 0:
                raise ParameterError(f"{what}: the weight of {prefix!r} is {weight}; weights must be finite and >= 0")
        if not any(weights):
            raise ParameterError(f"{what}: every weight is 0 ({tokens}); give at least one positive weight")
        zero = [p for p, w in zip(prefixes, weights) if w == 0]
        if zero:
            raise ParameterError(f"{what}: {zero[0]!r} has weight 0, which megatron-core's BlendedDataset "
                                 "refuses; leave the prefix out instead")
        weights = normalize(weights)
    return Blend(tuple(prefixes), None if weights is None else tuple(weights))


def parse_split(split: str) -> list[float]:
    """``parse_and_normalize_split``: the numbers of the string, padded to three, normalised."""
    if not isinstance(split, str):
        raise ParameterError(f"split_ratios must be a string such as \"969,30,1\", got {split!r}")
    numbers = [float(n) for n in re.findall(r"[.0-9]+", split)]
    if len(numbers) > len(SPLIT_NAMES) or not numbers:
        raise ParameterError(f"split_ratios {split!r}: expected 1 to 3 ratios (train, validation, test), "
                             f"found {len(numbers)}")
    numbers += [0.0] * (len(SPLIT_NAMES) - len(numbers))
    if sum(numbers) <= 0:
        raise ParameterError(f"split_ratios {split!r}: the ratios add up to 0; give at least one positive ratio")
    return normalize(numbers)


def split_matrix(vector: list[float]) -> list[tuple[float, float] | None]:
    """``convert_split_vector_to_split_matrix(vector)``: book-ends of each split, None for an
    empty one. Running sums in the same float order as megatron-core's reduce."""
    expansion = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector])
    bookends = list(zip(expansion[:-1], expansion[1:]))
    return [None if end <= begin else (begin, end) for begin, end in bookends]


def sequence_range(bookend: tuple[float, float], num_sequences: int) -> tuple[int, int]:
    """``_build_megatron_dataset_splits``: the sequences of a split of a prefix."""
    return int(round(bookend[0] * float(num_sequences))), int(round(bookend[1] * float(num_sequences)))


def per_dataset_size(size: int, weight: float, surplus: float = 0.0) -> int:
    """``_get_size_per_split_per_dataset`` for one dataset and split."""
    return int(math.ceil(math.ceil(size * weight) * (1 + surplus)))


@dataclass(frozen=True)
class Part:
    """One mid-level dataset of a split: a prefix's GPTDataset over a sequence range."""

    prefix: str
    dataset_id: int  # the prefix's index in its blend (BlendedDataset's dataset_id)
    bookend: tuple[float, float]  # fractions of the prefix's sequences
    num_samples: int | None  # what its GPTDataset is built for (None: one pass)


@dataclass(frozen=True)
class SplitPlan:
    """A split: its parts and how they are blended.

    ``blend`` is None (one part, no BlendedDataset), ``"weighted"`` (``weights`` and ``size``),
    or ``"by_length"`` (weights are the parts' lengths; ``size`` caps them, None = exhaustive).
    ``size`` is what the split was asked for; ``rows`` follow from it (see the module docstring).
    """

    name: str
    parts: tuple[Part, ...]
    blend: str | None
    weights: tuple[float, ...] | None
    size: int | None
    ratio: float  # the split's share of each prefix (1.0 for per-split blends)


def _sizes(num_samples) -> list[int | None]:
    if num_samples is None:
        return [None, None, None]
    if isinstance(num_samples, dict):
        unknown = set(num_samples) - set(SPLIT_NAMES)
        if unknown:
            raise ParameterError(f"num_samples names unknown split(s) {sorted(unknown)}; use {list(SPLIT_NAMES)}")
        sizes = [num_samples.get(name) for name in SPLIT_NAMES]
    else:
        sizes = [num_samples, None, None]
    return [check_int(f"num_samples[{name!r}]", size, 0, allow_none=True) for name, size in zip(SPLIT_NAMES, sizes)]


def _split_plan(name: str, index: int, blend: Blend, bookend, sizes: list, surplus: float, ratio: float,
                one_blend_for_all: bool) -> SplitPlan | None:
    size = sizes[index]
    if size == 0:
        return None  # Megatron builds no loader for an empty split
    if len(blend.prefixes) == 1 and (blend.weights is None or not one_blend_for_all):
        return SplitPlan(name, (Part(blend.prefixes[0], 0, bookend, size),), None, None, size, ratio)
    if blend.weights is not None:
        if size is None:
            raise ParameterError(f"split {name!r} blends weighted datasets but has no size: megatron-core "
                                 "refuses weights without a size (\"Using client-specified weights requires "
                                 f"client-specified size\"); give num_samples[{name!r}]")
        parts = tuple(Part(p, i, bookend, per_dataset_size(size, w, surplus))
                      for i, (p, w) in enumerate(zip(blend.prefixes, blend.weights)))
        return SplitPlan(name, parts, "weighted", blend.weights, size, ratio)
    parts = tuple(Part(p, i, bookend, None) for i, p in enumerate(blend.prefixes))
    return SplitPlan(name, parts, "by_length", None, size, ratio)


def megatron_plan(*, data_path=None, split_ratios: str | None = None, train_data_path=None,
                  valid_data_path=None, test_data_path=None, num_samples=None,
                  mid_level_dataset_surplus: float = DEFAULT_SURPLUS) -> dict[str, SplitPlan]:
    """The splits (``train``, ``validation``, ``test``; absent when empty) Megatron's
    BlendedMegatronDatasetBuilder would build for these arguments, before any file is read."""
    per_split = [train_data_path, valid_data_path, test_data_path]
    if not (isinstance(mid_level_dataset_surplus, (int, float)) and 0 <= mid_level_dataset_surplus < 1e6):
        raise ParameterError(f"mid_level_dataset_surplus must be a number >= 0, got {mid_level_dataset_surplus!r}")
    sizes = _sizes(num_samples)
    plans: dict[str, SplitPlan] = {}
    if data_path is not None:
        if any(p is not None for p in per_split):
            raise ParameterError("give data_path (with split_ratios) or train/valid/test_data_path, not both: "
                                 "megatron-core refuses blend together with blend_per_split")
        blend = parse_data_path(data_path)
        vector = parse_split(split_ratios if split_ratios is not None else LEGACY_DEFAULT_SPLIT)
        for index, (name, bookend) in enumerate(zip(SPLIT_NAMES, split_matrix(vector))):
            if bookend is not None:
                plan = _split_plan(name, index, blend, bookend, sizes, mid_level_dataset_surplus, vector[index], True)
                if plan is not None:
                    plans[name] = plan
        return plans
    if split_ratios is not None and any(p is not None for p in per_split):
        raise ParameterError("split_ratios applies to data_path; the per-split paths are whole splits already")
    if all(p is None for p in per_split):
        raise ParameterError("no data: give data_path (Megatron's --data-path) or train/valid/test_data_path")
    for index, (name, value) in enumerate(zip(SPLIT_NAMES, per_split)):
        if value is not None:
            what = ("train_data_path", "valid_data_path", "test_data_path")[index]
            plan = _split_plan(name, index, parse_data_path(value, what), (0.0, 1.0), sizes,
                               mid_level_dataset_surplus, 1.0, False)
            if plan is not None:
                plans[name] = plan
    return plans


def all_prefixes(plans: dict[str, SplitPlan]) -> list[str]:
    """Every prefix the plan reads, each once, in order of first use."""
    return list(dict.fromkeys(part.prefix for plan in plans.values() for part in plan.parts))


__all__ = ["Blend", "LEGACY_DEFAULT_SPLIT", "Part", "SPLIT_NAMES", "SplitPlan", "all_prefixes", "megatron_plan",
           "normalize", "parse_data_path", "parse_split", "per_dataset_size", "sequence_range", "split_matrix"]
